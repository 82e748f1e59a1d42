# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: serve_settings
short_description: One rank's vLLM settings, the inventory's flags merged with the plan's
version_added: 0.1.0
description:
  - Merges C(vllm_serve_args) with the flags the plan sets (parallel sizes and backend for the cluster; rank, node
    count, rendezvous address and port, headless for each node) and the name, address and port the rank serves on,
    in that order, into the settings M(vllmops.cluster.image_probe) checks and C(vllmops.cluster.vllm_cli_args)
    renders.
  - A flag the plan sets is refused in C(vllm_serve_args), in any spelling (C(tensor_parallel_size),
    C(tensor-parallel-size), C(--tensor-parallel-size), C(-tp)), naming the setting to use instead; it is never
    overwritten or rendered twice. C(vllmops.cluster.plan_owned_flags) gives the same sentences as a list, for a
    check before anything changes.
positional: _input, plan, host, served_name, bind_host
options:
  _input:
    description: C(vllm_serve_args).
    type: dict
    required: true
  plan:
    description: C(vllmops_plan), the plan role's result.
    type: dict
    required: true
  host:
    description: The node whose rank this is (C(inventory_hostname)).
    type: str
    required: true
  served_name:
    description: The model name the API serves.
    type: str
    required: true
  bind_host:
    description: The address vLLM listens on.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: This rank's settings
  ansible.builtin.set_fact:
    settings: "{{ vllm_serve_args | vllmops.cluster.serve_settings(vllmops_plan, inventory_hostname, 'qwen', '127.0.0.1') }}"
"""

RETURN = r"""
_value:
  description: Flag name (as vLLM's option, underscores) to its value.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PlanError, serve_settings


def _serve_settings(args, plan, host, served_name, bind_host):
    try:
        return serve_settings(dict(args or {}), plan, host, served_name, bind_host)
    except PlanError as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    def filters(self):
        return {"serve_settings": _serve_settings}
