# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The type model of vLLM's config dataclasses: the fields of a dataclass,
the member types of a field's annotation, and which argparse action
vLLM's ``get_kwargs`` gives the flag it generates for the field.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import (
    MAX_DEPTH,
    ClassVal,
    Const,
    Module,
    SourceIndex,
    dotted_name,
)

_BUILTIN_ATOMS = {"bool", "str", "int", "float", "dict", "list", "tuple", "set", "Any", "None"}
_WRAPPERS = {"Optional", "Union", "Annotated", "SkipValidation", "Final"}


@dataclass
class FieldKwargs:
    """argparse kwargs of one config-dataclass field (from get_kwargs)."""

    owner: ClassVal | None
    annotation: ast.AST | None
    overrides: dict = field(default_factory=dict)


@dataclass
class ActionRef:
    """An argparse action named by an attribute (``argparse.BooleanOptionalAction``)."""

    name: str


def action_name(value: object) -> str:
    """The name of an ``action=`` value; ``"custom"`` when it cannot be told."""
    if isinstance(value, Const) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ActionRef):
        return value.name
    if isinstance(value, ClassVal):
        return value.node.name
    return "custom"


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(dotted_name(n).split(".")[-1] in names for n in ast.walk(node)
               if isinstance(n, (ast.Name, ast.Attribute)))


class TypeModel:
    def __init__(self, index: SourceIndex) -> None:
        self.index = index
        self._optional_valued_rule: bool | None = None

    def dataclass_fields(self, cls: ClassVal) -> dict[str, FieldKwargs]:
        """Fields in dataclass order: bases first, a redefinition keeps its place."""
        fields: dict[str, FieldKwargs] = {}
        for owner in reversed(self.index.mro(cls)):
            for node in owner.node.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                if _mentions(node.annotation, {"ClassVar", "InitVar"}):
                    continue
                fields[node.target.id] = FieldKwargs(owner, node.annotation)
        return fields

    def is_dataclass(self, cls: ClassVal) -> bool:
        for owner in self.index.mro(cls):
            for deco in owner.node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name in {"dataclass", "config"}:
                    return True
        return False

    def type_atoms(self, module: Module, annotation: ast.AST | None, depth: int = 0) -> set:
        """Flatten an annotation to its member types: builtin names ('bool',
        'None', 'Literal', ...) and ClassVal for classes; aliases expanded."""
        atoms: set = set()
        if annotation is None or depth > MAX_DEPTH:
            return atoms
        node = annotation
        if isinstance(node, ast.Constant):
            if node.value is None:
                atoms.add("None")
            elif isinstance(node.value, str):  # a string annotation
                try:
                    return self.type_atoms(module, ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return atoms
            return atoms
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.type_atoms(module, node.left, depth + 1) | self.type_atoms(module, node.right, depth + 1)
        if isinstance(node, ast.Subscript):
            head = dotted_name(node.value).split(".")[-1]
            if head in _WRAPPERS:
                elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                if head == "Annotated":
                    elements = elements[:1]
                for element in elements:
                    atoms |= self.type_atoms(module, element, depth + 1)
                if head == "Optional":
                    atoms.add("None")
                return atoms
            if head == "Literal":
                return {"Literal"}
            return self.type_atoms(module, node.value, depth + 1)
        name = dotted_name(node)
        if not name:
            return atoms
        short = name.split(".")[-1]
        if short in _BUILTIN_ATOMS:
            return {short}
        if short in {"Dict", "Mapping"}:
            return {"dict"}
        if short in {"List", "Sequence"}:
            return {"list"}
        if "." not in name:
            value = self.index.resolve(module, name)
            if isinstance(value, ClassVal):
                return {value}
            alias = self.index.alias_expr(module, name)
            if alias is not None:
                alias_module, expr = alias
                return self.type_atoms(alias_module, expr, depth + 1)
        return {name}

    def has_optional_valued_rule(self) -> bool:
        """Newer get_kwargs turns `bool | str | None` fields into `--x [VALUE]`
        flags without a negation; older ones make them BooleanOptionalAction."""
        if self._optional_valued_rule is None:
            self._optional_valued_rule = False
            module = self.index.module("vllm.engine.arg_utils")
            node = module.defs.get("_compute_kwargs") or module.defs.get("get_kwargs") if module else None
            if node is not None:
                for compare in ast.walk(node):
                    if (isinstance(compare, ast.Compare) and isinstance(compare.comparators[0], ast.Set)
                            and {dotted_name(e) or ast.unparse(e) for e in compare.comparators[0].elts}
                            == {"bool", "str", "type(None)"}):
                        self._optional_valued_rule = True
        return self._optional_valued_rule

    def field_action(self, kwargs: FieldKwargs) -> str:
        """The argparse action of the flag generated for a field."""
        if "action" in kwargs.overrides:
            return action_name(kwargs.overrides["action"])
        if kwargs.owner is None:
            return "store"
        atoms = self.type_atoms(kwargs.owner.module, kwargs.annotation)
        if any(isinstance(a, ClassVal) and self.is_dataclass(a) for a in atoms):
            return "store"
        if self.has_optional_valued_rule() and atoms == {"bool", "str", "None"}:
            return "store"
        return "BooleanOptionalAction" if "bool" in atoms else "store"
