"""The node image is rebuilt exactly when its recipe changes."""

import importlib.util
import shutil
from pathlib import Path

import pytest

NODES_PY = Path(__file__).resolve().parents[2] / "sandbox" / "nodes.py"


@pytest.fixture
def nodes(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("sandbox_nodes", NODES_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recipe = tmp_path / "node"
    shutil.copytree(module.RECIPE_DIR, recipe)
    monkeypatch.setattr(module, "RECIPE_DIR", recipe)
    return module


def test_hash_is_stable_for_the_same_recipe(nodes):
    assert nodes.recipe_hash() == nodes.recipe_hash()


@pytest.mark.parametrize("change", [
    lambda d: (d / "packages.txt").write_text((d / "packages.txt").read_text() + "curl\n"),
    lambda d: (d / "Dockerfile").write_text((d / "Dockerfile").read_text() + "# touched\n"),
    lambda d: (d / "new.conf").write_text("x\n"),
], ids=["package added", "Dockerfile edited", "file added"])
def test_any_recipe_change_gives_a_new_image_tag(nodes, change):
    before = nodes.recipe_hash()
    change(nodes.RECIPE_DIR)
    assert nodes.recipe_hash() != before


def test_package_list_ignores_comments_and_blank_lines(nodes):
    (nodes.RECIPE_DIR / "packages.txt").write_text("# comment\nsystemd\n\n  sudo  \n")
    assert nodes.recipe_packages() == ["systemd", "sudo"]
