#!/usr/bin/env python3
"""Print where the sandbox serves, and what it answers, asked as a client.

    endpoint.py INVENTORY_DIR [PORT]

The head is vllmops_head_host or the first node of the generated hosts.yml;
its management address is reachable from this machine. The API is the proxy's
(https, the certificate checked against the CA the deployment published, the
key it generated; both in vllmops_secrets_dir). Besides /health it asks
/v1/models, one real completion of every model it lists (several services:
each one) and /metrics (vLLM's own series, let through by the sandbox's
api_proxy_metrics).
"""

from __future__ import annotations

import sys
import urllib.error
from pathlib import Path

from api_client import API_PORT, ApiClient, head, secrets_dir


def describe(client: ApiClient) -> str:
    try:
        status, _ = client.request("/health", key=None)
    except (urllib.error.URLError, OSError) as err:
        return (f"NOT answering ({getattr(err, 'reason', err)}): see `journalctl -u vllmops-api-proxy -u vllmops-vllm` "
                "on the head")
    parts = [f"healthy (/health {status})"]
    try:
        # Every model the endpoint lists (several services: each one, routed by its name).
        models = [entry["id"] for entry in client.json("/v1/models")["data"]]
        for model in models:
            done = client.json("/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 8})
            parts.append(f"{model} completed {done['choices'][0]['text']!r} ({done['usage']['completion_tokens']} tokens)")
        # Through the router (several services) /metrics names a model: ?model= picks one of its replicas.
        status, text = client.request("/metrics" + (f"?model={models[0]}" if len(models) > 1 else ""))
        series = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("vllm:")}
        parts.append(f"/metrics: {len(series)} vllm: series" if status == 200 else f"/metrics: HTTP {status}")
    except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError) as err:
        parts.append(f"but a completion failed: {err}")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    inventory = Path(argv[0])
    name, _address = head(inventory)
    client = ApiClient.for_inventory(inventory, port=int(argv[1]) if len(argv) > 1 else API_PORT)
    secrets = secrets_dir(inventory)
    print(f"sandbox endpoint: {client.url}  (head {name}; key {secrets}/api-key, CA {secrets}/api-ca.crt; "
          f"{describe(client)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
