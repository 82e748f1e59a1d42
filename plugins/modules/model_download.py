#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_download
short_description: Read or download a Hugging Face Hub model with the serving image's own client
version_added: 0.2.0
description:
  - Runs the C(huggingface_hub) client of O(image) in a container on the host network. With O(list_only) it lists the
    files of O(repo) at O(revision) (sizes, and sha256 for the files in LFS) and the commit the revision names, and
    reads its C(config.json) through the same client (what the model is, known before a byte of its weights moves).
  - Otherwise it downloads them into a staging directory beside O(path) (the client resumes a download
    interrupted earlier), checks every file against the hub's own hashes (sha256 for LFS files, the git blob sha1 for
    the others), and keeps it as a version of the model beside the one served, C(PARENT/.vllmops-versions/NAME/HEX)
    (HEX the first 16 hex digits of its digest), with the manifest beside it that M(vllmops.cluster.model_manifest)
    reads. What O(path) serves does not change (the release switch flips it); only where nothing was there yet does
    O(path) become a link to the new version.
  - The token reaches the client as a 0600 file mounted read-only (C(HF_TOKEN_PATH)), never on a command line, in the
    container's environment or in a log. O(endpoint) is C(HF_ENDPOINT) (a mirror).
  - A repository that does not exist, a gated one without an allowed token, and a revision that does not exist each
    fail with one sentence; nothing is changed.
options:
  image:
    description: The serving image (it must hold python3 with huggingface_hub).
    type: str
    required: true
  repo:
    description: The model's repository (C(org/name)).
    type: str
    required: true
  revision:
    description: A commit (or a branch or tag, resolved to its commit).
    type: str
    required: true
  path:
    description: The model's path, the link to the version served (required unless O(list_only)).
    type: path
  list_only:
    description: Only list the files and the commit; download nothing.
    type: bool
    default: false
  token:
    description: A hub token (for gated or private models).
    type: str
    default: ""
  endpoint:
    description: The hub's URL (C(HF_ENDPOINT)); empty for the Hugging Face Hub.
    type: str
    default: ""
  timeout:
    description: Seconds the client may run.
    type: int
    default: 7200
  progress_file:
    description: Where the bytes downloaded so far are written every 2 s; empty for none.
    type: str
    default: /run/vllmops/model-download.json
extends_documentation_fragment:
  - vllmops.cluster.docker_host
attributes:
  check_mode:
    support: full
    description: Lists the files and downloads nothing.
  diff_mode:
    support: none
    description: No diff.
  idempotent:
    support: none
    description: Downloads whenever it is called without O(list_only); the model role calls it only when the node lacks the revision.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Download the model on the head
  vllmops.cluster.model_download:
    image: vllm/vllm-openai:v0.33.0
    repo: Qwen/Qwen3.5-122B-A10B-FP8
    revision: 0123456789abcdef0123456789abcdef01234567
    path: /srv/models/Qwen3.5-122B-A10B-FP8
    token: "{{ vault_hf_token }}"
"""

RETURN = r"""
commit:
  description: The commit O(revision) names.
  returned: success
  type: str
files:
  description: The hub's files (name to C(size), C(sha256) for LFS files, C(blob_id)).
  returned: success
  type: dict
config:
  description: The repository's C(config.json) at the commit (with O(list_only); null when it has none or without).
  returned: success
  type: dict
bytes:
  description: Bytes of the model.
  returned: success
  type: int
downloaded_bytes:
  description: Bytes downloaded in this run.
  returned: success
  type: int
digest:
  description: The model's digest after the download (empty without one).
  returned: success
  type: str
version:
  description: The directory of the version downloaded (empty without a download).
  returned: success
  type: str
seconds:
  description: Seconds the download took.
  returned: after a download
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DEFAULT_HOST, DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.model_hub import Hub, HubError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            repo=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            path=dict(type="path"),
            list_only=dict(type="bool", default=False),
            token=dict(type="str", default="", no_log=True),
            endpoint=dict(type="str", default=""),
            timeout=dict(type="int", default=7200),
            progress_file=dict(type="str", default="/run/vllmops/model-download.json"),
            docker_host=dict(type="str", default=DEFAULT_HOST, fallback=(env_fallback, ["DOCKER_HOST"])),
        ),
        required_if=[("list_only", False, ["path"])],
        supports_check_mode=True,
    )
    params = module.params
    hub = Hub(DockerClient(params["docker_host"]), params["image"], params["endpoint"], params["token"], params["timeout"])
    started = time.monotonic()
    try:
        if params["list_only"]:
            commit, files, config = hub.info_and_config(params["repo"], params["revision"])
        else:
            (commit, files), config = hub.info(params["repo"], params["revision"]), None
        result = dict(changed=False, commit=commit, files=files, bytes=sum(e["size"] for e in files.values()),
                      downloaded_bytes=0, digest="", version="", config=config)
        if not params["list_only"]:
            result["changed"] = True
            if not module.check_mode:
                manifest, downloaded = hub.download(params["repo"], commit, params["path"].rstrip("/"),
                                                    params["progress_file"] or None)
                result.update(downloaded_bytes=downloaded, digest=manifest["digest"], version=manifest["path"],
                              seconds=round(time.monotonic() - started, 1))
    except (HubError, DockerError, OSError) as err:
        module.fail_json(msg=f"{params['repo']}@{params['revision']}: {err}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
