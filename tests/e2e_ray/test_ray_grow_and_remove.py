"""The cluster's members change, and its head with them: a third node added to
the inventory together with one more vLLM flag and the head moved to node2,
all in one validated run (the image is copied to node3 alone, it joins Ray,
tensor parallelism is re-derived to 3; Ray's head, rank 0, the API proxy and
the head watchdog move to node2, node1 keeps only a Ray worker; status.yml
shows the three nodes). Then node3 is deleted from the inventory while its
Ray worker still runs: deploy.yml refuses to serve beside it, naming its
address, and changes nothing; status.yml is DEGRADED, naming it.
playbooks/remove_node.yml, given its address, takes it out for good (purge)
while the head goes home to node1 (the inventory's default) in the same run:
the cluster serves on two nodes (TP 2, without the flag), status.yml is
clean, and node3 holds nothing of ours: no unit, container, firewall table,
configuration, image or model."""

from __future__ import annotations

import re

from ray_cluster import HEAD, NODE3, WORKER

HEAD_ONLY = {"vllmops-ray-head.service", "vllmops-vllm.service", "vllmops-api-proxy.service",
             "vllmops-vllm-health.timer"}


def tp(args: list[str]) -> str:
    return args[args.index("--tensor-parallel-size") + 1]


def units(cluster, node: str) -> set[str]:
    return set(cluster.on(node, "sh", "-c", "cd /etc/systemd/system && ls -d vllmops-* 2>/dev/null; true").split())


def ours(node: str, cluster) -> str:
    """Our containers and unit files on a node ("" when none)."""
    return cluster.on(node, "sh", "-c", "docker ps --all --quiet --filter label=io.vllmops.unit;"
                      " ls /etc/systemd/system/vllmops-* 2>/dev/null; true")


def test_a_third_node_joins_as_the_head_moves_then_is_refused_once_deleted_and_taken_out_as_the_head_goes_home(cluster):
    moved = {"vllmops_head_host": WORKER}
    run = cluster.deploy(serve_args={"max_num_seqs": 64}, extra=moved, node3=True)
    try:
        assert run.rc == 0, run
        assert run.fact("image_copied_to")[NODE3] == [NODE3], run.fact("image_copied_to")
        info = cluster.module("vllmops.cluster.ray_cluster_info", host=WORKER)
        assert (info["alive_nodes"], info["gpus"]) == (3, 3), info
        # the head moved: Ray's head, rank 0, the API proxy and the head watchdog on node2; node1 a Ray worker only
        assert units(cluster, HEAD) & HEAD_ONLY == set(), units(cluster, HEAD)
        assert "vllmops-ray-worker.service" in units(cluster, HEAD)
        assert units(cluster, WORKER) >= HEAD_ONLY, units(cluster, WORKER)
        assert set(cluster.running_images()[HEAD]) == {"vllmops-ray-worker"}, cluster.running_images()
        args = cluster.inspect(WORKER, "vllmops-vllm")["args"]
        assert (tp(args), args[args.index("--max-num-seqs") + 1]) == ("3", "64"), args
        assert cluster.complete("three nodes", 3, node=WORKER)["usage"]["completion_tokens"] == 3

        status = cluster.playbook("playbooks/status.yml", extra=moved, node3=True, as_json=False).stdout
        for node, row in ((WORKER, "head .* yes +active healthy"), (HEAD, "worker .* yes +-"), (NODE3, "worker .* yes +-")):
            assert re.search(f"{node} +{row}", status), (node, status[-3000:])
        served = cluster.vars["vllm_serve_served_model_name"]
        assert f"served model: {served}; Ray: 3 alive node(s), 3.0 GPU(s)" in status, status[-3000:]

        # Deleted from the inventory, its Ray worker still running: refused before anything changes.
        node3_ip = cluster.cluster_ip(NODE3)
        before = cluster.state()
        refused = cluster.deploy(serve_args={"max_num_seqs": 64}, extra=moved)
        assert refused.rc != 0, refused
        assert f"{node3_ip} (connected to {WORKER})" in str(refused) and "remove_node.yml" in str(refused), refused
        assert cluster.state() == before
        assert cluster.module("vllmops.cluster.ray_cluster_info", host=WORKER)["alive_nodes"] == 3

        degraded = cluster.playbook("playbooks/status.yml", extra=moved, as_json=False).stdout
        assert "DEGRADED" in degraded and f"not in the inventory but in the cluster: {node3_ip}" in degraded, degraded[-3000:]
    finally:
        # node3 out for good, and the head back where the inventory puts it (node1), in one run
        out = cluster.playbook("playbooks/remove_node.yml", extra={"node": NODE3, "node_address": cluster.addresses[NODE3],
                                                                    "remove_node_purge": True})
    assert out.rc == 0, out
    assert ours(NODE3, cluster) == "", "left on node3 after remove_node.yml"
    left = cluster.on(NODE3, "sh", "-c", f"ls -d /etc/vllmops {cluster.model_dir} 2>/dev/null;"
                      " docker images --quiet; nft list table inet vllmops 2>/dev/null | head -1; true")
    assert left == "", f"left on node3 by the purge: {left}"

    assert units(cluster, HEAD) >= HEAD_ONLY and units(cluster, WORKER) & HEAD_ONLY == set(), units(cluster, WORKER)
    assert cluster.ray(expected=2)["alive_nodes"] == 2
    args = cluster.vllm_args()
    assert tp(args) == "2" and "--max-num-seqs" not in args, args
    assert cluster.complete("the head again", 3)["usage"]["completion_tokens"] == 3
    clean = cluster.playbook("playbooks/status.yml", as_json=False).stdout
    assert "DEGRADED" not in clean and "Ray: 2 alive node(s)" in clean, clean[-3000:]
