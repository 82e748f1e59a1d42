# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model architectures vLLM supports: the keys of its model registry's
``_VLLM_MODELS`` table, whichever way the version composes that table
(literal dicts, ``**`` spreads of other tables, ``|`` unions, dict
comprehensions over lists of names).
"""

from __future__ import annotations

import ast

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import (
    MAX_DEPTH,
    Module,
    SourceIndex,
    VllmSourceError,
)

REGISTRY_MODULE = "vllm.model_executor.models.registry"


def architectures(index: SourceIndex) -> list[str]:
    module = index.module(REGISTRY_MODULE)
    if module is None:
        raise VllmSourceError("vllm/model_executor/models/registry.py is missing: "
                              "cannot tell which architectures this vLLM supports")
    if "_VLLM_MODELS" not in module.assigns:
        raise VllmSourceError("the model registry defines no _VLLM_MODELS table")
    return sorted(dict_keys(index, module, module.assigns["_VLLM_MODELS"], 0))


def dict_keys(index: SourceIndex, module: Module, node: ast.AST, depth: int) -> set[str]:
    keys: set[str] = set()
    if depth > MAX_DEPTH:
        return keys
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:  # **spread
                keys |= dict_keys(index, module, value, depth + 1)
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(key.value)
    elif isinstance(node, ast.Name):
        alias = index.alias_expr(module, node.id)
        if alias is not None:
            keys |= dict_keys(index, alias[0], alias[1], depth + 1)
    elif isinstance(node, ast.DictComp) and isinstance(node.key, ast.Name):
        generator = node.generators[0]
        if isinstance(generator.target, ast.Name) and generator.target.id == node.key.id:
            keys |= _iter_strings(index, module, generator.iter, depth + 1)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        keys |= dict_keys(index, module, node.left, depth + 1) | dict_keys(index, module, node.right, depth + 1)
    return keys


def _iter_strings(index: SourceIndex, module: Module, node: ast.AST, depth: int) -> set[str]:
    if depth > MAX_DEPTH:
        return set()
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    if isinstance(node, ast.Name):
        alias = index.alias_expr(module, node.id)
        if alias is not None:
            return _iter_strings(index, alias[0], alias[1], depth + 1)
    return set()
