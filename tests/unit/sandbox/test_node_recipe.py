"""The node image is tagged with its recipe's hash: rebuilt exactly when a recipe file changes, reused otherwise."""

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

NODES_PY = Path(__file__).resolve().parents[2] / "sandbox" / "nodes.py"


def load_nodes(recipe_dir: Path):
    spec = importlib.util.spec_from_file_location("sandbox_nodes", NODES_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.copytree(module.RECIPE_DIR, recipe_dir)
    module.RECIPE_DIR = recipe_dir
    return module


@pytest.fixture
def nodes(tmp_path):
    return load_nodes(tmp_path / "node")


def test_the_hash_is_a_docker_tag_of_the_recipe_alone(nodes, tmp_path):
    """Two checkouts of the same recipe, at other paths and with other file times, share one image."""
    other = load_nodes(tmp_path / "elsewhere" / "node")
    for path in other.RECIPE_DIR.iterdir():
        os.utime(path, (0, 0))
    tag = nodes.recipe_hash()
    assert re.fullmatch(r"[0-9a-f]{16}", tag)
    assert other.recipe_hash() == tag


def test_what_is_not_the_recipe_does_not_change_the_hash(nodes, tmp_path):
    before = nodes.recipe_hash()
    (tmp_path / "next-to-the-recipe.txt").write_text("x\n")
    packages = nodes.RECIPE_DIR / "packages.txt"
    packages.write_text(packages.read_text())  # rewritten, same bytes
    assert nodes.recipe_hash() == before


@pytest.mark.parametrize("change", [
    lambda d: (d / "packages.txt").write_text((d / "packages.txt").read_text() + "curl\n"),
    lambda d: (d / "Dockerfile").write_text((d / "Dockerfile").read_text() + "# touched\n"),
    lambda d: (d / "new.conf").write_text("x\n"),
    lambda d: (d / "sshd_config.conf").rename(d / "sshd_config.d.conf"),
], ids=["package added", "Dockerfile edited", "file added", "file renamed"])
def test_any_recipe_change_gives_a_new_image_tag(nodes, monkeypatch, change):
    monkeypatch.setattr(nodes, "ensure_docker", lambda: None)
    monkeypatch.setattr(nodes, "image_exists", lambda ref: True)  # both images already built: nothing to build
    old_tag = nodes.recipe_hash()
    before = nodes.build_image()
    change(nodes.RECIPE_DIR)
    new_tag = nodes.recipe_hash()
    after = nodes.build_image()
    assert new_tag != old_tag
    assert (before, after) == (f"vllmops/node:{old_tag}", f"vllmops/node:{new_tag}")


def test_a_missing_image_is_built_tagged_and_labelled_with_the_hash(nodes, monkeypatch):
    built = []
    monkeypatch.setattr(nodes, "ensure_docker", lambda: None)
    monkeypatch.setattr(nodes, "image_exists", lambda ref: "-rootfs:" in ref)  # the rootfs exists, the image not
    monkeypatch.setattr(nodes.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(nodes, "run", lambda argv, **_: built.append(argv))
    tag = nodes.recipe_hash()
    assert nodes.build_image() == f"vllmops/node:{tag}"
    [argv] = built
    assert argv[:2] == ["docker", "build"]
    assert f"BASE_IMAGE=vllmops/node-rootfs:{nodes.rootfs_hash(nodes.NODE_SUITE)}" in argv
    assert f"io.vllmops.sandbox.recipe={tag}" in argv
    assert argv[argv.index("-t") + 1] == f"vllmops/node:{tag}"


def test_package_list_ignores_comments_and_blank_lines(nodes):
    (nodes.RECIPE_DIR / "packages.txt").write_text("# comment\nsystemd\n\n  sudo  \n")
    assert nodes.recipe_packages() == ["systemd", "sudo"]


def test_the_rootfs_and_the_images_built_on_it_change_with_the_packages_and_suite_only(nodes):
    """Editing the node's Dockerfile or adding a file to it rebuilds the node image, not the rootfs (nor
    real vLLM's image and the others named after it)."""
    before = nodes.rootfs_hash(nodes.IMAGE_SUITE)
    node_before = nodes.recipe_hash()
    (nodes.RECIPE_DIR / "Dockerfile").write_text((nodes.RECIPE_DIR / "Dockerfile").read_text() + "# touched\n")
    (nodes.RECIPE_DIR / "new.conf").write_text("x\n")
    assert nodes.rootfs_hash(nodes.IMAGE_SUITE) == before and nodes.recipe_hash() != node_before
    assert nodes.rootfs_hash(nodes.NODE_SUITE) != before
    (nodes.RECIPE_DIR / "packages.txt").write_text((nodes.RECIPE_DIR / "packages.txt").read_text() + "curl\n")
    assert nodes.rootfs_hash(nodes.IMAGE_SUITE) != before
