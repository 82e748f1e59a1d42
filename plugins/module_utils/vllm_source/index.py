# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's source as an index of parsed modules: each module's top-level
definitions, assignments and imports, names resolved across imports, and the
classes they lead to (bases, MRO, members).

Files are read through a ``read_text(relative_path)`` callable, relative to
the site-packages directory that holds ``vllm/``; ``None`` means no such file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

MAX_DEPTH = 25


class VllmSourceError(Exception):
    """The source does not have the shape the extractor understands."""


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


def dotted_name(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes, ``""`` for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def absolute_module(current: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name a (possibly relative) ``from … import`` in ``current`` refers to."""
    if level == 0:
        return module or ""
    parts = current.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


@dataclass
class Module:
    """One parsed module and what its top level binds."""

    name: str
    tree: ast.Module
    is_package: bool

    def __post_init__(self) -> None:
        self.defs: dict[str, ast.AST] = {}
        self.assigns: dict[str, ast.AST] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        for node in self.tree.body:
            self._index(node)

    def _index(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.assigns[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            self.assigns[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom):
            base = absolute_module(self.name, self.is_package, node.module, node.level)
            for alias in node.names:
                self.imports[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.imports[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0], None)
        elif isinstance(node, ast.If):
            # `if TYPE_CHECKING:` / version guards: index both branches.
            for child in node.body + node.orelse:
                self._index(child)
        elif isinstance(node, ast.Try):
            for child in node.body + [s for h in node.handlers for s in h.body]:
                self._index(child)


@dataclass(eq=False)
class ClassVal:
    module: Module
    node: ast.ClassDef


@dataclass
class FuncVal:
    module: Module
    node: ast.FunctionDef
    owner: ClassVal | None = None
    bound: object = None  # cls or self for methods


@dataclass
class ModuleRef:
    name: str


@dataclass
class Const:
    value: object


class SourceIndex:
    """Parses modules on first use and resolves what names refer to."""

    def __init__(self, read_text) -> None:
        self._read_text = read_text
        self._modules: dict[str, Module | None] = {}

    # -- modules and names ----------------------------------------------------

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            self._modules[name] = None
            path = name.replace(".", "/")
            for rel, is_package in ((f"{path}.py", False), (f"{path}/__init__.py", True)):
                text = self._read_text(rel)
                if text is not None:
                    try:
                        tree = ast.parse(text)
                    except SyntaxError:
                        break
                    self._modules[name] = Module(name, tree, is_package)
                    break
        return self._modules[name]

    def exists(self, name: str) -> bool:
        return self.module(name) is not None

    def resolve(self, module: Module, name: str, depth: int = 0) -> object:
        """What a module-level name refers to: class, function, module, constant."""
        if depth > MAX_DEPTH:
            return UNKNOWN
        if name in module.defs:
            node = module.defs[name]
            if isinstance(node, ast.ClassDef):
                return ClassVal(module, node)
            return FuncVal(module, node)
        if name in module.imports:
            source, attr = module.imports[name]
            if attr is None:
                return ModuleRef(source)
            target = self.module(source)
            if target is not None:
                found = self.resolve(target, attr, depth + 1)
                if found is not UNKNOWN:
                    return found
            if self.module(f"{source}.{attr}") is not None:
                return ModuleRef(f"{source}.{attr}")
            return UNKNOWN
        if name in module.assigns:
            value = module.assigns[name]
            if isinstance(value, ast.Constant):
                return Const(value.value)
            if isinstance(value, ast.Name) and value.id != name:
                return self.resolve(module, value.id, depth + 1)
        return UNKNOWN

    def attr_of_module(self, ref: ModuleRef, attr: str) -> object:
        module = self.module(ref.name)
        if module is not None:
            found = self.resolve(module, attr)
            if found is not UNKNOWN:
                return found
        if self.module(f"{ref.name}.{attr}") is not None:
            return ModuleRef(f"{ref.name}.{attr}")
        return UNKNOWN

    def alias_expr(self, module: Module, name: str, depth: int = 0) -> tuple[Module, ast.AST] | None:
        """The expression a module-level name is bound to (an assignment or a
        ``type X = …`` alias), followed through ``from … import``."""
        if depth > MAX_DEPTH:
            return None
        if name in module.assigns:
            return module, module.assigns[name]
        for node in module.tree.body:
            if isinstance(node, getattr(ast, "TypeAlias", ())) and node.name.id == name:
                return module, node.value
        if name in module.imports:
            source, attr = module.imports[name]
            target = self.module(source) if attr else None
            if target is not None:
                return self.alias_expr(target, attr, depth + 1)
        return None

    def eval_static(self, module: Module, node: ast.AST) -> object:
        """A name or ``module.attr`` chain evaluated at module level."""
        if isinstance(node, ast.Name):
            return self.resolve(module, node.id)
        if isinstance(node, ast.Attribute):
            base = self.eval_static(module, node.value)
            if isinstance(base, ModuleRef):
                return self.attr_of_module(base, node.attr)
        return UNKNOWN

    # -- classes ----------------------------------------------------------------

    def bases(self, cls: ClassVal) -> list[ClassVal]:
        found = []
        for base in cls.node.bases:
            value = self.eval_static(cls.module, base)
            if isinstance(value, ClassVal):
                found.append(value)
        return found

    def mro(self, cls: ClassVal, depth: int = 0) -> list[ClassVal]:
        order = [cls]
        if depth < MAX_DEPTH:
            for base in self.bases(cls):
                for item in self.mro(base, depth + 1):
                    if all(item.node is not seen.node for seen in order):
                        order.append(item)
        return order

    def class_member(self, cls: ClassVal, name: str, skip_first: bool = False) -> tuple[ClassVal, ast.AST] | None:
        for owner in self.mro(cls)[1 if skip_first else 0:]:
            for node in owner.node.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return owner, node
                if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == name for t in node.targets):
                    return owner, node.value
                if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                        and node.target.id == name and node.value is not None):
                    return owner, node.value
        return None
