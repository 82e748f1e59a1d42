#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: image_source
short_description: Identify a Docker image source and stream it, once each, to the nodes that lack it
version_added: 0.1.0
description:
  - Reports the image ID, content ID, tags and size of an image on this host's Docker Engine (O(image)) or of a
    C(docker save) archive (O(archive)), without changing anything.
  - The content ID is what nodes compare (O(vllmops.cluster.image_receive#module:content_id) of
    M(vllmops.cluster.image_receive)) - Docker's classic image store and its containerd image store give the same
    image different image IDs, the content ID is the same on both.
  - With O(tokens), serves the image over HTTP on O(address):O(port), once to each token, as C(docker save)
    output or the archive's bytes, streamed in frames of at most 16 MiB that end with the byte count (or the
    error that stopped the source), so a receiver tells a whole stream from a broken one; no temporary file of the
    whole image is written. It returns when every token was served or at O(deadline). Run it with C(async) while
    the receivers run M(vllmops.cluster.image_receive); the image role gives it one token, the first node of a
    chain in which each node relays the stream to the next.
  - A receiver asks for a ticket derived from its token (an HMAC-SHA256 keyed by the token, so the token never
    crosses the network) with a random challenge; the answer carries the proof that this source holds the token
    (an HMAC-SHA256 of the challenge), without which M(vllmops.cluster.image_receive) reads nothing.
  - Anyone who can reach the port and knows a token's ticket can read the image, so bind it to the cluster
    network.
options:
  image:
    description: Image name:tag or ID on this host's Docker Engine. One of O(image) and O(archive) is required.
    type: str
  archive:
    description: A C(docker save) archive of exactly one image, on this host.
    type: path
  tokens:
    description:
      - One secret per receiver (the last part of its O(vllmops.cluster.image_receive#module:url)); each is served
        once. Empty to only identify the source.
    type: list
    elements: str
    default: []
  address:
    description:
      - Address to listen on; required with O(tokens). Give the one address the receivers connect to; C(0.0.0.0)
        and C(::) (every address of the host, where anyone who reaches the host could try tokens) are refused.
    type: str
  port:
    description: TCP port to listen on.
    type: int
    default: 29700
  deadline:
    description: Seconds to wait for every receiver to finish before giving up.
    type: int
    default: 3600
extends_documentation_fragment:
  - vllmops.cluster.docker_host
attributes:
  check_mode:
    support: partial
    details: Identifies the source; never serves in check mode.
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    support: none
    description: Nothing on the host changes.
  idempotent:
    support: full
    description: Never changes the host it runs on.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Identify a docker save archive on the controller
  vllmops.cluster.image_source:
    archive: /srv/images/vllm-openai-v0.33.0.tar
  delegate_to: localhost
  register: source
"""

RETURN = r"""
image_id:
  description:
    - The source image's ID on its engine - the digest of its config on Docker's classic image store, of its
      manifest (or index) on the containerd image store; for an archive, the digest of its config.
  returned: success
  type: str
content_id:
  description:
    - The image's content ID - C(sha256:) and the digest of its platform, its layers (diff IDs) and the settings a
      container starts with (Env, Entrypoint, Cmd, Labels, ...); the same for the same image on every image store.
    - Null when the engine reports no layers for it.
  returned: success
  type: str
  sample: sha256:085d8ea2e75d221feecafb18d8cae8640fcdd12c81b875950de352c48d5434ec
repo_tags:
  description: Its tags.
  returned: success
  type: list
  elements: str
size_bytes:
  description: Bytes of the archive, or the image's size on the engine.
  returned: success
  type: int
served:
  description: Bytes streamed to each receiver, in the order of O(tokens).
  returned: when O(tokens) was given
  type: list
  elements: int
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import ImageStream, TransferError, archive_image, local_image, serve


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str"),
            archive=dict(type="path"),
            tokens=dict(type="list", elements="str", default=[], no_log=True),
            address=dict(type="str"),
            port=dict(type="int", default=29700),
            deadline=dict(type="int", default=3600),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        required_one_of=[("image", "archive")],
        mutually_exclusive=[("image", "archive")],
        supports_check_mode=True,
    )
    params = module.params
    docker = None  # an archive needs no engine
    try:
        if params["archive"]:
            found = archive_image(params["archive"])
        else:
            docker = DockerClient(params["docker_host"])
            found = local_image(docker, params["image"])
            if found is None:
                module.fail_json(msg=f"the image source has no image {params['image']}: load or pull it there, "
                                     "or name another source (image_source_host / image_archive)")
        result = dict(changed=False, image_id=found.image_id, content_id=found.content_id, repo_tags=found.repo_tags,
                      size_bytes=found.size)
        if params["tokens"] and not params["address"]:
            module.fail_json(msg="serving the image: no address to listen on: give the address the receivers connect to")
        if params["tokens"] and not module.check_mode:
            source = ImageStream(docker, image=params["image"], archive=params["archive"])
            sent = serve(source, params["address"], params["port"], params["tokens"], params["deadline"])
            result["served"] = [sent[token] if isinstance(sent[token], int) else 0 for token in params["tokens"]]
            problems = [sent[token] for token in params["tokens"] if not isinstance(sent[token], int)]
            if problems:
                module.fail_json(msg="serving the image: " + "; ".join(sorted(set(problems))), **result)
    except (DockerError, TransferError) as err:
        module.fail_json(msg=str(err))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
