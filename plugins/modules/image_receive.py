#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: image_receive
short_description: Load a Docker image streamed by image_source (or the previous node), relaying it to the next node
version_added: 0.1.0
description:
  - Compares the content ID of O(image) on this host's Docker Engine with O(content_id) (or, without it, its image ID
    with O(image_id)). When they differ, reads the image from O(url) (served by M(vllmops.cluster.image_source))
    straight into the engine's image load (what C(docker load) does), then checks that O(image) now has that
    content. A load that brings any other image than O(image) (by what the engine says it loaded) fails the task
    and names those images.
  - The token (the last part of O(url)) never leaves this node. It asks for a ticket derived from the token with a
    random challenge, and reads nothing before the upstream proved that it holds the token (an HMAC-SHA256 of the
    challenge keyed by the token); a program that took the port first is refused, and nothing is loaded or relayed.
  - A frame of the stream holds at most 16 MiB; a bigger one fails the copy before it is read.
  - The content ID, not the image ID, says whether two engines hold the same image - Docker's classic image
    store names an image by its config's digest, the containerd image store by its manifest's, so the image
    loaded here may have another image ID than at the source. M(vllmops.cluster.image_source) reports both.
  - With O(relay_token), it also serves the bytes, as they arrive, to the next node of a chain (one request, on
    O(relay_address):O(relay_port), path O(relay_token)), holding at most 64 MiB in memory (a next node that reads
    slower slows this node's read of its upstream). When this node's load fails the rest of the stream is still
    relayed; when the upstream breaks, the next node receives the error. The relay listens before the node connects
    to its upstream, so every node of a chain can start at once.
  - Writes its progress (bytes, seconds, MB/s, bytes relayed) as JSON to O(progress_file) about once a second
    while copying.
options:
  image:
    description: Image name:tag as the source tags it.
    type: str
    required: true
  content_id:
    description:
      - The content ID the node must end up with (M(vllmops.cluster.image_source)'s C(content_id)), the same on
        every image store. One of O(content_id) and O(image_id) is required.
    type: str
  image_id:
    description:
      - The image ID the node must end up with, compared when O(content_id) is not given; only right when the
        source and this node use the same kind of image store.
    type: str
  url:
    description:
      - Where the source, or the previous node's relay, serves this node's copy (C(http://ADDRESS:PORT/TOKEN)).
      - The TOKEN itself is never sent; the upstream must prove it holds it.
    type: str
    required: true
  upstream:
    description: Who serves O(url), for messages (the source's or the previous node's inventory name).
    type: str
    default: the image source
  relay_token:
    description: The next node's one-time token; empty for the last node of a chain (no relay).
    type: str
    default: ""
  relay_to:
    description: The next node's name, for messages.
    type: str
    default: the next node
  relay_address:
    description:
      - The one address of this node the relay listens on and the next node connects to (its cluster address).
        C(0.0.0.0) and C(::) are refused. Required with O(relay_token).
    type: str
  relay_port:
    description: TCP port the relay listens on.
    type: int
    default: 29700
  total_bytes:
    description: Expected size, for the progress report.
    type: int
  progress_file:
    description: Where to write progress; empty for none.
    type: str
    default: /run/vllmops/image-receive.json
  connect_deadline:
    description: Seconds to keep trying to reach the source.
    type: int
    default: 60
  idle_timeout:
    description:
      - Seconds the upstream may send nothing, or the next node read nothing, before that hop is declared broken
        (and, for the relay, seconds to wait for the next node to connect).
    type: int
    default: 120
  deadline:
    description: Seconds the whole copy, relay included, may take.
    type: int
    default: 3600
extends_documentation_fragment:
  - vllmops.cluster.docker_host
attributes:
  check_mode:
    support: full
    description: Reports whether it would copy, copies nothing.
  diff_mode:
    support: none
    description: No diff.
  idempotent:
    support: full
    description: Copies nothing when the node has the image's content.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Receive the serving image
  vllmops.cluster.image_receive:
    image: vllm/vllm-openai:v0.33.0
    content_id: "{{ source.content_id }}"
    url: "http://10.0.0.1:29700/{{ token }}"
  no_log: true

- name: Receive it from node1 and relay it to node3 as it arrives
  vllmops.cluster.image_receive:
    image: vllm/vllm-openai:v0.33.0
    content_id: "{{ source.content_id }}"
    url: "http://10.0.0.11:29700/{{ token }}"
    upstream: node1
    relay_token: "{{ hostvars['node3'].token }}"
    relay_to: node3
    relay_address: 10.0.0.12
  no_log: true
"""

RETURN = r"""
previous_id:
  description: The image ID the node had before, null when it had none.
  returned: success
  type: str
image_id:
  description: The image ID it has now (this engine's, what a container is started from here).
  returned: success
  type: str
previous_content_id:
  description: The content ID of the image the node had before, null when it had none.
  returned: success
  type: str
content_id:
  description: The content ID of the image it has now.
  returned: success
  type: str
bytes:
  description: Bytes copied (0 when nothing was copied).
  returned: success
  type: int
seconds:
  description: Seconds the copy took.
  returned: success
  type: float
relayed_bytes:
  description: Bytes the next node read from this node's relay (0 without a relay).
  returned: success
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import short_id
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import (
    Relay,
    TransferError,
    check_loaded,
    local_image,
    receive,
    receiver_argument_spec,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            content_id=dict(type="str"),
            image_id=dict(type="str"),
            total_bytes=dict(type="int"),
            **receiver_argument_spec(29700, 3600, "/run/vllmops/image-receive.json", "the image source"),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        required_one_of=[("content_id", "image_id")],
        supports_check_mode=True,
    )
    params = module.params
    # What the node must hold: the content where the caller names it, else (an older caller) the ID.
    wanted_field, wanted = ("content_id", params["content_id"]) if params["content_id"] else ("image_id", params["image_id"])
    relay_wanted = bool(params["relay_token"])
    if relay_wanted and not params["relay_address"]:
        module.fail_json(msg="relaying the image: no relay_address: give this node's address the next node connects to")
    try:
        docker = DockerClient(params["docker_host"])
        before = local_image(docker, params["image"])
        previous = before.image_id if before else None
        result = dict(changed=getattr(before, wanted_field, None) != wanted, previous_id=previous, image_id=previous,
                      previous_content_id=before.content_id if before else None,
                      content_id=before.content_id if before else None, bytes=0, seconds=0.0, relayed_bytes=0)
        # A node in the middle of a chain copies even when it has the image: the next node waits for its relay.
        if (not result["changed"] and not relay_wanted) or module.check_mode:
            module.exit_json(**result)
        progress = params["progress_file"] or None
        if progress:
            os.makedirs(os.path.dirname(progress), exist_ok=True)
        relay = None
        if relay_wanted:
            relay = Relay(params["relay_to"], params["relay_address"], params["relay_port"], params["relay_token"],
                          params["deadline"], params["idle_timeout"])
        try:
            copied, seconds, said = receive(docker, params["url"], params["connect_deadline"], progress,
                                            params["total_bytes"], params["upstream"], relay, params["idle_timeout"])
        finally:
            # The process must outlive the relay: the next node reads the rest from it.
            relay_failed = relay.wait(params["deadline"]) if relay else None
        check_loaded(said, params["image"], params["image_id"])
        after = local_image(docker, params["image"])
    except (DockerError, TransferError) as err:
        module.fail_json(msg=f"copying {params['image']} from {params['upstream']}: {err}")
    result.update(image_id=after.image_id if after else None, content_id=after.content_id if after else None,
                  bytes=copied, seconds=round(seconds, 2), relayed_bytes=relay.sent if relay else 0)
    result["changed"] = result["changed"] or result["image_id"] != previous
    if relay_failed:
        module.fail_json(msg=f"{params['image']} was loaded here, but relaying it to {params['relay_to']} failed: {relay_failed}",
                         **result)
    if result[wanted_field] != wanted:
        module.fail_json(msg=f"after the copy {params['image']} has the {wanted_field.replace('_', ' ')} "
                             f"{short_id(result[wanted_field]) or 'none'}, not {short_id(wanted)}: the source changed "
                             "during the copy, or served another image under that name", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
