# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every option string ``vllm serve`` accepts, found by a small abstract
interpreter that walks the code building the serve parser: from the serve
subcommand (``vllm/entrypoints/cli/serve.py``, or ``vllm/scripts.py`` before
it existed) through ``make_arg_parser`` and ``*Args.add_cli_args``,
following calls that receive the parser.

It understands explicit ``add_argument`` calls, argument groups, the
dataclass-driven generation of newer versions (``get_kwargs(Config)`` with one
flag per field, ``argparse.BooleanOptionalAction`` for boolean fields giving
``--no-…``), f-string names in loops over those fields and the per-field
overrides. Anything else evaluates to ``UNKNOWN`` and is not followed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.field_types import (
    ActionRef,
    FieldKwargs,
    TypeModel,
    action_name,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import (
    MAX_DEPTH,
    UNKNOWN,
    ClassVal,
    Const,
    FuncVal,
    Module,
    ModuleRef,
    SourceIndex,
    VllmSourceError,
    dotted_name,
)


@dataclass
class ServeFlags:
    flags: set[str] = field(default_factory=set)
    negatable: set[str] = field(default_factory=set)
    deprecated: set[str] = field(default_factory=set)
    store_true: set[str] = field(default_factory=set)
    value_booleans: set[str] = field(default_factory=set)  # `--x true|false` (StoreBoolean)


def serve_flags(index: SourceIndex, types: TypeModel, inverse_prefixes: dict) -> ServeFlags:
    """The flags of the serve parser; ``inverse_prefixes`` maps a prefix such
    as ``--enable-`` to the one its negation takes (flexible_parser)."""
    result = ServeFlags(flags={"-h", "--help"})
    interp = Interpreter(index, types, inverse_prefixes, result)
    serve = index.module("vllm.entrypoints.cli.serve")
    if serve is not None:
        for node in serve.defs.values():
            if not isinstance(node, ast.ClassDef):
                continue
            cls = ClassVal(serve, node)
            found = index.class_member(cls, "subparser_init")
            if found and isinstance(found[1], ast.FunctionDef):
                interp.call(FuncVal(found[0].module, found[1], found[0], InstanceVal(cls)),
                            [SubparsersVal(serve_module=True)], {})
                return result
    scripts = index.module("vllm.scripts")
    if scripts is not None and "main" in scripts.defs:
        interp.call(FuncVal(scripts, scripts.defs["main"]), [], {})
        return result
    raise VllmSourceError("found neither vllm/entrypoints/cli/serve.py nor vllm/scripts.py: "
                          "cannot tell which flags `vllm serve` accepts")


# -- abstract values (besides index's ClassVal, FuncVal, ModuleRef, Const) -----


class _Parser:
    """The serve parser, or a group of it: add_argument on it registers a flag."""


class _OtherParser:
    """A parser of another subcommand: its flags are not serve's."""


SERVE = _Parser()
OTHER = _OtherParser()

# str methods evaluated on constants (flag names built from field names).
_STR_METHODS = {"replace", "lower", "upper", "strip", "removeprefix", "removesuffix"}


@dataclass
class SubparsersVal:
    serve_module: bool  # in the serve subcommand's module: an add_parser of unknown name is serve's


@dataclass
class InstanceVal:
    cls: ClassVal


@dataclass
class SuperVal:
    cls: ClassVal
    bound: object


@dataclass
class KwargsMap:
    fields: dict  # field name -> FieldKwargs (insertion order = dataclass order)


@dataclass
class DictVal:
    items: dict


@dataclass
class ListVal:
    items: list


class _Return(Exception):
    def __init__(self, value: object) -> None:
        self.value = value


class Interpreter:
    """Executes just enough of vLLM's parser-building code to see every flag."""

    def __init__(self, index: SourceIndex, types: TypeModel, inverse_prefixes: dict, result: ServeFlags) -> None:
        self.index = index
        self.types = types
        self.inverse_prefixes = inverse_prefixes
        self.result = result
        self.stack: list[ast.AST] = []

    # -- calls -----------------------------------------------------------------

    def call(self, func: FuncVal, args: list, kwargs: dict) -> object:
        if len(self.stack) > MAX_DEPTH or func.node in self.stack:
            return UNKNOWN
        env: dict[str, object] = {}
        params = func.node.args
        positional = [a.arg for a in params.posonlyargs + params.args]
        decorators = {dotted_name(d) for d in func.node.decorator_list}
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

    def block(self, body: list[ast.stmt], env: dict, func: FuncVal) -> None:
        for stmt in body:
            self.stmt(stmt, env, func)

    def stmt(self, node: ast.stmt, env: dict, func: FuncVal) -> None:
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
            if isinstance(test, Const):
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
                    if isinstance(base, KwargsMap) and isinstance(key, Const):
                        base.fields.pop(key.value, None)
                    elif isinstance(base, FieldKwargs) and isinstance(key, Const):
                        base.overrides.pop(key.value, None)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            module = Module(func.module.name, ast.Module(body=[node], type_ignores=[]), func.module.is_package)
            for name in module.imports:
                env[name] = self.index.resolve(module, name)

    def assign(self, target: ast.AST, value: object, env: dict, func: FuncVal) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value, env, func)
            key = self.expr(target.slice, env, func)
            if not isinstance(key, Const):
                return
            if isinstance(base, FieldKwargs):
                base.overrides[key.value] = value
            elif isinstance(base, KwargsMap):
                if isinstance(value, FieldKwargs):
                    base.fields[key.value] = value
                elif isinstance(value, DictVal):
                    base.fields[key.value] = FieldKwargs(None, None, dict(value.items))
            elif isinstance(base, DictVal):
                base.items[key.value] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ListVal):
            for sub, item in zip(target.elts, value.items, strict=False):
                self.assign(sub, item, env, func)

    def loop(self, node: ast.For, env: dict, func: FuncVal) -> None:
        iterable = node.iter
        items: list = []
        if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute)
                and iterable.func.attr in {"items", "keys", "values"}):
            base = self.expr(iterable.func.value, env, func)
            if isinstance(base, KwargsMap):
                pairs = list(base.fields.items())
            elif isinstance(base, DictVal):
                pairs = list(base.items.items())
            else:
                pairs = []
            kind = iterable.func.attr
            for key, value in pairs:
                items.append(ListVal([Const(key), value]) if kind == "items"
                             else Const(key) if kind == "keys" else value)
        else:
            value = self.expr(iterable, env, func)
            if isinstance(value, ListVal):
                items = value.items
            elif isinstance(value, KwargsMap):
                items = [Const(k) for k in value.fields]
        for item in items:
            self.assign(node.target, item, env, func)
            self.block(node.body, env, func)

    # -- expressions --------------------------------------------------------------

    def expr(self, node: ast.AST | None, env: dict, func: FuncVal) -> object:
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return Const(node.value)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in {"True", "False", "None"}:
                return Const({"True": True, "False": False, "None": None}[node.id])
            return self.index.resolve(func.module, node.id)
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
                if not isinstance(inner, Const):
                    return UNKNOWN
                parts.append(str(inner.value))
            return Const("".join(parts))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.expr(node.left, env, func), self.expr(node.right, env, func)
            if isinstance(left, Const) and isinstance(right, Const):
                try:
                    return Const(left.value + right.value)
                except TypeError:
                    return UNKNOWN
            if isinstance(left, ListVal) and isinstance(right, ListVal):
                return ListVal(left.items + right.items)
            return UNKNOWN
        if isinstance(node, (ast.List, ast.Tuple)):
            return ListVal([self.expr(e, env, func) for e in node.elts])
        if isinstance(node, ast.Dict):
            return self.dict_display(node, env, func)
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value, env, func)
            key = self.expr(node.slice, env, func)
            if isinstance(key, Const):
                if isinstance(base, KwargsMap):
                    return base.fields.get(key.value, UNKNOWN)
                if isinstance(base, FieldKwargs):
                    return base.overrides.get(key.value, UNKNOWN)
                if isinstance(base, DictVal):
                    return base.items.get(key.value, UNKNOWN)
            return UNKNOWN
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.expr(node.operand, env, func)
            return Const(not inner.value) if isinstance(inner, Const) else UNKNOWN
        return UNKNOWN

    def dict_display(self, node: ast.Dict, env: dict, func: FuncVal) -> object:
        items: dict = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                spread = self.expr(value, env, func)
                if isinstance(spread, FieldKwargs):
                    items.update({"__field__": spread}, **spread.overrides)
                elif isinstance(spread, DictVal):
                    items.update(spread.items)
            else:
                k = self.expr(key, env, func)
                if isinstance(k, Const):
                    items[k.value] = self.expr(value, env, func)
        return DictVal(items)

    def attribute(self, node: ast.Attribute, env: dict, func: FuncVal) -> object:
        base = self.expr(node.value, env, func)
        if dotted_name(node) in {"argparse.BooleanOptionalAction"} or node.attr == "BooleanOptionalAction":
            return ActionRef("BooleanOptionalAction")
        if isinstance(base, ModuleRef):
            return self.index.attr_of_module(base, node.attr)
        if isinstance(base, (ClassVal, InstanceVal, SuperVal)):
            cls = base.cls if isinstance(base, (InstanceVal, SuperVal)) else base
            found = self.index.class_member(cls, node.attr, skip_first=isinstance(base, SuperVal))
            if found is None:
                return UNKNOWN
            owner, member = found
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bound = base.bound if isinstance(base, SuperVal) else base
                return FuncVal(owner.module, member, owner, bound)
            if isinstance(member, ast.Constant):
                return Const(member.value)
            return UNKNOWN
        return UNKNOWN

    def call_expr(self, node: ast.Call, env: dict, func: FuncVal) -> object:
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
                return SubparsersVal(serve_module=False)
            if isinstance(receiver, _OtherParser):
                return OTHER if method.startswith("add_") and "group" in method else UNKNOWN
            if isinstance(receiver, SubparsersVal) and method == "add_parser":
                name = self.expr(node.args[0], env, func) if node.args else UNKNOWN
                is_serve = (isinstance(name, Const) and name.value == "serve") or (
                    receiver.serve_module and not isinstance(name, Const))
                return SERVE if is_serve else OTHER
            if isinstance(receiver, Const) and isinstance(receiver.value, str):
                args = [self.expr(a, env, func) for a in node.args]
                if all(isinstance(a, Const) for a in args) and method in _STR_METHODS:
                    try:
                        return Const(getattr(receiver.value, method)(*[a.value for a in args]))
                    except TypeError:
                        return UNKNOWN
                return UNKNOWN
            if isinstance(receiver, FieldKwargs) and method in {"pop", "get"}:
                key = self.expr(node.args[0], env, func) if node.args else UNKNOWN
                if isinstance(key, Const):
                    default = self.expr(node.args[1], env, func) if len(node.args) > 1 else UNKNOWN
                    value = receiver.overrides.get(key.value, default)
                    if method == "pop":
                        receiver.overrides.pop(key.value, None)
                    return value
                return UNKNOWN
            if isinstance(receiver, FieldKwargs) and method == "update":
                for arg in node.args:
                    update = self.expr(arg, env, func)
                    if isinstance(update, DictVal):
                        receiver.overrides.update(update.items)
                return UNKNOWN
        target = self.expr(callee, env, func)
        name = dotted_name(callee).split(".")[-1]
        args = [self.expr(a, env, func) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.expr(k.value, env, func) for k in node.keywords if k.arg}
        if name == "super" and func.owner is not None:
            return SuperVal(func.owner, func.bound)
        if name in {"get_kwargs", "_compute_kwargs"} and args and isinstance(args[0], ClassVal):
            return KwargsMap(self.types.dataclass_fields(args[0]))
        if name in {"FlexibleArgumentParser", "ArgumentParser"}:
            return OTHER
        if name in {"dict", "copy", "deepcopy"} and args and isinstance(args[0], (DictVal, KwargsMap)):
            return args[0]
        if isinstance(target, FuncVal):
            interesting = any(isinstance(v, (_Parser, KwargsMap, SubparsersVal))
                              for v in [*args, *kwargs.values()])
            if interesting or (isinstance(callee, ast.Attribute) and isinstance(
                    self.expr(callee.value, env, func), SuperVal)):
                return self.call(target, args, kwargs)
        return UNKNOWN

    def add_argument(self, node: ast.Call, env: dict, func: FuncVal) -> None:
        options: list[str] = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                value = self.expr(arg.value, env, func)
                values = value.items if isinstance(value, ListVal) else []
            else:
                values = [self.expr(arg, env, func)]
            options += [v.value for v in values if isinstance(v, Const) and isinstance(v.value, str)]
        options = [o for o in options if o.startswith("-")]
        settings: dict = {}
        for keyword in node.keywords:
            value = self.expr(keyword.value, env, func)
            if keyword.arg is None:
                if isinstance(value, FieldKwargs):
                    settings["__field__"] = value
                    settings.update(value.overrides)
                elif isinstance(value, DictVal):
                    settings.update(value.items)
            else:
                settings[keyword.arg] = value
        if "action" in settings:
            action = action_name(settings["action"])
        elif isinstance(settings.get("__field__"), FieldKwargs):
            action = self.types.field_action(settings["__field__"])
        else:
            action = "store"
        flags = set(options)
        if action == "BooleanOptionalAction":
            negations = {"--no-" + o[2:] for o in options if o.startswith("--")}
            for prefix, inverse in self.inverse_prefixes.items():
                negations |= {inverse + o[len(prefix):] for o in options if o.startswith(prefix)}
            flags |= negations
            self.result.negatable |= set(options)
        if action == "store_true":
            self.result.store_true |= set(options)
        if action == "StoreBoolean":
            self.result.value_booleans |= set(options)
        deprecated = settings.get("deprecated")
        if isinstance(deprecated, Const) and deprecated.value:
            self.result.deprecated |= flags
        self.result.flags |= flags
