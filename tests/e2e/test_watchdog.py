"""The head watchdog (vllmops-vllm-health) on real vLLM: a process of a rank
killed or frozen inside its container, the container itself (PID 1) left
alone, so that vLLM's port stays up.

What real vLLM 0.32 does here (measured in the sandbox): an engine process
that dies (EngineCore on rank 0, or the headless rank's worker) fails the
requests in flight at once (HTTP 500) and rank 0's API server exits within
seconds - systemd and the rank watchdogs bring the ranks back, and the head
watchdog must not add a restart of its own. A worker that hangs (stopped
here with SIGSTOP) is the case only the head watchdog catches: /health
answers 200, /v1/completions never does, every TCP connection stays up. It
restarts rank 0; the headless rank's watchdog sees its connections to rank
0 gone and restarts it too, and the two ranks meet again.

Runs after the other e2e files and leaves the sandbox serving as the
inventory describes it. The sandbox's settings (inventories/sandbox): a
check every 5 s with a 5 s deadline, 3 failures in a row."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import datetime

from conftest import INVENTORY

STATE = "/var/lib/vllmops/vllm-health.json"
SERVE = __import__("yaml").safe_load((INVENTORY / "group_vars/vllm_nodes/vllm_serve.yml").read_text())
# The configured bounds: `failures` checks, each at most interval + timeout apart (plus the timer's
# accuracy), then a restarted vLLM has vllm_serve_ready_timeout to answer.
DETECT_BOUND = SERVE["vllm_serve_health_failures"] * (SERVE["vllm_serve_health_interval"] + SERVE["vllm_serve_health_timeout"]) \
    + SERVE["vllm_serve_health_interval"] + 5
RECOVER_BOUND = DETECT_BOUND + SERVE["vllm_serve_ready_timeout"]


def record(sandbox) -> dict:
    text = sandbox.on(sandbox.head, "cat", STATE, check=False)
    return json.loads(text) if text.startswith("{") else {}


def completes(sandbox, timeout: float = 3) -> int | str:
    """The status of a one-token completion through the API (the proxy), or why there was none."""
    try:
        return sandbox.client.request("/v1/completions", {"model": "tiny-sandbox", "prompt": "Hello", "max_tokens": 1},
                                      timeout=timeout)[0]
    except (urllib.error.URLError, OSError) as err:
        return type(getattr(err, "reason", err)).__name__


def watched(sandbox, deadline_s: float = 60) -> dict:
    """The record once the head watchdog saw the running rank 0 answer (failures then count at once)."""
    end = time.monotonic() + deadline_s
    run = sandbox.on(sandbox.head, "systemctl", "show", "--property=InvocationID", "--value", "vllmops-vllm")
    while time.monotonic() < end:
        state = record(sandbox)
        if state.get("run_id") == run and state.get("answered_in_run"):
            return state
        time.sleep(1)
    raise AssertionError(f"the head watchdog saw no answer of rank 0 within {deadline_s} s: {record(sandbox)}")


def signal_process(sandbox, node: str, signal: str, name: str) -> float:
    """Send a signal to one of vLLM's processes inside the node's vLLM container (not its PID 1)."""
    pids = sandbox.on(node, "docker", "exec", "vllmops-vllm", "pgrep", "--full", f"^{name}").split()
    assert len(pids) == 1 and pids[0] != "1", f"{name} in the vLLM container on {node}: {pids}"
    sandbox.on(node, "docker", "exec", "vllmops-vllm", "kill", f"-{signal}", pids[0])
    return time.time()


def started(sandbox, node: str) -> datetime:
    stamp = sandbox.container(node)["started"]  # 2026-12-01T21:03:49.123456789Z
    return datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00")


def serving_again(sandbox, since: float) -> float:
    end = time.monotonic() + RECOVER_BOUND
    while time.monotonic() < end:
        if completes(sandbox, timeout=10) == 200:
            return time.time() - since
        time.sleep(1)
    logs = {node: sandbox.on(node, "journalctl", "--no-pager", "--output", "short-precise", "--since", f"@{int(since) - 5}",
                             "--unit", "vllmops-vllm", "--unit", "vllmops-vllm-watchdog", "--unit", "vllmops-vllm-health",
                             check=False)[-12000:] for node in sandbox.nodes}
    raise AssertionError(f"no completion within {RECOVER_BOUND} s; the units' journals since then:\n"
                         + "\n".join(f"--- {node}\n{text}" for node, text in logs.items()))


def test_the_head_watchdog_runs_on_the_head_only_without_the_key_in_its_unit(sandbox):
    assert sandbox.active(sandbox.head, "vllmops-vllm-health.timer")
    assert not sandbox.active(sandbox.worker, "vllmops-vllm-health.timer")
    unit = sandbox.unit(sandbox.head, "vllmops-vllm-health")
    assert "--url http://127.0.0.1:8001" in unit and "--env-file /etc/vllmops/vllm.env" in unit
    assert "VLLM_API_KEY" not in unit and "--api-key" not in unit


def test_a_killed_engine_process_takes_rank_0_down_and_systemd_brings_it_back_alone(sandbox):
    before = (watched(sandbox).get("last_event") or {}).get("at")
    old = {node: sandbox.container(node)["id"] for node in sandbox.nodes}
    killed = signal_process(sandbox, sandbox.head, "KILL", "VLLM::EngineCore")
    # what a client sees in the first seconds: completions fail, then rank 0's API server exits (the proxy: 502)
    seen = []
    while time.time() - killed < 8:
        seen.append((sandbox.healthy(timeout=1), completes(sandbox, timeout=1)))
        time.sleep(0.5)
    took = serving_again(sandbox, killed)
    print(f"EngineCore killed on rank 0: (/health ok, completion) in the first 8 s: {sorted(set(seen), key=str)}; rank 0 "
          f"exited, systemd and then the rank watchdog on node2 brought the ranks back: serving again {took:.0f} s after "
          f"the kill (bound {RECOVER_BOUND} s)")
    assert all(done != 200 for _health, done in seen), seen
    # rank 0's API server gone: the API proxy answers 502 Bad Gateway on every route, /health included
    assert (False, 502) in seen, seen
    assert all(sandbox.container(node)["id"] != old[node] for node in sandbox.nodes)
    # systemd restarted rank 0 (its API server exited): the head watchdog added no restart of its own
    assert (record(sandbox).get("last_event") or {}).get("at") == before, record(sandbox)


def test_a_hung_worker_behind_a_healthy_port_is_caught_and_the_ranks_restart_in_order(sandbox):
    watched(sandbox)
    old = {node: sandbox.container(node)["id"] for node in sandbox.nodes}
    stopped = signal_process(sandbox, sandbox.worker, "STOP", "VLLM::Worker_TP1")
    # what a client sees: the port answers /health, no completion ever comes
    seen = (sandbox.healthy(), completes(sandbox))
    end, event = time.monotonic() + DETECT_BOUND, {}
    while time.monotonic() < end and not event:
        event = record(sandbox).get("last_event") or {}
        event = event if event.get("at", 0) > stopped else {}
        time.sleep(0.5)
    assert event, f"no restart by the head watchdog within {DETECT_BOUND} s: {record(sandbox)}"
    took = serving_again(sandbox, stopped)
    follow = (started(sandbox, sandbox.worker) - started(sandbox, sandbox.head)).total_seconds()
    print(f"worker of rank 1 hung: (/health ok, completion) {seen}; the head watchdog restarted rank 0 "
          f"{event['at'] - stopped:.1f} s after (bound {DETECT_BOUND} s), rank 1 followed {follow:.1f} s after rank 0 "
          f"started; serving again {took:.0f} s after the hang (bound {RECOVER_BOUND} s)")

    assert seen == (True, "TimeoutError"), seen
    assert event["action"] == "restart", event
    assert event["check"] == {"ok": False, "what": f"completion: no answer within {SERVE['vllm_serve_health_timeout']} s",
                              "health": 200}, event
    assert event["did"].startswith("restarted vllmops-vllm (rank 0); the other ranks follow"), event
    # it names the failure it acted on, from rank 0's journal (a worker frozen without a word: a hang)
    print(f"the head watchdog's diagnosis: {event.get('failure_class')} - {event.get('evidence')}")
    assert event.get("failure_class") not in (None, "none", "unknown") and event.get("hint"), event
    # in rendezvous order: a new rank 0 first, then a new rank 1, restarted by its own watchdog
    assert all(sandbox.container(node)["id"] != old[node] for node in sandbox.nodes)
    assert follow > 0, follow
    since = f"@{int(stopped)}"
    head_log = sandbox.on(sandbox.head, "journalctl", "--no-pager", "--output", "cat", "--unit", "vllmops-vllm-health",
                          "--since", since)
    assert "check failed (3 of 3 in a row)" in head_log, head_log
    assert f"({event['restarts_in_window']} of at most 3 in 3600 s)" in head_log, head_log
    assert f"what vllmops-vllm logged since it started: {event['failure_class']} - " in head_log, head_log
    rank_log = sandbox.on(sandbox.worker, "journalctl", "--no-pager", "--output", "cat", "--unit", "vllmops-vllm-watchdog",
                          "--since", since)
    assert "rank 1: none of its connections to" in rank_log, rank_log

    # the head watchdog notes when the service answered again, and status.yml shows the event
    end = time.monotonic() + 30
    while not record(sandbox)["last_event"].get("recovered_at") and time.monotonic() < end:
        time.sleep(1)
    assert record(sandbox)["last_event"].get("recovered_after_s"), record(sandbox)
    run = sandbox.playbook("playbooks/status.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "head watchdog vllmops-vllm-health: timer active; last check" in run.stdout, run.stdout[-3000:]
    assert f"last event {event['time']}: saw 3 failed checks in a row" in run.stdout, run.stdout[-3000:]
    assert f"the rank's log: {event['failure_class']}" in run.stdout, run.stdout[-3000:]
    assert "did restarted vllmops-vllm (rank 0)" in run.stdout and "served again" in run.stdout, run.stdout[-3000:]
    assert "DEGRADED" not in run.stdout, run.stdout[-3000:]
