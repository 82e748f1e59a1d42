# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: model_path
short_description: Where vLLM finds the model on a node, from vllm_serve_model and vllm_serve_model_dir
version_added: 0.2.0
description:
  - An absolute path is kept; a name (or C(./name), or C(./org/name)) lies under O(model_dir); anything else with a
    C(/) (C(org/name)) is a Hugging Face ID, returned as it is (vLLM downloads it itself).
  - The one place this is decided, for the model, plan and vllm_serve roles.
positional: model_dir
options:
  _input:
    description: vllm_serve_model.
    type: str
    required: true
  model_dir:
    description: vllm_serve_model_dir, the directory every container mounts.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The model's directory
  ansible.builtin.debug:
    msg: "{{ 'Qwen3.5-122B-A10B-FP8' | vllmops.cluster.model_path('/srv/models') }}"  # /srv/models/Qwen3.5-122B-A10B-FP8
"""

RETURN = r"""
_value:
  description: An absolute path, a Hugging Face ID, or empty when the model is empty.
  type: str
"""

import posixpath


def model_path(model, model_dir):
    model = (model or "").strip()
    if not model or model.startswith("/"):
        return posixpath.normpath(model) if model else ""
    if model.startswith("./"):
        return posixpath.join(model_dir, posixpath.normpath(model[2:]))
    if "/" in model:
        return model
    return posixpath.join(model_dir, model)


class FilterModule:
    def filters(self):
        return {"model_path": model_path}
