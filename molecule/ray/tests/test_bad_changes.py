"""Changes that must not take the working endpoint down: a flag this vLLM
does not have is refused before anything restarts; a configuration that dies
or hangs at start is rolled back on every node."""

from __future__ import annotations

import pytest
from conftest import HEAD, Poller


def test_a_flag_this_vllm_lacks_is_refused_before_anything_restarts(cluster):
    before = cluster.state()
    with Poller(cluster) as poller:
        # The whole deploy.yml, with a Ray setting changed too: the flag must be
        # refused before Ray's units change (a Ray restart takes vLLM with it).
        run = cluster.deploy(serve_args={"num_scheduler_steps": 10}, extra={"ray_cluster_restart_sec": 4})
    assert run.rc != 0 and "--num-scheduler-steps" in run.stdout and "0.33.0" in run.stdout, run
    assert "did you mean" in run.stdout or "async-scheduling" in run.stdout, run
    assert cluster.state() == before
    assert (poller.failed, poller.ok > 5) == (0, True), f"/health polls: {poller.ok} ok, {poller.failed} failed"


@pytest.mark.parametrize(("failure", "diagnosis"), [("oom", "oom"), ("hang", "hang"), ("usage", "unknown_flag")])
def test_a_configuration_that_fails_at_start_is_rolled_back(cluster, failure, diagnosis):
    args = cluster.vllm_args()
    run = cluster.deploy("--tags", "vllm_serve", serve_args={"max_num_seqs": 8},
                         extra={"vllm_serve_env": {"VLLMOPS_STANDIN_FAIL": failure}})
    assert run.rc != 0, run
    assert f"new configuration: {diagnosis}" in run.stdout, run
    assert "Rolled back every node to the last working configuration: healthy again." in run.stdout, run
    assert cluster.vllm_args() == args
    assert "VLLMOPS_STANDIN_FAIL" not in cluster.on(HEAD, "cat", "/etc/vllmops/vllm.env")
    assert cluster.healthy()
