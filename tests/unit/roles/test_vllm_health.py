"""The head watchdog's script (roles/vllm_serve/files/vllm_health.py): its decision as a table of (state, unit,
check) -> (action, what it records), and whole runs against a real HTTP server with a recording `systemctl`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "vllm_serve" / "files" / "vllm_health.py"
CFG = {"unit": "vllmops-vllm", "mode": "mp-multinode", "failures": 3, "grace": 300, "max_restarts": 2, "window": 3600}
NOW = 1_800_000_000.0
OLD = {"active": "active", "run_id": "run-1", "age": 5000.0}
YOUNG = {**OLD, "age": 20.0}
OK = {"ok": True, "took": 0.05}
HUNG = {"ok": False, "took": 10.0, "what": "completion: no answer within 10 s", "health": 200}
REFUSED = {"ok": None, "took": 0.01, "what": "completion refused: HTTP 401 {\"error\": \"Unauthorized\"}"}


@pytest.fixture(scope="module")
def health(load_script):
    return load_script("vllm_health", SCRIPT)


def run_checks(health, checks, state=None, unit=OLD, cfg=CFG, start=NOW, interval=10.0):
    """Feed checks in order, `interval` s apart: the last state and every action taken."""
    actions, lines = [], []
    for index, result in enumerate(checks):
        state, action, said = health.decide(state or {}, unit, result, start + index * interval, cfg)
        actions.append(action)
        lines += said
    return state, actions, lines


@pytest.mark.parametrize(("checks", "unit", "actions", "failures"), [
    pytest.param([OK, OK], OLD, ["", ""], 0, id="answers: nothing to do"),
    pytest.param([HUNG, HUNG], OLD, ["", ""], 2, id="two failures of three: counted, no action"),
    pytest.param([HUNG, OK, HUNG, HUNG], OLD, ["", "", "", ""], 2, id="one slow request between: the count starts again"),
    pytest.param([HUNG, HUNG, HUNG], OLD, ["", "", "restart"], 0, id="three in a row: restart"),
    pytest.param([HUNG, HUNG, HUNG], YOUNG, ["", "", ""], 0, id="loading within the grace: not counted"),
    pytest.param([OK, HUNG, HUNG, HUNG], YOUNG, ["", "", "", "restart"], 0, id="young but answered once: counted"),
    pytest.param([None, None], {**OLD, "active": "activating"}, ["", ""], 0, id="unit not running: nothing"),
    pytest.param([HUNG, REFUSED, HUNG, REFUSED, HUNG], OLD, [""] * 5, 1,
                 id="the check refused (HTTP 4xx): not an outage, and the count starts again"),
])
def test_when_it_acts(health, checks, unit, actions, failures):
    state, taken, _lines = run_checks(health, checks, unit=unit)
    assert taken == actions
    assert state["failures"] == failures


def test_a_restart_records_what_it_saw_and_did_and_when_the_service_answered_again(health):
    state, _actions, lines = run_checks(health, [OK, HUNG, HUNG, HUNG])
    event = state["last_event"]
    assert event["action"] == "restart"
    assert event["time"] == "2027-01-15T08:00:30Z" and event["failing_since"] == "2027-01-15T08:00:10Z"
    assert event["saw"] == ("3 failed checks in a row since 2027-01-15T08:00:10Z: completion: no answer within 10 s; "
                            "/health: 200")
    assert event["check"] == {"ok": False, "what": "completion: no answer within 10 s", "health": 200}
    assert event["did"] == ("restarted vllmops-vllm (rank 0); the other ranks follow through their rank watchdogs once "
                            "their connections to rank 0 are gone")
    assert lines[-1].startswith("<3>3 failed checks in a row") and lines[-1].endswith("(1 of at most 2 in 3600 s)")
    # the new rank 0 is a new run of the unit: loading, then answering
    restarted = {**YOUNG, "run_id": "run-2", "age": 5.0}
    state, actions, lines = run_checks(health, [HUNG, OK], state=state, unit=restarted, start=NOW + 60)
    assert actions == ["", ""]
    assert state["last_event"]["recovered_after_s"] == 40.0 and state["last_event"]["recovered_at"] == "2027-01-15T08:01:10Z"
    assert "the service serves again 40 s after the restart" in lines


@pytest.mark.parametrize(("mode", "did"), [
    ("ray", "restarted vllmops-vllm; vLLM joins the running Ray cluster again"),
    ("mp-single", "restarted vllmops-vllm"),
])
def test_the_restart_is_described_per_backend(health, mode, did):
    state, _actions, _lines = run_checks(health, [HUNG] * 3, cfg={**CFG, "mode": mode})
    assert state["last_event"]["did"] == did


def test_the_limit_holds_then_the_window_makes_room_again(health):
    fail3 = [HUNG] * 3
    state, actions, _ = run_checks(health, fail3 * 3)  # the outage goes on: 9 failed checks, 3 rounds
    assert actions.count("restart") == 2  # max_restarts 2, then it holds
    event = state["last_event"]
    assert event["action"] == "held" and event["restarts_in_window"] == 2
    assert event["did"].startswith("nothing: 2 restart(s) in the last 3600 s already, the limit (vllm_serve_health_max_restarts)"
                                   "; the next one is possible at 2027-01-15T09:00:20Z.")
    # still failing: it says so once, not every round
    state, actions, lines = run_checks(health, fail3, state=state, start=NOW + 100)
    assert actions == ["", "", ""] and not [line for line in lines if line.startswith("<3>")]
    assert state["last_event"]["time"] == event["time"] and "still_at" in state["last_event"]
    # an hour after the first restart, the window has room for one again
    state, actions, _ = run_checks(health, fail3, state=state, start=NOW + 3600 + 30)
    assert actions == ["", "", "restart"]


def test_no_restart_at_all_with_a_limit_of_zero(health):
    state, actions, _ = run_checks(health, [HUNG] * 3, cfg={**CFG, "max_restarts": 0})
    assert actions == ["", "", ""] and state["last_event"]["action"] == "held"
    assert "the next one" not in state["last_event"]["did"]


def test_a_state_file_from_nowhere_or_broken_starts_afresh(health, tmp_path):
    path = tmp_path / "vllm-health.json"
    assert health.load_state(str(path)) == {}
    path.write_text("{not json")
    assert health.load_state(str(path)) == {}
    health.save_state(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and oct(path.stat().st_mode & 0o777) == "0o644"


def test_the_key_comes_from_the_env_file_only(health, tmp_path):
    env = tmp_path / "vllm.env"
    env.write_text("# managed\nHF_HUB_OFFLINE=1\nVLLM_API_KEY=s3cr=et\n")
    assert health.read_api_key(str(env)) == "s3cr=et"
    assert health.read_api_key(str(tmp_path / "missing.env")) == ""
    assert health.read_api_key("") == ""


# --- whole runs: a real HTTP server, a systemctl that records what it is asked -----------------
class Api:
    """vLLM from the outside: answers, hangs, or fails completions; /health always 200."""

    def __init__(self) -> None:
        self.mode, self.seen_keys = "ok", []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body=b""):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send(200 if self.path == "/health" else 404)

            def do_POST(self):
                api.seen_keys.append(self.headers.get("Authorization"))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if api.mode == "hang":
                    time.sleep(5)
                if api.mode == "error":
                    self._send(500, b'{"error": "EngineDeadError"}')
                    return
                if api.mode == "unauthorized":
                    self._send(401, b'{"error": "Unauthorized"}')
                    return
                self._send(200, json.dumps({"choices": [{"text": "x"}], "model": body["model"]}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def api():
    server = Api()
    yield server
    server.server.shutdown()


@pytest.fixture
def node(tmp_path):
    """A PATH whose systemctl shows an active unit (active since boot) and records restarts; the env file; the state
    path. The unit is past its grace whatever the machine's uptime: watchdog_run gives --grace 0 (the grace itself is
    test_when_it_acts')."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl.calls"
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{calls}\n'
        'if [ "$1" = show ]; then\n'
        "  echo ActiveState=active; echo InvocationID=abc; echo ActiveEnterTimestampMonotonic=1\n"
        "fi\n")
    (bin_dir / "systemctl").chmod(0o755)
    env = tmp_path / "vllm.env"
    env.write_text("VLLM_API_KEY=the-key\n")
    env.chmod(0o600)
    return {"path": f"{bin_dir}:{os.environ['PATH']}", "calls": calls, "env": env, "state": tmp_path / "state.json"}


def watchdog_run(node, api, *extra):
    argv = [sys.executable, str(SCRIPT), "--url", api.url, "--model", "tiny", "--unit", "vllmops-vllm", "--mode", "ray",
            "--env-file", str(node["env"]), "--state", str(node["state"]), "--timeout", "1", "--failures", "2", "--grace", "0",
            *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, PATH=node["path"]), timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(node["state"].read_text())


def test_a_hanging_completion_behind_a_healthy_port_restarts_vllm_after_two_checks(node, api):
    out, state = watchdog_run(node, api)
    assert out == "" and state["last_check"]["ok"] is True
    assert api.seen_keys == ["Bearer the-key"]
    api.mode = "hang"
    started = time.monotonic()
    out, state = watchdog_run(node, api)
    assert time.monotonic() - started < 4  # the deadline is the run's, not the server's 5 s
    assert out.strip() == "check failed (1 of 2 in a row): completion: no answer within 1 s; /health: 200"
    assert "restart" not in node["calls"].read_text()
    out, state = watchdog_run(node, api)
    assert "restart vllmops-vllm" in node["calls"].read_text().splitlines()
    assert state["last_event"]["action"] == "restart" and state["last_event"]["check"]["health"] == 200
    assert "<3>2 failed checks in a row" in out


def test_an_error_answer_counts_too_and_the_key_never_reaches_a_command_line(node, api):
    api.mode = "error"
    for _ in range(2):
        out, state = watchdog_run(node, api)
    assert state["last_event"]["check"]["what"] == "completion: HTTP 500"
    assert "the-key" not in node["calls"].read_text() and "the-key" not in json.dumps(state) and "the-key" not in out


def test_a_closed_port_is_a_failed_check(node, api):
    url = api.url
    api.server.shutdown()
    api.server.server_close()
    node_api = type("Closed", (), {"url": url})()
    _out, state = watchdog_run(node, node_api)
    assert state["last_check"]["ok"] is False and state["failures"] == 1
    assert "refused" in state["last_check"]["what"].lower(), state["last_check"]


def test_a_refused_check_is_said_once_and_never_restarts(node, api):
    api.mode = "unauthorized"
    outs = [watchdog_run(node, api) for _ in range(3)]
    said = [line for out, _state in outs for line in out.splitlines()]
    assert said == ['<4>cannot check vLLM: completion refused: HTTP 401 {"error": "Unauthorized"} - a restart would not fix '
                    "that, none is made; check the served model name and the key in the environment file"]
    assert outs[-1][1]["last_check"] == {"ok": None, "what": 'completion refused: HTTP 401 {"error": "Unauthorized"}'}
    assert "restart" not in node["calls"].read_text()


# --- the class of the failure it acted on, from the rank's journal ----------------------------------------------
CLASSIFIER = Path(__file__).resolve().parents[3] / "plugins" / "module_utils" / "vllm_logs.py"
OOM_LOG = """INFO 12-05 10:00:01 [api_server.py:1090] Starting vLLM API server 0 on http://0.0.0.0:8001
INFO:     Application startup complete.
INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 200 OK
ERROR 12-05 10:20:13 [core.py:700] EngineCore encountered a fatal error.
ERROR 12-05 10:20:13 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
"""
SILENT_LOG = """INFO 12-05 10:00:01 [api_server.py:1090] Starting vLLM API server 0 on http://0.0.0.0:8001
INFO:     Application startup complete.
INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 200 OK
"""


def installed_run(node, api, journal: str):
    """A run of the script as the role installs it, the classifier beside it; journalctl shows `journal`."""
    home = node["state"].parent / "etc"
    home.mkdir(exist_ok=True)
    for source in (SCRIPT, CLASSIFIER):
        (home / source.name).write_text(source.read_text())
    (node["state"].parent / "journal.log").write_text(journal)
    journalctl = Path(node["path"].split(":")[0]) / "journalctl"
    journalctl.write_text(f'#!/bin/sh\necho "$*" >>{node["calls"]}.journalctl\ncat {node["state"].parent / "journal.log"}\n')
    journalctl.chmod(0o755)
    argv = [sys.executable, str(home / SCRIPT.name), "--url", api.url, "--model", "tiny", "--unit", "vllmops-vllm",
            "--mode", "mp-multinode", "--env-file", str(node["env"]), "--state", str(node["state"]), "--timeout", "1",
            "--failures", "2", "--grace", "0"]
    outs = [subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, PATH=node["path"]), timeout=30)
            for _ in range(2)]
    assert all(proc.returncode == 0 for proc in outs), outs
    return outs[-1].stdout, json.loads(node["state"].read_text())


def test_the_restart_names_the_class_of_the_failure_from_the_ranks_journal(node, api):
    api.mode = "error"
    out, state = installed_run(node, api, OOM_LOG)
    event = state["last_event"]
    assert event["action"] == "restart" and event["failure_class"] == "oom", event
    assert any("CUDA out of memory" in line for line in event["evidence"]), event
    assert event["hint"].startswith("Out of memory: lower gpu_memory_utilization")
    assert "<3>what vllmops-vllm logged since it started: oom - Out of memory" in out
    # the current run's journal only (its invocation), read before the restart
    assert "_SYSTEMD_INVOCATION_ID=abc" in Path(f"{node['calls']}.journalctl").read_text()
    # nothing written beside the script (a __pycache__ in /etc/vllmops would be drift to every deploy's check)
    assert sorted(path.name for path in (node["state"].parent / "etc").iterdir()) == ["vllm_health.py", "vllm_logs.py"]


def test_a_server_that_logs_nothing_since_it_started_is_named_a_hang(node, api):
    api.mode = "hang"
    _out, state = installed_run(node, api, SILENT_LOG)
    assert state["last_event"]["failure_class"] == "hang", state["last_event"]
    assert state["last_event"]["hint"].startswith("vLLM stopped answering without logging a cause")
    assert state["last_event"]["evidence"][-1].endswith('"POST /v1/completions HTTP/1.1" 200 OK')  # the last it said


def test_without_the_classifier_beside_it_the_watchdog_acts_the_same(node, api):
    api.mode = "error"
    for _ in range(2):
        _out, state = watchdog_run(node, api)
    assert state["last_event"]["action"] == "restart" and "failure_class" not in state["last_event"]
