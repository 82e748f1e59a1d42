"""The cluster link's bandwidth check on the sandbox (real vLLM's image: torch.distributed with Gloo on CPU). Each
node's cluster interface is limited by tc to a known rate (a token bucket on its egress, which is all an
all-reduce sends); the check, told that rate is the link's speed, must measure 50-100 % of it, and a link limited
to a tenth of it must fail, naming the pair. The limits are removed at the end."""

from __future__ import annotations

import json
import re

RATE_MBIT = 400
SMALL = {"network_check_link_mbps": RATE_MBIT, "network_check_bytes": 8 << 20, "network_check_seconds": 3}


def _interface(sandbox, node: str) -> str:
    """The node's cluster interface, as the nccl role pinned it (GLOO_SOCKET_IFNAME in cluster.env)."""
    return sandbox.on(node, "sed", "-n", "s/^GLOO_SOCKET_IFNAME=//p", "/etc/vllmops/cluster.env")


def _limit(sandbox, mbit: int) -> None:
    for node in sandbox.nodes:
        sandbox.on(node, "tc", "qdisc", "replace", "dev", _interface(sandbox, node), "root", "tbf", "rate", f"{mbit}mbit",
                   "burst", "64kb", "latency", "400ms")


def _unlimit(sandbox) -> None:
    for node in sandbox.nodes:
        sandbox.on(node, "tc", "qdisc", "del", "dev", _interface(sandbox, node), "root", check=False)


def _results(directory) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*-network.json"))]


def test_the_check_measures_the_link_and_names_a_slow_pair(sandbox, tmp_path):
    pair = f"{sandbox.head} <-> {sandbox.worker}"
    before = {node: sandbox.container(node)["id"] for node in sandbox.nodes}
    try:
        _limit(sandbox, RATE_MBIT)
        # deploy.yml -e network_check=true: measured after the image play, judged against the rate given
        run = sandbox.deploy(tags="network_check", extra={"network_check": True, **SMALL,
                                                          "network_check_results_dir": str(tmp_path)})
        assert run.returncode == 0, run.stdout[-3000:]
        [first] = _results(tmp_path)
        [row] = first["rows"]
        print(f"{pair} limited to {RATE_MBIT} Mbit/s: {row['busbw_gbit']} Gbit/s bus bandwidth, ratio {row['ratio']} "
              f"({row['iterations']} all-reduces of {row['bytes'] >> 20} MiB, {row['backend']})")
        assert (row["link"], row["backend"], row["link_gbit"]) == (pair, "gloo", RATE_MBIT / 1000)
        assert 0.5 <= row["ratio"] <= 1.0, row
        assert len(list(tmp_path.glob("*Z-network.png"))) == 1 and len(list(tmp_path.glob("*Z-network.md"))) == 1

        # a link at a tenth of its speed: the check fails, naming the pair, and keeps the measurement
        _limit(sandbox, RATE_MBIT // 10)
        run = sandbox.playbook("playbooks/network_check.yml", {**SMALL, "network_check_results_dir": str(tmp_path)})
        out = re.sub(r"\s+", " ", run.stdout)
        assert run.returncode != 0
        assert f"{pair}: " in out and f"of the link's {RATE_MBIT / 1000:g} Gbit/s, below network_check_min_ratio 0.5" in out
        [_, second] = _results(tmp_path)
        print(f"{pair} limited to {RATE_MBIT // 10} Mbit/s: {second['rows'][0]['busbw_gbit']} Gbit/s, ratio "
              f"{second['rows'][0]['ratio']}")
        assert second["rows"][0]["slow"] and second["problems"]
    finally:
        _unlimit(sandbox)
    # the check serves nothing and restarts nothing
    assert {node: sandbox.container(node)["id"] for node in sandbox.nodes} == before
    assert sandbox.healthy()
