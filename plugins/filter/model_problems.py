# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: model_problems
short_description: What vLLM would refuse about a model's layout and context, from its config.json
version_added: 0.1.0
description:
  - Reads the model's shape from its C(config.json) (attention and KV heads, layers, longest context; nested
    C(text_config) of multimodal models too) and checks a rank's settings against vLLM's own rules, before vLLM
    is started with them.
  - The tensor parallel size must divide the attention heads, and the KV heads must split evenly across the ranks
    (or be replicated on a whole number of them when there are fewer KV heads than ranks).
  - The pipeline parallel size is at most the number of layers.
  - C(max_model_len) is at most the model's longest context (the smallest length key of C(config.json), times a
    lengthening RoPE scaling factor).
  - With O(weight_bytes) and O(gpu_memory_bytes), whether one rank's share fits its GPU, counting the weights
    over TP x PP plus the KV cache (C(kv_cache_memory_bytes) when set, else one request of C(max_model_len)) against the GPU's
    memory times C(gpu_memory_utilization) (0.9 unless set). Activations and CUDA graphs are not counted, so a
    refusal is certain and a pass is no promise.
  - Returns one sentence per problem, naming the value and what would fit; an empty list when none.
positional: _input, settings, where, weight_bytes, gpu_memory_bytes
options:
  _input:
    description: The model's C(config.json), parsed.
    type: dict
    required: true
  settings:
    description: The rank's vLLM settings (C(vllmops.cluster.serve_settings)); any spelling of C(max_model_len).
    type: dict
    required: true
  where:
    description: How to name the model in the sentences (its path or ID).
    type: str
    default: the model
  weight_bytes:
    description: Bytes of the model's files (its manifest's C(bytes)); 0 to leave memory unchecked.
    type: int
    default: 0
  gpu_memory_bytes:
    description: Memory of one of the rank's GPUs in bytes; 0 to leave memory unchecked.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Check the layout and context against the model
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }}"
  vars:
    _problems: "{{ config | vllmops.cluster.model_problems(settings, '/srv/models/qwen') }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem.
  type: list
  elements: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.model_config import facts, memory_problems, problems
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import flag_name


def _model_problems(config, settings, where="the model", weight_bytes=0, gpu_memory_bytes=0):
    named = {flag_name(key): value for key, value in dict(settings or {}).items()}
    shape = facts(dict(config or {}))
    found = problems(shape, tensor_parallel_size=named.get("tensor_parallel_size") or 1,
                     pipeline_parallel_size=named.get("pipeline_parallel_size") or 1,
                     max_model_len=named.get("max_model_len"), where=where)
    if weight_bytes and gpu_memory_bytes:
        found += memory_problems(shape, named, int(weight_bytes), int(gpu_memory_bytes), where)
    return found


class FilterModule:
    def filters(self):
        return {"model_problems": _model_problems}
