"""vllm_source.registry: the architectures in the model registry's _VLLM_MODELS."""

from textwrap import dedent

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.index import SourceIndex, VllmSourceError
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source.registry import architectures

REGISTRY = "vllm/model_executor/models/registry.py"


def archs(registry: str, **others: str) -> list[str]:
    files = {REGISTRY: dedent(registry), **{f"vllm/{name}.py": dedent(text) for name, text in others.items()}}
    return architectures(SourceIndex(files.get))


@pytest.mark.parametrize(("registry", "expected"), [
    ('_VLLM_MODELS = {"LlamaForCausalLM": ("llama", "L"), "GPT2LMHeadModel": ("gpt2", "G")}',
     ["GPT2LMHeadModel", "LlamaForCausalLM"]),
    ("""
        _TEXT = {"LlamaForCausalLM": ("llama", "L")}
        _VISION = {"LlavaForConditionalGeneration": ("llava", "V")}
        _VLLM_MODELS = {**_TEXT, **_VISION, "Extra": ("x", "X")}
     """, ["Extra", "LlamaForCausalLM", "LlavaForConditionalGeneration"]),
    ("""
        _TEXT = {"A": ("a", "A")}
        _VLLM_MODELS = _TEXT | {"B": ("b", "B")}
     """, ["A", "B"]),
    ("""
        _NAMES = ["Bert", "Roberta"]
        _VLLM_MODELS = {name: ("bert", name) for name in _NAMES}
     """, ["Bert", "Roberta"]),
    ('_VLLM_MODELS = {arch: spec for arch, spec in pairs}', []),  # not a table of names: nothing claimed
    ('_VLLM_MODELS = {1: "not a name", "Real": ("r", "R")}', ["Real"]),
])
def test_architectures(registry, expected):
    assert archs(registry) == expected


def test_tables_imported_from_other_modules():
    registry = "from vllm.tables import _TEXT\n_VLLM_MODELS = {**_TEXT}\n"
    assert archs(registry, tables='_TEXT = {"Qwen2ForCausalLM": ("qwen2", "Q")}') == ["Qwen2ForCausalLM"]


def test_tables_that_refer_to_each_other_stop():
    assert archs("_A = {**_B}\n_B = {**_A, 'X': 1}\n_VLLM_MODELS = _A\n") == ["X"]
    assert archs("_A = _B\n_B = _A\n_VLLM_MODELS = {n: 1 for n in _A}\n") == []


@pytest.mark.parametrize(("files", "message"), [
    ({}, "cannot tell which architectures"),
    ({REGISTRY: "MODELS = {}"}, "no _VLLM_MODELS table"),
])
def test_a_registry_of_another_shape_is_an_error(files, message):
    with pytest.raises(VllmSourceError, match=message):
        architectures(SourceIndex(files.get))
