"""What the image and model copy benchmarks share: bench nodes whose links are limited with tc, their cluster
addresses, ansible-playbook with the json callback, and the role's copy results.

A bench is `ChainBench(prefix, count)`: its node names and networks; `limit_links(rate)` shapes every node's
interfaces and the controller's bridge to them (so a copy is network-bound, not bound by the two CPU cores the
nodes share), `remove_everything()` removes the nodes, their volumes and networks and the controller's limit by
name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))

import nodes  # noqa: E402


class ChainBench:
    def __init__(self, prefix: str, count: int) -> None:
        self.prefix = prefix
        self.names = [f"{prefix}-node{i}" for i in range(1, count + 1)]
        self.networks = [f"{prefix}-mgmt", f"{prefix}-cluster"]
        self.bridges: list[str] = []

    def short(self, host: str) -> str:
        return host.removeprefix(self.prefix + "-")

    def devices(self, name: str) -> list[str]:
        return [dev for dev in nodes.run(["docker", "exec", name, "ls", "/sys/class/net"]).stdout.split() if dev != "lo"]

    def rx_bytes(self, name: str) -> int:
        """Bytes the node's interfaces received (loopback aside)."""
        paths = [f"/sys/class/net/{dev}/statistics/rx_bytes" for dev in self.devices(name)]
        return sum(int(x) for x in nodes.run(["docker", "exec", name, "cat", *paths]).stdout.split())

    def write_cluster_env(self, cluster: dict) -> None:
        """What the nccl role writes: the node's cluster address, where the copy's relays listen."""
        for node in cluster["nodes"]:
            address = node["addresses"][self.networks[1]]
            nodes.run(["docker", "exec", node["name"], "sh", "-c",
                       f"mkdir -p /etc/vllmops && printf 'VLLM_HOST_IP=%s\\n' {address} > /etc/vllmops/cluster.env"])

    def limit_links(self, rate_mbit: int) -> None:
        """tbf on every uplink a copy uses: each node's interfaces and the controller's bridge to the nodes."""
        shape = ["root", "tbf", "rate", f"{rate_mbit}mbit", "burst", "256kb", "latency", "50ms"]
        for name in self.names:
            for dev in self.devices(name):
                nodes.run(["docker", "exec", name, "tc", "qdisc", "replace", "dev", dev, *shape])
        bridge = "br-" + nodes.run(["docker", "network", "inspect", "-f", "{{.Id}}", self.networks[0]]).stdout.strip()[:12]
        nodes.run(["tc", "qdisc", "replace", "dev", bridge, *shape])
        self.bridges.append(bridge)

    def remove_everything(self) -> None:
        """The bench's containers, volumes and networks, by name; and the controller's tc limit."""
        for bridge in self.bridges:
            subprocess.run(["tc", "qdisc", "del", "dev", bridge, "root"], capture_output=True)
        subprocess.run(["docker", "rm", "-f", "-v", *self.names], capture_output=True)
        subprocess.run(["docker", "volume", "rm", *[f"{n}-docker" for n in self.names]], capture_output=True)
        subprocess.run(["docker", "network", "rm", *self.networks], capture_output=True)


def playbook(inventory: Path, book: Path, *args: str) -> tuple[float, dict]:
    """Wall seconds and the json callback's report of one ansible-playbook run; RuntimeError when it fails."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    started = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), str(book), *args],
                          capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"ansible-playbook failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    return elapsed, json.loads(proc.stdout)


def task_results(report: dict, name: str) -> dict:
    """host -> result of the task named name (role tasks may carry the role's name)."""
    for play in report["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].split(" : ")[-1] == name:
                return task["hosts"]
    return {}


def copies(report: dict) -> dict:
    """host -> the receive result, for the nodes a role copied to."""
    return {host: r for host, r in task_results(report, "Wait for the copies to finish").items() if not r.get("skipped")}
