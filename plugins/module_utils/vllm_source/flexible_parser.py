# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's FlexibleArgumentParser: what it rewrites in argv before argparse
sees it (underscores, ``-O3``, dotted JSON keys), whether it allows
abbreviations, and the ``--enable-x``/``--disable-x`` pairs of the
BooleanOptionalAction replacement newer versions register.
"""

from __future__ import annotations

import ast

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import (
    ClassVal,
    Module,
    SourceIndex,
    dotted_name,
)

_HOMES = ("vllm.utils.argparse_utils", "vllm.utils")


def find_parser_class(index: SourceIndex) -> tuple[Module, ast.ClassDef] | None:
    for name in _HOMES:
        module = index.module(name)
        if module is not None and isinstance(module.defs.get("FlexibleArgumentParser"), ast.ClassDef):
            return module, module.defs["FlexibleArgumentParser"]
    return None


def inverse_prefixes(index: SourceIndex) -> dict:
    """Newer parsers register a BooleanOptionalAction replacement that also
    pairs --enable-x with --disable-x (its `_inverse_prefixes`)."""
    found = find_parser_class(index)
    if found is None:
        return {}
    module, cls = found
    prefixes: dict = {}
    for call in ast.walk(cls):
        if (isinstance(call, ast.Call) and dotted_name(call.func).endswith(".register")
                and len(call.args) == 3 and _is_str(call.args[0], "action")
                and dotted_name(call.args[1]).endswith("BooleanOptionalAction")):
            replacement = index.resolve(module, dotted_name(call.args[2]))
            if isinstance(replacement, ClassVal):
                member = index.class_member(replacement, "_inverse_prefixes")
                if member and isinstance(member[1], ast.Dict):
                    prefixes = {
                        k.value: v.value for k, v in zip(member[1].keys, member[1].values, strict=True)
                        if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return prefixes


def parser_features(index: SourceIndex) -> dict:
    """What FlexibleArgumentParser does to argv before argparse sees it."""
    features = {"underscores": False, "dash_o": False, "dotted_keys": False, "allow_abbrev": True}
    found = find_parser_class(index)
    if found is None:
        return features
    cls = found[1]
    for node in ast.walk(cls):
        if _is_method_call(node, "replace", "_", "-"):  # key.replace('_', '-')
            features["underscores"] = True
        if _is_method_call(node, "startswith", "-O"):  # arg.startswith('-O')
            features["dash_o"] = True
        if _tests_membership_of(node, "."):  # '.' in arg
            features["dotted_keys"] = True
        for kw in getattr(node, "keywords", []):
            if kw.arg == "allow_abbrev" and isinstance(kw.value, ast.Constant):
                features["allow_abbrev"] = bool(kw.value.value)
        if (isinstance(node, ast.Assign) and any(dotted_name(t).endswith("allow_abbrev") for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            features["allow_abbrev"] = bool(node.value.value)
        if isinstance(node, ast.Subscript) and _is_str(node.slice, "allow_abbrev"):
            value = _assigned_value(cls, node)
            if isinstance(value, ast.Constant):
                features["allow_abbrev"] = bool(value.value)
    return features


def _is_str(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _is_method_call(node: ast.AST, method: str, *args: str) -> bool:
    """``<anything>.method(*args)`` with exactly these string arguments."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
            and not node.keywords and len(node.args) == len(args)
            and all(_is_str(a, v) for a, v in zip(node.args, args, strict=True)))


def _tests_membership_of(node: ast.AST, value: str) -> bool:
    """``value in <anything>``, alone or in a chain of comparisons."""
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    return any(isinstance(op, ast.In) and _is_str(operands[i], value) for i, op in enumerate(node.ops))


def _assigned_value(root: ast.AST, target: ast.AST) -> ast.AST | None:
    for node in ast.walk(root):
        if isinstance(node, ast.Assign) and target in node.targets:
            return node.value
    return None
