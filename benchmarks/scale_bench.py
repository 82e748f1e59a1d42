#!/usr/bin/env python3
"""deploy.yml on 2 and on 8 sandbox nodes, side by side in one run (these machines are noisy).

    .venv/bin/python benchmarks/scale_bench.py [--sizes 2,8] [--rounds 2] [--serving standin|real]
                                               [--keep] [--image-copy]

For each size N, on the same serving (by default the inference stand-in over
Ray, as `make sandbox SANDBOX_NODES=8` uses; `--serving real --sizes 2` is
the default 2-node sandbox with real vLLM):
  fresh      `make sandbox-down`, then `make sandbox SANDBOX_NODES=N` until its
             endpoint answers (node containers, Docker, toolkit, network,
             firewall, exporters, image copy, Ray, vLLM, proxy, readiness);
             locally built images and downloads are cached and not counted
then, interleaved round by round on the converged cluster:
  no-op      ansible-playbook deploy.yml (the fast path: every node as recorded)
  full no-op the same with -e vllmops_fast_rerun=false (every play; changes nothing)
  ping       a one-task ansible.builtin.ping play on the same hosts
Prints medians, the task results each run made (host x task), the time of
each play of the full no-op, and the ratios the issue names: no-op / ping on
2 nodes, and 8-node / 2-node for fresh and no-op. --image-copy also runs
benchmarks/image_copy_bench.py (image to 1 and to 4 nodes over tc-limited
links) and prints its figures. The sandbox is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
PING = "- name: One task\n  hosts: vllm_nodes\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"


def machine_cpu_s() -> float:
    """CPU seconds this machine has spent (all cores, every process: the controller and the nodes)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def controller_cpu_s() -> float:
    """CPU seconds of this process's finished children (ansible-playbook, its forks and ssh)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


LAST = {}  # the CPU seconds of the last timed() call: machine, controller


def timed(argv: list[str], env: dict | None = None) -> tuple[float, str]:
    started, machine, controller = time.monotonic(), machine_cpu_s(), controller_cpu_s()
    proc = subprocess.run(argv, cwd=ROOT, env=env or ENV, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    LAST.update(machine=machine_cpu_s() - machine, controller=controller_cpu_s() - controller)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def playbook(*args: str) -> tuple[float, dict]:
    """Run a playbook with the JSON callback: (seconds, its document)."""
    env = {**ENV, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    seconds, out = timed(["ansible-playbook", *args, "-i", "inventories/sandbox"], env)
    return seconds, json.loads(out[out.index("{"):])


def task_results(doc: dict) -> int:
    return sum(s["ok"] + s["changed"] + s["skipped"] + s["failures"] for s in doc["stats"].values())


def changed(doc: dict) -> int:
    return sum(s["changed"] for s in doc["stats"].values())


def play_times(doc: dict) -> list[tuple[str, float]]:
    def at(stamp: str) -> float:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return [(p["play"]["name"], at(p["play"]["duration"]["end"]) - at(p["play"]["duration"]["start"]))
            for p in doc["plays"] if p["play"].get("duration", {}).get("end")]


def measure(nodes: int, rounds: int, serving: str, ping_book: str) -> dict:
    make = ["make", "--no-print-directory", f"SANDBOX_NODES={nodes}", f"SANDBOX_SERVING={serving}"]
    timed([*make, "sandbox-down"])
    fresh, out = timed([*make, "sandbox"], {**ENV, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    fresh_cpu = dict(LAST)
    fresh_doc, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
    print(f"[{nodes} nodes] fresh sandbox -> healthy endpoint: {fresh:.1f} s; CPU {fresh_cpu['machine']:.0f} s "
          f"(controller {fresh_cpu['controller']:.0f} s)", flush=True)
    fast, full, ping = [], [], []
    for _ in range(rounds):
        seconds, fast_doc = playbook("deploy.yml")
        fast.append(seconds)
        seconds, full_doc = playbook("deploy.yml", "-e", "vllmops_fast_rerun=false")
        full.append(seconds)
        full_cpu = dict(LAST)
        ping.append(timed(["ansible-playbook", ping_book, "-i", "inventories/sandbox"])[0])
        for name, doc in (("no-op", fast_doc), ("full no-op", full_doc)):
            if changed(doc):
                sys.exit(f"[{nodes} nodes] the {name} deploy changed {changed(doc)} things")
        if "nothing to do. -e" not in json.dumps(fast_doc):
            sys.exit(f"[{nodes} nodes] the no-op deploy did not take the fast path")
    print(f"[{nodes} nodes] no-op {fast}  full no-op {full}  ping {ping}", flush=True)
    return {"nodes": nodes, "fresh": fresh, "fast": statistics.median(fast), "full": statistics.median(full),
            "ping": statistics.median(ping), "fast_tasks": task_results(fast_doc),
            "full_tasks": task_results(full_doc), "fresh_tasks": task_results(fresh_doc), "fresh_cpu": fresh_cpu,
            "full_cpu": full_cpu, "plays": play_times(full_doc), "fresh_plays": play_times(fresh_doc)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2,8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serving", choices=["standin", "real"], default="standin")
    parser.add_argument("--keep", action="store_true", help="leave the last sandbox running")
    parser.add_argument("--image-copy", action="store_true", help="also run benchmarks/image_copy_bench.py")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]

    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as book:
        book.write(PING)
    results = []
    try:
        for nodes in sizes:
            results.append(measure(nodes, args.rounds, args.serving, book.name))
    finally:
        os.unlink(book.name)
        if not args.keep:
            timed(["make", "--no-print-directory", "sandbox-down"])

    print("\n| nodes | fresh | no-op (tasks) | full no-op (tasks) | ping | no-op / ping | full no-op / ping |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['nodes']} | {r['fresh']:.1f} s | {r['fast']:.1f} s ({r['fast_tasks']}) | {r['full']:.1f} s "
              f"({r['full_tasks']}) | {r['ping']:.2f} s | {r['fast'] / r['ping']:.1f}x | {r['full'] / r['ping']:.1f}x |")
    if len(results) > 1:
        small, big = results[0], results[-1]
        print(f"\n{big['nodes']} nodes / {small['nodes']} nodes: fresh {big['fresh'] / small['fresh']:.2f}x, "
              f"no-op {big['fast'] / small['fast']:.2f}x, full no-op {big['full'] / small['full']:.2f}x, "
              f"ping {big['ping'] / small['ping']:.2f}x")
    cores = os.cpu_count() or 1
    print(f"\nCPU seconds ({cores} cores shared by the controller and every node; busy = CPU / (wall x cores)):")
    for r in results:
        for what, wall in (("fresh", r["fresh"]), ("full no-op", r["full"])):
            cpu = r["fresh_cpu"] if what == "fresh" else r["full_cpu"]
            print(f"  {r['nodes']} nodes {what:10}: machine {cpu['machine']:6.0f} s, controller (Ansible, ssh) "
                  f"{cpu['controller']:6.0f} s, nodes {cpu['machine'] - cpu['controller']:6.0f} s; "
                  f"busy {cpu['machine'] / (wall * cores):.0%}")
    for key, title in (("fresh_plays", "fresh deploy"), ("plays", "full no-op")):
        print(f"\n{title}, seconds per play: " + " | ".join(f"{r['nodes']} nodes" for r in results))
        for i, (name, _) in enumerate(results[0][key]):
            cells = " | ".join(f"{r[key][i][1]:6.1f}" if i < len(r[key]) else "-" for r in results)
            print(f"  {name[:70]:70} {cells}")

    if args.image_copy:
        print("\n$ benchmarks/image_copy_bench.py", flush=True)
        return subprocess.run([sys.executable, str(ROOT / "benchmarks/image_copy_bench.py")], cwd=ROOT).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
