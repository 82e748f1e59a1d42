"""The controller's files in the deploy's fingerprint: a model directory on the controller
(model_controller_path) counts with every file under it, in its subdirectories too (issue 38)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.files_fingerprint import files_fingerprint


@pytest.fixture()
def model(tmp_path):
    root = tmp_path / "model"
    (root / "original").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "original" / "consolidated.safetensors").write_bytes(b"w" * 64)
    return root


@pytest.mark.parametrize("change", [
    pytest.param(lambda root: (root / "original" / "consolidated.safetensors").write_bytes(b"v" * 65), id="resized"),
    pytest.param(lambda root: os.utime(root / "original" / "consolidated.safetensors", ns=(1, 1)), id="touched"),
    pytest.param(lambda root: (root / "original" / "extra.bin").write_bytes(b"x"), id="added"),
    pytest.param(lambda root: (root / "original" / "consolidated.safetensors").unlink(), id="removed"),
    pytest.param(lambda root: (root / "original" / "consolidated.safetensors").rename(root / "original" / "other.safetensors"),
                 id="renamed"),
    pytest.param(lambda root: (root / "a" / "b").mkdir(parents=True) or (root / "a" / "b" / "deep.bin").write_bytes(b"d"),
                 id="added two levels down"),
])
def test_a_file_changed_in_a_subdirectory_changes_the_fingerprint(model, change):
    before = files_fingerprint([str(model)])
    change(model)
    assert files_fingerprint([str(model)]) != before


def test_the_same_tree_gives_the_same_fingerprint(model):
    assert files_fingerprint([str(model)]) == files_fingerprint([str(model), ""])


def test_top_level_files_count_as_before(model):
    """A directory without subdirectories fingerprints as it did before the walk went recursive."""
    (model / "original" / "consolidated.safetensors").unlink()
    (model / "original").rmdir()
    info = (model / "config.json").stat()
    expected = json.dumps({str(model): {"config.json": [info.st_size, info.st_mtime_ns]}}, sort_keys=True)
    assert files_fingerprint([str(model)]) == hashlib.sha256(expected.encode()).hexdigest()
