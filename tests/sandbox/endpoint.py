#!/usr/bin/env python3
"""Print where the sandbox serves, and what it answers.

    endpoint.py INVENTORY_DIR [PORT]

The head is vllmops_head_host or the first node of the generated hosts.yml;
its management address is reachable from this machine. Besides /health it
asks /v1/models, one real completion and /metrics (vLLM's own series).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import yaml


def head(inventory: Path) -> tuple[str, str]:
    data = yaml.safe_load((inventory / "hosts.yml").read_text())
    group = data["all"]["children"]["vllm_nodes"]
    name = group.get("vars", {}).get("vllmops_head_host") or next(iter(group["hosts"]))
    return name, group["hosts"][name]["ansible_host"]


def _get(url: str, data: dict | None = None) -> tuple[int, str]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.read().decode()


def describe(url: str) -> str:
    try:
        status, _ = _get(url + "/health")
    except (urllib.error.URLError, OSError) as err:
        return f"NOT answering ({getattr(err, 'reason', err)}): see `journalctl -u vllmops-vllm` on the head"
    parts = [f"healthy (/health {status})"]
    try:
        model = json.loads(_get(url + "/v1/models")[1])["data"][0]["id"]
        done = json.loads(_get(url + "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 8})[1])
        parts.append(f"{model} completed {done['choices'][0]['text']!r} ({done['usage']['completion_tokens']} tokens)")
        series = {line.split("{")[0].split(" ")[0] for line in _get(url + "/metrics")[1].splitlines()
                  if line.startswith("vllm:")}
        parts.append(f"/metrics: {len(series)} vllm: series")
    except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError) as err:
        parts.append(f"but a completion failed: {err}")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    name, address = head(Path(argv[0]))
    url = f"http://{address}:{argv[1] if len(argv) > 1 else 8000}"
    print(f"sandbox endpoint: {url}  (head {name}; {describe(url)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
