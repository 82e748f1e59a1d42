"""Real vLLM across the sandbox's two nodes: what an operator sees when the
service is changed, broken and healed. The tests run in order on one cluster."""

from __future__ import annotations

import re
import time

METRIC_PREFIX = "vllm:"


def test_serves_a_real_completion_from_two_ranks(sandbox):
    head, worker = sandbox.container(sandbox.head), sandbox.container(sandbox.worker)
    assert head["running"] and worker["running"]
    # rank 0 on the head serves the API; the other node runs a headless rank of the same TP group
    assert "--headless" not in head["args"] and "--headless" in worker["args"]
    for args, rank in ((head["args"], "0"), (worker["args"], "1")):
        assert args[args.index("--node-rank") + 1] == rank
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--tensor-parallel-size") + 1] == "2"
        assert args[args.index("--distributed-executor-backend") + 1] == "mp"
    done = sandbox.complete("The cluster", 8)
    assert done["usage"]["completion_tokens"] == 8
    assert done["system_fingerprint"].startswith("vllm-0.32.0-tp2")  # vLLM itself, TP 2
    status, text = sandbox.client.request("/metrics", timeout=10)  # through the proxy, with the key
    assert status == 200, text[:300]
    series = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith(METRIC_PREFIX)}
    assert "vllm:num_requests_running" in series and len(series) > 20


def test_status_shows_both_ranks(sandbox):
    run = sandbox.playbook("playbooks/status.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert re.search(rf"{sandbox.head} +head 0 .* active healthy", run.stdout), run.stdout[-3000:]
    assert re.search(rf"{sandbox.worker} +worker 1 .* active", run.stdout), run.stdout[-3000:]
    assert "served model: tiny-sandbox; mp multi-node: 2 nodes" in run.stdout
    assert "DEGRADED" not in run.stdout


def test_unknown_flag_touches_nothing(sandbox, poller):
    before = {node: sandbox.container(node) for node in sandbox.nodes}
    bad = dict(sandbox.serve_vars["vllm_serve_args"], num_scheduler_steps=8)
    with poller() as polls:
        run = sandbox.deploy(bad)
    assert run.returncode != 0
    assert "--num-scheduler-steps" in run.stdout and "0.32.0" in run.stdout
    assert polls.failed == 0 and polls.ok > 10
    assert {node: sandbox.container(node) for node in sandbox.nodes} == before


def test_one_flag_changed_restarts_each_rank_once(sandbox, poller):
    starts = {node: sandbox.starts(node) for node in sandbox.nodes}
    changed = dict(sandbox.serve_vars["vllm_serve_args"], max_num_seqs=8)
    run = sandbox.deploy(changed)
    assert run.returncode == 0, run.stdout[-3000:]
    assert {node: sandbox.starts(node) for node in sandbox.nodes} == {n: c + 1 for n, c in starts.items()}
    for node in sandbox.nodes:
        args = sandbox.container(node)["args"]
        assert args[args.index("--max-num-seqs") + 1] == "8"
    assert sandbox.complete()["choices"][0]["text"]
    # back to the inventory's configuration for the tests that follow
    assert sandbox.deploy().returncode == 0


def test_config_that_fails_in_vllm_rolls_back_every_rank(sandbox):
    units = {node: sandbox.unit(node) for node in sandbox.nodes}
    # passes every check of the image's flags, but vLLM itself refuses to start: 64 KiB of KV cache
    # cannot hold one request of max_model_len 256
    too_small = dict(sandbox.serve_vars["vllm_serve_args"], kv_cache_memory_bytes=65536)
    run = sandbox.deploy(too_small)
    assert run.returncode != 0
    assert "did not come up with the new configuration" in run.stdout
    assert "Rolled back every node to the last working configuration: healthy again" in run.stdout
    assert {node: sandbox.unit(node) for node in sandbox.nodes} == units
    for node in sandbox.nodes:
        args = sandbox.container(node)["args"]
        assert args[args.index("--kv-cache-memory-bytes") + 1] == "67108864"
    assert sandbox.complete()["choices"][0]["text"]


def _kill_and_recover(sandbox, node: str) -> tuple[float, dict]:
    old = {n: sandbox.container(n)["id"] for n in sandbox.nodes}
    sandbox.on(node, "docker", "kill", "vllmops-vllm")
    time.sleep(3)
    took = sandbox.wait_serving(deadline_s=300)
    return took, old


def test_headless_rank_killed_service_recovers(sandbox):
    took, old = _kill_and_recover(sandbox, sandbox.worker)
    print(f"served again {took:.0f} s after the headless rank was killed")
    assert sandbox.container(sandbox.worker)["id"] != old[sandbox.worker]
    # rank 0 had to meet the new rank again: it restarted too
    assert sandbox.container(sandbox.head)["id"] != old[sandbox.head]


def test_head_killed_ranks_follow_and_service_recovers(sandbox):
    took, old = _kill_and_recover(sandbox, sandbox.head)
    print(f"served again {took:.0f} s after rank 0 was killed")
    assert sandbox.container(sandbox.head)["id"] != old[sandbox.head]
    assert sandbox.container(sandbox.worker)["id"] != old[sandbox.worker]
