"""The plan owns vLLM's command: a flag it sets, given in vllm_serve_args in any spelling, is refused by deploy.yml's
preflight, before any play changes a node, naming the setting to use instead. Without that check
`tensor_parallel_size` was silently overwritten, and `tensor-parallel-size` rendered twice (the last one won)."""

from __future__ import annotations

import re
import time


def test_a_flag_the_plan_sets_is_refused_in_any_spelling_and_the_cluster_keeps_serving(sandbox, poller):
    before = {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes}
    args = dict(sandbox.serve_vars["vllm_serve_args"], **{"tensor-parallel-size": 1, "-pp": 2, "port": 9000})
    with poller() as polls:
        began = time.monotonic()
        run = sandbox.deploy(args, tags="image,model,vllm_serve")
        took = time.monotonic() - began
    said = " ".join(run.stdout.split())
    assert run.returncode != 0
    for flag, written, setting in (("--tensor-parallel-size", " (written 'tensor-parallel-size')", "vllm_serve_tensor_parallel_size"),
                                   ("--pipeline-parallel-size", " (written '-pp')", "vllm_serve_pipeline_parallel_size"),
                                   ("--port", "", "vllm_serve_port")):
        assert f"vllm_serve_args sets {flag}{written}, which the plan sets on every rank: remove it and use {setting}" \
            in said, said[-3000:]
    assert "Nothing was changed on any host" in said
    # refused in the preflight play: no later play ran
    assert "PLAY [The serving image on every node, probed]" not in run.stdout, run.stdout[-3000:]
    assert all(changed == "0" for changed in re.findall(r"changed=(\d+)", run.stdout)), run.stdout[-1500:]
    assert {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes} == before
    assert polls.failed == 0 and polls.ok > 0, (polls.ok, polls.failed)
    print(f"refused {took:.1f} s after ansible-playbook started")
