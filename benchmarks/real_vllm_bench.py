#!/usr/bin/env python3
"""Real vLLM in the sandbox, measured side by side in one run (these machines are noisy).

    .venv/bin/python benchmarks/real_vllm_bench.py [--keep]

1. cold: `make sandbox-down`, then `make sandbox` until a completion is served
   (node containers, Docker, toolkit, cluster env, the ~3 GB image streamed to
   both nodes, the plan, both vLLM ranks and readiness). The image build, the
   wheels and the tiny model are cached and not counted; say so when quoting.
2. warm: `make sandbox` again (changes nothing).
3. vLLM's own start per rank, from the good change below: the container's
   start to rank 0's "Application startup complete" and to the headless
   rank's last start-up line (its KV cache allocated); memory of each rank's
   container and of each node.
4. while /health is polled every 0.1 s from this machine:
     good change   one flag changed (max_num_seqs): play time, longest outage
     bad flag      --num-scheduler-steps (not in vLLM 0.32): play time, failed polls (must be 0)
     rollback      a KV cache vLLM itself refuses at start: play time, endpoint down in all
The sandbox is put back to the inventory's settings, and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from api_client import ApiClient, secrets_dir  # noqa: E402

ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
NODES = ("vllmops-sandbox-node1", "vllmops-sandbox-node2")
BASE = yaml.safe_load((ROOT / "inventories/sandbox/group_vars/vllm_nodes/vllm_serve.yml").read_text())["vllm_serve_args"]


class Poller:
    """/health every 0.1 s; counts failures and records outages."""

    def __init__(self, url: str) -> None:
        self.url, self.stop, self.failures, self.outages = url, threading.Event(), 0, []
        # The proxy's https, checked against the CA the deployment published.
        self.client = ApiClient(url, cafile=secrets_dir(ROOT / "inventories/sandbox") / "api-ca.crt")
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        down_since = None
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                ok = self.client.healthy(timeout=2)
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


def timed(argv: list[str], check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True)
    if check and proc.returncode:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return time.monotonic() - started, proc


def deploy(args: dict) -> tuple[float, subprocess.CompletedProcess]:
    return timed(["ansible-playbook", "deploy.yml", "-i", "inventories/sandbox", "--tags", "vllm_serve",
                  "-e", json.dumps({"vllm_serve_args": args})], check=False)


def on(node: str, *argv: str) -> str:
    return subprocess.run(["docker", "exec", node, *argv], capture_output=True, text=True).stdout.strip()


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.strip().replace("Z", "+00:00")[:26] + "+00:00").timestamp()


def rank_start(node: str, marker: str) -> float:
    """Seconds from the rank's container start to the last log line holding marker."""
    started = _stamp(on(node, "docker", "inspect", "--format", "{{.State.StartedAt}}", "vllmops-vllm"))
    out = subprocess.run(["docker", "exec", node, "docker", "logs", "--timestamps", "vllmops-vllm"],
                         capture_output=True, text=True)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if marker in ln]
    return _stamp(lines[-1].split()[0]) - started if lines else float("nan")


def memory() -> str:
    parts = []
    for node in NODES:
        rank = on(node, "docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", "vllmops-vllm").split(" / ")[0]
        whole = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", node],
                               capture_output=True, text=True).stdout.split(" / ")[0]
        parts.append(f"{node.rsplit('-', 1)[1]}: rank {rank}, node {whole}")
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = parser.parse_args()

    timed(["make", "sandbox-down"])
    cold_s, proc = timed(["make", "sandbox"])
    assert " completed " in proc.stdout, proc.stdout[-2000:]
    warm_s, proc = timed(["make", "sandbox"])
    assert " completed " in proc.stdout, proc.stdout[-2000:]
    url = proc.stdout.split("sandbox endpoint: ")[1].split()[0]
    results = [f"make sandbox cold {cold_s:.1f} s, warm {warm_s:.1f} s (image, wheels and model cached)"]
    try:
        with Poller(url) as good:
            good_s, proc = deploy({**BASE, "max_num_seqs": 8})
        assert proc.returncode == 0, proc.stdout[-3000:]
        head = rank_start(NODES[0], "Application startup complete")
        headless = rank_start(NODES[1], "for KV cache")
        results.append(f"vLLM start per rank: rank 0 to 'Application startup complete' {head:.1f} s; "
                       f"headless rank to its KV cache {headless:.1f} s")
        results.append(f"memory: {memory()}")
        results.append(f"good change : play {good_s:5.1f} s; longest outage {max(good.outages, default=0):.1f} s; "
                       f"failed polls {good.failures}")
        with Poller(url) as bad:
            bad_s, proc = deploy({**BASE, "max_num_seqs": 8, "num_scheduler_steps": 8})
        assert proc.returncode != 0 and "--num-scheduler-steps" in proc.stdout, proc.stdout[-3000:]
        results.append(f"bad flag    : play {bad_s:5.1f} s; failed polls {bad.failures} (nothing touched)")
        with Poller(url) as rollback:
            rb_s, proc = deploy({**BASE, "max_num_seqs": 8, "kv_cache_memory_bytes": 65536})
        assert proc.returncode != 0 and "healthy again" in proc.stdout, proc.stdout[-3000:]
        results.append(f"rollback    : play {rb_s:5.1f} s; endpoint down {sum(rollback.outages):.1f} s in all "
                       f"(both ranks stopped, the refused start, both ranks back on the old flags)")
        assert deploy(BASE)[1].returncode == 0
    finally:
        print("\n".join(results))
        if not args.keep:
            timed(["make", "sandbox-down"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
