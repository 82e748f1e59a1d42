#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: release
short_description: Keep what served on this node as a release, and put a kept release back
version_added: 0.1.0
description:
  - A release is this node's part of a configuration that served - its record (image, model version, this node's part,
    argv, proxy, plan), a copy of each of its files (units, environment files) and, where given, the API key - kept
    under O(root) in a directory named by its ID. O(root)/index.json names three releases - the one serving now
    (C(current)), the last one that answered (C(last_good)) and the one before it (C(previous)); no other is kept.
  - Every node keeps its own part of the same releases under the same IDs. The playbooks decide the order in which
    units stop and start; this module keeps and puts back the files, the model version and the index.
  - With O(state=checked), reports the index, the records it names, the sha256 of O(files) as they are now, and whether
    the current release's files are as it recorded them; it changes nothing (but a migration, as every state).
  - With O(state=kept), keeps O(id) afresh (written whole or not at all; nothing is written when it is kept already as
    it is), makes it C(last_good) and C(current) (the C(last_good) before it becomes C(previous)), removes every other
    release and, with O(model_path), the model versions none of the three serves.
  - With O(state=restored), puts the files of the release O(release) back where they differ, its model version in
    place (at O(model_path), or the served path the release recorded), and makes it C(current). Nothing is removed - the caller stops and removes the units
    that the release does not have.
  - With O(state=promoted), makes the release O(release) C(last_good) and C(current); the C(last_good) before it
    becomes C(previous) (after a rollback that answered, a second rollback goes forward again).
  - With O(state=linked), serves O(model_version) at O(model_path).
  - Every state first migrates the layout kept before releases (O(legacy)) - once - into the releases
    C(legacy-last-good) and C(legacy-previous).
options:
  root:
    description: Where the releases are kept (created 0700).
    type: path
    default: /etc/vllmops/releases
  state:
    description: What to do.
    type: str
    choices: [checked, kept, restored, promoted, linked]
    default: checked
  id:
    description:
      - The ID of the release to keep (O(state=kept)) - letters, digits, C(.), C(_) and C(-), not starting with C(.).
        Every node keeps its part of one release under the same ID.
    type: str
  release:
    description:
      - The release to restore or promote, or whose secret to read - C(last_good), C(previous), C(current) or an ID.
      - Required with O(state=restored) and O(state=promoted); O(state=checked) reads the secret of C(last_good) without it.
    type: str
  record:
    description:
      - The fields of the record (O(state=kept)) - for instance C(image) (C(content_id), C(local_id)), C(model)
        (C(path), C(digest), C(version)) or null, C(member), C(argv), C(proxy) or null, C(plan).
      - C(schema), C(id), C(node), C(created), C(files) and C(digests) are the module's and are refused here.
      - C(model.digest) names the model version a release serves (pruning keeps it); C(model.version), the directory
        of that version, is what O(state=restored) serves again at O(model_path).
    type: dict
    default: {}
  files:
    description:
      - O(state=kept) - the files of this node that belong to the release; each is copied in, and a missing one is an
        error (nothing is kept then).
      - O(state=checked) - the files whose sha256 to report in RV(live) (O(files[].mode) is not used).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file's path on the node.
        type: path
        required: true
      mode:
        description: Its mode, in octal (C("0644")); the copy and the file put back get it. Unset, the file's mode now.
        type: raw
  digests:
    description:
      - O(state=kept) - label to path; the record keeps the sha256 of each file (null when it is missing), not the file
        (the network environment, Ray's token, the certificate).
    type: dict
    default: {}
  secret:
    description: O(state=kept) - one secret kept with the release (the API key, 0600); returned only by O(read_secret).
    type: str
  read_secret:
    description: O(state=checked) - return the secret kept with O(release) (default C(last_good)) as RV(secret). Run the task with C(no_log).
    type: bool
    default: false
  model_path:
    description:
      - The path the model is served at (a link to one of its versions, kept side by side by digest).
      - O(state=kept) - remove the versions of it that no kept release serves.
      - O(state=restored) - serve the restored release's C(model.version) at it, when the record has one (unset, at the
        record's C(model.path)).
      - O(state=linked) - serve O(model_version) at it.
    type: path
  model_version:
    description: O(state=linked) - the version directory to serve at O(model_path).
    type: path
  legacy:
    description:
      - The layout kept before releases, to migrate (every state does first). Its directories become the releases
        C(legacy-last-good) (C(last_good) and C(current)) and C(legacy-previous) (C(previous)) and are removed once
        they are written. Where an index naming other releases exists, they are left as they are, with a warning.
    type: dict
    suboptions:
      last_good:
        description: The directory of the last working configuration.
        type: path
      previous:
        description: The directory of the one before it.
        type: path
      files:
        description:
          - Basename of a file kept in those directories to its live C(path) and C(mode); files not named here are
            not migrated.
        type: dict
        default: {}
      api_port:
        description: The port vLLM served on, for a directory kept without C(member.json) that holds the vLLM unit.
        type: int
      vllm_unit:
        description: The basename of the vLLM unit in those directories.
        type: str
        default: vllmops-vllm.service
attributes:
  check_mode:
    support: full
    description: Every state reports what it would change (the files, the index, the releases and model versions removed) and writes nothing.
  diff_mode:
    support: partial
    description: The index before and after; not the files (an environment file holds the API key).
  idempotent:
    support: full
    description: Keeping a release kept already as it is, restoring one in place, promoting the last good one change nothing.
notes:
  - The record's C(node) is the node's host name.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Keep this configuration, which answered, as the last working one
  vllmops.cluster.release:
    state: kept
    id: "{{ vllmops_plan.release_id }}"
    record:
      image: {content_id: "{{ vllmops_plan.image_content_id }}", local_id: "{{ _vllm_serve_own_image_id }}"}
      model: "{{ vllmops_model_release | default(none) }}"
      member: "{{ _vllm_serve_member }}"
      plan: "{{ vllmops_plan }}"
    files:
      - {path: /etc/systemd/system/vllmops-vllm.service, mode: "0644"}
      - {path: /etc/vllmops/vllm.env, mode: "0600"}
      - {path: /etc/vllmops/cluster.env, mode: "0644"}
    digests:
      network_env: /etc/vllmops/cluster.env
    secret: "{{ vllmops_api_key }}"
    model_path: /srv/models/Qwen3-8B
  no_log: true

- name: Put the previous release back on this node
  vllmops.cluster.release:
    state: restored
    release: previous
    model_path: /srv/models/Qwen3-8B
  register: __restored

- name: It answered - keep it as the last working one
  vllmops.cluster.release:
    state: promoted
    release: "{{ __restored.id }}"

- name: What is kept, and are the current release's files in place?
  vllmops.cluster.release:
    files:
      - path: /etc/vllmops/vllm.env
    legacy:
      last_good: /etc/vllmops/last-good
      previous: /etc/vllmops/previous
      api_port: 8000
      files:
        vllmops-vllm.service: {path: /etc/systemd/system/vllmops-vllm.service, mode: "0644"}
        vllm.env: {path: /etc/vllmops/vllm.env, mode: "0600"}
        cluster.env: {path: /etc/vllmops/cluster.env, mode: "0644"}
  register: __releases
"""

RETURN = r"""
index:
  description: The index after the task (as it would be, in check mode) - C(schema), C(current), C(last_good), C(previous) (IDs or null).
  returned: always
  type: dict
  sample: {schema: vllmops.release-index/1, current: r2, last_good: r2, previous: r1}
records:
  description: The records the index names (C(current), C(last_good), C(previous)), each the release's release.json or null.
  returned: O(state=checked)
  type: dict
live:
  description: Path to the sha256 of each of O(files) now (null when it is missing).
  returned: O(state=checked)
  type: dict
matches:
  description:
    - Whether every file of the current release is as it recorded it (sha256) and, with O(files), whether the files of
      O(files) that exist are exactly those it recorded; null without a current release.
  returned: O(state=checked)
  type: bool
secret:
  description: The secret kept with O(release) (null when none was kept).
  returned: O(state=checked) with O(read_secret)
  type: str
id:
  description: The ID of the release kept, restored or promoted.
  returned: O(state=kept), O(state=restored), O(state=promoted)
  type: str
removed:
  description: The IDs of the releases removed (no longer current, last good or previous).
  returned: O(state=kept)
  type: list
  elements: str
pruned_versions:
  description: The model versions removed (none of the kept releases serves them).
  returned: O(state=kept)
  type: list
  elements: str
freed_bytes:
  description: The bytes those versions held.
  returned: O(state=kept)
  type: int
record:
  description: The restored release's record (release.json, its C(files) included).
  returned: O(state=restored)
  type: dict
changed_files:
  description: The files put back (their content or mode differed, or they were missing).
  returned: O(state=restored)
  type: list
  elements: str
model_changed:
  description: Whether O(model_path) was switched to another version.
  returned: O(state=restored), O(state=linked)
  type: bool
migrated:
  description: The releases the legacy layout was migrated into by this task.
  returned: always
  type: list
  elements: str
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils import release
from ansible_collections.vllmops.cluster.plugins.module_utils.model_files import ModelError


def run(module: AnsibleModule, store: release.Store) -> dict:
    params = module.params
    state = params["state"]
    if state == "checked":
        return {**store.info(params["files"], params["release"] or "last_good", params["read_secret"]), "changed": False}
    if state == "kept":
        return store.keep(params["id"], params["record"], params["files"], params["digests"], socket.gethostname(),
                          secret=params["secret"], model_path=params["model_path"])
    if state == "restored":
        return store.restore(params["release"], model_path=params["model_path"])
    if state == "promoted":
        return store.promote(params["release"])
    changed = store.link(params["model_path"], params["model_version"])
    return {"index": store.index(), "model_changed": changed, "changed": changed}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default=release.ROOT),
            state=dict(type="str", choices=["checked", "kept", "restored", "promoted", "linked"], default="checked"),
            id=dict(type="str"),
            release=dict(type="str"),
            record=dict(type="dict", default={}),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                mode=dict(type="raw"),
            )),
            digests=dict(type="dict", default={}),
            secret=dict(type="str", no_log=True),
            read_secret=dict(type="bool", default=False),
            model_path=dict(type="path"),
            model_version=dict(type="path"),
            legacy=dict(type="dict", options=dict(
                last_good=dict(type="path"),
                previous=dict(type="path"),
                files=dict(type="dict", default={}),
                api_port=dict(type="int"),
                vllm_unit=dict(type="str", default=release.LEGACY_VLLM_UNIT),
            )),
        ),
        required_if=[
            ("state", "kept", ["id"]),
            ("state", "restored", ["release"]),
            ("state", "promoted", ["release"]),
            ("state", "linked", ["model_path", "model_version"]),
        ],
        supports_check_mode=True,
    )
    store = release.Store(module.params["root"], module.check_mode)
    migrated = {"migrated": [], "changed": False}
    try:
        before = store.index()
        if module.params["legacy"]:
            migrated = store.migrate(module.params["legacy"], socket.gethostname())
            for warning in migrated["warnings"]:
                module.warn(warning)
        result = run(module, store)
    except (release.ReleaseError, ModelError, OSError) as err:
        module.fail_json(msg=f"release {module.params['state']} under {module.params['root']}: {err}")
    result["changed"] = result["changed"] or migrated["changed"]
    result.setdefault("index", store.index())
    module.exit_json(migrated=migrated["migrated"], diff={"before": before, "after": result["index"]}, **result)


if __name__ == "__main__":
    main()
