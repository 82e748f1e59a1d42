"""vLLM over Ray with its engine dead behind a healthy port: the stand-in's
worker process is killed inside the vLLM container, /health and /v1/models
still answer 200 and completions hang - what users report of vLLM when a
worker died. The head watchdog (vllmops-vllm-health, settings in
ray_cluster.ray_vars(): a check every 3 s with a 3 s deadline, 2 failures, at most 1
restart in 600 s) restarts vLLM on the head, records what it saw and did,
and status.yml shows it. The same failure again, within the window: it does
not restart, says so, and status.yml says DEGRADED. The story then restarts
vLLM by hand, as the operator would, and puts the watchdog's record back."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error

import pytest
from ray_cluster import HEAD

STATE = "/var/lib/vllmops/vllm-health.json"
TIMER = "vllmops-vllm-health.timer"


def record(cluster) -> dict:
    text = cluster.on(HEAD, "cat", STATE, check=False)
    return json.loads(text) if text.startswith("{") else {}


def kill_worker(cluster) -> float:
    cluster.on(HEAD, "docker", "exec", "vllmops-vllm", "pkill", "-KILL", "-f", "VLLM::Worker_TP0")
    return time.time()


def completes(cluster, timeout: float = 3) -> bool:
    try:
        status, _ = cluster.get("/v1/completions", cluster.vars["vllm_serve_api_key"],
                                {"model": cluster.vars["vllm_serve_served_model_name"], "prompt": "hi", "max_tokens": 1},
                                timeout=timeout)
    except (urllib.error.URLError, OSError):
        return False
    return status == 200


def event_after(cluster, since: float, deadline_s: float) -> dict:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        event = record(cluster).get("last_event") or {}
        if event.get("at", 0) > since:
            return event
        time.sleep(0.5)
    journal = cluster.on(HEAD, "journalctl", "--no-pager", "--unit", "vllmops-vllm-health", "--since", f"@{int(since)}",
                         check=False)
    raise AssertionError(f"no event of the head watchdog within {deadline_s} s; its journal:\n{journal[-3000:]}")


def serving_again(cluster, since: float, deadline_s: float) -> float:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if completes(cluster):
            return time.time() - since
        time.sleep(0.5)
    raise AssertionError(f"no completion within {deadline_s} s")


def checked_ok(cluster, deadline_s: float = 60) -> dict:
    """The record once the watchdog's last check succeeded (so that failures count at once)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        state = record(cluster)
        if (state.get("last_check") or {}).get("ok") is True:
            return state
        time.sleep(0.5)
    raise AssertionError(f"the head watchdog recorded no successful check within {deadline_s} s: {record(cluster)}")


@pytest.fixture
def watchdog_record(cluster):
    """A fresh record for the story (no earlier restart in the window); the one before it is put back after."""
    before = cluster.on(HEAD, "cat", STATE, check=False)

    def write(text: str) -> None:
        cluster.on(HEAD, "systemctl", "stop", TIMER, "vllmops-vllm-health.service")
        subprocess.run(["docker", "exec", "-i", HEAD, "sh", "-c", f"cat >{STATE}" if text else f"rm -f {STATE}"],
                       input=text + "\n" if text else "", text=True, check=True, timeout=60)
        cluster.on(HEAD, "systemctl", "start", TIMER)

    write("")
    checked_ok(cluster)
    yield
    write(before)


def test_a_dead_engine_behind_a_healthy_port_is_restarted_once_then_the_limit_holds(cluster, watchdog_record):
    v = cluster.vars
    # The configured bounds: detection takes `failures` checks, each up to interval + timeout apart;
    # a restarted vLLM may take vllm_serve_ready_timeout to answer.
    detect_bound = v["vllm_serve_health_failures"] * (v["vllm_serve_health_interval"] + v["vllm_serve_health_timeout"]) \
        + v["vllm_serve_health_interval"] + 5
    recover_bound = detect_bound + v["vllm_serve_ready_timeout"]
    assert completes(cluster)
    starts = cluster.vllm_starts()

    killed = kill_worker(cluster)
    # what a user sees: the port answers, completions do not
    assert cluster.get("/health")[0] == 200 and cluster.get("/v1/models", v["vllm_serve_api_key"])[0] == 200
    assert not completes(cluster, timeout=2)
    event = event_after(cluster, killed, detect_bound)
    recovered = serving_again(cluster, killed, recover_bound)
    print(f"Ray backend (stand-in): the head watchdog restarted vLLM {event['at'] - killed:.1f} s after its worker was "
          f"killed (bound {detect_bound} s); served again {recovered:.1f} s after the kill")
    assert event["action"] == "restart", event
    assert event["check"] == {"ok": False, "what": f"completion: no answer within {v['vllm_serve_health_timeout']} s",
                              "health": 200}, event
    assert event["did"] == "restarted vllmops-vllm; vLLM joins the running Ray cluster again"
    assert cluster.vllm_starts() == starts + 1
    journal = cluster.on(HEAD, "journalctl", "--no-pager", "--output", "cat", "--unit", "vllmops-vllm-health",
                         "--since", f"@{int(killed)}")
    assert "check failed (1 of 2 in a row): completion: no answer within 3 s; /health: 200" in journal, journal
    assert "restarted vllmops-vllm; vLLM joins the running Ray cluster again (1 of at most 1 in 600 s)" in journal, journal
    end = time.monotonic() + 30  # the watchdog's own next check notes when the service answered again
    while not record(cluster)["last_event"].get("recovered_at") and time.monotonic() < end:
        time.sleep(0.5)
    status = cluster.playbook("playbooks/status.yml", as_json=False).stdout
    assert f"last event {event['time']}: saw 2 failed checks in a row" in status, status[-3000:]
    assert "did restarted vllmops-vllm; vLLM joins the running Ray cluster again; served again" in status, status[-3000:]
    assert "DEGRADED" not in status, status[-3000:]

    # the same failure within the window (once the watchdog saw the new vLLM answer): no second restart, said once
    checked_ok(cluster)
    killed = kill_worker(cluster)
    held = event_after(cluster, killed, detect_bound)
    assert held["action"] == "held", held
    assert held["did"].startswith("nothing: 1 restart(s) in the last 600 s already, the limit"), held
    time.sleep(2 * v["vllm_serve_health_interval"])
    assert cluster.vllm_starts() == starts + 1 and not completes(cluster, timeout=2)
    journal = cluster.on(HEAD, "journalctl", "--no-pager", "--output", "cat", "--unit", "vllmops-vllm-health",
                         "--since", f"@{int(killed)}")
    assert journal.count("did nothing: 1 restart(s) in the last 600 s already, the limit") == 1, journal
    status = cluster.playbook("playbooks/status.yml", as_json=False).stdout
    assert "DEGRADED: the head watchdog reached its restart limit (1 in its window) and no longer restarts vLLM" in status, \
        status[-3000:]

    # the operator's restart brings it back
    cluster.on(HEAD, "systemctl", "restart", "vllmops-vllm")
    serving_again(cluster, time.time(), v["vllm_serve_ready_timeout"])
