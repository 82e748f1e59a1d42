#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_state
short_description: Record what a node looks like after a completed deploy, and tell whether it still does
version_added: 0.1.0
description:
  - With O(state=recorded), observes the node and writes the record O(path) (0600) with the fingerprint O(inputs) of
    the deploy's settings. deploy.yml does this as its last step, on a full run that completed.
  - With O(state=checked), observes the node again, as the record says it was observed (the options below count
    only when recording), and compares. RV(converged) is true only when a record exists, its inputs equal O(inputs)
    and every observation is equal, and O(model_hub_revision) is empty or a commit; RV(reasons) names each
    difference.
    When the node is not converged the record is removed (not in check mode), so a full run that fails half way
    leaves no record behind.
  - With O(state=absent), removes the record (teardown).
  - "Observed: the files O(files) match (sha256, mode, owner; O(files_excluded) left out), the files under O(trees)
    (size, modification time), the units O(units) match
    (running or not, enablement), the containers carrying O(container_label) (state, image ID), the IDs of O(images),
    the installed packages O(packages) match (versions), the nftables tables O(nft_tables) (family inet), the node's
    ephemeral port range (C(net.ipv4.ip_local_port_range), which the firewall filters), its
    global addresses (IPv6 privacy addresses aside), its GPUs as C(nvidia-smi) lists them and its C(/dev/nvidiaN)
    device nodes, and the HTTP status of O(health_urls) (never through a proxy)."
options:
  state:
    description: What to do.
    type: str
    choices: [checked, recorded, absent]
    default: checked
  path:
    description: The record.
    type: path
    default: /var/lib/vllmops/deploy-state.json
  inputs:
    description: The fingerprint of the deploy's inputs (made on the controller by the deploy_fingerprint filter).
    type: str
    default: ""
  model_hub_revision:
    description:
      - The revision of the hub the model comes from (empty when it does not come from the hub). Anything but a full
        commit hash (40 hex digits) - a branch or a tag, which may name another commit tomorrow - makes
        O(state=checked) report the node as not converged, saying so, so that the full run asks the hub again.
    type: str
    default: ""
  files:
    description: Glob patterns (C(**) recursive) of the files whose content, mode and owner are compared.
    type: list
    elements: str
    default: []
  files_excluded:
    description: Glob patterns of files left out (files our services rewrite while they run).
    type: list
    elements: str
    default: []
  trees:
    description: Files, and directories whose files, are compared by size and modification time (the model; no content is read).
    type: list
    elements: path
    default: []
  units:
    description: systemd unit patterns.
    type: list
    elements: str
    default: []
  container_label:
    description: The label of our containers.
    type: str
    default: ""
  images:
    description: Image names whose ID on the node is compared (the serving image).
    type: list
    elements: str
    default: []
  packages:
    description: dpkg package name patterns.
    type: list
    elements: str
    default: []
  nft_tables:
    description: Names of nftables tables of family inet.
    type: list
    elements: str
    default: []
  health_urls:
    description: http URLs on the node that must answer as they did when recorded.
    type: list
    elements: str
    default: []
  docker_host:
    description: The Docker Engine (unix://PATH); default $DOCKER_HOST, else /var/run/docker.sock.
    type: str
attributes:
  check_mode:
    support: full
    description: C(checked) observes only; C(recorded) and C(absent) report what they would do.
  diff_mode:
    support: none
    description: The record is our own bookkeeping; nothing to diff.
  idempotent:
    support: partial
    description: C(recorded) rewrites the record with the time of the run.
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Is this node as the last completed deploy left it?
  vllmops.cluster.deploy_state:
    inputs: "{{ hostvars[inventory_hostname] | vllmops.cluster.deploy_fingerprint(groups['vllm_nodes'], hostvars) }}"
  register: __state
"""

RETURN = r"""
converged:
  description: Whether the node is as the record says (C(checked)); true once recorded (C(recorded)).
  returned: always
  type: bool
reasons:
  description: What differs, one sentence each (C(checked) only).
  returned: always
  type: list
  elements: str
recorded_at:
  description: When the record was written (seconds since the epoch), null without one.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllmops.cluster.plugins.module_utils import deploy_state

SPEC_KEYS = ("files", "files_excluded", "trees", "units", "container_label", "images", "packages", "nft_tables", "health_urls",
             "docker_host")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["checked", "recorded", "absent"], default="checked"),
            path=dict(type="path", default="/var/lib/vllmops/deploy-state.json"),
            inputs=dict(type="str", default=""),
            model_hub_revision=dict(type="str", default=""),
            files=dict(type="list", elements="str", default=[]),
            files_excluded=dict(type="list", elements="str", default=[]),
            trees=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="str", default=[]),
            container_label=dict(type="str", default=""),
            images=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            nft_tables=dict(type="list", elements="str", default=[]),
            health_urls=dict(type="list", elements="str", default=[]),
            docker_host=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    try:
        run(module)
    except (OSError, ValueError) as err:
        module.fail_json(msg=f"{module.params['path']} ({module.params['state']}): {err}")


def run(module):
    def command(argv):
        try:
            rc, out, _err = module.run_command(argv, environ_update={"LC_ALL": "C"}, handle_exceptions=False)
        except OSError as err:  # not installed here (nvidia-smi on a host without GPUs): an observation too
            return 127, str(err)
        return rc, out

    params = module.params
    path = params["path"]
    spec = {key: params[key] for key in SPEC_KEYS}
    previous = deploy_state.read(path)
    recorded_at = previous.get("recorded_at") if previous else None

    if params["state"] == "absent":
        if not module.check_mode:
            deploy_state.forget(path)
        module.exit_json(changed=previous is not None, converged=False, reasons=[], recorded_at=recorded_at)

    if params["state"] == "recorded":
        if module.check_mode:
            module.exit_json(changed=True, converged=False, reasons=[], recorded_at=recorded_at)
        record = deploy_state.write(path, params["inputs"], spec, command)
        module.exit_json(changed=True, converged=True, reasons=[], recorded_at=record["recorded_at"])

    converged, reasons = deploy_state.check(path, params["inputs"], command, params["model_hub_revision"])
    changed = False
    if not converged and previous is not None and not module.check_mode:
        changed = deploy_state.forget(path)
    module.exit_json(changed=changed, converged=converged, reasons=reasons, recorded_at=recorded_at)


if __name__ == "__main__":
    main()
