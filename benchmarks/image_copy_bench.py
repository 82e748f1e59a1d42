#!/usr/bin/env python3
"""The image role's copy to 1 node and to 4 nodes, side by side, with the network as the bottleneck.

    .venv/bin/python benchmarks/image_copy_bench.py [--filler-mib N] [--rate MBIT] [--keep]

Starts four sandbox nodes (prefix vllmops-bench, Docker installed by the
docker role), each with a cluster address in /etc/vllmops/cluster.env (the
nccl role's file, where the image role finds the relay addresses), builds an
image of N MiB of random bytes (FROM scratch) and saves it as a `docker save`
archive on this machine (the controller). Then every link is limited with
`tc ... tbf rate MBIT`: each node's interfaces (its uplinks) and the
controller's bridge to the nodes (its uplink), so a copy is network-bound,
not bound by the two CPU cores all nodes share here. It runs the image role
(image_source=archive, probe off) three times:
  one node    copy to node1 only (--limit node1)
  four nodes  image removed from node1, copy to node1..node4 (a chain)
  re-run      every node has it: the nodes copied to, bytes served, bytes
              the nodes received on their interfaces (SSH included)
and prints wall times, MB/s per node, the four/one ratio and the re-run's
bytes. The nodes, their volumes and networks are removed by name at the end
(also on failure) unless --keep.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from chain_bench import ChainBench, copies, nodes, playbook, task_results

BENCH = ChainBench("vllmops-bench", 4)
PREFIX, NAMES, NETWORKS = BENCH.prefix, BENCH.names, BENCH.networks
CLUSTER_SUBNET = "10.55.0.0/24"
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


def remove_image(name: str, image: str) -> None:
    nodes.run(["docker", "exec", name, "docker", "image", "rm", "--force", image], check=False)


def build_archive(filler_mib: int) -> tuple[str, Path]:
    """An image of filler_mib MiB of random bytes and its `docker save` archive (both kept for the next run)."""
    image = f"{PREFIX}/copy-filler:{filler_mib}mib"
    if not nodes.image_exists(image):
        with tempfile.TemporaryDirectory() as tmp:
            with open(Path(tmp) / "filler.bin", "wb") as out:
                for _ in range(filler_mib):
                    out.write(os.urandom(1 << 20))
            (Path(tmp) / "Dockerfile").write_text("FROM scratch\nCOPY filler.bin /filler.bin\n")
            nodes.run(["docker", "build", "--quiet", "-t", image, tmp])
    image_id = nodes.run(["docker", "image", "inspect", "-f", "{{.Id}}", image]).stdout.strip()
    archive = nodes.save_archive(image, image, nodes.CACHE_DIR / "images" / f"bench-{image_id[7:19]}.tar")
    return image, archive


def line(label: str, wall_s: float, report: dict) -> str:
    per_node = "  ".join(f"{h.removeprefix(PREFIX + '-')}: {r['bytes'] / 1e6:.0f} MB in {r['seconds']:.1f} s = "
                         f"{r['bytes'] / 1e6 / r['seconds']:.1f} MB/s (relayed {r.get('relayed_bytes', 0) / 1e6:.0f} MB)"
                         for h, r in sorted(copies(report).items()))
    return f"{label}: {wall_s:6.1f} s wall (playbook)  {per_node}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filler-mib", type=int, default=240, help="MiB of random bytes in the image")
    parser.add_argument("--rate", type=int, default=64, help="Mbit/s of every uplink (tc tbf)")
    parser.add_argument("--keep", action="store_true", help="leave the bench nodes running")
    args = parser.parse_args()

    nodes.ensure_docker()
    image, archive = build_archive(args.filler_mib)
    size = archive.stat().st_size
    print(f"image {image}: archive {size / 1e6:.0f} MB; every uplink limited to {args.rate} Mbit/s "
          f"({args.rate / 8:.1f} MB/s: one copy >= {size / (args.rate / 8 * 1e6):.0f} s)", flush=True)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            inventory, book = Path(tmp) / "hosts.yml", Path(tmp) / "bench.yml"
            cluster = nodes.up(PREFIX, len(NAMES), [NETWORKS[0], f"{NETWORKS[1]}={CLUSTER_SUBNET}"])
            nodes.write_inventory(inventory, cluster, [f"image_name={image}", f"image_archive={archive}", "image_probe=false",
                                                       "docker_install_source=distro"])
            book.write_text(PLAYBOOK)
            playbook(inventory, book, "--tags", "docker")
            BENCH.write_cluster_env(cluster)
            for name in NAMES:
                remove_image(name, image)
            BENCH.limit_links(args.rate)

            one_s, one = playbook(inventory, book, "--tags", "image", "--limit", NAMES[0])
            remove_image(NAMES[0], image)
            four_s, four = playbook(inventory, book, "--tags", "image")
            before = {name: BENCH.rx_bytes(name) for name in NAMES}
            rerun_s, rerun = playbook(inventory, book, "--tags", "image")
            received = {name: BENCH.rx_bytes(name) - before[name] for name in NAMES}

            served = task_results(rerun, "Serve the image from " + str(archive))
            copy_one = max(r["seconds"] for r in copies(one).values())
            copy_four = max(r["seconds"] for r in copies(four).values())
            print()
            print(line("one node  ", one_s, one))
            print(line("four nodes", four_s, four))
            print(f"four/one wall ratio: {four_s / one_s:.2f}; copy ratio (slowest node's copy): "
                  f"{copy_four:.1f} s / {copy_one:.1f} s = {copy_four / copy_one:.2f}  (1.00 = flat, 4.00 = one uplink for all)")
            print(f"re-run    : {rerun_s:6.1f} s wall; image bytes served: "
                  f"{sum(sum(r.get('served', [])) for r in served.values() if not r.get('skipped'))}; "
                  f"copied to: {sorted(copies(rerun))}; bytes received on the nodes' interfaces "
                  f"(SSH included): " + ", ".join(f"{n.removeprefix(PREFIX + '-')}={b / 1e3:.0f} kB" for n, b in received.items()))
    except (RuntimeError, nodes.SandboxError) as err:
        print(err, file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            BENCH.remove_everything()
    return 0


if __name__ == "__main__":
    sys.exit(main())
