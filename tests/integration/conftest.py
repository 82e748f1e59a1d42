"""Integration tests: the real Docker Engine, real images, modules run by
`ansible localhost -m ...` from this checkout (as an operator would)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests/sandbox"))


@pytest.fixture(scope="session")
def probe_images():
    import probe_images as builder

    return builder.build_all()


def run_module(module: str, args: dict, check: bool = False, env: dict | None = None) -> tuple[int, dict]:
    """Run vllmops.cluster.<module> on localhost; return (rc, the module's result)."""
    argv = [str(BIN / "ansible"), "localhost", "-m", f"vllmops.cluster.{module}", "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                    ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", PATH=f"{BIN}:{os.environ['PATH']}",
                    **(env or {}))
    proc = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=300)
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as err:
        raise AssertionError(f"no module result (rc={proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}") from err
    return proc.returncode, result
