"""vllm_source.field_types: config-dataclass fields, their types, and the
argparse action vLLM's get_kwargs gives the flag generated for each."""

import ast
from textwrap import dedent

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.field_types import (
    ActionRef,
    FieldKwargs,
    TypeModel,
    action_name,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import ClassVal, Const, SourceIndex

CONFIG = """
    from dataclasses import dataclass, InitVar
    from typing import Annotated, ClassVar, Dict, List, Literal, Optional, Union
    from vllm.devices import Device

    MaybeBool = Union[bool, None]

    @dataclass
    class CompilationConfig:
        level: int = 0

    class Plain:
        pass

    @dataclass
    class Base:
        seed: int = 0
        enforce_eager: bool = False

    @dataclass(frozen=True)
    class ModelConfig(Base):
        model: str = "m"
        seed: Optional[int] = None
        registry: ClassVar[dict] = {}
        secret: InitVar[str] = ""
        def method(self): ...
"""


def model(arg_utils: str = "", extra: dict | None = None) -> tuple[TypeModel, object]:
    files = {"vllm/config.py": dedent(CONFIG), "vllm/devices.py": "Device = Literal['cuda', 'cpu'] | None\n",
             "vllm/engine/arg_utils.py": dedent(arg_utils), **(extra or {})}
    index = SourceIndex(files.get)
    return TypeModel(index), index.module("vllm.config")


@pytest.mark.parametrize(("annotation", "expected"), [
    ("bool", {"bool"}),
    ("bool | None", {"bool", "None"}),
    ("Optional[int]", {"int", "None"}),
    ("typing.Optional[bool]", {"bool", "None"}),
    ("Union[str, int, None]", {"str", "int", "None"}),
    ("Annotated[bool, Meta('x')]", {"bool"}),
    ("Literal['a', 'b']", {"Literal"}),
    ("'int | None'", {"int", "None"}),
    ("list[int]", {"list"}),
    ("List[str]", {"list"}),
    ("Dict[str, int]", {"dict"}),
    ("MaybeBool", {"bool", "None"}),  # an alias in the same module
    ("Device", {"Literal", "None"}),  # an alias imported from another one
    ("torch.dtype", {"torch.dtype"}),
    ("Unresolved", {"Unresolved"}),
    ("'not valid ('", set()),
])
def test_type_atoms(annotation, expected):
    types, config = model()
    assert types.type_atoms(config, ast.parse(annotation, mode="eval").body) == expected


def test_a_class_is_an_atom_of_its_own():
    types, config = model()
    [atom] = types.type_atoms(config, ast.parse("CompilationConfig", mode="eval").body)
    assert isinstance(atom, ClassVal) and atom.node.name == "CompilationConfig"


def test_a_self_referencing_alias_stops():
    types, _ = model(extra={"vllm/loop.py": "A = B | None\nB = A | None\n"})
    loop = types.index.module("vllm.loop")
    assert types.type_atoms(loop, ast.parse("A", mode="eval").body) == {"None"}


def test_dataclass_fields_in_dataclass_order():
    types, config = model()
    fields = types.dataclass_fields(types.index.resolve(config, "ModelConfig"))
    # Base's fields first; seed redefined keeps its place; ClassVar and InitVar are not fields.
    assert list(fields) == ["seed", "enforce_eager", "model"]
    assert fields["seed"].owner.node.name == "ModelConfig"
    assert ast.unparse(fields["seed"].annotation) == "Optional[int]"


@pytest.mark.parametrize(("cls", "expected"), [
    ("ModelConfig", True),  # @dataclass(frozen=True)
    ("CompilationConfig", True),
    ("Plain", False),
])
def test_is_dataclass(cls, expected):
    types, config = model()
    assert types.is_dataclass(types.index.resolve(config, cls)) is expected


def test_a_subclass_of_a_dataclass_is_one():
    types, _ = model(extra={"vllm/sub.py": "from vllm.config import Base\nclass Sub(Base): ...\n"})
    assert types.is_dataclass(types.index.resolve(types.index.module("vllm.sub"), "Sub"))


NEW_GET_KWARGS = """
    def get_kwargs(cls):
        for field in fields(cls):
            if set(types) == {bool, str, type(None)}:
                kwargs["nargs"] = "?"
"""


@pytest.mark.parametrize(("annotation", "arg_utils", "overrides", "expected"), [
    ("bool", "", {}, "BooleanOptionalAction"),
    ("bool | None", "", {}, "BooleanOptionalAction"),
    ("int", "", {}, "store"),
    ("Literal['a']", "", {}, "store"),
    ("CompilationConfig | bool", "", {}, "store"),  # a nested config takes JSON
    ("bool | str | None", "", {}, "BooleanOptionalAction"),
    ("bool | str | None", NEW_GET_KWARGS, {}, "store"),  # `--x [VALUE]` in newer versions
    ("bool", "", {"action": Const("store_true")}, "store_true"),
])
def test_field_action(annotation, arg_utils, overrides, expected):
    types, config = model(arg_utils)
    owner = types.index.resolve(config, "ModelConfig")
    kwargs = FieldKwargs(owner, ast.parse(annotation, mode="eval").body, dict(overrides))
    assert types.field_action(kwargs) == expected


def test_field_without_owner_is_stored():
    types, _ = model()
    assert types.field_action(FieldKwargs(None, None)) == "store"


def test_optional_valued_rule_is_read_from_the_versions_get_kwargs():
    assert model(NEW_GET_KWARGS)[0].has_optional_valued_rule()
    assert not model("def get_kwargs(cls): ...")[0].has_optional_valued_rule()
    assert not model(extra={"vllm/engine/arg_utils.py": None})[0].has_optional_valued_rule()


@pytest.mark.parametrize(("value", "expected"), [
    (Const("store_true"), "store_true"),
    (ActionRef("BooleanOptionalAction"), "BooleanOptionalAction"),
    (Const(3), "custom"),
    (None, "custom"),
])
def test_action_name(value, expected):
    assert action_name(value) == expected


def test_action_name_of_a_class_is_its_name():
    types, config = model()
    assert action_name(types.index.resolve(config, "Plain")) == "Plain"
