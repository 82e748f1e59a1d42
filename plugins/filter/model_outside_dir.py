# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: model_outside_dir
short_description: The sentence refusing a model directory the serving containers do not mount
version_added: 0.1.0
description:
  - The serving containers mount C(vllm_serve_model_dir) alone. A model path outside it is refused by the plan; the
    model role refuses it with the same sentence before it downloads or copies anything.
  - Empty when the path lies under the directory, or is a Hugging Face ID (vLLM downloads it itself).
positional: model_dir
options:
  _input:
    description: The model's path, from C(vllmops.cluster.model_path).
    type: str
    required: true
  model_dir:
    description: C(vllm_serve_model_dir).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse a model the containers would not see
  ansible.builtin.assert:
    that: problem | length == 0
    fail_msg: "{{ problem }}"
  vars:
    problem: "{{ '/data/qwen' | vllmops.cluster.model_outside_dir('/srv/models') }}"
    # the model path /data/qwen is outside vllm_serve_model_dir /srv/models, which is the only directory the
    # containers see: move the model under /srv/models or set vllm_serve_model_dir
"""

RETURN = r"""
_value:
  description: The sentence, or empty.
  type: str
"""

from ansible_collections.vllmops.cluster.plugins.module_utils.plan import model_outside_dir


class FilterModule:
    def filters(self):
        return {"model_outside_dir": lambda path, model_dir: model_outside_dir(path or "", model_dir)}
