"""Recipes: the format's checks, the layout picked for the cluster's hardware, the inventory's flags over the
recipe's, and the deadlines sized by the work."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.recipes import (
    RecipeError,
    download_timeout,
    from_document,
    hardware_class,
    merge_flags,
    ready_timeout,
    resolve,
)

GB10 = {"name": "NVIDIA GB10"}
RECIPE = {
    "schema": 1, "name": "demo", "description": "A demo.",
    "model": {"repo": "org/Demo-7B", "revision": "abc123", "served_name": "demo", "weight_bytes": 14_000_000_000},
    "vllm": {"min_version": "0.11.1"},
    "args": {"max_model_len": 32768, "tool_call_parser": "hermes", "enable_auto_tool_choice": True},
    "env": {"A": "1"},
    "layouts": {"gb10x2": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                           "args": {"gpu_memory_utilization": 0.8, "max-model-len": 16384}, "env": {"B": "2"},
                           "ready_timeout": 1800}},
}


def test_a_recipe_resolves_for_the_hardware_it_was_tested_on():
    resolved = resolve(from_document(copy.deepcopy(RECIPE), "demo"), "", [[GB10], [GB10]])
    assert resolved["layout"] == "gb10x2"
    assert resolved["tensor_parallel_size"] == 2 and resolved["pipeline_parallel_size"] == 1
    assert resolved["ready_timeout"] == 1800
    # the layout's flags over the recipe's, whatever the spelling
    assert resolved["args"] == {"tool_call_parser": "hermes", "enable_auto_tool_choice": True,
                                "gpu_memory_utilization": 0.8, "max-model-len": 16384}
    assert resolved["env"] == {"A": "1", "B": "2"}
    assert resolved["model"] == {"repo": "org/Demo-7B", "revision": "abc123", "dir": "Demo-7B", "served_name": "demo",
                                 "weight_bytes": 14_000_000_000, "task": "generate"}
    assert resolved["min_vllm_version"] == "0.11.1"


@pytest.mark.parametrize(("gpus", "why"), [
    ([[GB10]], "no layout tested on gb10x1 (tested: gb10x2): the recipe's own flags"),
    ([], "the GPUs are not known yet: the recipe's own flags"),
])
def test_without_a_tested_layout_the_recipe_s_own_flags_apply_and_the_plan_says_so(gpus, why):
    resolved = resolve(from_document(copy.deepcopy(RECIPE), "demo"), "", gpus)
    assert (resolved["layout"], resolved["layout_reason"]) == ("", why)
    assert resolved["tensor_parallel_size"] == 0 and resolved["args"]["max_model_len"] == 32768


def test_a_layout_that_gives_only_the_pipeline_size_keeps_it_and_lets_the_plan_derive_tp():
    document = copy.deepcopy(RECIPE)
    document["layouts"] = {"gb10x2": {"pipeline_parallel_size": 2}}
    resolved = resolve(from_document(document, "demo"), "", [[GB10], [GB10]])
    assert (resolved["tensor_parallel_size"], resolved["pipeline_parallel_size"]) == (0, 2)


def test_a_named_layout_wins_and_an_unknown_one_is_refused_with_the_closest():
    recipe = from_document(copy.deepcopy(RECIPE), "demo")
    assert resolve(recipe, "gb10x2", [])["layout"] == "gb10x2"
    with pytest.raises(RecipeError, match=r"has no layout 'gb10x3' \(vllmops_recipe_layout\); it has: gb10x2; did you mean 'gb10x2'"):
        resolve(recipe, "gb10x3", [])


@pytest.mark.parametrize(("gpus", "cls"), [
    ([[GB10], [GB10]], "gb10x2"),
    ([[{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}] * 8], "rtx-pro-6000x8"),
    ([[{"name": "NVIDIA H100 80GB HBM3"}] * 8], "h100x8"),
    ([[{"name": "NVIDIA H200"}] * 4, [{"name": "NVIDIA H200"}] * 4], "h200x8"),
    ([[GB10], [{"name": "NVIDIA H100"}]], ""),  # mixed: no class
    ([[{"name": "Tesla T4"}]], ""),
])
def test_the_hardware_class_is_the_gpus_family_and_count(gpus, cls):
    assert hardware_class(gpus) == cls


def test_the_inventory_s_flags_override_key_by_key_and_null_drops_one():
    base = {"max_model_len": 262144, "enable_prefix_caching": True, "--kv-cache-dtype": "fp8"}
    assert merge_flags(base, {"max-model-len": 32768, "enable_prefix_caching": None, "seed": 1}) == \
        {"--kv-cache-dtype": "fp8", "max-model-len": 32768, "seed": 1}
    assert merge_flags(base, {}) == base and merge_flags(None, None) == {}


@pytest.mark.parametrize(("change", "said"), [
    ({"schema": 2}, "schema: 2 is not a recipe schema this collection reads (it reads schema 1)"),
    ({"name": "other"}, "name is 'other', not the file's name 'demo'"),
    ({"argz": {}}, "unknown key 'argz'; did you mean 'args'?"),
    ({"model": {"repo": "Demo-7B"}}, "model.repo 'Demo-7B' is not a Hugging Face repository (org/name)"),
    ({"model": {"repo": "org/x", "dir": "a/b"}}, "model.dir 'a/b' is a directory name under the models' directory"),
    ({"model": {"repo": "org/x", "task": "rerank"}}, "model.task 'rerank' is generate or embed"),
    ({"vllm": {"min_version": "latest"}}, "vllm.min_version 'latest' is not a version"),
    ({"args": {"tensor-parallel-size": 2}}, "args sets --tensor-parallel-size, which the plan sets"),
    ({"args": {"hf_token": "x"}}, "args sets --hf-token, a secret"),
    ({"layouts": {"gb10x3": {}}}, "layouts.gb10x3: 'gb10x3' is not a hardware class"),
    ({"layouts": {"gb10x2": {"tensor_parallel_size": 0}}}, "layouts.gb10x2.tensor_parallel_size is not a whole number above 0"),
    ({"layouts": {"gb10x2": {"args": {"port": 9000}}}}, "layouts.gb10x2.args sets --port, which the plan sets"),
    ({"env": {"A": [1]}}, "env.A is not a scalar"),
])
def test_a_broken_recipe_is_refused_naming_what_is_wrong(change, said):
    document = dict(copy.deepcopy(RECIPE), **change)
    with pytest.raises(RecipeError) as refused:
        from_document(document, "demo")
    assert str(refused.value).startswith("recipe demo: ") and said in str(refused.value), str(refused.value)


def test_a_document_of_no_known_format_is_refused():
    with pytest.raises(RecipeError, match="recipe x: "):
        from_document({"hello": "world"}, "x")
    with pytest.raises(RecipeError, match="not a mapping"):
        from_document(["a"], "x")


def test_the_deadlines_grow_with_the_work():
    assert ready_timeout(0, 1) == 900  # the size unknown: the fixed deadline of before
    assert ready_timeout(4_400_000, 2) == 601
    assert ready_timeout(125_000_000_000, 2) == 600 + 313  # 62.5 GB per node at 200 MB/s
    assert ready_timeout(595_000_000_000, 1) == 600 + 2975
    assert download_timeout(595_000_000_000, 20_000_000) == 600 + 29750  # Kimi-K2.5 at 20 MB/s: 8.4 h
    assert download_timeout(0, 20_000_000) == 7200
