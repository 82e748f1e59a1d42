#!/usr/bin/env python3
"""What one Ansible module run costs a sandbox node, with and without the node
image's bytecode cache for AnsiballZ payloads (tests/sandbox/node/python),
measured side by side on one node of its own (`vllmops-bench-nm`, removed at
the end).

    .venv/bin/python benchmarks/node_module_bench.py [--rounds 3] [--tasks 40]

Each round runs the same play twice, the cache's .pth taken out of the node's
site-packages for one run and put back for the other (the order alternates):
`--tasks` module runs (stat, file, copy: what the roles run most) as root
through sudo, the way deploy.yml runs them. It prints the node container's CPU
(its cgroup's cpuacct.usage) per module run and the playbook's wall time, for
each run, then the medians and the ratio cached/uncached.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
import nodes  # noqa: E402

PREFIX = "vllmops-bench-nm"
NODE = f"{PREFIX}-node1"
PLAY = """
- hosts: all
  gather_facts: false
  become: true
  tasks:
    - ansible.builtin.stat:
        path: /etc/hostname
      loop: "{{{{ range({stat}) | list }}}}"
    - ansible.builtin.file:
        path: /tmp/bench
        state: directory
      loop: "{{{{ range({file}) | list }}}}"
    - ansible.builtin.copy:
        content: bench
        dest: /tmp/bench/file
      loop: "{{{{ range({copy}) | list }}}}"
"""


def node_cpu_ns(container_id: str) -> int:
    for path in (f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
                 f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat",
                 f"/sys/fs/cgroup/docker/{container_id}/cpu.stat"):
        if os.path.exists(path):
            text = Path(path).read_text()
            if path.endswith("cpuacct.usage"):
                return int(text)
            return int(dict(line.split() for line in text.splitlines())["usage_usec"]) * 1000
    raise SystemExit(f"no CPU accounting found for container {container_id}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=40)
    args = parser.parse_args()
    stat = args.tasks // 2
    file = (args.tasks - stat) // 2
    copy = args.tasks - stat - file
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        inventory, play = Path(tmp) / "hosts.yml", Path(tmp) / "play.yml"
        play.write_text(PLAY.format(stat=stat, file=file, copy=copy))
        subprocess.run([sys.executable, str(ROOT / "tests/sandbox/nodes.py"), "up", "--prefix", PREFIX, "--count", "1",
                        "--network", f"{PREFIX}-mgmt=10.93.0.0/24", "--inventory", str(inventory)],
                       check=True, stdout=subprocess.DEVNULL)
        try:
            container = nodes.run(["docker", "inspect", "-f", "{{.Id}}", NODE]).stdout.strip()
            site = nodes.run(["docker", "exec", NODE, "python3", "-c",
                              "import site; print(site.getsitepackages()[0])"]).stdout.strip()
            pth, aside = f"{site}/sandbox_zip_bytecode.pth", "/root/sandbox_zip_bytecode.pth"
            env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_HOST_KEY_CHECKING="False")
            figures: dict[str, list[tuple[float, float]]] = {"uncached": [], "cached": []}
            # one unmeasured run each way: the connection, the cache filled
            for order in [("uncached", "cached")] + [(("cached", "uncached") if r % 2 else ("uncached", "cached"))
                                                     for r in range(args.rounds)]:
                for mode in order:
                    src, dest = (aside, pth) if mode == "cached" else (pth, aside)
                    subprocess.run(["docker", "exec", NODE, "sh", "-c", f"[ ! -e {src} ] || mv {src} {dest}"],
                                   check=True)
                    before, started = node_cpu_ns(container), time.monotonic()
                    subprocess.run([str(bin_dir / "ansible-playbook"), "-i", str(inventory), str(play)], cwd=ROOT,
                                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    wall, cpu = time.monotonic() - started, (node_cpu_ns(container) - before) / 1e6 / args.tasks
                    figures[mode].append((cpu, wall))
            for mode, runs in figures.items():
                runs.pop(0)  # the warm-up
                for cpu, wall in runs:
                    print(f"{mode:9s} node CPU {cpu:6.1f} ms per module run, play {wall:5.1f} s")
            cached = statistics.median(cpu for cpu, _ in figures["cached"])
            uncached = statistics.median(cpu for cpu, _ in figures["uncached"])
            print(f"median node CPU per module run: uncached {uncached:.1f} ms, cached {cached:.1f} ms, "
                  f"ratio {cached / uncached:.2f}")
        finally:
            subprocess.run([sys.executable, str(ROOT / "tests/sandbox/nodes.py"), "down", "--prefix", PREFIX],
                           check=False, stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
