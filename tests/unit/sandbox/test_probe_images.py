"""The probe's test images are trusted by their recipe label, not by their name: CI once found an image of another
branch under the same name and failed on what it held."""

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox"))
import probe_images


@pytest.fixture
def engine(monkeypatch):
    """docker image inspect answered from a name -> label table (absent names fail as Docker does)."""
    labels = {}

    def run(argv, **_kwargs):
        tag = argv[-1]
        if tag not in labels:
            return types.SimpleNamespace(returncode=1, stdout="", stderr="No such image")
        return types.SimpleNamespace(returncode=0, stdout=labels[tag] + "\n", stderr="")

    monkeypatch.setattr(probe_images.subprocess, "run", run)
    return labels


def test_an_image_of_this_recipe_is_reused(engine):
    engine["vllmops-test/probe-vllm-0.33.0"] = probe_images.recipe_hash()
    assert probe_images._exists("vllmops-test/probe-vllm-0.33.0")


def test_an_image_of_another_recipe_or_none_is_rebuilt(engine):
    engine["vllmops-test/probe-vllm-0.33.0"] = "0123456789abcdef"  # another branch's build
    engine["vllmops-test/probe-no-vllm"] = ""  # built before images carried the label
    assert not probe_images._exists("vllmops-test/probe-vllm-0.33.0")
    assert not probe_images._exists("vllmops-test/probe-no-vllm")
    assert not probe_images._exists("vllmops-test/probe-absent")


def test_the_recipe_covers_the_node_rootfs_the_images_start_from(monkeypatch):
    before = probe_images.recipe_hash()
    probe_images.recipe_hash.cache_clear()
    monkeypatch.setattr(probe_images.nodes, "rootfs_hash", lambda suite="bookworm": "another-rootfs")
    try:
        assert probe_images.recipe_hash() != before
    finally:
        probe_images.recipe_hash.cache_clear()
