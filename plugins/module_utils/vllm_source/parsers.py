# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tool-call parsers (``--tool-call-parser``) and reasoning parsers
(``--reasoning-parser``) a vLLM version registers, in either of the two ways
vLLM has registered them:

* eagerly: ``@ToolParserManager.register_module("hermes")`` (or a list of
  names, or none: the class's name) on classes in the modules the parser
  package's ``__init__`` imports (vLLM up to about 0.11);
* lazily: ``Manager.register_lazy_module(name, module_path, class_name)`` in
  the package's ``__init__``, with a literal name or a loop over a table of
  ``name: (file, class)`` (newer versions).

A version without the package registers none (``[]``: 0.6 has no reasoning
parsers); a package whose registrations cannot be read is a VllmSourceError.
"""

from __future__ import annotations

import ast

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import (
    Module,
    SourceIndex,
    VllmSourceError,
    dotted_name,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.registry import dict_keys

TOOL_PACKAGES = ("vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers")
REASONING_PACKAGES = ("vllm.reasoning", "vllm.entrypoints.openai.reasoning_parsers")
MAX_MODULES = 200


def tool_parsers(index: SourceIndex) -> list[str]:
    return registered(index, TOOL_PACKAGES, "ToolParserManager", "tool-call")


def reasoning_parsers(index: SourceIndex) -> list[str]:
    return registered(index, REASONING_PACKAGES, "ReasoningParserManager", "reasoning")


def registered(index: SourceIndex, packages: tuple, manager: str, kind: str) -> list[str]:
    """Names registered with `manager` by those of `packages` this version has and the modules they import."""
    names: set[str] = set()
    found = [index.module(p) for p in packages if index.module(p) is not None]
    for package in found:
        for module in package_modules(index, package):
            names |= module_registrations(index, module, manager)
    if found and not names:
        raise VllmSourceError(f"{found[0].name} registers no {kind} parser the extractor can read")
    return sorted(names)


def package_modules(index: SourceIndex, package: Module) -> list[Module]:
    """The package's __init__ and the modules of the package it imports, transitively."""
    modules, queue = {package.name: package}, [package]
    while queue and len(modules) < MAX_MODULES:
        for base, attr in queue.pop().imports.values():
            for name in (base, f"{base}.{attr}" if attr else base):
                if name.startswith(package.name + ".") and name not in modules and index.module(name) is not None:
                    modules[name] = index.module(name)
                    queue.append(modules[name])
    return list(modules.values())


def module_registrations(index: SourceIndex, module: Module, manager: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ClassDef):
            for deco in node.decorator_list:
                if is_call_of(deco, manager, "register_module"):
                    names |= call_names(deco, "name") or {node.name}
        elif is_call_of(node, manager, "register_module"):  # Manager.register_module(name=..., module=Cls)
            module_arg = next((k.value for k in node.keywords if k.arg == "module"), None)
            default = {dotted_name(module_arg).split(".")[-1]} if module_arg is not None else set()
            names |= call_names(node, "name") or default
        elif is_call_of(node, manager, "register_lazy_module"):
            names |= call_names(node, "name") or loop_table_keys(index, module, node)
    return {n for n in names if n}


def is_call_of(node: ast.AST, manager: str, method: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
            and dotted_name(node.func.value).split(".")[-1] == manager)


def call_names(call: ast.Call, keyword: str) -> set[str]:
    """The literal name(s) a register call gives: its first argument or `keyword=`, a string or a list of them."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == keyword), None)
    values = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
    return {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}


def loop_table_keys(index: SourceIndex, module: Module, call: ast.Call) -> set[str]:
    """``for name, (...) in TABLE.items(): Manager.register_lazy_module(name, ...)``: TABLE's keys."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "name"), None)
    if not isinstance(arg, ast.Name):
        return set()
    for loop in ast.walk(module.tree):
        if not (isinstance(loop, ast.For) and any(n is call for n in ast.walk(loop))):
            continue
        target = loop.target.elts[0] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
        table = loop.iter
        if isinstance(table, ast.Call) and isinstance(table.func, ast.Attribute) and table.func.attr in {"items", "keys"}:
            table = table.func.value
        if isinstance(target, ast.Name) and target.id == arg.id:
            return dict_keys(index, module, table, 0)
    return set()
