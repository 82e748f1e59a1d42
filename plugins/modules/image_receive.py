#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: image_receive
short_description: Load a Docker image streamed by image_source, unless this node already has that image ID
version_added: 0.1.0
description:
  - Compares the image ID of O(image) on this host's Docker Engine with O(image_id). When they differ, reads the
    image from O(url) (served by M(vllmops.cluster.image_source)) straight into the engine's image load (what C(docker load) does), then checks that
    O(image) now has O(image_id).
  - Writes its progress (bytes, seconds, MB/s) as JSON to O(progress_file) about once a second while copying.
options:
  image:
    description: Image name:tag as the source tags it.
    type: str
    required: true
  image_id:
    description: The ID the node must end up with.
    type: str
    required: true
  url:
    description: Where the source serves this node's copy (C(http://ADDRESS:PORT/TOKEN)).
    type: str
    required: true
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
    description: Copies nothing when the node has the image ID.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Receive the serving image
  vllmops.cluster.image_receive:
    image: vllm/vllm-openai:v0.33.0
    image_id: "{{ source.image_id }}"
    url: "http://10.0.0.1:29700/{{ token }}"
  no_log: true
"""

RETURN = r"""
previous_id:
  description: The image ID the node had before, null when it had none.
  returned: success
  type: str
image_id:
  description: The image ID it has now.
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
"""

import os

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_transfer import TransferError, local_image, receive


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            image_id=dict(type="str", required=True),
            url=dict(type="str", required=True, no_log=True),
            total_bytes=dict(type="int"),
            progress_file=dict(type="str", default="/run/vllmops/image-receive.json"),
            connect_deadline=dict(type="int", default=60),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        docker = DockerClient(params["docker_host"])
        before = local_image(docker, params["image"])
        previous = before[0] if before else None
        result = dict(changed=previous != params["image_id"], previous_id=previous, image_id=previous, bytes=0, seconds=0.0)
        if not result["changed"] or module.check_mode:
            module.exit_json(**result)
        progress = params["progress_file"] or None
        if progress:
            os.makedirs(os.path.dirname(progress), exist_ok=True)
        copied, seconds, _said = receive(docker, params["url"], params["connect_deadline"], progress, params["total_bytes"])
        after = local_image(docker, params["image"])
    except (DockerError, TransferError) as err:
        module.fail_json(msg=f"copying {params['image']}: {err}")
    result.update(image_id=after[0] if after else None, bytes=copied, seconds=round(seconds, 2))
    if result["image_id"] != params["image_id"]:
        module.fail_json(msg=f"after the copy {params['image']} is {result['image_id']}, not {params['image_id']}: "
                             "the source changed during the copy, or served another image under that name", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
