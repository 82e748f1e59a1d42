"""A killed Ray worker comes back through systemd (RestartSec from the
inventory) and rejoins the cluster as a new Ray node at the same address."""

from __future__ import annotations

import time

from ray_cluster import WORKER


def test_a_killed_worker_comes_back_and_rejoins_ray(cluster):
    address = cluster.cluster_ip(WORKER)
    before = {node["node_id"] for node in cluster.ray()["nodes"]}
    cluster.on(WORKER, "docker", "kill", "vllmops-ray-worker")
    killed, rejoined = time.monotonic(), []
    while not rejoined and time.monotonic() - killed < 60:
        time.sleep(2)
        rejoined = [node for node in cluster.ray()["nodes"]
                    if node["alive"] and node["address"] == address and node["node_id"] not in before]
    assert len(rejoined) == 1, f"no new Ray node at {address} 60 s after the kill (RestartSec={cluster.vars['ray_cluster_restart_sec']})"
