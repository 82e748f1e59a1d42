#!/usr/bin/env python3
# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head watchdog of the vLLM service (vllmops.cluster, role vllm_serve).

Run by its systemd timer on the head, one check per run: a one-token
completion asked of vLLM itself, with a deadline. /health alone is not
enough: vLLM keeps answering it while its engine is dead behind the port,
while a rank is lost, while requests hang after a worker died. After a few
failed checks in a row (one slow request is not enough) it restarts vLLM's
unit on the head, at most --max-restarts times in --window seconds; past
that it stops acting and says so. In vLLM's Ray-free multi-node mode the
head runs rank 0: once it restarts, the connections the other ranks held to
it are gone, and their rank watchdogs restart them, so every rank meets the
new rank 0. Over Ray the head's unit is all of vLLM that runs in systemd.

What it saw and did goes to the journal (stdout) and to a small JSON state
file (--state) that playbooks/status.yml shows. Before it acts it reads what
vLLM's unit logged since it started (its journal) and names the failure's
class, the evidence and the fix to try, with the collection's own classifier
(vllm_logs.py, installed beside this script). Failed checks do not count
while vLLM's unit is younger than --grace seconds and has not answered yet
(it is loading), nor while the unit is not running (systemd, or a deploy,
is bringing it back; a deploy also stops this timer while it restarts the
ranks). The API key is read from vLLM's own 0600 environment file
(VLLM_API_KEY), never from the command line.

Standard library only; Python 3.8+ (the node's python3).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# No __pycache__ beside it: /etc/vllmops holds only what the deploy wrote (its record compares every file there).
sys.dont_write_bytecode = True
try:
    import vllm_logs  # the collection's plugins/module_utils/vllm_logs.py, installed beside this script
except ImportError:  # an older install without it: the watchdog acts the same, without naming the class
    vllm_logs = None

STATE_VERSION = 1
# The log names no failure since the server started, yet the checks failed: requests hang silently.
SILENT_HINT = ("vLLM stopped answering without logging a cause since it started: a worker stuck (a frozen process, a "
               "GPU or NCCL operation that never returns); the restart brings it back, the rank's journal before "
               "it shows what it was doing.")
JOURNAL_LINES = 5000
# Kept for the status line and the tests: how a restart is described per plan mode.
FOLLOWERS = {
    "mp-multinode": "the other ranks follow through their rank watchdogs once their connections to rank 0 are gone",
    "ray": "vLLM joins the running Ray cluster again",
    "mp-single": "",
}


def _now_iso(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


# --- what the node says ----------------------------------------------------------------
def read_api_key(env_file: str) -> str:
    """VLLM_API_KEY from docker's --env-file format (KEY=value, no quoting); "" when absent."""
    if not env_file:
        return ""
    try:
        with open(env_file, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep and key.strip() == "VLLM_API_KEY":
                    return value
    except OSError:
        pass
    return ""


def read_unit(unit: str) -> dict:
    """ActiveState, InvocationID and age (seconds since it became active) of a systemd unit."""
    proc = subprocess.run(["systemctl", "show", "--property=ActiveState", "--property=InvocationID",
                           "--property=ActiveEnterTimestampMonotonic", unit],
                          capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C"))
    props = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    entered = int(props.get("ActiveEnterTimestampMonotonic") or 0)
    # systemd's monotonic timestamps are CLOCK_MONOTONIC, as time.monotonic() on Linux.
    age = time.monotonic() - entered / 1e6 if entered else 0.0
    return {"active": props.get("ActiveState", "unknown"), "run_id": props.get("InvocationID", ""), "age": age}


def _call(url: str, body: dict | None, key: str, deadline: float) -> tuple[int | None, bytes, str]:
    """(HTTP status, body, error) within deadline seconds in all: a request that hangs counts as failed."""
    result: dict = {}

    def worker() -> None:
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=deadline) as resp:
                result.update(status=resp.status, body=resp.read())
        except urllib.error.HTTPError as err:
            result.update(status=err.code, body=err.read() or b"", error=f"HTTP {err.code}")
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            result.update(error=f"no answer within {deadline:g} s" if "timed out" in str(reason) else str(reason))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        return None, b"", f"no answer within {deadline:g} s"
    return result.get("status"), result.get("body", b""), result.get("error", "")


def probe(url: str, model: str, key: str, deadline: float, task: str = "generate") -> dict:
    """One completion of one token (an embedding of an embedding model); on failure also what /health says (it may
    well be 200)."""
    started = time.monotonic()
    if task == "embed":
        status, body, error = _call(url + "/v1/embeddings", {"model": model, "input": "ping"}, key, deadline)
    else:
        status, body, error = _call(url + "/v1/completions",
                                    {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}, key, deadline)
    took = round(time.monotonic() - started, 3)
    if status == 200 and not error:
        try:
            answer = json.loads(body.decode()).get("data" if task == "embed" else "choices")
        except ValueError:
            answer = None
        if answer:
            return {"ok": True, "took": took}
        error = "an answer without " + ("data" if task == "embed" else "choices")
    if status is not None and 400 <= status < 500:
        # The API server answered and refused this request (a key it does not know, a model name it does not
        # serve): a configuration problem that no restart fixes.
        detail = body.decode(errors="replace").strip()[:200]
        return {"ok": None, "took": took, "what": f"completion refused: HTTP {status} {detail}".rstrip()}
    health, _body, health_error = _call(url + "/health", None, "", min(deadline, 5.0))
    return {"ok": False, "took": took, "what": "completion: " + (error or f"HTTP {status}"),
            "health": health if health is not None else health_error}


def read_journal(unit: str, run_id: str, lines: int = JOURNAL_LINES) -> list[str]:
    """What the unit's current run logged (its container's output), its last `lines` lines."""
    where = [f"_SYSTEMD_INVOCATION_ID={run_id}"] if run_id else ["--unit", unit]
    proc = subprocess.run(["journalctl", "--no-pager", "--output", "cat", "--lines", str(lines), *where],
                          capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C"))
    return proc.stdout.splitlines()


def diagnose(lines: list[str]) -> dict:
    """The failure's class, its evidence and the hint, from the unit's log ({} without the classifier)."""
    if vllm_logs is None or not lines:
        return {}
    cls, evidence, hint = vllm_logs.classify(lines, exited=False)
    if cls == "none":  # a healthy start and nothing since: the silence is the failure the checks saw
        cls, hint = "hang", SILENT_HINT
        evidence = [line for line in lines if line.strip()][-3:]  # the last it said
    return {"failure_class": cls, "evidence": evidence[-3:], "hint": hint}


# --- the decision ----------------------------------------------------------------------
def decide(state: dict, unit: dict, result: dict | None, now: float, cfg: dict) -> tuple[dict, str, list[str]]:
    """The new state, the action ("restart" or "") and the journal lines, from the last state,
    the unit, this check's result (None when there was nothing to check; ok None when vLLM refused
    the check itself) and the settings."""
    state = json.loads(json.dumps(state or {}))  # a copy: callers keep theirs
    state["version"] = STATE_VERSION
    state.setdefault("restarts", [])
    lines: list[str] = []
    name = cfg["unit"]
    if state.get("run_id") != unit["run_id"]:
        state.update(run_id=unit["run_id"], answered_in_run=False, failures=0, first_failed_at=None)
    state["checked_at"] = _now_iso(now)

    if unit["active"] != "active" or result is None:
        if state.get("failures"):
            lines.append(f"{name} is {unit['active']}: not checking it (systemd or a deploy brings it back)")
        state.update(failures=0, first_failed_at=None, last_check={"ok": None, "what": f"{name} is {unit['active']}"})
        return state, "", lines

    if result["ok"] is None:
        if (state.get("last_check") or {}).get("what") != result["what"]:
            lines.append(f"<4>cannot check vLLM: {result['what']} - a restart would not fix that, none is made; "
                         f"check the served model name and the key in the environment file")
        state.update(failures=0, first_failed_at=None, last_check={"ok": None, "what": result["what"]})
        return state, "", lines

    if result["ok"]:
        if state.get("failures"):
            lines.append(f"vLLM answers again (a completion in {result['took']:.1f} s) after {state['failures']} failed check(s)")
        event = state.get("last_event") or {}
        if event.get("action") == "restart" and not event.get("recovered_at"):
            event.update(recovered_at=_now_iso(now), recovered_after_s=round(now - event["at"], 1))
            lines.append(f"the service serves again {event['recovered_after_s']:.0f} s after the restart")
        state.update(failures=0, first_failed_at=None, answered_in_run=True, last_ok=_now_iso(now), last_ok_at=now,
                     last_check={"ok": True, "took": result["took"]})
        return state, "", lines

    seen = f"{result['what']}; /health: {result['health']}"
    state["last_check"] = {"ok": False, "what": result["what"], "health": result["health"]}
    if not state.get("answered_in_run") and unit["age"] < cfg["grace"]:
        lines.append(f"vLLM is starting ({name} up {unit['age']:.0f} s of a {cfg['grace']} s grace, not answered yet): "
                     f"{seen} - not counted")
        return state, "", lines

    state["failures"] = state.get("failures", 0) + 1
    if state["failures"] == 1:
        state["first_failed_at"] = now
    lines.append(f"check failed ({state['failures']} of {cfg['failures']} in a row): {seen}")
    if state["failures"] < cfg["failures"]:
        return state, "", lines

    since = state.get("first_failed_at") or now
    saw = f"{state['failures']} failed checks in a row since {_now_iso(since)}: {seen}"
    recent = [at for at in state["restarts"] if now - at < cfg["window"]]
    state["restarts"] = recent
    state.update(failures=0, first_failed_at=None)
    # What status.yml and an operator read: when, what it saw (and the last failed check), what it did.
    event = {"at": now, "time": _now_iso(now), "failing_since": _now_iso(since), "saw": saw, "check": state["last_check"]}
    if len(recent) >= cfg["max_restarts"]:
        possible = f"; the next one is possible at {_now_iso(min(recent) + cfg['window'])}" if recent else ""
        did = (f"nothing: {len(recent)} restart(s) in the last {cfg['window']} s already, the limit "
               f"(vllm_serve_health_max_restarts){possible}. Find the cause (journalctl -u {name} on every node), "
               "then restart it by hand or re-run deploy.yml")
        held = state.get("last_event") or {}
        if held.get("action") == "held" and (state.get("last_ok_at") or 0) < held["at"]:
            held["still_at"] = _now_iso(now)  # said once per outage, not every few checks
            return state, "", lines
        state["last_event"] = {**event, "did": did, "action": "held", "restarts_in_window": len(recent)}
        lines.append(f"<3>{saw}; did {did}")
        return state, "", lines

    follow = FOLLOWERS.get(cfg["mode"], "")
    rank = " (rank 0)" if cfg["mode"] == "mp-multinode" else ""
    did = f"restarted {name}{rank}" + (f"; {follow}" if follow else "")
    state["restarts"] = [*recent, now]
    state["last_event"] = {**event, "did": did, "action": "restart", "restarts_in_window": len(recent) + 1}
    lines.append(f"<3>{saw}; {did} ({len(recent) + 1} of at most {cfg['max_restarts']} in {cfg['window']} s)")
    return state, "restart", lines


# --- the run ---------------------------------------------------------------------------
def load_state(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(path: str, state: dict) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".vllm-health.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(state, out, indent=2, sort_keys=True)
        out.write("\n")
    os.chmod(temp, 0o644)
    os.replace(temp, path)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="vLLM itself, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--task", default="generate", choices=["generate", "embed"],
                        help="what to ask: a completion, or an embedding (an embedding model)")
    parser.add_argument("--unit", required=True, help="vLLM's systemd unit on this node")
    parser.add_argument("--mode", default="mp-single", help="the plan's mode: ray, mp-multinode or mp-single")
    parser.add_argument("--env-file", default="", help="vLLM's environment file (VLLM_API_KEY is read from it)")
    parser.add_argument("--state", required=True, help="the JSON state file")
    parser.add_argument("--timeout", type=float, default=30, help="seconds a check may take in all")
    parser.add_argument("--failures", type=int, default=3, help="failed checks in a row before acting")
    parser.add_argument("--grace", type=int, default=900, help="seconds a (re)started unit may take to answer")
    parser.add_argument("--max-restarts", type=int, default=3, help="restarts at most per window")
    parser.add_argument("--window", type=int, default=3600, help="seconds of the restart window")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cfg = {"unit": args.unit, "mode": args.mode, "failures": max(1, args.failures), "grace": args.grace,
           "max_restarts": args.max_restarts, "window": args.window}
    state = load_state(args.state)
    unit = read_unit(args.unit)
    result = None
    if unit["active"] == "active":
        result = probe(args.url.rstrip("/"), args.model, read_api_key(args.env_file), args.timeout, args.task)
    now = time.time()
    state, action, lines = decide(state, unit, result, now, cfg)
    event = state.get("last_event") or {}
    if event.get("at") == now:  # acted on (restart), or reached the limit: what the rank's own log says
        found = diagnose(read_journal(args.unit, unit["run_id"]))
        event.update(found)
        if found:
            lines.append(f"<3>what {args.unit} logged since it started: {found['failure_class']} - {found['hint']} "
                         f"Evidence: {' | '.join(found['evidence'])}")
    for line in lines:
        print(line, flush=True)
    if action == "restart":
        save_state(args.state, state)  # before acting: a restart that hangs still leaves the record
        proc = subprocess.run(["systemctl", "restart", args.unit], capture_output=True, text=True, check=False)
        if proc.returncode:
            failed = f"systemctl restart {args.unit} failed (rc {proc.returncode}): {proc.stderr.strip()[-300:]}"
            state["last_event"]["did"] += "; " + failed
            print("<3>" + failed, flush=True)
    save_state(args.state, state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
