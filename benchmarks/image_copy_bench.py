#!/usr/bin/env python3
"""The image role's copy, measured side by side in one run (these machines are noisy).

    .venv/bin/python benchmarks/image_copy_bench.py [--filler-mib N] [--keep]

Starts two sandbox nodes (prefix vllmops-bench, Docker installed by the
docker role), builds the serving test image padded past 1 GiB and saves it
as a `docker save` archive on this machine (the controller), then runs the
image role (image_source=archive, probe off) three times:
  one-node   copy to node1 only (--limit node1)
  two-nodes  image removed from node1, copy to node1 and node2 in parallel
  re-run     both nodes have it: bytes the source served and bytes the
             nodes received on their network interfaces (SSH included)
and prints wall times, MB/s per node and the two-node/one-node ratio.
The nodes are removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
sys.path.insert(0, str(ROOT / "tests/sandbox/serving"))

import nodes  # noqa: E402
import serving_image  # noqa: E402

PREFIX = "vllmops-bench"
IMAGE = "vllmops-bench/serving-big:1"
PLAYBOOK = """\
- name: Docker on the nodes
  hosts: vllm_nodes
  become: true
  tags: [docker]
  roles: [vllmops.cluster.docker]
- name: The image on the nodes
  hosts: vllm_nodes
  become: true
  gather_facts: false
  tags: [image]
  roles: [vllmops.cluster.image]
"""


def playbook(inventory: Path, book: Path, *args: str) -> tuple[float, dict]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    started = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), str(book), *args],
                          capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"ansible-playbook failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return elapsed, json.loads(proc.stdout)


def task_results(report: dict, name: str) -> dict:
    for play in report["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].split(" : ")[-1] == name:  # role tasks may carry the role's name
                return task["hosts"]
    return {}


def rx_bytes(name: str) -> int:
    out = nodes.run(["docker", "exec", name, "sh", "-c", "cat /sys/class/net/*/statistics/rx_bytes"]).stdout
    return sum(int(x) for x in out.split())


def remove_image(name: str) -> None:
    nodes.run(["docker", "exec", name, "docker", "image", "rm", "--force", IMAGE], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filler-mib", type=int, default=700, help="incompressible MiB added to the ~500 MB image")
    parser.add_argument("--keep", action="store_true", help="leave the bench nodes running")
    args = parser.parse_args()

    nodes.ensure_docker()
    base = serving_image.build()
    if not nodes.image_exists(IMAGE):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "Dockerfile").write_text(f"FROM {base}\nRUN head -c {args.filler_mib * 1048576} /dev/urandom > /opt/filler.bin\n")
            nodes.run(["docker", "build", "--quiet", "-t", IMAGE, tmp])
    archive = serving_image.ARCHIVES / f"bench-{nodes.run(['docker', 'image', 'inspect', '-f', '{{.Id}}', IMAGE]).stdout.strip()[7:19]}.tar"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        with open(archive, "wb") as out:
            subprocess.run(["docker", "save", IMAGE], stdout=out, check=True)
    size = archive.stat().st_size
    print(f"image {IMAGE}: archive {size / 1e9:.2f} GB", flush=True)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            inventory, book = Path(tmp) / "hosts.yml", Path(tmp) / "bench.yml"
            cluster = nodes.up(PREFIX, 2, [f"{PREFIX}-mgmt", f"{PREFIX}-cluster=10.55.0.0/24"])
            nodes.write_inventory(inventory, cluster, [f"image_name={IMAGE}", f"image_archive={archive}", "image_probe=false",
                                                       "docker_install_source=distro"])
            book.write_text(PLAYBOOK)
            names = [n["name"] for n in cluster["nodes"]]
            playbook(inventory, book, "--tags", "docker")
            for name in names:
                remove_image(name)

            one_s, one = playbook(inventory, book, "--tags", "image", "--limit", names[0])
            remove_image(names[0])
            two_s, two = playbook(inventory, book, "--tags", "image")
            before = {name: rx_bytes(name) for name in names}
            rerun_s, rerun = playbook(inventory, book, "--tags", "image")
            received = {name: rx_bytes(name) - before[name] for name in names}

            def copies(report):
                return {host: r for host, r in task_results(report, "Wait for the copies to finish").items() if not r.get("skipped")}

            served = task_results(rerun, "Serve the image from " + str(archive))
            print(f"\none node : {one_s:6.1f} s wall (playbook)  " + "  ".join(
                f"{h}: {r['bytes'] / 1e6:.0f} MB in {r['seconds']:.1f} s = {r['bytes'] / 1e6 / r['seconds']:.1f} MB/s" for h, r in copies(one).items()))
            print(f"two nodes: {two_s:6.1f} s wall (playbook)  " + "  ".join(
                f"{h}: {r['bytes'] / 1e6:.0f} MB in {r['seconds']:.1f} s = {r['bytes'] / 1e6 / r['seconds']:.1f} MB/s" for h, r in copies(two).items()))
            print(f"two/one wall ratio: {two_s / one_s:.2f}  (1.00 = perfectly parallel, 2.00 = serial)")
            print(f"re-run   : {rerun_s:6.1f} s wall; image bytes served: "
                  f"{sum(sum(r.get('served', [])) for r in served.values() if not r.get('skipped'))}; "
                  f"copied to: {[h for h, r in copies(rerun).items()]}; bytes received on the nodes' interfaces "
                  f"(SSH included): " + ", ".join(f"{n}={b / 1e3:.0f} kB" for n, b in received.items()))
    finally:
        if not args.keep:
            nodes.down(PREFIX)
    return 0


if __name__ == "__main__":
    sys.exit(main())
