# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Ray cluster holds, read from its head, compared with what the inventory expects."""

from __future__ import annotations

import json

# Run by the image's own Python inside the head's Ray container: connects as a
# short-lived driver and prints the node table as JSON on one line.
# A driver that cannot register (seen on a head that was a worker a moment
# ago: "auto" found the old head's GCS and ray.init waited for it forever) is
# killed by its alarm; the caller asks again.
DRIVER_DEADLINE_S = 45
_NODES_SCRIPT = """
import json, logging, signal, ray
signal.alarm({deadline})
ray.init(address={address!r}, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
print("VLLMOPS-RAY-NODES " + json.dumps(ray.nodes()))
"""


def nodes_script(address="auto"):
    """A short Ray driver that prints the node list; address is the GCS (host:port) or "auto"."""
    return _NODES_SCRIPT.format(deadline=DRIVER_DEADLINE_S, address=address)


class RayClusterError(Exception):
    pass


def parse_nodes(output):
    """The node list from NODES_SCRIPT's output (Ray may log around it)."""
    for line in reversed(output.splitlines()):
        if line.startswith("VLLMOPS-RAY-NODES "):
            raw = json.loads(line[len("VLLMOPS-RAY-NODES "):])
            return [{
                "node_id": node.get("NodeID"),
                "address": node.get("NodeManagerAddress"),
                "alive": bool(node.get("Alive")),
                "gpus": float(node.get("Resources", {}).get("GPU", 0)),
                "cpus": float(node.get("Resources", {}).get("CPU", 0)),
                "head": "node:__internal_head__" in node.get("Resources", {}),
            } for node in raw]
    raise RayClusterError("the head's Ray answered without a node table: " + (output.strip()[-400:] or "(no output)"))


def compare(nodes, expected):
    """Compare alive nodes with expected {inventory name: {address, gpus}}.

    Returns (ready, summary) where summary lists, per expected node, whether an
    alive Ray node has its address and how many GPUs it declared, plus nodes
    Ray has that the inventory does not name."""
    alive = {}
    for node in nodes:
        if node["alive"]:
            alive.setdefault(node["address"], node)
    missing, short, present = [], [], []
    for name, want in sorted(expected.items()):
        node = alive.get(want["address"])
        if node is None:
            missing.append(f"{name} ({want['address']})")
        elif node["gpus"] < want["gpus"]:
            short.append(f"{name} has {node['gpus']:g} of {want['gpus']} GPU(s)")
        else:
            present.append(name)
    known = {want["address"] for want in expected.values()}
    extra = sorted(address for address in alive if address not in known)
    summary = {
        "alive_nodes": len(alive),
        "gpus": sum(node["gpus"] for node in alive.values()),
        "expected_gpus": sum(want["gpus"] for want in expected.values()),
        "present": present,
        "missing": missing,
        "short_of_gpus": short,
        "unexpected": extra,
        "dead": sorted({node["address"] for node in nodes if not node["alive"]} - set(alive)),
    }
    return not missing and not short, summary


def describe(summary, deadline):
    parts = []
    if summary["missing"]:
        parts.append("not in the Ray cluster: " + ", ".join(summary["missing"]))
    if summary["short_of_gpus"]:
        parts.append("; ".join(summary["short_of_gpus"]))
    text = (f"after {deadline} s the Ray cluster has {summary['alive_nodes']} alive node(s) and "
            f"{summary['gpus']:g} GPU(s), expected {len(summary['present']) + len(summary['missing']) + len(summary['short_of_gpus'])} "
            f"node(s) and {summary['expected_gpus']:g} GPU(s): " + "; ".join(parts) + ". ")
    text += ("Check the missing node's Ray worker unit (`systemctl status` and `journalctl -u` on that node; "
             "`ansible-playbook playbooks/status.yml` names it): its --address must be the head's cluster address, "
             "and the GCS port and the Ray node ports must be open between the nodes.")
    return text
