"""vllm_source.index: parsing modules on demand and resolving names and classes."""

import ast
from textwrap import dedent

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import (
    UNKNOWN,
    ClassVal,
    Const,
    FuncVal,
    Module,
    ModuleRef,
    SourceIndex,
    absolute_module,
    dotted_name,
)


def index_of(files: dict) -> SourceIndex:
    return SourceIndex({path: dedent(text) for path, text in files.items()}.get)


@pytest.mark.parametrize(("current", "is_package", "module", "level", "expected"), [
    ("vllm.engine.arg_utils", False, "vllm.config", 0, "vllm.config"),
    ("vllm.engine.arg_utils", False, "metrics", 1, "vllm.engine.metrics"),
    ("vllm.engine.arg_utils", False, "config", 2, "vllm.config"),
    ("vllm.engine.arg_utils", False, None, 1, "vllm.engine"),
    ("vllm.engine", True, "arg_utils", 1, "vllm.engine.arg_utils"),
    ("vllm.engine", True, "config", 2, "vllm.config"),
])
def test_absolute_module(current, is_package, module, level, expected):
    assert absolute_module(current, is_package, module, level) == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("a", "a"),
    ("a.b.c", "a.b.c"),
    ("f().b", ""),
    ("'text'", ""),
])
def test_dotted_name(source, expected):
    assert dotted_name(ast.parse(source, mode="eval").body) == expected


def test_module_indexes_top_level_names_in_every_branch():
    tree = ast.parse(dedent("""
        import os.path
        import numpy as np
        from .config import ModelConfig as MC
        LIMIT: int = 3
        X = Y = 1
        if TYPE_CHECKING:
            from vllm.outputs import Output
        else:
            Output = None
        try:
            from fast import speed
        except ImportError:
            def speed(): ...
        class C: ...
        async def serve(): ...
    """))
    module = Module("vllm.engine.arg_utils", tree, is_package=False)
    assert module.imports == {"os": ("os", None), "np": ("numpy", None),
                              "MC": ("vllm.engine.config", "ModelConfig"),
                              "Output": ("vllm.outputs", "Output"), "speed": ("fast", "speed")}
    assert set(module.assigns) == {"LIMIT", "X", "Y", "Output"}
    assert set(module.defs) == {"speed", "C", "serve"}


def test_module_is_read_once_from_a_file_or_a_package():
    reads = []
    files = {"vllm/__init__.py": "", "vllm/config.py": "A = 1"}

    def read(rel):
        reads.append(rel)
        return files.get(rel)

    index = SourceIndex(read)
    assert index.module("vllm").is_package
    assert not index.module("vllm.config").is_package
    assert index.module("vllm.config") is index.module("vllm.config")
    assert reads.count("vllm/config.py") == 1
    assert index.module("vllm.missing") is None
    assert not index.exists("vllm.missing")


def test_a_file_that_does_not_parse_is_no_module():
    assert SourceIndex({"vllm/broken.py": "def ("}.get).module("vllm.broken") is None


def test_resolve_follows_imports_to_definitions():
    index = index_of({
        "vllm/__init__.py": "from vllm.engine.arg_utils import EngineArgs\nfrom vllm import config\n",
        "vllm/config.py": "",
        "vllm/engine/__init__.py": "",
        "vllm/engine/arg_utils.py": """
            from .helpers import make as make_parser
            class EngineArgs: ...
            DEFAULT = 'auto'
            Alias = EngineArgs
            Loop = Loop
        """,
        "vllm/engine/helpers.py": "def make(): ...",
    })
    top = index.module("vllm")
    args = index.module("vllm.engine.arg_utils")
    found = index.resolve(top, "EngineArgs")
    assert isinstance(found, ClassVal) and found.node.name == "EngineArgs"
    assert index.resolve(top, "config") == ModuleRef("vllm.config")
    made = index.resolve(args, "make_parser")
    assert isinstance(made, FuncVal) and made.module.name == "vllm.engine.helpers"
    assert index.resolve(args, "DEFAULT") == Const("auto")
    assert index.resolve(args, "Alias").node is found.node
    assert index.resolve(args, "Loop") is UNKNOWN
    assert index.resolve(args, "nowhere") is UNKNOWN


def test_an_import_cycle_resolves_to_unknown():
    index = index_of({"a.py": "from b import x", "b.py": "from a import x"})
    assert index.resolve(index.module("a"), "x") is UNKNOWN


def test_attribute_of_a_module_reference():
    index = index_of({"vllm/__init__.py": "", "vllm/utils/__init__.py": "def f(): ...", "vllm/utils/sub.py": ""})
    assert isinstance(index.attr_of_module(ModuleRef("vllm.utils"), "f"), FuncVal)
    assert index.attr_of_module(ModuleRef("vllm.utils"), "sub") == ModuleRef("vllm.utils.sub")
    assert index.attr_of_module(ModuleRef("vllm.utils"), "g") is UNKNOWN


def test_alias_expr_follows_imports():
    index = index_of({
        "types_.py": "Device = str | None\ntype Level = int | None\n",
        "user.py": "from types_ import Device, Level",
    })
    module, expr = index.alias_expr(index.module("user"), "Device")
    assert module.name == "types_" and ast.unparse(expr) == "str | None"
    assert ast.unparse(index.alias_expr(index.module("user"), "Level")[1]) == "int | None"
    assert index.alias_expr(index.module("user"), "Other") is None


def test_mro_and_class_members():
    index = index_of({
        "base.py": """
            class Root:
                def add_cli_args(parser): ...
                name = "root"
            class Left(Root):
                def add_cli_args(parser): ...
            class Right(Root):
                flag: bool = True
        """,
        "leaf.py": """
            import base
            class Leaf(base.Left, base.Right):
                pass
        """,
    })
    leaf = index.resolve(index.module("leaf"), "Leaf")
    assert [c.node.name for c in index.mro(leaf)] == ["Leaf", "Left", "Root", "Right"]
    owner, member = index.class_member(leaf, "add_cli_args")
    assert owner.node.name == "Left" and isinstance(member, ast.FunctionDef)
    left = index.mro(leaf)[1]
    assert index.class_member(left, "add_cli_args", skip_first=True)[0].node.name == "Root"
    assert index.class_member(leaf, "name")[1].value == "root"
    assert index.class_member(leaf, "flag")[1].value is True
    assert index.class_member(leaf, "missing") is None


def test_a_class_that_inherits_from_itself_does_not_loop():
    index = index_of({"a.py": "from b import B\nclass A(B): ...", "b.py": "from a import A\nclass B(A): ..."})
    a = index.resolve(index.module("a"), "A")
    assert [c.node.name for c in index.mro(a)] == ["A", "B"]
