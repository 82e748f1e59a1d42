# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Recipes: what a model needs to be served (recipes/README.md), checked, and
resolved for the cluster's hardware.

* ``from_document``: a recipe document (ours, or sparkrun's and
  spark-vllm-docker's through recipe_import) as a checked recipe, or a
  RecipeError naming every problem;
* ``resolve``: the values the roles read (model, args, env, parallel sizes,
  readiness deadline), the layout tested for the cluster's hardware class
  over the recipe's own;
* ``merge_flags``: the inventory's vllm_serve_args over a recipe's, key by
  key in any spelling (``max-model-len`` overrides ``max_model_len``; ``null``
  drops the recipe's flag);
* ``ready_timeout`` and ``download_timeout``: deadlines from the work.
"""

from __future__ import annotations

import difflib
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.plan import PLAN_OWNED, flag_name
from ansible_collections.vllmops.cluster.plugins.module_utils.recipe_import import RecipeImportError, detect, to_recipe

SCHEMA = 1
HARDWARE_CLASSES = ("gb10x1", "gb10x2", "rtx-pro-6000x8", "h100x8", "h200x8")
# A GPU's name (nvidia-smi's) to its family, most specific first.
GPU_FAMILIES = (("RTX PRO 6000", "rtx-pro-6000"), ("GB10", "gb10"), ("H200", "h200"), ("H100", "h100"))
TOP_KEYS = {"schema", "name", "description", "model", "vllm", "args", "env", "layouts", "notes", "image",
            "import_warnings"}
MODEL_KEYS = {"repo", "revision", "dir", "served_name", "weight_bytes", "task"}
LAYOUT_KEYS = {"tensor_parallel_size", "pipeline_parallel_size", "args", "env", "ready_timeout", "tested", "notes"}
# Flags that carry a secret: given in a recipe they would reach the unit file and every process list.
SECRET_FLAGS = {"api_key", "hf_token"}
VERSION = re.compile(r"^\d+(\.\d+){0,3}([a-z]+\d*)?$")

# Readiness: compiling and capturing graphs take minutes before the weights count; each node then reads its share
# of the weights (safetensors from local disk into the GPU) at no less than this rate.
READY_BASE_S = 600
READY_LOAD_RATE = 200 * 1000 * 1000
DOWNLOAD_BASE_S = 600
# When the size is not known (a listing without sizes, no recipe): the fixed deadlines of before.
READY_UNSIZED_S = 900
DOWNLOAD_UNSIZED_S = 7200


class RecipeError(ValueError):
    pass


def closest(name: str, names) -> str:
    """', did you mean X?' for the nearest of names, or ''."""
    found = difflib.get_close_matches(str(name), list(names), n=1, cutoff=0.6)
    return f"; did you mean {found[0]!r}?" if found else ""


def from_document(document, name: str) -> dict:
    """The recipe in document (ours, or a foreign format recipe_import converts), checked."""
    if not isinstance(document, dict):
        raise RecipeError(f"recipe {name}: not a mapping (a YAML document with schema, model, args...)")
    try:
        kind = detect(document)
    except RecipeImportError as err:
        raise RecipeError(f"recipe {name}: {err}") from None
    recipe = document if kind == "vllmops" else to_recipe(document, name)
    found = problems(recipe, name if kind == "vllmops" else None)
    if found:
        raise RecipeError(f"recipe {name}: " + "; ".join(found))
    return recipe


def _is_int(value, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _args_problems(args, where: str) -> list[str]:
    if not isinstance(args, dict):
        return [f"{where} is not a mapping of vllm serve flags"]
    found = []
    for key in args:
        flag = flag_name(key)
        if flag in PLAN_OWNED:
            found.append(f"{where} sets --{flag.replace('_', '-')}, which the plan sets (a layout's "
                         "tensor_parallel_size/pipeline_parallel_size, or the model section, say it)")
        elif flag in SECRET_FLAGS:
            found.append(f"{where} sets --{flag.replace('_', '-')}, a secret: it belongs in the inventory's vault")
    return found


def _env_problems(env, where: str) -> list[str]:
    if not isinstance(env, dict):
        return [f"{where} is not a mapping of environment variables"]
    return [f"{where}.{key} is not a scalar" for key, value in env.items() if isinstance(value, (dict, list))]


def problems(recipe: dict, file_name: str | None = None) -> list[str]:
    """Every way the recipe breaks the format of recipes/README.md."""
    found = []
    unknown = sorted(set(recipe) - TOP_KEYS)
    found += [f"unknown key {key!r}{closest(key, TOP_KEYS)}" for key in unknown]
    if recipe.get("schema") != SCHEMA:
        found.append(f"schema is {recipe.get('schema')!r}, this collection reads schema {SCHEMA}")
    if file_name is not None and recipe.get("name") != file_name:
        found.append(f"name is {recipe.get('name')!r}, not the file's name {file_name!r}")
    model = recipe.get("model")
    if not isinstance(model, dict):
        found.append("model is missing (repo, revision, served_name)")
        model = {}
    found += [f"unknown key model.{key}{closest(key, MODEL_KEYS)}" for key in sorted(set(model) - MODEL_KEYS)]
    if not re.match(r"^[\w.-]+/[\w.-]+$", str(model.get("repo", ""))):
        found.append(f"model.repo {model.get('repo')!r} is not a Hugging Face repository (org/name)")
    for key in ("revision", "dir", "served_name"):
        if key in model and (not isinstance(model[key], str) or not model[key] or "\n" in model[key]):
            found.append(f"model.{key} is not a one-line string")
    if "/" in str(model.get("dir", "")):
        found.append(f"model.dir {model['dir']!r} is a directory name under the models' directory, not a path")
    if "weight_bytes" in model and not _is_int(model["weight_bytes"]):
        found.append("model.weight_bytes is not a byte count")
    if model.get("task", "generate") not in ("generate", "embed"):
        found.append(f"model.task {model['task']!r} is generate or embed")
    vllm = recipe.get("vllm", {})
    if not isinstance(vllm, dict) or not VERSION.match(str(vllm.get("min_version", "0"))):
        found.append(f"vllm.min_version {vllm.get('min_version') if isinstance(vllm, dict) else vllm!r} is not a version")
    found += _args_problems(recipe.get("args", {}), "args")
    found += _env_problems(recipe.get("env", {}), "env")
    layouts = recipe.get("layouts", {})
    if not isinstance(layouts, dict):
        return [*found, "layouts is not a mapping of hardware classes"]
    for cls, layout in layouts.items():
        where = f"layouts.{cls}"
        if cls not in HARDWARE_CLASSES:
            found.append(f"{where}: {cls!r} is not a hardware class ({', '.join(HARDWARE_CLASSES)}){closest(cls, HARDWARE_CLASSES)}")
        if not isinstance(layout, dict):
            found.append(f"{where} is not a mapping")
            continue
        found += [f"unknown key {where}.{key}{closest(key, LAYOUT_KEYS)}" for key in sorted(set(layout) - LAYOUT_KEYS)]
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "ready_timeout"):
            if key in layout and not _is_int(layout[key], 1):
                found.append(f"{where}.{key} is not a whole number above 0")
        found += _args_problems(layout.get("args", {}), f"{where}.args")
        found += _env_problems(layout.get("env", {}), f"{where}.env")
    return found


def hardware_class(node_gpus) -> str:
    """The class of the cluster's GPUs (gb10x2: two GB10 in all), '' when unknown or mixed.
    node_gpus: one list of gpu_probe's GPUs per node."""
    gpus = [gpu for node in node_gpus or [] for gpu in node or []]
    families = {next((family for mark, family in GPU_FAMILIES if mark in str(gpu.get("name", ""))), "") for gpu in gpus}
    if len(families) != 1 or "" in families:
        return ""
    return f"{families.pop()}x{len(gpus)}"


def merge_flags(base, override) -> dict:
    """override's flags over base's, key by key whatever their spelling; an override of None drops the flag."""
    override = dict(override or {})
    names = {flag_name(key) for key in override}
    merged = {key: value for key, value in (base or {}).items() if flag_name(key) not in names}
    merged.update({key: value for key, value in override.items() if value is not None})
    return merged


def resolve(recipe: dict, layout: str = "", node_gpus=None) -> dict:
    """What the roles read of a checked recipe, for the named layout or the one of the cluster's hardware class."""
    layouts = recipe.get("layouts") or {}
    detected = hardware_class(node_gpus)
    chosen = layout or detected
    if layout and layout not in layouts:
        raise RecipeError(f"recipe {recipe['name']} has no layout {layout!r} (vllmops_recipe_layout); "
                          f"it has: {', '.join(layouts) or 'none'}{closest(layout, layouts)}")
    picked = layouts.get(chosen) or {}
    if picked:
        why = f"layout {chosen}" + (" (vllmops_recipe_layout)" if layout else " (the cluster's GPUs)")
    elif detected:
        why = f"no layout tested on {detected} (tested: {', '.join(layouts) or 'none'}): the recipe's own flags"
    else:
        why = "the GPUs are not known yet: the recipe's own flags"
    model = recipe["model"]
    return {
        "name": recipe["name"],
        "description": recipe.get("description", ""),
        "model": {"repo": model["repo"], "revision": model.get("revision", "main"),
                  "dir": model.get("dir") or model["repo"].split("/")[-1],
                  "served_name": model.get("served_name", ""), "weight_bytes": model.get("weight_bytes", 0),
                  "task": model.get("task", "generate")},
        "min_vllm_version": str((recipe.get("vllm") or {}).get("min_version", "")),
        "layout": chosen if picked else "",
        "layout_reason": why,
        "args": merge_flags(recipe.get("args"), picked.get("args")),
        "env": {**(recipe.get("env") or {}), **(picked.get("env") or {})},
        "tensor_parallel_size": picked.get("tensor_parallel_size", 0),
        "pipeline_parallel_size": picked.get("pipeline_parallel_size", 0),
        "ready_timeout": picked.get("ready_timeout", 0),
        "image": recipe.get("image", ""),
        "import_warnings": list(recipe.get("import_warnings") or []),
    }


def ready_timeout(weight_bytes: int, nodes: int) -> int:
    """Seconds a cluster of `nodes` gets to answer after its ranks start: a base for compilation and graphs, then each
    node's share of the weights at READY_LOAD_RATE."""
    if not weight_bytes:
        return READY_UNSIZED_S
    share = int(weight_bytes) // max(int(nodes or 1), 1)
    return READY_BASE_S + -(-share // READY_LOAD_RATE)


def download_timeout(total_bytes: int, min_rate: int) -> int:
    """Seconds a download of total_bytes gets at no less than min_rate bytes per second."""
    if not total_bytes:
        return DOWNLOAD_UNSIZED_S
    return DOWNLOAD_BASE_S + -(-int(total_bytes) // max(int(min_rate), 1))
