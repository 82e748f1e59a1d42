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
    # The full path is itself idempotent: with the worker's record gone (the
    # tests before leave the cluster as the inventory says), every play runs
    # on every node and changes nothing; then every node is recorded.
    sandbox.on(sandbox.worker, "rm", "-f", RECORD)
    full = _full_run(sandbox)
    assert f"{sandbox.worker}: no record of a completed deploy" in " ".join(full.stdout.split())
    assert all(r["changed"] == 0 for r in _recap(full).values()), _recap(full)
    for node in sandbox.nodes:
        assert sandbox.on(node, "stat", "--format", "%a", RECORD) == "600", node
    _fast_run(sandbox)

    # Drift: a file of ours edited on the head, a timer of ours stopped on the
    # worker. The run names both and repairs them.
    before = sandbox.on(sandbox.head, "sha256sum", HEALTH_SCRIPT)
    sandbox.on(sandbox.head, "sh", "-c", f"echo '# edited by hand' >> {HEALTH_SCRIPT}")
    sandbox.on(sandbox.worker, "systemctl", "stop", "vllmops-vllm-watchdog.timer")
    repair = _full_run(sandbox)
    said = " ".join(repair.stdout.split())  # the YAML callback folds long lines
    assert f"{sandbox.head}: files: {HEALTH_SCRIPT}: " in said
    assert f"{sandbox.worker}: units: vllmops-vllm-watchdog.timer: active enabled -> - enabled" in said
    assert sandbox.on(sandbox.head, "sha256sum", HEALTH_SCRIPT) == before
    assert sandbox.active(sandbox.worker, "vllmops-vllm-watchdog.timer")
    assert sandbox.complete()["choices"][0]["text"]
    _fast_run(sandbox)

    # A run of some plays only (--tags) cannot vouch for the others: the
    # records go, and the next run runs every play.
    tagged = sandbox.deploy(tags="metrics_exporters", echo=False)
    assert tagged.returncode == 0, tagged.stdout[-4000:]
    for node in sandbox.nodes:
        assert sandbox.on(node, "sh", "-c", f"test -e {RECORD} && echo present || echo absent") == "absent", node
