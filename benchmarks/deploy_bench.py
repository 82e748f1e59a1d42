#!/usr/bin/env python3
"""deploy.yml's own cost, measured side by side in one run (these machines are noisy).

    .venv/bin/python benchmarks/deploy_bench.py [--rounds N] [--keep]

1. fresh sandbox -> healthy endpoint: `make sandbox-down`, then `make sandbox`
   (node containers, Docker, toolkit, cluster env, image copy, Ray, vLLM and
   its readiness check), timed until the endpoint's /health answers 200.
   Locally built images and downloads are cached and not counted.
2. on that converged 2-node sandbox, interleaved round by round:
     noop-deploy  ansible-playbook deploy.yml -i inventories/sandbox (changes nothing)
     ping         a one-task ansible.builtin.ping play on the same hosts
   and prints medians and their ratio.
The sandbox is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from api_client import ApiClient, secrets_dir  # noqa: E402

ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
PING = "- name: One task\n  hosts: vllm_nodes\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"


def timed(argv: list[str]) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def endpoint() -> str:
    line = subprocess.run([str(ROOT / ".venv/bin/python"), "tests/sandbox/endpoint.py", "inventories/sandbox"],
                          cwd=ROOT, env=ENV, capture_output=True, text=True).stdout
    return line.split()[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = parser.parse_args()

    timed(["make", "sandbox-down"])
    fresh_s, out = timed(["make", "sandbox"])
    url = endpoint()
    assert ApiClient(url, cafile=secrets_dir(ROOT / "inventories/sandbox") / "api-ca.crt").healthy(timeout=10)
    print(f"fresh sandbox -> healthy endpoint {url}: {fresh_s:.1f} s", flush=True)

    noop, ping = [], []
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as book:
            book.write(PING)
        for _ in range(args.rounds):
            seconds, out = timed(["ansible-playbook", "deploy.yml", "-i", "inventories/sandbox"])
            if any(int(n) for n in re.findall(r"changed=(\d+)", out.split("PLAY RECAP")[-1])):
                sys.exit("the no-op deploy changed something:\n" + out.split("PLAY RECAP")[-1])
            noop.append(seconds)
            ping.append(timed(["ansible-playbook", book.name, "-i", "inventories/sandbox"])[0])
        os.unlink(book.name)
    finally:
        if not args.keep:
            timed(["make", "sandbox-down"])
    print(f"no-op deploy.yml : median {statistics.median(noop):6.1f} s  ({', '.join(f'{x:.1f}' for x in noop)})")
    print(f"one-task ping    : median {statistics.median(ping):6.1f} s  ({', '.join(f'{x:.1f}' for x in ping)})")
    print(f"ratio            : {statistics.median(noop) / statistics.median(ping):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
