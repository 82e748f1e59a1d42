# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: recipe_flags
short_description: The inventory's vllm serve flags over a recipe's, key by key in any spelling
version_added: 0.1.0
description:
  - Each key of O(override) replaces the recipe's flag of the same name, however either is spelled
    (C(max_model_len), C(max-model-len), C(--max-model-len)). An override of C(null) drops the recipe's flag.
positional: _input, override
options:
  _input:
    description: The recipe's flags.
    type: dict
    required: true
  override:
    description: The inventory's C(vllm_serve_args).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The flags vLLM gets
  ansible.builtin.debug:
    msg: "{{ {'max_model_len': 262144, 'enable_prefix_caching': true} | vllmops.cluster.recipe_flags({'max-model-len': 32768,
             'enable_prefix_caching': none}) }}"
    # {"max-model-len": 32768}
"""

RETURN = r"""
_value:
  description: The merged flags.
  type: dict
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.recipes import merge_flags


class FilterModule:
    def filters(self):
        return {"recipe_flags": merge_flags}
