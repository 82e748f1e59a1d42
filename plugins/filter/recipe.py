# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: recipe
short_description: A recipe (what a model needs to be served), checked and resolved for the cluster's hardware
version_added: 0.1.0
description:
  - Reads the recipe C(vllmops_recipe) names, a file of the collection's C(recipes/) directory (without C(.yml)), or a
    file on the controller (a path), in this collection's format (C(recipes/README.md)) or sparkrun's or
    spark-vllm-docker's, and checks it. An unknown name or a broken recipe is an error that names what is wrong (and
    the closest recipe name).
  - Resolves it for the layout named by O(layout), else the layout tested for the class of the cluster's GPUs (their
    name and count, from O(node_gpus)), else the recipe's own flags.
  - Returns an empty dict when the input is empty (no recipe).
positional: _input, layout, node_gpus
options:
  _input:
    description: The recipe's name, or a path to a recipe file on the controller.
    type: str
    required: true
  layout:
    description: The layout to use (C(gb10x2), C(h200x8)...); empty picks it from O(node_gpus).
    type: str
    default: ""
  node_gpus:
    description: One list of M(vllmops.cluster.gpu_probe)'s GPUs per node (each with C(name)).
    type: list
    elements: list
    default: []
"""

EXAMPLES = r"""
- name: What the recipe says for this cluster
  ansible.builtin.debug:
    msg: "{{ 'qwen3.5-122b-a10b-fp8' | vllmops.cluster.recipe('', [[{'name': 'NVIDIA GB10'}], [{'name': 'NVIDIA GB10'}]]) }}"
    # {"name": "qwen3.5-122b-a10b-fp8", "layout": "gb10x2", "tensor_parallel_size": 2, "args": {...}, ...}
"""

RETURN = r"""
_value:
  description:
    - C(name), C(description), C(model) (C(repo), C(revision), C(dir), C(served_name), C(weight_bytes), C(task)),
      C(min_vllm_version), C(layout) (empty when none applies) and C(layout_reason), C(args) and C(env) (the layout's
      over the recipe's), C(tensor_parallel_size) and C(pipeline_parallel_size) (0 when the plan derives them),
      C(ready_timeout) (0 when derived), C(image) (a suggestion), C(import_warnings), C(path).
    - An empty dict without a recipe.
  type: dict
"""

import os
from functools import lru_cache
from pathlib import Path

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.module_utils.recipes import RecipeError, closest, from_document, resolve

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _locate(spec: str) -> tuple[Path, str]:
    if "/" in spec or spec.endswith((".yml", ".yaml")):
        path = Path(os.path.expanduser(spec))
        if not path.is_file():
            raise AnsibleFilterError(f"recipe file {spec} does not exist on the controller (vllmops_recipe)")
        return path, path.name.rsplit(".", 1)[0]
    path = RECIPES / f"{spec}.yml"
    if not path.is_file():
        names = sorted(p.stem for p in RECIPES.glob("*.yml"))
        raise AnsibleFilterError(f"no recipe {spec!r} in this collection (vllmops_recipe){closest(spec, names)}; "
                                 f"it has: {', '.join(names)}; or give a path to a recipe file.")
    return path, spec


@lru_cache(maxsize=32)
def _load(path: str, mtime: float, name: str) -> dict:
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise AnsibleFilterError(f"recipe {path} cannot be read: {err}") from None
    try:
        return from_document(document, name)
    except (RecipeError, ValueError) as err:
        raise AnsibleFilterError(f"{err} ({path})") from None


def recipe(spec, layout="", node_gpus=None):
    if not spec:
        return {}
    path, name = _locate(str(spec))
    try:
        resolved = resolve(_load(str(path), path.stat().st_mtime, name), str(layout or ""), list(node_gpus or []))
    except RecipeError as err:
        raise AnsibleFilterError(str(err)) from None
    return dict(resolved, path=str(path))


class FilterModule:
    def filters(self):
        return {"recipe": recipe}
