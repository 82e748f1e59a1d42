#!/usr/bin/env python3
"""Print where the sandbox serves, and whether it answers yet.

    endpoint.py INVENTORY_DIR [PORT]

The head is vllmops_head_host or the first node of the generated hosts.yml;
its management address is reachable from this machine.
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
    name, address = head(Path(argv[0]))
    url = f"http://{address}:{argv[1] if len(argv) > 1 else 8000}"
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            state = f"healthy (/health {resp.status})"
    except (urllib.error.URLError, OSError) as err:
        state = f"NOT answering ({getattr(err, 'reason', err)}): see `journalctl -u vllmops-vllm` on the head"
    print(f"sandbox endpoint: {url}  (head {name}; {state})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
