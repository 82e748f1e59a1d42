# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster link's bandwidth check (role network_check): which groups of nodes are measured, how each
measurement compares with the link's speed, and the results kept on the controller beside the benchmark's.

Each group runs an all-reduce (torch.distributed in the serving image: NCCL on GPUs, Gloo on CPU); its bus
bandwidth (nccl-tests' busbw, the figure comparable with the link's speed whatever the number of ranks) is judged
against the slowest member's link speed (sysfs, or network_check_link_mbps).
"""

from __future__ import annotations

import os
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import read_documents

SCHEMA = "vllmops.network-check/1"


class NetworkCheckError(Exception):
    pass


def groups(nodes: list[str], pairs: bool = True) -> list[list[str]]:
    """Every pair of nodes (each link on its own), then the whole ring when it is more than a pair."""
    found = [[a, b] for i, a in enumerate(nodes) for b in nodes[i + 1:]] if pairs else []
    if len(nodes) > 2 or not found:
        found.append(list(nodes))
    return found


def label(nodes: list[str]) -> str:
    return " <-> ".join(nodes) if len(nodes) == 2 else "ring of " + ", ".join(nodes)


def rows(measurements: list[dict], link_mbps: dict, min_ratio: float) -> list[dict]:
    """measurements: [{nodes, result (rank 0's JSON line)}]; link_mbps: node -> its link's speed (Mb/s, 0 unknown)."""
    found = []
    for measured in measurements:
        nodes, result = list(measured["nodes"]), measured.get("result") or {}
        if "busbw_gbit" not in result:
            raise NetworkCheckError(f"{label(nodes)}: no result ({measured.get('error') or result})")
        speeds = [int(link_mbps.get(node) or 0) for node in nodes]
        link_gbit = min(speeds) / 1000 if all(speeds) else None
        ratio = round(result["busbw_gbit"] / link_gbit, 3) if link_gbit else None
        found.append({"link": label(nodes), "nodes": nodes, "backend": result.get("backend"), "bytes": result.get("bytes"),
                      "iterations": result.get("iterations"), "busbw_gbit": result["busbw_gbit"],
                      "algbw_gbit": result.get("algbw_gbit"), "link_gbit": link_gbit, "ratio": ratio,
                      "slow": ratio is not None and ratio < min_ratio})
    return found


def problems(table: list[dict], min_ratio: float) -> list[str]:
    return [f"{row['link']}: {row['busbw_gbit']:g} Gbit/s of bus bandwidth, {row['ratio']:.0%} of the link's "
            f"{row['link_gbit']:g} Gbit/s, below network_check_min_ratio {min_ratio:g}. Look at that link: its MTU, "
            "its cable, both halves of a Spark's port up (the nccl role's warnings), NCCL's transport "
            "(NCCL_DEBUG=INFO in nccl_env shows NET/IB or NET/Socket)"
            for row in table if row["slow"]]


def unknown_speeds(table: list[dict]) -> list[str]:
    return [f"{row['link']}: the link's speed is unknown (sysfs reports none: a virtual or down interface); set "
            "network_check_link_mbps to judge it" for row in table if row["link_gbit"] is None]


def file_stem(time: str) -> str:
    return re.sub(r"[^0-9T]", "", time.split(".")[0])[:15] + "Z-network"


def earlier(directory: str, exclude: str = "") -> list[dict]:
    """The earlier checks kept in directory, oldest first."""
    found = [dict(document, path=path) for path, document in read_documents(directory, SCHEMA, "-network.json", exclude)]
    return sorted(found, key=lambda document: document["stamp"].get("time", ""))


def markdown(document: dict, before: dict | None) -> str:
    stamp = document["stamp"]
    lines = [f"# Cluster link bandwidth - {stamp.get('time', '')}", "",
             f"Image {stamp.get('image') or '?'}, {stamp.get('bytes', 0) / 2**20:g} MiB all-reduced, "
             f"network_check_min_ratio {document['min_ratio']:g}.", "",
             "| link | backend | bus bandwidth (Gbit/s) | link (Gbit/s) | ratio | before |",
             "|---|---|---:|---:|---:|---:|"]
    previous = {row["link"]: row for row in (before or {}).get("rows", [])}
    for row in document["rows"]:
        was = previous.get(row["link"], {}).get("busbw_gbit")
        lines.append(f"| {row['link']} | {row['backend']} | {row['busbw_gbit']:g} | "
                     f"{'?' if row['link_gbit'] is None else format(row['link_gbit'], 'g')} | "
                     f"{'?' if row['ratio'] is None else format(row['ratio'], '.0%')}{' (slow)' if row['slow'] else ''} | "
                     f"{'' if was is None else format(was, 'g')} |")
    if before:
        lines += ["", f"Before: {before['stamp'].get('time', '')} ({os.path.basename(before.get('path', ''))})."]
    for problem in document["problems"]:
        lines += ["", f"- {problem}"]
    return "\n".join(lines) + "\n"
