"""The recipes the collection ships, read as the inventory names them: each checked against the format, its flags
against what `vllm serve` of a recorded vLLM accepts and its parsers against that vLLM's registries; the example
inventories get the layout tested on their hardware; an unknown name is refused with the closest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.filter.recipe import RECIPES, recipe
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import flag_name

ROOT = Path(__file__).resolve().parents[4]
FLAGS = json.loads((ROOT / "tests/fixtures/vllm/serve_flags/0.33.0.json").read_text())
PARSERS = json.loads((ROOT / "tests/fixtures/vllm/parsers/0.33.0.json").read_text())
SHIPPED = sorted(p.stem for p in RECIPES.glob("*.yml"))


def test_the_collection_ships_the_recipes_the_readme_names():
    assert set(SHIPPED) >= {"qwen3.5-122b-a10b-fp8", "kimi-k2.5", "gpt-oss-120b", "qwen3-coder-30b-a3b", "llama-3.3-70b",
                            "qwen3-embedding-8b"}


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_recipe_holds_only_flags_and_parsers_vllm_0_33_has(name):
    document = yaml.safe_load((RECIPES / f"{name}.yml").read_text())
    layouts = [document.get("args") or {}] + [layout.get("args") or {} for layout in (document.get("layouts") or {}).values()]
    for args in layouts:
        unknown = [key for key in args if "--" + flag_name(key).replace("_", "-") not in FLAGS["flags"]]
        assert unknown == [], f"{name}: vllm serve 0.33.0 has no {unknown}"
        if "tool_call_parser" in args:
            assert args["tool_call_parser"] in PARSERS["tool_parsers"], name
        if "reasoning_parser" in args:
            assert args["reasoning_parser"] in PARSERS["reasoning_parsers"], name
    resolved = recipe(name)
    assert resolved["name"] == name and resolved["min_vllm_version"]
    assert resolved["model"]["weight_bytes"] > 0, "the deadlines are sized by it"


@pytest.mark.parametrize(("inventory", "gpus", "layout", "tp"), [
    ("spark", [[{"name": "NVIDIA GB10"}], [{"name": "NVIDIA GB10"}]], "gb10x2", 2),
    ("rtx8", [[{"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"}] * 8], "rtx-pro-6000x8", 8),
])
def test_the_example_inventories_serve_their_recipe_on_its_tested_layout(inventory, gpus, layout, tp):
    settings = yaml.safe_load((ROOT / f"inventories/{inventory}/group_vars/vllm_nodes/vllmops.yml").read_text())
    resolved = recipe(settings["vllmops_recipe"], "", gpus)
    assert (resolved["layout"], resolved["tensor_parallel_size"]) == (layout, tp)
    assert resolved["args"]["tool_call_parser"] in PARSERS["tool_parsers"]


def test_an_unknown_recipe_is_refused_with_the_closest_name():
    with pytest.raises(AnsibleFilterError, match=r"no recipe 'qwen3.5-122b' in this collection \(vllmops_recipe\); did you mean "
                                                 r"'qwen3.5-122b-a10b-fp8'\?; it has: "):
        recipe("qwen3.5-122b")
    with pytest.raises(AnsibleFilterError, match="does not exist on the controller"):
        recipe("/nonexistent/recipe.yml")


def test_no_recipe_is_an_empty_dict():
    assert recipe("") == {}


def test_a_recipe_file_of_ones_own_and_a_foreign_one_are_read_by_path(tmp_path):
    own = tmp_path / "mine.yml"
    own.write_text(yaml.safe_dump({"schema": 1, "name": "mine", "model": {"repo": "org/m"}, "args": {"max_model_len": 1024}}))
    assert recipe(str(own))["args"] == {"max_model_len": 1024}
    foreign = ROOT / "tests/fixtures/recipes_foreign/spark-vllm-docker-cluster.yaml"
    imported = recipe(str(foreign), "", [[{"name": "NVIDIA GB10"}], [{"name": "NVIDIA GB10"}]])
    assert imported["model"]["repo"] and imported["layout"] == "gb10x2"


def test_a_broken_recipe_file_names_the_file(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("schema: 1\nname: broken\nmodel: {repo: org/m}\nargs: {port: 9000}\n")
    with pytest.raises(AnsibleFilterError, match=rf"recipe broken: args sets --port, which the plan sets.*\({broken}\)"):
        recipe(str(broken))
