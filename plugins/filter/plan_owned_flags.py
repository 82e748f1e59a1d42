# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: plan_owned_flags
short_description: The flags in vllm_serve_args that the plan sets itself, each with the setting to use instead
version_added: 0.1.0
description:
  - The plan sets the parallel sizes and the distributed backend, each node's rank, the node count, the rendezvous
    address and port and C(--headless), and the name, address and port vLLM serves on. Given in C(vllm_serve_args)
    they would be overwritten, or, spelled another way, rendered twice with the last one winning.
  - Returns one sentence per such key, in any spelling (C(tensor_parallel_size), C(tensor-parallel-size),
    C(--tensor-parallel-size), C(-tp)), naming the setting that decides it. An empty list when there is none.
  - C(vllmops.cluster.serve_settings) refuses the same keys when it merges a rank's settings.
positional: _input
options:
  _input:
    description: C(vllm_serve_args).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse flags the plan sets, before anything changes
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' ') }}"
  vars:
    problems: "{{ vllm_serve_args | vllmops.cluster.plan_owned_flags }}"
    # ["vllm_serve_args sets --tensor-parallel-size (written '-tp'), which the plan sets on every rank: remove it
    #   and use vllm_serve_tensor_parallel_size instead."]
"""

RETURN = r"""
_value:
  description: One sentence per flag the plan sets; empty when there is none.
  type: list
  elements: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.plan import owned_flags


def plan_owned_flags(args):
    return owned_flags(dict(args or {}))


class FilterModule:
    def filters(self):
        return {"plan_owned_flags": plan_owned_flags}
