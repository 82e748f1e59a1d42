# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark playbook's results: one row per concurrency from the JSON
`vllm bench serve --save-result` writes, the stamp of what was measured, a
Markdown table that compares with the previous result, and the file names in
the results directory. Pure functions (the plot is the module's)."""

from __future__ import annotations

import os
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.json_file import read_documents

SCHEMA = "vllmops.benchmark/1"

# (row key, key in vllm bench serve's result JSON)
METRICS = (
    ("output_tok_s", "output_throughput"),
    ("total_tok_s", "total_token_throughput"),
    ("request_s", "request_throughput"),
    ("ttft_median_ms", "median_ttft_ms"),
    ("ttft_p99_ms", "p99_ttft_ms"),
    ("itl_median_ms", "median_itl_ms"),
    ("itl_p99_ms", "p99_itl_ms"),
    ("tpot_median_ms", "median_tpot_ms"),
    ("tpot_p99_ms", "p99_tpot_ms"),
)

# (column title, row key, digits) of the Markdown table.
COLUMNS = (
    ("output tok/s", "output_tok_s", 1),
    ("requests/s", "request_s", 2),
    ("TTFT median ms", "ttft_median_ms", 1),
    ("TTFT p99 ms", "ttft_p99_ms", 1),
    ("ITL median ms", "itl_median_ms", 2),
    ("ITL p99 ms", "itl_p99_ms", 2),
)


class BenchmarkError(ValueError):
    pass


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def row(result: dict, concurrency: int) -> dict:
    """One level of the sweep from vllm bench serve's result JSON."""
    if not isinstance(result, dict) or "completed" not in result:
        raise BenchmarkError(f"the result at concurrency {concurrency} is not vllm bench serve's result JSON")
    out = {
        "concurrency": int(result.get("max_concurrency") or concurrency),
        "prompts": int(result.get("num_prompts") or 0),
        "completed": int(result.get("completed") or 0),
        "failed": int(result.get("failed") or 0),
        "duration_s": _number(result.get("duration")),
        "output_tokens": int(result.get("total_output_tokens") or 0),
    }
    for key, source in METRICS:
        out[key] = _number(result.get(source))
    return out


def rows(results: list) -> list[dict]:
    """The sweep's rows, ordered by concurrency. results: [{concurrency, result}]."""
    return sorted((row(item["result"], item["concurrency"]) for item in results), key=lambda r: r["concurrency"])


def problems(sweep: list[dict], failed: list[dict] | None = None) -> list[str]:
    """What makes a sweep not a measurement: a level whose client failed (failed:
    [{concurrency, rc, error}]), requests that failed, none completed."""
    found = []
    for level in failed or []:
        what = "timed out" if level.get("rc") == 124 else f"vllm bench serve exited {level.get('rc')}"
        error = str(level.get("error") or "").strip()
        found.append(f"concurrency {level['concurrency']}: {what}{': ' + error if error else ''}")
    for level in sweep:
        if level["completed"] == 0:
            found.append(f"concurrency {level['concurrency']}: no request completed")
        elif level["failed"]:
            found.append(f"concurrency {level['concurrency']}: {level['failed']} of "
                         f"{level['completed'] + level['failed']} requests failed")
    return sorted(found, key=lambda text: int(text.split()[1].rstrip(":")))


def measured(stamp: dict) -> str:
    """What the sweep measured, in one word: the service, else the model."""
    return str(stamp.get("service") or stamp.get("model") or "model")


def file_stem(stamp: dict) -> str:
    """<UTC time>-<service or model>: sorts by time, says what was measured."""
    when = re.sub(r"[^0-9T]", "", stamp["time"].split(".")[0])[:15]
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", measured(stamp)).strip("_")[:60]
    return f"{when}Z-{model}"


def previous(directory: str, exclude: str = "") -> dict | None:
    """The newest earlier result in directory (by its stamp's time), or None."""
    found = read_documents(directory, SCHEMA, exclude=exclude)
    if not found:
        return None
    path, document = max(found, key=lambda item: (item[1]["stamp"].get("time", ""), item[0]))
    document["path"] = path
    return document


def _cell(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _change(now, before) -> str:
    if now is None or not before:
        return ""
    return f" ({(now - before) / before * 100:+.0f} %)"


def shape(stamp: dict) -> str:
    """A service's replicas and parallel sizes: 2 replicas x TP 1 x PP 1 x DP 1 (EP); "" without a service."""
    if not stamp.get("service"):
        return ""
    layout, count = stamp.get("layout") or {}, stamp.get("replicas")
    return (f"{count} replica{'' if count == 1 else 's'} x TP {layout.get('tensor_parallel_size', '?')} "
            f"x PP {layout.get('pipeline_parallel_size', '?')} x DP {layout.get('data_parallel_size', '?')}"
            + (" (EP)" if layout.get("enable_expert_parallel") else ""))


def _stamp_lines(stamp: dict) -> list[str]:
    gpus = stamp.get("gpus")
    service = [f"- service: {stamp['service']}, {shape(stamp)}"] if stamp.get("service") else []
    return [
        *service,
        f"- model: {stamp.get('model')} ({stamp.get('model_path') or '-'})",
        f"- image: {stamp.get('image')} ({str(stamp.get('image_id') or '-')[:19]}), vLLM {stamp.get('vllm_version') or '-'}",
        f"- cluster: {stamp.get('backend')} backend, {len(stamp.get('nodes') or [])} node(s) "
        f"({', '.join(stamp.get('nodes') or [])}), {gpus} GPU(s), TP {stamp.get('tensor_parallel_size')} "
        f"x PP {stamp.get('pipeline_parallel_size')}",
        "- vllm " + " ".join(str(arg) for arg in stamp.get("serve_args") or ["serve", "?"]),
        f"- load: {stamp.get('input_len')} prompt + {stamp.get('output_len')} output tokens (random), "
        f"through {stamp.get('url')}",
        f"- measured: {stamp.get('time')}{' - ' + stamp['label'] if stamp.get('label') else ''}",
    ]


def markdown(document: dict, before: dict | None) -> str:
    """The report: what was measured, one row per concurrency, and the change
    against the previous result at the same concurrency."""
    earlier = {level["concurrency"]: level for level in (before or {}).get("rows", [])}
    titles = ["concurrency"] + [column[0] for column in COLUMNS]
    lines = [f"# vLLM benchmark: {measured(document['stamp'])}", "", *_stamp_lines(document["stamp"]), ""]
    lines += ["| " + " | ".join(titles) + " |", "|" + "---:|" * len(titles)]
    for level in document["rows"]:
        old = earlier.get(level["concurrency"], {})
        cells = [str(level["concurrency"])]
        for _title, key, digits in COLUMNS:
            cells.append(_cell(level[key], digits) + _change(level[key], old.get(key)))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if before:
        lines.append(f"Changes in parentheses: against {os.path.basename(before['path'])} "
                     f"({before['stamp'].get('time')}, image {str(before['stamp'].get('image_id') or '-')[:19]}).")
        differs = [key for key in ("image_id", "vllm_version", "serve_args", "nodes", "backend", "replicas", "layout",
                                   "input_len", "output_len")
                   if before["stamp"].get(key) != document["stamp"].get(key)]
        if differs:
            lines.append(f"What differs from it: {', '.join(differs)}.")
    else:
        lines.append("No earlier result in this directory to compare with.")
    if document.get("problems"):
        lines += ["", "Problems: " + "; ".join(document["problems"]) + "."]
    return "\n".join(lines) + "\n"


def summary(document: dict) -> str:
    """One line to set beside other services' sweeps: what was measured and its output tok/s at each concurrency."""
    stamp, rows = document["stamp"], document["rows"]
    what = measured(stamp) + (f" ({shape(stamp)})" if stamp.get("service") else "")
    figures = ", ".join(f"{level['concurrency']}: {_cell(level['output_tok_s'], 1)}" for level in rows)
    line = f"{what}: output tok/s at concurrency {figures}" if rows else f"{what}: no level measured"
    problems = document.get("problems") or []
    return line + (f" - {len(problems)} problem{'' if len(problems) == 1 else 's'} (see its report)" if problems else "")
