#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: network_report
short_description: Judge the cluster link's measured bandwidth against its speed, and keep it beside the benchmarks
version_added: 0.2.0
description:
  - Takes the all-reduce measurements of the C(vllmops.cluster.network_check) role (one per pair of nodes, and one
    for the whole ring of three or more) and compares each bus bandwidth with the link's speed - the slowest
    member's, from sysfs or the operator - giving the ratio, and the groups below O(min_ratio).
  - Writes three files into O(dest), named C(<UTC time>Z-network) - C(.json) (the rows and O(stamp)), C(.md) (the
    table, against the newest earlier check there) and C(.png) (each link's bus bandwidth over every check kept
    there, the link's speed dashed). The plot needs C(matplotlib) on the controller; without it a warning says so.
  - Runs on the controller (the role delegates it to C(localhost)). It does not fail on a slow link - RV(problems)
    names them and the role fails after the results are kept.
options:
  dest:
    description: The results directory (the benchmark's); created (mode 0755) when missing.
    type: path
    required: true
  measurements:
    description: One item per group - C(nodes) (inventory names, rank 0 first) and C(result) (rank 0's JSON line).
    type: list
    elements: dict
    required: true
  link_mbps:
    description: Each node's link speed in Mb/s; 0 or missing when unknown (the group is then not judged).
    type: dict
    default: {}
  min_ratio:
    description: The smallest bus bandwidth, as a share of the link's speed, that passes.
    type: float
    default: 0.5
  stamp:
    description: What was measured - C(time) (ISO 8601, UTC) is required; the role also gives C(image), C(bytes),
      C(nodes), C(interfaces).
    type: dict
    required: true
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Keep and judge the measurements
  vllmops.cluster.network_report:
    dest: ~/.vllmops/benchmarks/spark
    measurements: [{nodes: [spark-1, spark-2], result: {busbw_gbit: 181.2, backend: nccl}}]
    link_mbps: {spark-1: 200000, spark-2: 200000}
    stamp: {time: "2026-12-05T10:00:00Z"}
  delegate_to: localhost
"""

RETURN = r"""
rows:
  description: One per group - C(link), C(nodes), C(backend), C(bytes), C(iterations), C(busbw_gbit),
    C(algbw_gbit), C(link_gbit) (null when unknown), C(ratio) and C(slow).
  returned: success
  type: list
  elements: dict
problems:
  description: One sentence per group below O(min_ratio), naming its nodes.
  returned: success
  type: list
  elements: str
table:
  description: The Markdown table.
  returned: success
  type: str
json:
  description: Path of the JSON results.
  returned: success
  type: str
png:
  description: Path of the plot; null without matplotlib on the controller.
  returned: success
  type: str
"""

import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.vllmops.cluster.plugins.module_utils import network_check

try:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
except ImportError:
    HAS_MATPLOTLIB = False
    MATPLOTLIB_ERROR = traceback.format_exc()
else:
    HAS_MATPLOTLIB = True
    MATPLOTLIB_ERROR = None


def plot(documents: list[dict], path: str) -> None:
    """Each link's bus bandwidth over the checks kept (oldest first), its speed dashed."""
    figure, axes = pyplot.subplots(figsize=(8, 4))
    times = [document["stamp"].get("time", "").replace("T", " ")[:19] for document in documents]
    links = sorted({row["link"] for document in documents for row in document["rows"]})
    for link in links:
        points = [(i, row) for i, document in enumerate(documents) for row in document["rows"] if row["link"] == link]
        line = axes.plot([point[0] for point in points], [point[1]["busbw_gbit"] for point in points], marker="o",
                         label=link)[0]
        speeds = {point[1]["link_gbit"] for point in points if point[1]["link_gbit"]}
        for speed in speeds:
            axes.axhline(speed, linestyle="--", color=line.get_color(), alpha=0.5)
    axes.set_xticks(range(len(times)), times, rotation=30, ha="right", fontsize="small")
    axes.set_ylabel("bus bandwidth (Gbit/s); link speed dashed")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    axes.set_title("Cluster link: all-reduce bus bandwidth per check")
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    pyplot.close(figure)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "measurements": {"type": "list", "elements": "dict", "required": True},
            "link_mbps": {"type": "dict", "default": {}},
            "min_ratio": {"type": "float", "default": 0.5},
            "stamp": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["stamp"].get("time"):
        module.fail_json(msg="stamp.time is required (ISO 8601, UTC)")
    try:
        rows = network_check.rows(params["measurements"], params["link_mbps"], params["min_ratio"])
    except (network_check.NetworkCheckError, KeyError, TypeError, ValueError) as err:
        module.fail_json(msg=f"Cannot read the measurements: {err}")
    stem = os.path.join(params["dest"], network_check.file_stem(params["stamp"]["time"]))
    paths = {"json": stem + ".json", "markdown": stem + ".md", "png": stem + ".png" if HAS_MATPLOTLIB else None}
    document = {"schema": network_check.SCHEMA, "stamp": params["stamp"], "min_ratio": params["min_ratio"],
                "rows": rows, "problems": network_check.problems(rows, params["min_ratio"])}
    history = network_check.earlier(params["dest"], exclude=paths["json"])
    table = network_check.markdown(document, history[-1] if history else None)
    for warning in network_check.unknown_speeds(rows):
        module.warn(warning)
    result = {"changed": not module.check_mode, **paths, "table": table, "rows": rows, "problems": document["problems"]}
    if not HAS_MATPLOTLIB:
        module.warn(f"No plot: {missing_required_lib('matplotlib')} (on the controller)")
    if module.check_mode:
        module.exit_json(**result)
    os.makedirs(params["dest"], mode=0o755, exist_ok=True)
    with open(paths["json"], "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
    with open(paths["markdown"], "w", encoding="utf-8") as handle:
        handle.write(table)
    if HAS_MATPLOTLIB:
        plot([*history, document], paths["png"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
