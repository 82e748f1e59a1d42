#!/usr/bin/env python3
"""The model role's copy to 1, 2 and 3 nodes, side by side, with the network as the bottleneck.

    .venv/bin/python benchmarks/model_copy_bench.py [--size-mib N] [--rate MBIT] [--keep]

Starts three sandbox nodes (prefix vllmops-mbench, no Docker on them: the
controller serves, the nodes receive with Python), each with its cluster
address in /etc/vllmops/cluster.env (the nccl role's file, where the model
role's relays listen), and writes a model directory on this machine (the
controller): config.json and N MiB of random bytes in two safetensors files.
Every link is limited with `tc ... tbf rate MBIT`: each node's interfaces
(its uplinks) and the controller's bridge to the nodes (its uplink; the
controller serves on the address node1's SSH session came from), so a copy is
network-bound, not bound by the two CPU cores all nodes share here. It runs
the model role (model_source=controller, vllm_serve_model=bench-model, so
/srv/models/bench-model on the nodes) four times:
  1 node    the model absent, --limit node1
  2 nodes   the model removed from node1, --limit node1,node2 (a chain)
  3 nodes   the model removed from node1 and node2, all three (a chain)
  re-run    all three again: must copy nothing
and prints, per run and node, the wall time of ansible-playbook, the copy's
seconds, bytes written, read and relayed (the role's receive results) and the
bytes the node's interfaces received (SSH included); then the 2/1 and 3/1
ratios against the goal (3 nodes within 1.3x one node: each node forwards
what it receives). The nodes, their volumes and networks, the tc limit and
the temporary directory are removed by name at the end (also on failure)
unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from chain_bench import ChainBench, copies, nodes, playbook, task_results

BENCH = ChainBench("vllmops-mbench", 3)
NAMES = BENCH.names
SUBNETS = ["10.57.0.0/24", "10.56.0.0/24"]
MODEL = "/srv/models/bench-model"
# Not the role's default (29701): another sandbox on this machine may be copying a model at the same time.
PORT = 29711
GOAL = 1.3
PLAYBOOK = """\
- name: The model on the nodes
  hosts: vllm_nodes
  become: true
  gather_facts: false
  roles: [vllmops.cluster.model]
"""


def said(report: dict) -> str:
    return next((r["msg"] for r in task_results(report, "Say what will be copied").values() if "msg" in r), "")


def write_model(directory: Path, size_mib: int) -> int:
    """config.json and size_mib MiB of random bytes in two safetensors files; returns the bytes."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "bench", "size_mib": size_mib}) + "\n")
    halves = [size_mib // 2, size_mib - size_mib // 2]
    for index, mib in enumerate(halves, 1):
        with open(directory / f"model-{index:05d}-of-{len(halves):05d}.safetensors", "wb") as out:
            for _ in range(mib):
                out.write(os.urandom(1 << 20))
    return sum(f.stat().st_size for f in directory.iterdir())


def remove_model(names: list[str]) -> None:
    for name in names:
        nodes.run(["docker", "exec", name, "rm", "-rf", MODEL, f"{MODEL}.vllmops-manifest.json",
                   "/srv/models/.vllmops-staging", "/run/vllmops/model-receive.json"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=200, help="MiB of random bytes in the model's weights")
    parser.add_argument("--rate", type=int, default=64, help="Mbit/s of every uplink (tc tbf)")
    parser.add_argument("--keep", action="store_true", help="leave the bench nodes and the temporary directory")
    args = parser.parse_args()

    nodes.ensure_docker()
    tmp = Path(tempfile.mkdtemp(prefix=f"{BENCH.prefix}-"))
    started = time.monotonic()
    try:
        model = tmp / "bench-model"
        size = write_model(model, args.size_mib)
        print(f"model {model}: {size / 1e6:.0f} MB; every uplink limited to {args.rate} Mbit/s "
              f"({args.rate / 8:.1f} MB/s: one copy >= {size / (args.rate / 8 * 1e6):.0f} s)", flush=True)
        inventory, book = tmp / "hosts.yml", tmp / "bench.yml"
        cluster = nodes.up(BENCH.prefix, len(NAMES), [f"{net}={subnet}" for net, subnet in zip(BENCH.networks, SUBNETS, strict=True)])
        nodes.write_inventory(inventory, cluster, [
            "model_source=controller", f"model_controller_path={model}", "vllm_serve_model=bench-model",
            "model_space_margin=0", f"model_copy_port={PORT}", f"model_controller_manifest_dir={tmp / 'manifests'}"])
        book.write_text(PLAYBOOK)
        BENCH.write_cluster_env(cluster)
        remove_model(NAMES)
        BENCH.limit_links(args.rate)

        runs = {}
        for label, hosts in [("1 node", NAMES[:1]), ("2 nodes", NAMES[:2]), ("3 nodes", NAMES), ("re-run", NAMES)]:
            if label != "re-run":
                remove_model(hosts)
            before = {name: BENCH.rx_bytes(name) for name in hosts}
            wall, report = playbook(inventory, book, "--limit", ",".join(hosts))
            rx = {name: BENCH.rx_bytes(name) - before[name] for name in hosts}
            runs[label] = (wall, copies(report), rx, said(report))
            print(f"{label}: {wall:.1f} s; {said(report)}", flush=True)

        print()
        print(f"{'run':8} {'wall s':>7} {'copy s':>7}  {'node':6} {'written MB':>10} {'read MB':>8} {'relayed MB':>10} "
              f"{'seconds':>7} {'MB/s':>6} {'iface rx MB':>11}")
        copy_s = {}
        for label, (wall, results, rx, _) in runs.items():
            copy_s[label] = max((r["seconds"] for r in results.values()), default=0.0)
            for i, name in enumerate(sorted(rx)):
                r = results.get(name, {})
                head = f"{label:8} {wall:7.1f} {copy_s[label]:7.1f}" if i == 0 else " " * 24
                seconds = r.get("seconds", 0.0)
                rate = f"{r['received_bytes'] / 1e6 / seconds:6.1f}" if seconds else f"{'-':>6}"
                print(f"{head}  {BENCH.short(name):6} {r.get('bytes', 0) / 1e6:10.1f} {r.get('received_bytes', 0) / 1e6:8.1f} "
                      f"{r.get('relayed_bytes', 0) / 1e6:10.1f} {seconds:7.1f} {rate} {rx[name] / 1e6:11.1f}")
        print()
        one_wall, three_wall = runs["1 node"][0], runs["3 nodes"][0]
        for n in ("2 nodes", "3 nodes"):
            print(f"{n}/1 node: copy {copy_s[n]:.1f} s / {copy_s['1 node']:.1f} s = {copy_s[n] / copy_s['1 node']:.2f}; "
                  f"wall {runs[n][0]:.1f} s / {one_wall:.1f} s = {runs[n][0] / one_wall:.2f}")
        ratio = copy_s["3 nodes"] / copy_s["1 node"]
        print(f"goal: 3 nodes within {GOAL}x one node's copy: {ratio:.2f} -> {'met' if ratio <= GOAL else 'MISSED'} "
              f"(wall {three_wall / one_wall:.2f}; 1.00 = flat, 3.00 = one uplink for all)")
        rerun_wall, rerun_copies, rerun_rx, rerun_said = runs["re-run"]
        moved = sum(r.get("received_bytes", 0) for r in rerun_copies.values())
        print(f"re-run: {rerun_wall:.1f} s wall; model bytes copied: {moved}; nodes copied to: {sorted(rerun_copies)}; "
              f"said 'nothing to copy': {'yes' if 'nothing to copy' in rerun_said else 'NO'}; "
              f"interfaces (SSH included): " + ", ".join(f"{BENCH.short(n)}={b / 1e3:.0f} kB" for n, b in rerun_rx.items()))
    except (RuntimeError, nodes.SandboxError) as err:
        print(err, file=sys.stderr)
        return 1
    finally:
        print(f"bench run time: {time.monotonic() - started:.0f} s", file=sys.stderr)
        if args.keep:
            print(f"kept: nodes {', '.join(NAMES)}; inventory and model in {tmp}", file=sys.stderr)
        else:
            BENCH.remove_everything()
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
