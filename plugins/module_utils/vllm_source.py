# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a vLLM installation supports, read statically from its source with
``ast``: never imported, never run, no GPU needed.

* ``serve_flags``: every option string ``vllm serve`` accepts. A small
  abstract interpreter walks the code that builds the serve parser, from the
  serve subcommand (``vllm/entrypoints/cli/serve.py``, or ``vllm/scripts.py``
  before it existed) through ``make_arg_parser`` and ``*Args.add_cli_args``,
  following calls that receive the parser. It understands explicit
  ``add_argument`` calls, argument groups, the dataclass-driven generation of
  newer versions (``get_kwargs(Config)`` with one flag per field,
  ``argparse.BooleanOptionalAction`` for boolean fields giving ``--no-…``),
  f-string names in loops over those fields and the per-field overrides.
* ``architectures``: the keys of the model registry's ``_VLLM_MODELS``.
* ``parser_features``: what the version's FlexibleArgumentParser rewrites
  (underscores, ``-O3``, dotted JSON keys) and whether it allows abbreviations.

Files are read through a ``read_text(relative_path)`` callable, relative to
the site-packages directory that holds ``vllm/``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_MAX_DEPTH = 25


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


class _Parser:
    """The serve parser, or a group of it: add_argument on it registers a flag."""


class _OtherParser:
    """A parser of another subcommand: its flags are not serve's."""


SERVE = _Parser()
OTHER = _OtherParser()


@dataclass
class _Module:
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
            base = _absolute_module(self.name, self.is_package, node.module, node.level)
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


def _absolute_module(current: str, is_package: bool, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = current.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


@dataclass(eq=False)
class _ClassVal:
    module: _Module
    node: ast.ClassDef


@dataclass
class _InstanceVal:
    cls: _ClassVal


@dataclass
class _FuncVal:
    module: _Module
    node: ast.FunctionDef
    owner: _ClassVal | None = None
    bound: object = None  # cls or self for methods


@dataclass
class _SuperVal:
    cls: _ClassVal
    bound: object


@dataclass
class _ModuleRef:
    name: str


@dataclass
class _FieldKwargs:
    """argparse kwargs of one config-dataclass field (from get_kwargs)."""

    owner: _ClassVal | None
    annotation: ast.AST | None
    overrides: dict = field(default_factory=dict)


@dataclass
class _KwargsMap:
    fields: dict  # field name -> _FieldKwargs (insertion order = dataclass order)


@dataclass
class _DictVal:
    items: dict


@dataclass
class _ListVal:
    items: list


@dataclass
class _Const:
    value: object


@dataclass
class ServeFlags:
    flags: set[str] = field(default_factory=set)
    negatable: set[str] = field(default_factory=set)
    deprecated: set[str] = field(default_factory=set)
    store_true: set[str] = field(default_factory=set)
    value_booleans: set[str] = field(default_factory=set)  # `--x true|false` (StoreBoolean)


class _Return(Exception):
    def __init__(self, value: object) -> None:
        self.value = value


class VllmSource:
    """Static view of one vLLM installation."""

    def __init__(self, read_text) -> None:
        self._read_text = read_text
        self._modules: dict[str, _Module | None] = {}
        self._optional_valued_rule: bool | None = None
        self._inverse_prefixes: dict | None = None

    # -- modules and names ----------------------------------------------------

    def module(self, name: str) -> _Module | None:
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
                    self._modules[name] = _Module(name, tree, is_package)
                    break
        return self._modules[name]

    def exists(self, name: str) -> bool:
        return self.module(name) is not None

    def resolve(self, module: _Module, name: str, depth: int = 0) -> object:
        """What a module-level name refers to: class, function, module, constant."""
        if depth > _MAX_DEPTH:
            return UNKNOWN
        if name in module.defs:
            node = module.defs[name]
            if isinstance(node, ast.ClassDef):
                return _ClassVal(module, node)
            return _FuncVal(module, node)
        if name in module.imports:
            source, attr = module.imports[name]
            if attr is None:
                return _ModuleRef(source)
            target = self.module(source)
            if target is not None:
                found = self.resolve(target, attr, depth + 1)
                if found is not UNKNOWN:
                    return found
            if self.module(f"{source}.{attr}") is not None:
                return _ModuleRef(f"{source}.{attr}")
            return UNKNOWN
        if name in module.assigns:
            value = module.assigns[name]
            if isinstance(value, ast.Constant):
                return _Const(value.value)
            if isinstance(value, ast.Name) and value.id != name:
                return self.resolve(module, value.id, depth + 1)
        return UNKNOWN

    def _attr_of_module(self, ref: _ModuleRef, attr: str) -> object:
        module = self.module(ref.name)
        if module is not None:
            found = self.resolve(module, attr)
            if found is not UNKNOWN:
                return found
        if self.module(f"{ref.name}.{attr}") is not None:
            return _ModuleRef(f"{ref.name}.{attr}")
        return UNKNOWN

    # -- classes ----------------------------------------------------------------

    def bases(self, cls: _ClassVal) -> list[_ClassVal]:
        found = []
        for base in cls.node.bases:
            value = self._eval_static(cls.module, base)
            if isinstance(value, _ClassVal):
                found.append(value)
        return found

    def mro(self, cls: _ClassVal, depth: int = 0) -> list[_ClassVal]:
        order = [cls]
        if depth < _MAX_DEPTH:
            for base in self.bases(cls):
                for item in self.mro(base, depth + 1):
                    if all(item.node is not seen.node for seen in order):
                        order.append(item)
        return order

    def class_member(self, cls: _ClassVal, name: str, skip_first: bool = False) -> tuple[_ClassVal, ast.AST] | None:
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

    def dataclass_fields(self, cls: _ClassVal) -> dict[str, _FieldKwargs]:
        """Fields in dataclass order: bases first, a redefinition keeps its place."""
        fields: dict[str, _FieldKwargs] = {}
        for owner in reversed(self.mro(cls)):
            for node in owner.node.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                if _mentions(node.annotation, {"ClassVar", "InitVar"}):
                    continue
                fields[node.target.id] = _FieldKwargs(owner, node.annotation)
        return fields

    def is_dataclass(self, cls: _ClassVal) -> bool:
        for owner in self.mro(cls):
            for deco in owner.node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name in {"dataclass", "config"}:
                    return True
        return False

    # -- field types --------------------------------------------------------------

    def type_atoms(self, module: _Module, annotation: ast.AST | None, depth: int = 0) -> set:
        """Flatten an annotation to its member types: builtin names ('bool',
        'None', 'Literal', ...) and _ClassVal for classes; aliases expanded."""
        atoms: set = set()
        if annotation is None or depth > _MAX_DEPTH:
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
            head = _dotted_name(node.value).split(".")[-1]
            if head in {"Optional", "Union", "Annotated", "SkipValidation", "Final"}:
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
        name = _dotted_name(node)
        if not name:
            return atoms
        short = name.split(".")[-1]
        if short in {"bool", "str", "int", "float", "dict", "list", "tuple", "set", "Any", "None"}:
            return {short}
        if short in {"Dict", "Mapping"}:
            return {"dict"}
        if short in {"List", "Sequence"}:
            return {"list"}
        if "." not in name:
            value = self.resolve(module, name)
            if isinstance(value, _ClassVal):
                return {value}
            alias = self._alias_expr(module, name)
            if alias is not None:
                alias_module, expr = alias
                return self.type_atoms(alias_module, expr, depth + 1)
        return {name}

    def _alias_expr(self, module: _Module, name: str, depth: int = 0) -> tuple[_Module, ast.AST] | None:
        if depth > _MAX_DEPTH:
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
                return self._alias_expr(target, attr, depth + 1)
        return None

    def _has_optional_valued_rule(self) -> bool:
        """Newer get_kwargs turns `bool | str | None` fields into `--x [VALUE]`
        flags without a negation; older ones make them BooleanOptionalAction."""
        if self._optional_valued_rule is None:
            self._optional_valued_rule = False
            module = self.module("vllm.engine.arg_utils")
            node = module.defs.get("_compute_kwargs") or module.defs.get("get_kwargs") if module else None
            if node is not None:
                for compare in ast.walk(node):
                    if (isinstance(compare, ast.Compare) and isinstance(compare.comparators[0], ast.Set)
                            and {_dotted_name(e) or ast.unparse(e) for e in compare.comparators[0].elts}
                            == {"bool", "str", "type(None)"}):
                        self._optional_valued_rule = True
        return self._optional_valued_rule

    def field_action(self, kwargs: _FieldKwargs) -> str:
        if "action" in kwargs.overrides:
            return _action_name(kwargs.overrides["action"])
        if kwargs.owner is None:
            return "store"
        atoms = self.type_atoms(kwargs.owner.module, kwargs.annotation)
        if any(isinstance(a, _ClassVal) and self.is_dataclass(a) for a in atoms):
            return "store"
        if self._has_optional_valued_rule() and atoms == {"bool", "str", "None"}:
            return "store"
        return "BooleanOptionalAction" if "bool" in atoms else "store"

    # -- static evaluation (module level) -------------------------------------

    def _eval_static(self, module: _Module, node: ast.AST) -> object:
        if isinstance(node, ast.Name):
            return self.resolve(module, node.id)
        if isinstance(node, ast.Attribute):
            base = self._eval_static(module, node.value)
            if isinstance(base, _ModuleRef):
                return self._attr_of_module(base, node.attr)
        return UNKNOWN

    # -- serve flags -----------------------------------------------------------

    def serve_flags(self) -> ServeFlags:
        result = ServeFlags(flags={"-h", "--help"})
        interp = _Interpreter(self, result)
        serve = self.module("vllm.entrypoints.cli.serve")
        if serve is not None:
            for node in serve.defs.values():
                if not isinstance(node, ast.ClassDef):
                    continue
                cls = _ClassVal(serve, node)
                found = self.class_member(cls, "subparser_init")
                if found and isinstance(found[1], ast.FunctionDef):
                    interp.call(_FuncVal(found[0].module, found[1], found[0], _InstanceVal(cls)),
                                [_SubparsersVal(serve_module=True)], {})
                    return result
        scripts = self.module("vllm.scripts")
        if scripts is not None and "main" in scripts.defs:
            interp.call(_FuncVal(scripts, scripts.defs["main"]), [], {})
            return result
        raise VllmSourceError("found neither vllm/entrypoints/cli/serve.py nor vllm/scripts.py: "
                              "cannot tell which flags `vllm serve` accepts")

    def _flexible_parser(self) -> tuple[_Module, ast.ClassDef] | None:
        for name in ("vllm.utils.argparse_utils", "vllm.utils"):
            module = self.module(name)
            if module is not None and isinstance(module.defs.get("FlexibleArgumentParser"), ast.ClassDef):
                return module, module.defs["FlexibleArgumentParser"]
        return None

    def inverse_prefixes(self) -> dict:
        """Newer parsers register a BooleanOptionalAction replacement that also
        pairs --enable-x with --disable-x (its `_inverse_prefixes`)."""
        if self._inverse_prefixes is None:
            self._inverse_prefixes = {}
            found = self._flexible_parser()
            if found is not None:
                module, cls = found
                for call in ast.walk(cls):
                    if (isinstance(call, ast.Call) and _dotted_name(call.func).endswith(".register")
                            and len(call.args) == 3 and isinstance(call.args[0], ast.Constant)
                            and call.args[0].value == "action"
                            and _dotted_name(call.args[1]).endswith("BooleanOptionalAction")):
                        replacement = self.resolve(module, _dotted_name(call.args[2]))
                        if isinstance(replacement, _ClassVal):
                            member = self.class_member(replacement, "_inverse_prefixes")
                            if member and isinstance(member[1], ast.Dict):
                                self._inverse_prefixes = {
                                    k.value: v.value for k, v in zip(member[1].keys, member[1].values, strict=True)
                                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
        return self._inverse_prefixes

    def parser_features(self) -> dict:
        """What FlexibleArgumentParser does to argv before argparse sees it."""
        features = {"underscores": False, "dash_o": False, "dotted_keys": False, "allow_abbrev": True}
        found = self._flexible_parser()
        if found is None:
            return features
        cls = found[1]
        text = ast.unparse(cls)
        features["underscores"] = bool(re.search(r"replace\(['\"]_['\"],\s*['\"]-['\"]\)", text))
        features["dash_o"] = bool(re.search(r"startswith\(['\"]-O['\"]\)", text))
        features["dotted_keys"] = "'.' in" in text or '"." in' in text
        for call in ast.walk(cls):
            for kw in getattr(call, "keywords", []):
                if kw.arg == "allow_abbrev" and isinstance(kw.value, ast.Constant):
                    features["allow_abbrev"] = bool(kw.value.value)
            if (isinstance(call, ast.Assign) and any(_dotted_name(t).endswith("allow_abbrev") for t in call.targets)
                    and isinstance(call.value, ast.Constant)):
                features["allow_abbrev"] = bool(call.value.value)
            if (isinstance(call, ast.Subscript) and isinstance(call.slice, ast.Constant)
                    and call.slice.value == "allow_abbrev"):
                parent_assign = _assign_value_for(cls, call)
                if isinstance(parent_assign, ast.Constant):
                    features["allow_abbrev"] = bool(parent_assign.value)
        return features

    # -- model registry -----------------------------------------------------------

    def architectures(self) -> list[str]:
        module = self.module("vllm.model_executor.models.registry")
        if module is None:
            raise VllmSourceError("vllm/model_executor/models/registry.py is missing: "
                                  "cannot tell which architectures this vLLM supports")
        if "_VLLM_MODELS" not in module.assigns:
            raise VllmSourceError("the model registry defines no _VLLM_MODELS table")
        return sorted(self._dict_keys(module, module.assigns["_VLLM_MODELS"], 0))

    def _dict_keys(self, module: _Module, node: ast.AST, depth: int) -> set[str]:
        keys: set[str] = set()
        if depth > _MAX_DEPTH:
            return keys
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:  # **spread
                    keys |= self._dict_keys(module, value, depth + 1)
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keys.add(key.value)
        elif isinstance(node, ast.Name):
            alias = self._alias_expr(module, node.id)
            if alias is not None:
                keys |= self._dict_keys(alias[0], alias[1], depth + 1)
        elif isinstance(node, ast.DictComp) and isinstance(node.key, ast.Name):
            generator = node.generators[0]
            if isinstance(generator.target, ast.Name) and generator.target.id == node.key.id:
                keys |= self._iter_strings(module, generator.iter, depth + 1)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            keys |= self._dict_keys(module, node.left, depth + 1) | self._dict_keys(module, node.right, depth + 1)
        return keys

    def _iter_strings(self, module: _Module, node: ast.AST, depth: int) -> set[str]:
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if isinstance(node, ast.Name):
            alias = self._alias_expr(module, node.id)
            if alias is not None:
                return self._iter_strings(alias[0], alias[1], depth + 1)
        return set()


class VllmSourceError(Exception):
    """The source does not have the shape the extractor understands."""


@dataclass
class _SubparsersVal:
    serve_module: bool


def _dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(_dotted_name(n).split(".")[-1] in names for n in ast.walk(node)
               if isinstance(n, (ast.Name, ast.Attribute)))


def _assign_value_for(root: ast.AST, target: ast.AST) -> ast.AST | None:
    for node in ast.walk(root):
        if isinstance(node, ast.Assign) and target in node.targets:
            return node.value
    return None


def _action_name(value: object) -> str:
    if isinstance(value, _Const) and isinstance(value.value, str):
        return value.value
    if isinstance(value, _ActionRef):
        return value.name
    if isinstance(value, _ClassVal):
        return value.node.name
    return "custom"


@dataclass
class _ActionRef:
    name: str


class _Interpreter:
    """Executes just enough of vLLM's parser-building code to see every flag."""

    def __init__(self, source: VllmSource, result: ServeFlags) -> None:
        self.src = source
        self.result = result
        self.stack: list[ast.AST] = []

    # -- calls -----------------------------------------------------------------

    def call(self, func: _FuncVal, args: list, kwargs: dict) -> object:
        if len(self.stack) > _MAX_DEPTH or func.node in self.stack:
            return UNKNOWN
        env: dict[str, object] = {}
        params = func.node.args
        positional = [a.arg for a in params.posonlyargs + params.args]
        decorators = {_dotted_name(d) for d in func.node.decorator_list}
        if func.owner is not None and "staticmethod" not in decorators and positional:
            env[positional.pop(0)] = func.bound if func.bound is not None else func.owner
        for name, value in zip(positional, args, strict=False):
            env[name] = value
        for name in positional[len(args):]:
            env[name] = kwargs.get(name, UNKNOWN)
        for kwonly in params.kwonlyargs:
            env[kwonly.arg] = kwargs.get(kwonly.arg, UNKNOWN)
        self.stack.append(func.node)
        try:
            self.block(func.node.body, env, func)
        except _Return as ret:
            return ret.value
        finally:
            self.stack.pop()
        return UNKNOWN

    # -- statements --------------------------------------------------------------

    def block(self, body: list[ast.stmt], env: dict, func: _FuncVal) -> None:
        for stmt in body:
            self.stmt(stmt, env, func)

    def stmt(self, node: ast.stmt, env: dict, func: _FuncVal) -> None:
        if isinstance(node, ast.Expr):
            self.expr(node.value, env, func)
        elif isinstance(node, ast.Assign):
            value = self.expr(node.value, env, func)
            for target in node.targets:
                self.assign(target, value, env, func)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, self.expr(node.value, env, func), env, func)
        elif isinstance(node, ast.AugAssign):
            self.expr(node.value, env, func)
        elif isinstance(node, ast.Return):
            raise _Return(self.expr(node.value, env, func) if node.value else UNKNOWN)
        elif isinstance(node, ast.If):
            test = self.expr(node.test, env, func)
            if isinstance(test, _Const):
                self.block(node.body if test.value else node.orelse, env, func)
            else:
                self.block(node.body, env, func)
                self.block(node.orelse, env, func)
        elif isinstance(node, ast.For):
            self.loop(node, env, func)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self.block(node.body, env, func)
        elif isinstance(node, ast.Try):
            self.block(node.body, env, func)
            self.block(node.orelse, env, func)
            self.block(node.finalbody, env, func)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    base = self.expr(target.value, env, func)
                    key = self.expr(target.slice, env, func)
                    if isinstance(base, _KwargsMap) and isinstance(key, _Const):
                        base.fields.pop(key.value, None)
                    elif isinstance(base, _FieldKwargs) and isinstance(key, _Const):
                        base.overrides.pop(key.value, None)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            module = _Module(func.module.name, ast.Module(body=[node], type_ignores=[]), func.module.is_package)
            for name in module.imports:
                env[name] = self.src.resolve(module, name)

    def assign(self, target: ast.AST, value: object, env: dict, func: _FuncVal) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value, env, func)
            key = self.expr(target.slice, env, func)
            if not isinstance(key, _Const):
                return
            if isinstance(base, _FieldKwargs):
                base.overrides[key.value] = value
            elif isinstance(base, _KwargsMap):
                if isinstance(value, _FieldKwargs):
                    base.fields[key.value] = value
                elif isinstance(value, _DictVal):
                    base.fields[key.value] = _FieldKwargs(None, None, dict(value.items))
            elif isinstance(base, _DictVal):
                base.items[key.value] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, _ListVal):
            for sub, item in zip(target.elts, value.items, strict=False):
                self.assign(sub, item, env, func)

    def loop(self, node: ast.For, env: dict, func: _FuncVal) -> None:
        iterable = node.iter
        items: list = []
        if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute)
                and iterable.func.attr in {"items", "keys", "values"}):
            base = self.expr(iterable.func.value, env, func)
            if isinstance(base, _KwargsMap):
                pairs = list(base.fields.items())
            elif isinstance(base, _DictVal):
                pairs = list(base.items.items())
            else:
                pairs = []
            kind = iterable.func.attr
            for key, value in pairs:
                items.append(_ListVal([_Const(key), value]) if kind == "items"
                             else _Const(key) if kind == "keys" else value)
        else:
            value = self.expr(iterable, env, func)
            if isinstance(value, _ListVal):
                items = value.items
            elif isinstance(value, _KwargsMap):
                items = [_Const(k) for k in value.fields]
        for item in items:
            self.assign(node.target, item, env, func)
            self.block(node.body, env, func)

    # -- expressions --------------------------------------------------------------

    def expr(self, node: ast.AST | None, env: dict, func: _FuncVal) -> object:
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return _Const(node.value)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in {"True", "False", "None"}:
                return _Const({"True": True, "False": False, "None": None}[node.id])
            return self.src.resolve(func.module, node.id)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, env, func)
        if isinstance(node, ast.Call):
            return self.call_expr(node, env, func)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                    continue
                inner = self.expr(value.value, env, func)
                if not isinstance(inner, _Const):
                    return UNKNOWN
                parts.append(str(inner.value))
            return _Const("".join(parts))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.expr(node.left, env, func), self.expr(node.right, env, func)
            if isinstance(left, _Const) and isinstance(right, _Const):
                try:
                    return _Const(left.value + right.value)
                except TypeError:
                    return UNKNOWN
            if isinstance(left, _ListVal) and isinstance(right, _ListVal):
                return _ListVal(left.items + right.items)
            return UNKNOWN
        if isinstance(node, (ast.List, ast.Tuple)):
            return _ListVal([self.expr(e, env, func) for e in node.elts])
        if isinstance(node, ast.Dict):
            return self.dict_display(node, env, func)
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value, env, func)
            key = self.expr(node.slice, env, func)
            if isinstance(key, _Const):
                if isinstance(base, _KwargsMap):
                    return base.fields.get(key.value, UNKNOWN)
                if isinstance(base, _FieldKwargs):
                    return base.overrides.get(key.value, UNKNOWN)
                if isinstance(base, _DictVal):
                    return base.items.get(key.value, UNKNOWN)
            return UNKNOWN
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.expr(node.operand, env, func)
            return _Const(not inner.value) if isinstance(inner, _Const) else UNKNOWN
        return UNKNOWN

    def dict_display(self, node: ast.Dict, env: dict, func: _FuncVal) -> object:
        items: dict = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                spread = self.expr(value, env, func)
                if isinstance(spread, _FieldKwargs):
                    items.update({"__field__": spread}, **spread.overrides)
                elif isinstance(spread, _DictVal):
                    items.update(spread.items)
            else:
                k = self.expr(key, env, func)
                if isinstance(k, _Const):
                    items[k.value] = self.expr(value, env, func)
        return _DictVal(items)

    def attribute(self, node: ast.Attribute, env: dict, func: _FuncVal) -> object:
        base = self.expr(node.value, env, func)
        if _dotted_name(node) in {"argparse.BooleanOptionalAction"} or node.attr == "BooleanOptionalAction":
            return _ActionRef("BooleanOptionalAction")
        if isinstance(base, _ModuleRef):
            return self.src._attr_of_module(base, node.attr)
        if isinstance(base, (_ClassVal, _InstanceVal, _SuperVal)):
            cls = base.cls if isinstance(base, (_InstanceVal, _SuperVal)) else base
            found = self.src.class_member(cls, node.attr, skip_first=isinstance(base, _SuperVal))
            if found is None:
                return UNKNOWN
            owner, member = found
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bound = base.bound if isinstance(base, _SuperVal) else base
                return _FuncVal(owner.module, member, owner, bound)
            if isinstance(member, ast.Constant):
                return _Const(member.value)
            return UNKNOWN
        return UNKNOWN

    def call_expr(self, node: ast.Call, env: dict, func: _FuncVal) -> object:
        callee = node.func
        # Methods on parsers and values first.
        if isinstance(callee, ast.Attribute):
            receiver = self.expr(callee.value, env, func)
            method = callee.attr
            if isinstance(receiver, _Parser):
                if method == "add_argument":
                    self.add_argument(node, env, func)
                    return UNKNOWN
                if method in {"add_argument_group", "add_mutually_exclusive_group"}:
                    return SERVE
                return UNKNOWN
            if method == "add_subparsers":
                return _SubparsersVal(serve_module=False)
            if isinstance(receiver, _OtherParser):
                return OTHER if method.startswith("add_") and "group" in method else UNKNOWN
            if isinstance(receiver, _SubparsersVal) and method == "add_parser":
                name = self.expr(node.args[0], env, func) if node.args else UNKNOWN
                is_serve = (isinstance(name, _Const) and name.value == "serve") or (
                    receiver.serve_module and not isinstance(name, _Const))
                return SERVE if is_serve else OTHER
            if isinstance(receiver, _Const) and isinstance(receiver.value, str):
                args = [self.expr(a, env, func) for a in node.args]
                if all(isinstance(a, _Const) for a in args) and method in {"replace", "lower", "upper", "strip",
                                                                           "removeprefix", "removesuffix"}:
                    try:
                        return _Const(getattr(receiver.value, method)(*[a.value for a in args]))
                    except TypeError:
                        return UNKNOWN
                return UNKNOWN
            if isinstance(receiver, _FieldKwargs) and method in {"pop", "get"}:
                key = self.expr(node.args[0], env, func) if node.args else UNKNOWN
                if isinstance(key, _Const):
                    default = self.expr(node.args[1], env, func) if len(node.args) > 1 else UNKNOWN
                    value = receiver.overrides.get(key.value, default)
                    if method == "pop":
                        receiver.overrides.pop(key.value, None)
                    return value
                return UNKNOWN
            if isinstance(receiver, _FieldKwargs) and method == "update":
                for arg in node.args:
                    update = self.expr(arg, env, func)
                    if isinstance(update, _DictVal):
                        receiver.overrides.update(update.items)
                return UNKNOWN
        target = self.expr(callee, env, func)
        name = _dotted_name(callee).split(".")[-1]
        args = [self.expr(a, env, func) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.expr(k.value, env, func) for k in node.keywords if k.arg}
        if name == "super" and func.owner is not None:
            return _SuperVal(func.owner, func.bound)
        if name in {"get_kwargs", "_compute_kwargs"} and args and isinstance(args[0], _ClassVal):
            return _KwargsMap(self.src.dataclass_fields(args[0]))
        if name in {"FlexibleArgumentParser", "ArgumentParser"}:
            return OTHER
        if name in {"dict", "copy", "deepcopy"} and args and isinstance(args[0], (_DictVal, _KwargsMap)):
            return args[0]
        if isinstance(target, _FuncVal):
            interesting = any(isinstance(v, (_Parser, _KwargsMap, _SubparsersVal))
                              for v in [*args, *kwargs.values()])
            if interesting or (isinstance(callee, ast.Attribute) and isinstance(
                    self.expr(callee.value, env, func), _SuperVal)):
                return self.call(target, args, kwargs)
        return UNKNOWN

    def add_argument(self, node: ast.Call, env: dict, func: _FuncVal) -> None:
        options: list[str] = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                value = self.expr(arg.value, env, func)
                values = value.items if isinstance(value, _ListVal) else []
            else:
                values = [self.expr(arg, env, func)]
            options += [v.value for v in values if isinstance(v, _Const) and isinstance(v.value, str)]
        options = [o for o in options if o.startswith("-")]
        settings: dict = {}
        for keyword in node.keywords:
            value = self.expr(keyword.value, env, func)
            if keyword.arg is None:
                if isinstance(value, _FieldKwargs):
                    settings["__field__"] = value
                    settings.update(value.overrides)
                elif isinstance(value, _DictVal):
                    settings.update(value.items)
            else:
                settings[keyword.arg] = value
        if "action" in settings:
            action = _action_name(settings["action"])
        elif isinstance(settings.get("__field__"), _FieldKwargs):
            action = self.src.field_action(settings["__field__"])
        else:
            action = "store"
        flags = set(options)
        if action == "BooleanOptionalAction":
            negations = {"--no-" + o[2:] for o in options if o.startswith("--")}
            for prefix, inverse in self.src.inverse_prefixes().items():
                negations |= {inverse + o[len(prefix):] for o in options if o.startswith(prefix)}
            flags |= negations
            self.result.negatable |= set(options)
        if action == "store_true":
            self.result.store_true |= set(options)
        if action == "StoreBoolean":
            self.result.value_booleans |= set(options)
        deprecated = settings.get("deprecated")
        if isinstance(deprecated, _Const) and deprecated.value:
            self.result.deprecated |= flags
        self.result.flags |= flags
