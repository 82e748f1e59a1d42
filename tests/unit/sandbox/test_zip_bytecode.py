"""The node image's bytecode cache for AnsiballZ payloads (tests/sandbox/node/python): a module imported from a
payload zip runs the same with it, is compiled once per source and user, and is named after the zip it came from."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HOOK_DIR = Path(__file__).resolve().parents[2] / "sandbox" / "node" / "python"

PROGRAM = """
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import pkg.mod as mod
try:
    mod.fail()
except RuntimeError:
    where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
print(json.dumps({"value": mod.VALUE, "file": mod.__file__, "raised_in": where,
                  "loader": type(mod.__loader__).__name__}))
"""


def payload(path: Path, value: int) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", f"VALUE = {value}\n\ndef fail():\n    raise RuntimeError('x')\n")
    return path


def run(zip_path: Path, cache: Path, hook: bool = True) -> dict:
    env = dict(os.environ, SANDBOX_ZIP_BYTECODE_CACHE=str(cache))
    prelude = f"import sys; sys.path.insert(0, {str(HOOK_DIR)!r}); import sandbox_zip_bytecode\n" if hook else ""
    proc = subprocess.run([sys.executable, "-c", prelude + PROGRAM, str(zip_path)], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout)


def cached(cache: Path) -> list[Path]:
    return sorted((cache / str(os.getuid())).glob("*"))


def test_a_payload_runs_the_same_and_is_compiled_once_per_source(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    first_zip = payload(tmp_path / "a" / "ansible_x_payload.zip", 1)
    first = run(first_zip, cache)
    assert first == run(first_zip, cache, hook=False) | {"loader": "CachedZipImporter"}
    entries = cached(cache)
    assert len(entries) == 2, entries  # pkg and pkg.mod

    (tmp_path / "b").mkdir()
    second_zip = payload(tmp_path / "b" / "ansible_x_payload.zip", 1)  # another run's payload, the same source
    second = run(second_zip, cache)
    assert cached(cache) == entries  # nothing compiled again
    # named after this run's zip, not the one the cache was filled from
    assert second["file"] == second["raised_in"] == str(second_zip / "pkg" / "mod.py")

    changed = payload(tmp_path / "b" / "ansible_x_payload.zip", 2)
    assert run(changed, cache)["value"] == 2
    assert len(cached(cache)) == 3


def test_other_zips_import_as_before(tmp_path):
    plain = payload(tmp_path / "library.zip", 3)
    assert run(plain, tmp_path / "cache")["loader"] == "zipimporter"
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs to make a directory owned by another user")
def test_a_cache_directory_another_user_could_write_is_not_used(tmp_path):
    cache = tmp_path / "cache"
    mine = cache / str(os.getuid())
    mine.mkdir(parents=True)
    mine.chmod(0o777)
    (tmp_path / "a").mkdir()
    result = run(payload(tmp_path / "a" / "ansible_x_payload.zip", 4), cache)
    assert result["value"] == 4
    assert cached(cache) == []
