# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: model_weight_bytes
short_description: The bytes of the weights vLLM loads, from a model's file listing
version_added: 0.1.0
description:
  - From the files M(vllmops.cluster.model_manifest) or M(vllmops.cluster.model_download) list (relative path to
    C(size)), the top-level C(*.safetensors) when there are any, else the top-level C(.bin), C(.pt), C(.pth) and
    C(.gguf) files. A repository that also ships its weights in another format (C(original/consolidated.00.pth) beside
    the safetensors) is not counted twice; tokenizer and configuration files are not counted.
  - What the memory check divides over the ranks (C(vllmops.cluster.model_problems)).
options:
  _input:
    description: The listing, relative path to a dict with C(size).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The weights' bytes
  ansible.builtin.debug:
    msg: "{{ listing.files | vllmops.cluster.model_weight_bytes }}"
"""

RETURN = r"""
_value:
  description: Bytes.
  type: int
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.model_files import weight_bytes


class FilterModule:
    def filters(self):
        return {"model_weight_bytes": weight_bytes}
