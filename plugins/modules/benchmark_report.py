#!/usr/bin/python
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: benchmark_report
short_description: Write a vLLM benchmark sweep as JSON, a Markdown table and a plot, compared with the previous one
version_added: 0.2.0
description:
  - Turns the result JSON of C(vllm bench serve --save-result), one per concurrency, into one row per concurrency
    (output tok/s, requests/s, TTFT and inter-token latency, median and p99) and writes three files into O(dest),
    named C(<UTC time>Z-<model>) (C(<UTC time>Z-<service>) when O(stamp) names a service) - C(.json) (the rows and
    O(stamp)), C(.md) (the table) and C(.png) (output tok/s and median TTFT against concurrency).
  - The table gives, in parentheses, the change against the newest earlier result in O(dest) at the same
    concurrency (the plot draws that result dashed), and names what differs between the two (image, vLLM version,
    flags, nodes, backend, replicas, layout, lengths).
  - Also returns one line (RV(summary)) with the output tok/s at each concurrency, to set several sweeps (the services
    of one run) side by side.
  - Runs on the controller (the playbook delegates it to C(localhost)). The plot needs C(matplotlib) there; without
    it the JSON and the table are written and a warning says so.
  - Used by the C(vllmops.cluster.benchmark) role (C(playbooks/benchmark.yml)).
options:
  dest:
    description: The results directory; created (mode 0755) when missing.
    type: path
    required: true
  results:
    description: One item per concurrency, C(concurrency) and C(result) (the parsed result JSON).
    type: list
    elements: dict
    required: true
  failed:
    description:
      - Levels whose client failed, each with C(item) (the concurrency), C(rc) and C(stderr); C(rc) 124 is a timeout.
        They have no row, and the report names them among RV(problems).
    type: list
    elements: dict
    default: []
  stamp:
    description:
      - What was measured, recorded with the rows. C(time) (ISO 8601, UTC) is required; the role also gives
        C(model), C(model_path), C(image), C(image_id), C(vllm_version), C(backend), C(nodes), C(gpus),
        C(tensor_parallel_size), C(pipeline_parallel_size), C(serve_args) (the arguments vLLM runs with), C(url),
        C(input_len), C(output_len), C(label).
      - For one service of several (C(vllmops_services)) also C(service) (its name, the model name it serves),
        C(revision), C(replicas) (how many) and C(layout) (C(tensor_parallel_size), C(pipeline_parallel_size),
        C(data_parallel_size), C(data_parallel_size_local), C(enable_expert_parallel)); the report names the service.
    type: dict
    required: true
author:
  - vllmops.cluster developers (@vllmops)
"""

EXAMPLES = r"""
- name: Write the results on the controller
  vllmops.cluster.benchmark_report:
    dest: ~/.vllmops/benchmarks/spark
    results: "{{ sweep }}"
    stamp: {time: "2026-12-02T10:00:00Z", model: qwen, image_id: "sha256:..."}
  delegate_to: localhost
"""

RETURN = r"""
json:
  description: Path of the JSON document (C(schema) vllmops.benchmark/1, C(stamp), C(rows), C(problems)).
  returned: always
  type: str
markdown:
  description: Path of the Markdown table.
  returned: always
  type: str
png:
  description: Path of the plot; null without matplotlib on the controller.
  returned: always
  type: str
table:
  description: The Markdown report's text.
  returned: always
  type: str
rows:
  description: One per concurrency, ordered.
  returned: always
  type: list
  elements: dict
previous:
  description: The earlier result the table compares with; null when there is none.
  returned: always
  type: str
summary:
  description: One line, what was measured (the service, its replicas and layout) and its output tok/s per concurrency.
  returned: always
  type: str
  sample: "chat (2 replicas x TP 1 x PP 1 x DP 1): output tok/s at concurrency 1: 41.9, 16: 508.9"
problems:
  description: Levels whose client failed, where requests failed or where none completed.
  returned: always
  type: list
  elements: str
"""

import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.vllmops.cluster.plugins.module_utils import benchmark

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


def plot(rows: list[dict], stamp: dict, path: str, before: dict | None) -> None:
    levels = [level["concurrency"] for level in rows]
    earlier = sorted((before or {}).get("rows") or [], key=lambda level: level["concurrency"])
    figure, (tokens, ttft) = pyplot.subplots(1, 2, figsize=(10, 4))
    figure.suptitle(f"{benchmark.measured(stamp)} - vLLM {stamp.get('vllm_version') or '?'}, "
                    f"{len(stamp.get('nodes') or [])} node(s), {stamp.get('backend')} - {stamp.get('time', '')[:16]}")
    for axes, key, label in ((tokens, "output_tok_s", "output tokens/s"), (ttft, "ttft_median_ms", "median TTFT (ms)")):
        axes.plot(levels, [level[key] or 0 for level in rows], marker="o", label="this run")
        if earlier:
            axes.plot([level["concurrency"] for level in earlier], [level.get(key) or 0 for level in earlier],
                      marker="x", linestyle="--", color="gray", label=f"previous ({before['stamp'].get('time', '')[:16]})")
            axes.legend(fontsize="small")
        axes.set_xscale("log", base=2)
        ticks = sorted(set(levels) | {level["concurrency"] for level in earlier})
        axes.set_xticks(ticks, [str(level) for level in ticks])
        axes.set_xlabel("concurrent requests")
        axes.set_ylabel(label)
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    pyplot.close(figure)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "results": {"type": "list", "elements": "dict", "required": True},
            "failed": {"type": "list", "elements": "dict", "default": []},
            "stamp": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    dest, stamp = module.params["dest"], module.params["stamp"]
    if not stamp.get("time"):
        module.fail_json(msg="stamp.time is required (ISO 8601, UTC)")
    try:
        rows = benchmark.rows(module.params["results"])
    except (benchmark.BenchmarkError, KeyError, TypeError, ValueError) as err:
        module.fail_json(msg=f"Cannot read the benchmark's results: {err}")
    stem = os.path.join(dest, benchmark.file_stem(stamp))
    paths = {"json": stem + ".json", "markdown": stem + ".md", "png": stem + ".png" if HAS_MATPLOTLIB else None}
    failed = [{"concurrency": level.get("item"), "rc": level.get("rc"),
               "error": (str(level.get("stderr") or "").strip().splitlines() or [""])[-1]}
              for level in module.params["failed"]]
    document = {"schema": benchmark.SCHEMA, "stamp": stamp, "rows": rows, "problems": benchmark.problems(rows, failed)}
    before = benchmark.previous(dest, exclude=paths["json"])
    table = benchmark.markdown(document, before)
    result = {"changed": not module.check_mode, **paths, "table": table, "rows": rows, "summary": benchmark.summary(document),
              "previous": before["path"] if before else None, "problems": document["problems"]}
    if not HAS_MATPLOTLIB and rows:
        module.warn(f"No plot: {missing_required_lib('matplotlib')} (on the controller)")
    if module.check_mode:
        module.exit_json(**result)
    os.makedirs(dest, mode=0o755, exist_ok=True)
    with open(paths["json"], "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
    with open(paths["markdown"], "w", encoding="utf-8") as handle:
        handle.write(table)
    if HAS_MATPLOTLIB and rows:
        plot(rows, stamp, paths["png"], before)
    elif not rows:
        paths["png"] = result["png"] = None
    module.exit_json(**result)


if __name__ == "__main__":
    main()
