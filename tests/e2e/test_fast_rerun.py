"""deploy.yml's fast path (vllmops_fast_rerun): a re-run that finds every node
as the last completed full run left it runs one step per node and changes
nothing; a node without a record, or with anything of ours changed, sends the
run down every play, which repairs it; a run with --tags forgets the records."""

from __future__ import annotations

import re

RECORD = "/var/lib/vllmops/deploy-state.json"
HEALTH_SCRIPT = "/etc/vllmops/vllm-health.py"


def _recap(run) -> dict:
    """host -> {ok, changed, failed, skipped} from the PLAY RECAP."""
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
            for host, rest in re.findall(r"^(\S+)\s+: (ok=.*)$", run.stdout.split("PLAY RECAP")[-1], re.M)}


def _full_run(sandbox):
    run = sandbox.deploy(tags="all", echo=False)
    assert run.returncode == 0, run.stdout[-4000:]
    assert "PLAY [Docker Engine on every node]" in run.stdout
    return run


def _fast_run(sandbox):
    run = sandbox.deploy(tags="all", echo=False)
    assert run.returncode == 0, run.stdout[-4000:]
    assert "nothing to do. -e vllmops_fast_rerun=false runs every play" in " ".join(run.stdout.split()), run.stdout[-4000:]
    assert "PLAY [Docker Engine on every node]" in run.stdout  # the play is there, and ends at once
    recap = _recap(run)
    assert set(recap) == set(sandbox.nodes)
    assert all(r["changed"] == 0 and r["failed"] == 0 and r["ok"] <= 8 for r in recap.values()), recap
    return run


def test_a_rerun_that_finds_nothing_changed_runs_one_step_per_node_and_drift_is_repaired(sandbox):
    # One full run for two things. On the worker, its record gone: every play
    # runs there and changes nothing - the full path is idempotent. On the
    # head, drift: a file of ours edited, a timer of ours stopped; the run
    # names both and repairs them, and changes nothing else. Then every node
    # is recorded. This test runs first (conftest): the records are those of
    # `make sandbox`, whose second run took the fast path.
    for node in sandbox.nodes:
        assert sandbox.on(node, "stat", "--format", "%a", RECORD) == "600", f"{node}: no record left by `make sandbox`"
    sandbox.on(sandbox.worker, "rm", "-f", RECORD)
    before = sandbox.on(sandbox.head, "sha256sum", HEALTH_SCRIPT)
    sandbox.on(sandbox.head, "sh", "-c", f"echo '# edited by hand' >> {HEALTH_SCRIPT}")
    sandbox.on(sandbox.head, "systemctl", "stop", "vllmops-vllm-health.timer")
    starts = {node: sandbox.starts(node) for node in sandbox.nodes}
    full = _full_run(sandbox)
    said = " ".join(full.stdout.split())  # the YAML callback folds long lines
    assert f"{sandbox.worker}: no record of a completed deploy" in said
    assert f"{sandbox.head}: files: {HEALTH_SCRIPT}: " in said
    # one line per node: "NODE: files: ...; units: ..."
    assert "; units: vllmops-vllm-health.timer: active enabled -> - enabled" in said
    recap = _recap(full)
    assert recap[sandbox.worker]["changed"] == 0, recap
    # the script written back and the timer started again, without a restart of vLLM
    assert recap[sandbox.head]["changed"] >= 1, recap
    assert {node: sandbox.starts(node) for node in sandbox.nodes} == starts
    assert sandbox.on(sandbox.head, "sha256sum", HEALTH_SCRIPT) == before
    assert sandbox.active(sandbox.head, "vllmops-vllm-health.timer")
    assert sandbox.complete()["choices"][0]["text"]
    for node in sandbox.nodes:
        assert sandbox.on(node, "stat", "--format", "%a", RECORD) == "600", node
    _fast_run(sandbox)

    # A run of some plays only (--tags) cannot vouch for the others: the
    # records go, and the next run runs every play.
    tagged = sandbox.deploy(tags="metrics_exporters", echo=False)
    assert tagged.returncode == 0, tagged.stdout[-4000:]
    for node in sandbox.nodes:
        assert sandbox.on(node, "sh", "-c", f"test -e {RECORD} && echo present || echo absent") == "absent", node
