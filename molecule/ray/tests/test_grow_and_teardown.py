"""The cluster's life past the first deploy: a third node added to the
inventory together with one more vLLM flag (the image is copied to it alone,
it joins Ray, tensor parallelism is re-derived to 3, vLLM restarts once for
both changes, status.yml shows the three nodes); then teardown.yml takes
every unit and container of ours down on all three and keeps the
configuration; deploy.yml on the inventory brings the two-node cluster back
(TP 2, without the flag)."""

from __future__ import annotations

import re

from conftest import HEAD, NODE3, WORKER


def tp(args: list[str]) -> str:
    return args[args.index("--tensor-parallel-size") + 1]


def test_a_third_node_joins_then_teardown_and_deploy_bring_back_two(cluster):
    starts = cluster.vllm_starts()
    run = cluster.deploy(serve_args={"max_num_seqs": 64}, node3=True)
    try:
        assert run.rc == 0, run
        assert run.fact("image_copied_to")[NODE3] == [NODE3], run.fact("image_copied_to")
        info = cluster.ray()
        assert (info["alive_nodes"], info["gpus"]) == (3, 3), info
        args = cluster.vllm_args()
        assert (tp(args), args[args.index("--max-num-seqs") + 1]) == ("3", "64"), args
        assert cluster.vllm_starts() == starts + 1
        assert cluster.complete("three nodes", 3)["usage"]["completion_tokens"] == 3

        status = cluster.playbook("playbooks/status.yml", node3=True, as_json=False).stdout
        for node, row in ((HEAD, "head .* yes +active healthy"), (WORKER, "worker .* yes +-"), (NODE3, "worker .* yes +-")):
            assert re.search(f"{node} +{row}", status), (node, status[-3000:])
        assert "served model: qwen3-molecule; Ray: 3 alive node(s), 3.0 GPU(s)" in status, status[-3000:]
    finally:
        down = cluster.playbook("playbooks/teardown.yml", node3=True)
        left = {node: cluster.on(node, "sh", "-c", "docker ps --all --quiet --filter label=io.vllmops.unit;"
                                 " ls /etc/systemd/system/vllmops-* 2>/dev/null; true")
                for node in (HEAD, WORKER, NODE3)}
        kept = {node: cluster.run(node, "test", "-f", "/etc/vllmops/cluster.env").returncode == 0
                for node in (HEAD, WORKER, NODE3)}
        back = cluster.deploy()
    assert down.rc == 0, down
    assert left == dict.fromkeys(left, ""), f"left after teardown: {left}"
    assert all(kept.values()), f"configuration kept: {kept}"

    assert back.rc == 0, back
    assert cluster.ray(expected=2)["alive_nodes"] == 2
    args = cluster.vllm_args()
    assert tp(args) == "2" and "--max-num-seqs" not in args, args
    assert cluster.vllm_starts() == starts + 2
    assert cluster.healthy()
