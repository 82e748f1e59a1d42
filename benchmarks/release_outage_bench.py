#!/usr/bin/env python3
"""The outage a client sees while a release changes, on a converged sandbox
(`make sandbox`): a good change (one more flag, every rank restarts in order),
then a change that fails readiness and is rolled back, then playbooks/
rollback.yml back to the release before the good change, and deploy.yml
forward to the inventory's configuration again. Each step, one after the
other in one run, from this machine through the proxy with the key the
deployment left here (as a client holds it):

    .venv/bin/python benchmarks/release_outage_bench.py [--inventory inventories/sandbox]

prints, per step, the run's wall time, the outage (the longest stretch of
/v1/models asked every 0.2 s that did not answer 200) and the failed polls.
Run it on two checkouts against the same sandbox to compare them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from api_client import ApiClient  # noqa: E402

BIN = Path(sys.executable).parent


class Outage:
    """/v1/models asked every 0.2 s while a block runs: failed polls and the longest stretch without a 200."""

    def __init__(self, inventory: Path) -> None:
        self.inventory, self.failed, self.ok, self.longest = inventory, 0, 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _answers(self) -> bool:
        try:  # the key is read each time: a rollback may put the previous one back on this machine
            return ApiClient.for_inventory(self.inventory).request("/v1/models", timeout=2)[0] == 200
        except OSError:
            return False

    def _run(self) -> None:
        down = None
        while not self._stop.is_set():
            now = time.monotonic()
            if self._answers():
                self.ok += 1
                if down is not None:
                    self.longest, down = max(self.longest, now - down), None
            else:
                self.failed += 1
                down = now if down is None else down
            time.sleep(0.2)
        if down is not None:
            self.longest = max(self.longest, time.monotonic() - down)

    def __enter__(self) -> Outage:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def playbook(inventory: Path, path: str, extra: dict | None = None, tags: str | None = None) -> tuple[int, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(extra or {}, handle)
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    argv = [str(BIN / "ansible-playbook"), path, "-i", str(inventory), "-e", f"@{handle.name}"]
    began = time.monotonic()
    try:
        proc = subprocess.run(argv + (["--tags", tags] if tags else []), cwd=ROOT, env=env, capture_output=True, text=True)
    finally:
        os.unlink(handle.name)
    return proc.returncode, time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path, default=ROOT / "inventories/sandbox")
    inventory = parser.parse_args().inventory.resolve()
    args = yaml.safe_load((inventory / "group_vars/vllm_nodes/vllm_serve.yml").read_text())["vllm_serve_args"]
    steps = [
        ("good change (max_num_seqs 4)", "deploy.yml", {"vllm_serve_args": dict(args, max_num_seqs=4)}, "api_proxy,vllm_serve", 0),
        ("failing change, rolled back", "deploy.yml", {"vllm_serve_args": dict(args, max_num_seqs=4, enable_auto_tool_choice=None)},
         "api_proxy,vllm_serve", 2),
        ("rollback.yml (to the previous)", "playbooks/rollback.yml", None, None, 0),
        ("forward again (the inventory's)", "deploy.yml", None, "api_proxy,vllm_serve", 0),
    ]
    print(f"{'step':34} {'rc':>3} {'run s':>7} {'outage s':>9} {'failed':>7}")
    bad = 0
    for name, path, extra, tags, expected in steps:
        with Outage(inventory) as outage:
            code, took = playbook(inventory, path, extra, tags)
        bad += (code == 0) != (expected == 0)
        print(f"{name:34} {code:>3} {took:7.1f} {outage.longest:9.1f} {outage.failed:7d}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
