# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_recipes
short_description: Several services (vllmops_services) with each service's recipe written into its settings
version_added: 0.1.0
description:
  - A service with C(recipe) (a recipe's name in this collection's C(recipes/), or a path on the controller, as
    P(vllmops.cluster.recipe#filter) reads it) gets what the recipe says, under what the service says itself - its model
    (C(model) and C(revision), unless the service names a model), C(args) (the service's flags override the
    recipe's, key by key whatever their spelling), C(env), the layout's C(tensor_parallel_size) and
    C(pipeline_parallel_size) (unless the service sets them), C(image) (unless the service names one) and
    C(min_vllm_version) (the units are checked against the image's vLLM with it).
  - The recipe's layout is C(recipe_layout) when the service names one; else, when the service sets its
    C(tensor_parallel_size) or C(pipeline_parallel_size), the layout of one replica of that size on the cluster's GPU
    family (C(gb10x2) for TP 2 on GB10s) if the recipe has it; else the recipe's own flags.
  - Services without a recipe are returned as they are; C(recipe) becomes the recipe's name.
positional: _input, node_gpus
options:
  _input:
    description: C(vllmops_services).
    type: list
    elements: dict
    required: true
  node_gpus:
    description: One list of M(vllmops.cluster.gpu_probe)'s GPUs per node (each with C(name)); the GPU family.
    type: list
    elements: list
    default: []
"""

EXAMPLES = r"""
- name: Plan the services, their recipes written in
  vllmops.cluster.fleet_plan:
    services: "{{ vllmops_services | vllmops.cluster.fleet_recipes(_gpus) }}"
    nodes: "{{ nodes }}"
"""

RETURN = r"""
_value:
  description: The services, each with its recipe's settings under its own.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.filter.recipe import recipe
from ansible_collections.vllmops.cluster.plugins.module_utils.recipes import hardware_class, merge_flags

LAYOUT_KEYS = ("tensor_parallel_size", "pipeline_parallel_size")


def _resolved(raw: dict, family: str) -> dict:
    """The service's recipe, resolved for the layout it names (recipe_layout), or one replica of its TP x PP on the
    GPU family when the recipe has that layout, else the recipe's own flags."""
    if raw.get("recipe_layout"):
        return recipe(raw["recipe"], str(raw["recipe_layout"]), [])
    if family and any(key in raw for key in LAYOUT_KEYS):
        size = int(raw.get("tensor_parallel_size") or 1) * int(raw.get("pipeline_parallel_size") or 1)
        try:
            return recipe(raw["recipe"], f"{family}x{size}", [])
        except AnsibleFilterError:
            pass  # no such layout in the recipe (a broken recipe fails again just below)
    return recipe(raw["recipe"], "", [])


def fleet_recipes(services, node_gpus=None):
    if not isinstance(services, list):
        raise AnsibleFilterError(f"vllmops_services is {type(services).__name__}: give a list of services")
    cluster = hardware_class(list(node_gpus or []))
    family = cluster.rsplit("x", 1)[0] if cluster else ""
    expanded = []
    for raw in services:
        if not isinstance(raw, dict) or not raw.get("recipe"):
            expanded.append(raw)
            continue
        if "recipe_layout" in raw and not isinstance(raw["recipe_layout"], str):
            raise AnsibleFilterError(f"vllmops_services: service {raw.get('name')} sets recipe_layout "
                                     f"{raw['recipe_layout']!r}: name a layout of its recipe (gb10x2, h200x8...)")
        try:
            found = _resolved(raw, family)
        except AnsibleFilterError as err:
            raise AnsibleFilterError(f"vllmops_services: service {raw.get('name')}: {err}") from None
        service = {key: value for key, value in raw.items() if key not in ("recipe", "recipe_layout")}
        if "model" not in raw:
            service["model"] = found["model"]["repo"]
            service.setdefault("revision", found["model"]["revision"])
        service["args"] = merge_flags(found["args"], raw.get("args"))
        service["env"] = {**found["env"], **dict(raw.get("env") or {})}
        for key in LAYOUT_KEYS:
            if key not in raw and found[key]:
                service[key] = found[key]
        if found["image"] and "image" not in raw:
            service["image"] = found["image"]
        if found["min_vllm_version"]:
            service["min_vllm_version"] = found["min_vllm_version"]
        service["recipe"] = found["name"]
        expanded.append(service)
    return expanded


class FilterModule:
    def filters(self):
        return {"fleet_recipes": fleet_recipes}
