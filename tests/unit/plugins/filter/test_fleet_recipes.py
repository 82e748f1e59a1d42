"""Several services with their recipes written into their settings (filter fleet_recipes): the recipe's model,
flags, env, layout and oldest vLLM under what the service says itself; the layout of one replica on the cluster's
GPU family; a service without a recipe untouched; a bad recipe named with its service."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.filter.fleet_recipes import fleet_recipes
from ansible_collections.vllmops.cluster.plugins.module_utils.fleet import make_fleet

ROOT = Path(__file__).resolve().parents[4]
SPARKS = [[{"name": "NVIDIA GB10"}], [{"name": "NVIDIA GB10"}], [{"name": "NVIDIA GB10"}]]
H200 = [[{"name": "NVIDIA H200"}] * 8]


def test_a_service_without_a_recipe_is_left_as_it_is():
    services = [{"name": "qwen", "model": "Qwen/Qwen3-0.6B", "args": {"max_model_len": 4096}}]
    assert fleet_recipes(services, SPARKS) == services


def test_the_recipe_s_layout_for_one_replica_of_the_service_s_size_and_its_flags_under_the_service_s():
    [service] = fleet_recipes([{"name": "qwen", "recipe": "qwen3.5-122b-a10b-fp8", "tensor_parallel_size": 2,
                                "args": {"max-model-len": 32768, "max_num_seqs": 8}, "env": {"A": "1"}}], SPARKS)
    assert service["model"] == "Qwen/Qwen3.5-122B-A10B-FP8" and service["revision"] == "main"
    assert service["recipe"] == "qwen3.5-122b-a10b-fp8" and service["min_vllm_version"] == "0.17.0"
    # gb10x2 (TP 2 on GB10s): its flags; the service's max-model-len replaces the recipe's whatever the spelling
    assert service["args"]["gpu_memory_utilization"] == 0.8 and service["args"]["max_num_batched_tokens"] == 8192
    assert "max_model_len" not in service["args"] and service["args"]["max-model-len"] == 32768
    assert service["args"]["max_num_seqs"] == 8 and service["args"]["tool_call_parser"] == "qwen3_coder"
    assert service["env"] == {"A": "1"} and service["tensor_parallel_size"] == 2
    assert "recipe_layout" not in service


def test_without_a_size_the_recipe_s_own_flags_and_with_recipe_layout_that_layout():
    [own] = fleet_recipes([{"name": "qwen", "recipe": "qwen3.5-122b-a10b-fp8"}], SPARKS)
    assert "gpu_memory_utilization" not in own["args"] and "tensor_parallel_size" not in own
    [named] = fleet_recipes([{"name": "qwen", "recipe": "qwen3.5-122b-a10b-fp8", "recipe_layout": "h200x8"}], SPARKS)
    assert named["tensor_parallel_size"] == 8 and named["args"]["speculative_config"]["method"] == "mtp"
    # a size the recipe has no layout for: its own flags, the service's size
    [odd] = fleet_recipes([{"name": "qwen", "recipe": "qwen3.5-122b-a10b-fp8", "tensor_parallel_size": 4}], H200)
    assert odd["tensor_parallel_size"] == 4 and "speculative_config" not in odd["args"]


def test_the_service_s_own_model_wins_and_a_sandbox_recipe_file_is_read_by_path():
    recipe = str(ROOT / "tests/sandbox/recipes/sandbox-tiny.yml")
    [service] = fleet_recipes([{"name": "tiny-b", "model": "sandbox/tiny-b", "recipe": recipe}], [])
    assert service["model"] == "sandbox/tiny-b" and "revision" not in service
    assert service["args"]["max_model_len"] == 256 and service["min_vllm_version"] == "0.11.1"
    # what the plan makes of it: the recipe's name and oldest vLLM carried per service
    fleet = make_fleet([service], [{"name": "n1", "gpus": 1}])
    assert (fleet["services"][0]["recipe"], fleet["services"][0]["min_vllm_version"]) == ("sandbox-tiny", "0.11.1")


@pytest.mark.parametrize(("services", "said"), [
    ([{"name": "qwen", "recipe": "qwen3.5-122b"}], "service qwen: no recipe 'qwen3.5-122b' in this collection"),
    ([{"name": "qwen", "recipe": "qwen3.5-122b-a10b-fp8", "recipe_layout": "gb10x5"}], "has no layout 'gb10x5'"),
    ([{"name": "qwen", "recipe": "qwen3.5-122b-a10b-fp8", "recipe_layout": 2}], "sets recipe_layout 2"),
    ({"name": "qwen"}, "give a list of services"),
])
def test_a_bad_recipe_is_named_with_its_service(services, said):
    with pytest.raises(AnsibleFilterError, match=None) as err:
        fleet_recipes(services, SPARKS)
    assert said in str(err.value), str(err.value)
