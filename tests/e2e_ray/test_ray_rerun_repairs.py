"""What an operator finds broken, re-running deploy.yml repairs (here the
plays that own it, --tags ray_cluster,vllm_serve): a Ray worker that stays
away (status.yml says DEGRADED until then) and vLLM stopped with a leftover
container of ours in its way (removed, and named in the run's output, before
vLLM starts)."""

from __future__ import annotations

import time

from ray_cluster import HEAD, WORKER


def status(cluster, until: str = "", timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        run = cluster.playbook("playbooks/status.yml", as_json=False)
        assert run.rc == 0, run
        if until in run.stdout or time.monotonic() > deadline:
            return run.stdout
        time.sleep(3)


def test_a_rerun_brings_back_a_worker_away_and_removes_a_leftover_container(cluster):
    cluster.on(WORKER, "systemctl", "stop", "vllmops-ray-worker")
    cluster.on(HEAD, "systemctl", "stop", "vllmops-vllm")
    cluster.on(HEAD, "docker", "run", "--detach", "--name", "vllmops-vllm-leftover", "--label", "io.vllmops.unit=vllmops-vllm",
               "--entrypoint", "sleep", cluster.vars["vllmops_image"], "infinity")
    degraded = f"DEGRADED: not in Ray: {WORKER}"
    assert degraded in status(cluster, until=degraded)

    run = cluster.deploy("--tags", "ray_cluster,vllm_serve")

    assert run.rc == 0, run
    assert "vllmops-vllm-leftover" in run.stdout, run  # the run names what it removed
    ours = cluster.on(HEAD, "docker", "ps", "--all", "--filter", "label=io.vllmops.unit=vllmops-vllm", "--format", "{{.Names}} {{.State}}")
    assert ours.splitlines() == ["vllmops-vllm running"]
    healed = status(cluster)
    assert "DEGRADED" not in healed and "Ray: 2 alive node(s), 2.0 GPU(s)" in healed, healed[-3000:]
