# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_cli_args
short_description: Turn structured vLLM settings into a C(vllm serve) argv list
version_added: 0.1.0
description:
  - Keys become flags (C(tensor_parallel_size) gives C(--tensor-parallel-size)); a key that already starts
    with C(-) is kept as written (C(-tp)).
  - C(true) gives C(--x); C(false) gives C(--no-x) where the version generates it, nothing for a
    store_true flag (false is its default), C(--x false) for flags that take a boolean value; C(null) leaves
    the flag out.
  - Lists give one flag followed by each item; mappings (and lists inside lists) are passed as compact JSON.
  - Given image_probe's C(vllm) result, booleans are spelled the way that version spells them and the
    result is the same argv that M(vllmops.cluster.image_probe) validates.
  - A list input is returned as strings, unchanged.
positional: _input, vllm
options:
  _input:
    description: The settings, a mapping (or a list of argv strings).
    type: raw
    required: true
  vllm:
    description: The C(vllm) part of an image_probe result.
    type: dict
"""

EXAMPLES = r"""
- name: Render the flags of the serving unit
  ansible.builtin.set_fact:
    serve_argv: "{{ {'tensor_parallel_size': 2, 'enable_prefix_caching': true} | vllmops.cluster.vllm_cli_args(probe.vllm) }}"
    # ['--tensor-parallel-size', '2', '--enable-prefix-caching']
"""

RETURN = r"""
_value:
  description: The argv list.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import CliArgsError, settings_to_argv


def vllm_cli_args(settings, vllm=None):
    try:
        return settings_to_argv(settings, vllm)
    except CliArgsError as err:
        raise AnsibleFilterError(f"vllm_cli_args: {err}") from err


class FilterModule:
    def filters(self):
        return {"vllm_cli_args": vllm_cli_args}
