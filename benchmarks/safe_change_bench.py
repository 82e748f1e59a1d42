#!/usr/bin/env python3
"""What a config change costs the endpoint, measured on the converged sandbox in one run.

    .venv/bin/python benchmarks/safe_change_bench.py      (after `make sandbox`)

While /health and a tiny completion are polled every 0.1 s from this machine:
  good-change   deploy.yml --tags vllm_serve with one changed flag (max_num_seqs):
                the longest time the endpoint did not answer
  bad-flag      a flag this vLLM does not have: requests failed during the play (must be 0)
  hang          the stand-in told to hang at init, hang window W: time from the
                restart to the diagnosis, next to W
  rollback      an OOM at start: time from the diagnosis to the old config answering again,
                and the play's total time
The sandbox's vllm_serve settings are restored at the end (one more deploy).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
BASE = {"max_model_len": 4096, "gpu_memory_utilization": 0.6, "enable_prefix_caching": True}
HANG_WINDOW = 15


class Poller:
    """/health every 0.1 s; records when requests failed."""

    def __init__(self, url: str) -> None:
        self.url, self.stop, self.failures, self.outages = url, threading.Event(), 0, []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        down_since = None
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    ok = resp.status == 200
            except OSError:
                ok = False
            if not ok:
                self.failures += 1
                down_since = down_since or now
            elif down_since is not None:
                self.outages.append(now - down_since)
                down_since = None
            time.sleep(0.1)
        if down_since is not None:
            self.outages.append(time.monotonic() - down_since)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def deploy(extra: dict) -> tuple[int, float, str]:
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "deploy.yml", "-i", "inventories/sandbox", "--tags", "vllm_serve",
                           "-e", json.dumps(extra)], cwd=ROOT, env=ENV, capture_output=True, text=True)
    return proc.returncode, time.monotonic() - started, proc.stdout


def head_address() -> str:
    line = subprocess.run([sys.executable, "tests/sandbox/endpoint.py", "inventories/sandbox"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True).stdout
    if "healthy" not in line:
        sys.exit("run `make sandbox` first: " + line)
    return line.split()[2]


def journal_times(unit_pattern: str) -> list[float]:
    out = subprocess.run(["docker", "exec", "vllmops-sandbox-node1", "journalctl", "--unit", "vllmops-vllm", "--output",
                          "short-unix", "--no-pager", "--grep", unit_pattern], capture_output=True, text=True).stdout
    return [float(line.split()[0]) for line in out.splitlines() if re.match(r"^\d+\.\d+ ", line)]


def main() -> int:
    url = head_address()
    with Poller(url) as good:
        rc, good_s, out = deploy({"vllm_serve_args": {**BASE, "max_num_seqs": 96}})
    assert rc == 0, out[-3000:]
    with Poller(url) as bad:
        rc, bad_s, out = deploy({"vllm_serve_args": {**BASE, "max_num_seqs": 96, "num_scheduler_steps": 10}})
    assert rc != 0 and "--num-scheduler-steps" in out, out[-3000:]

    restart_at = time.time()
    rc, hang_s, out = deploy({"vllm_serve_args": {**BASE, "max_num_seqs": 48}, "vllm_serve_hang_window": HANG_WINDOW,
                              "vllm_serve_env": {"VLLMOPS_STANDIN_FAIL": "hang"}})
    assert rc != 0 and "new configuration: hang" in out, out[-3000:]
    starts = [t for t in journal_times("^Started vllmops-vllm") if t >= restart_at - 1]
    hang_detect = starts[1] - starts[0] if len(starts) >= 2 else float("nan")  # second start = the rollback restart

    restart_at = time.time()
    with Poller(url) as oom:
        rc, oom_s, out = deploy({"vllm_serve_args": {**BASE, "max_num_seqs": 24}, "vllm_serve_env": {"VLLMOPS_STANDIN_FAIL": "oom"}})
    assert rc != 0 and "Rolled back to the last working configuration: healthy again." in out, out[-3000:]
    starts = [t for t in journal_times("^Started vllmops-vllm") if t >= restart_at - 1]
    rc, _, out = deploy({})  # back to the inventory's settings
    assert rc == 0, out[-2000:]

    print(f"good change : play {good_s:5.1f} s; longest outage {max(good.outages, default=0):.2f} s; failed polls {good.failures}")
    print(f"bad flag    : play {bad_s:5.1f} s; failed polls {bad.failures} (the running server was not touched)")
    print(f"hang        : play {hang_s:5.1f} s; restart -> diagnosis + rollback restart {hang_detect:.1f} s "
          f"(hang window {HANG_WINDOW} s)")
    print(f"oom rollback: play {oom_s:5.1f} s; endpoint down {max(oom.outages, default=0):.1f} s in all "
          f"(new config start -> rollback start {starts[-1] - starts[0] if len(starts) > 1 else float('nan'):.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
