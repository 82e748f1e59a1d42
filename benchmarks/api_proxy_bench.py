#!/usr/bin/env python3
"""The API proxy's cost on a completion, measured side by side on the
converged sandbox (`make sandbox` first; it is left as it was).

    .venv/bin/python benchmarks/api_proxy_bench.py [--requests 200] [--tokens 16] [--prefix vllmops-sandbox]

Both paths are measured from the head itself, so that only the proxy differs:
direct - vLLM on the head's loopback (http://127.0.0.1:8001, the key);
proxy  - the proxy (https://127.0.0.1:8000, the key, the certificate checked
against the CA). Requests alternate between the two, one at a time, in two
client styles: a kept-alive connection (an SDK's connection pool) and a new
connection per request (a TLS handshake each time through the proxy). Prints
the median and 90th percentile latency of each and the ratio proxy/direct.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from api_client import secrets_dir  # noqa: E402

# Runs on the head with its own python3 (Debian's), stdlib only.
ON_HEAD = r"""
import http.client, json, ssl, statistics, sys, time
key, requests, tokens = sys.stdin.readline().strip(), int(sys.argv[1]), int(sys.argv[2])
context = ssl.create_default_context(cafile="/etc/vllmops/api-proxy/ca.crt")
body = json.dumps({"model": "tiny-sandbox", "prompt": "The cluster", "max_tokens": tokens, "temperature": 0,
                   "ignore_eos": True})
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
def connect(path):
    return (http.client.HTTPConnection("127.0.0.1", 8001, timeout=60) if path == "direct"
            else http.client.HTTPSConnection("127.0.0.1", 8000, timeout=60, context=context))
def once(conn):
    started = time.perf_counter()
    conn.request("POST", "/v1/completions", body, headers)
    answer = conn.getresponse()
    data = answer.read()
    assert answer.status == 200 and json.loads(data)["usage"]["completion_tokens"] == tokens, (answer.status, data[:200])
    return time.perf_counter() - started
result = {}
for style in ("kept-alive", "new connection"):
    conns = {path: connect(path) for path in ("direct", "proxy")}
    for path in conns:  # warm-up
        once(conns[path])
    times = {"direct": [], "proxy": []}
    for i in range(requests):
        for path in (("direct", "proxy") if i % 2 else ("proxy", "direct")):
            if style == "new connection":
                conns[path].close()
                conns[path] = connect(path)
            times[path].append(once(conns[path]))
    result[style] = {path: {"median_ms": statistics.median(t) * 1000,
                            "p90_ms": statistics.quantiles(t, n=10)[-1] * 1000} for path, t in times.items()}
print(json.dumps(result))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="completions per path and client style")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--prefix", default="vllmops-sandbox", help="the sandbox's SANDBOX_PREFIX")
    args = parser.parse_args()
    key = (secrets_dir(ROOT / "inventories/sandbox") / "api-key").read_text().strip()
    proc = subprocess.run(["docker", "exec", "--interactive", f"{args.prefix}-node1", "python3", "-c", ON_HEAD,
                           str(args.requests), str(args.tokens)], input=key + "\n",  # the key never in argv
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    result = json.loads(proc.stdout)
    print(f"{args.requests} completions of {args.tokens} tokens per path, alternating, one at a time, on the head:")
    print(f"{'client':<16}{'direct median':>15}{'proxy median':>14}{'ratio':>8}{'direct p90':>12}{'proxy p90':>11}")
    for style, paths in result.items():
        direct, proxy = paths["direct"], paths["proxy"]
        print(f"{style:<16}{direct['median_ms']:>12.1f} ms{proxy['median_ms']:>11.1f} ms"
              f"{proxy['median_ms'] / direct['median_ms']:>8.3f}{direct['p90_ms']:>9.1f} ms{proxy['p90_ms']:>8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
