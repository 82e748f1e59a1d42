#!/usr/bin/env python3
"""What routing by model (api_proxy_services: njs reads each request's body)
adds to a request, on this machine without Docker: real nginx and njs from
Debian 12, unpacked into ~/.cache/vllmops/nginx-router, configured by the
role's own templates (tests/sandbox/router_fixture.py, shared with
tests/integration/test_api_proxy_router.py).

    .venv/bin/python benchmarks/router_latency_bench.py [--requests 400] [--concurrency 1 16]

One stand-in vLLM (a Python HTTP server answering a small completion at
once) reached three ways:
  direct  - plain http to the stand-in;
  default - the proxy as deployed today (api_proxy_services empty: one
            upstream, no njs), https with the certificate checked, the key;
  router  - the proxy routing by model (one service, the stand-in), https,
            the key, the model read from the JSON body by the router script.
Each client thread keeps its connection alive. Prints the median and 99th
percentile latency and requests per second per path and concurrency, then
what the router adds over the default proxy and over the direct path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from router_fixture import Client, Nginx, Replica, certificate, free_port, proxy_vars, render  # noqa: E402

KEY = "vllmops-router-bench-0123456789"
MODEL = "bench-model"
WARM_UP = 5  # requests per client before timing (TLS handshake, nginx's upstream connection)


def measure(make_client, body: str, requests: int, concurrency: int) -> tuple[list[float], float]:
    """Every request's latency (s) and the wall time of them all, from `concurrency` kept-alive clients."""
    clients = [make_client() for _ in range(concurrency)]
    for client in clients:
        for _ in range(WARM_UP):
            status, _ = client.request("POST", "/v1/completions", body)
            assert status == 200, status
    latencies: list[float] = []
    lock, start = threading.Lock(), threading.Barrier(concurrency + 1)

    def run(client: Client, count: int) -> None:
        mine = []
        start.wait()
        for _ in range(count):
            began = time.perf_counter()
            status, answer = client.request("POST", "/v1/completions", body)
            mine.append(time.perf_counter() - began)
            assert status == 200 and json.loads(answer)["model"] == MODEL, (status, answer[:200])
        with lock:
            latencies.extend(mine)

    shares = [requests // concurrency + (index < requests % concurrency) for index in range(concurrency)]
    threads = [threading.Thread(target=run, args=(client, share)) for client, share in zip(clients, shares, strict=True)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    for client in clients:
        client.close()
    return latencies, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per path and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--prompt-kb", type=int, default=0,
                        help="a prompt this long (KiB) besides the few words: the router parses the whole body")
    args = parser.parse_args()
    body = json.dumps({"model": MODEL, "prompt": "The cluster " + "x" * 1024 * args.prompt_kb, "max_tokens": 4,
                       "temperature": 0})
    with tempfile.TemporaryDirectory(prefix="vllmops-router-bench-") as tmp:
        directory = Path(tmp)
        cert = certificate(directory)
        stand_in = Replica(MODEL, "replica-0").start()
        ports = {"default": free_port(), "router": free_port()}
        confs = render(directory, {
            "default": proxy_vars(directory / "default", ports["default"], KEY, cert, upstream=stand_in.address),
            "router": proxy_vars(directory / "router", ports["router"], KEY, cert,
                                 [{"name": MODEL, "upstreams": [stand_in.address]}])})
        clients = {"direct": lambda: Client(stand_in.port),
                   "default": lambda: Client(ports["default"], KEY, cert[0]),
                   "router": lambda: Client(ports["router"], KEY, cert[0])}
        results: dict[tuple[str, int], dict[str, float]] = {}
        with Nginx(confs["default"], ports["default"]), Nginx(confs["router"], ports["router"]):
            for concurrency in args.concurrency:
                for path, make_client in clients.items():
                    latencies, wall = measure(make_client, body, args.requests, concurrency)
                    cuts = statistics.quantiles(latencies, n=100)
                    results[path, concurrency] = {"p50": statistics.median(latencies) * 1000, "p99": cuts[98] * 1000,
                                                  "rps": len(latencies) / wall}
        stand_in.stop()
    print(f"{args.requests} completions ({len(body)} bytes) per path and concurrency, kept-alive clients, one stand-in vLLM:")
    print(f"{'path':<9}{'clients':>8}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}")
    for (path, concurrency), figures in results.items():
        print(f"{path:<9}{concurrency:>8}{figures['p50']:>9.2f}{figures['p99']:>9.2f}{figures['rps']:>9.0f}")
    print("\nwhat the router adds (ms):")
    print(f"{'clients':>8}{'p50 vs default':>16}{'p99 vs default':>16}{'p50 vs direct':>15}{'p99 vs direct':>15}")
    for concurrency in args.concurrency:
        router, default, direct = (results[path, concurrency] for path in ("router", "default", "direct"))
        print(f"{concurrency:>8}{router['p50'] - default['p50']:>16.2f}{router['p99'] - default['p99']:>16.2f}"
              f"{router['p50'] - direct['p50']:>15.2f}{router['p99'] - direct['p99']:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
