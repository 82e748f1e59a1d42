"""The Ray sandbox (ray_cluster.py): what its converge (every play) and the re-run left. Read only."""

from __future__ import annotations

import ipaddress
import json
import re

from ansible_collections.vllmops.cluster.plugins.filter.container_memory import container_memory
from ray_cluster import HEAD, RAY_UNITS, WORKER

RAY_TOKEN, RAY_SESSIONS = "/etc/vllmops/ray/auth_token", "/var/lib/vllmops/ray"


def test_the_image_reached_node2_once_and_both_nodes_hold_the_same_image(cluster):
    # node1 held the stand-in already (loaded by hand): only node2 lacked it
    assert cluster.converged["image_copied_to"] == {node: [WORKER] for node in RAY_UNITS}, cluster.converged
    # the same content on both: its layers (an image's ID differs between Docker's image stores)
    layers = {node: cluster.on(node, "docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}",
                               cluster.vars["vllmops_image"]) for node in RAY_UNITS}
    assert len(set(layers.values())) == 1, layers


def test_the_rerun_changed_nothing_and_restarted_neither_ray_nor_vllm(cluster):
    assert cluster.converged["rerun_changed"] == {node: 0 for node in RAY_UNITS}, cluster.converged
    assert cluster.converged["rerun_fast"], "the re-run did not take deploy.yml's fast path"
    assert cluster.at_start["ray_started"] == cluster.converged["ray_started"]
    assert cluster.at_start["vllm_started"] == cluster.converged["vllm_started"]


def test_vllm_runs_over_ray_on_the_head_and_node2_runs_only_rays_worker(cluster):
    unit = cluster.on(HEAD, "cat", "/etc/systemd/system/vllmops-vllm.service").replace("\\\n", "")
    assert "--distributed-executor-backend ray" in unit, unit
    assert cluster.on(WORKER, "ls", "/etc/systemd/system/vllmops-vllm.service", check=False) == ""
    assert cluster.inspect(WORKER, "vllmops-vllm") == {}
    # the stand-in's Ray (2.60) has token authentication: a 0600 token on each node, Ray's session files closed
    for node, ray_unit in RAY_UNITS.items():
        assert cluster.on(node, "stat", "--format", "%a", RAY_TOKEN, RAY_SESSIONS).split() == ["600", "700"], node
        text = cluster.on(node, "cat", f"/etc/systemd/system/{ray_unit}.service").replace("\\\n", "")
        assert "RAY_AUTH_TOKEN_PATH=" + RAY_TOKEN in text, (node, text)


def test_ray_units_are_enabled_active_and_restart_always(cluster):
    for node, unit in RAY_UNITS.items():
        shown = cluster.on(node, "systemctl", "show", "--property=Restart", "--property=UnitFileState",
                           "--property=ActiveState", unit).splitlines()
        assert sorted(shown) == ["ActiveState=active", "Restart=always", "UnitFileState=enabled"], (node, shown)


def test_ray_has_exactly_the_inventory_nodes_on_the_cluster_network(cluster):
    expected = {node: {"address": cluster.cluster_ip(node), "gpus": 1} for node in RAY_UNITS}
    info = cluster.module("vllmops.cluster.ray_cluster_info", {"expected_nodes": expected, "timeout": 30})
    assert (info["alive_nodes"], info["gpus"], info["unexpected"]) == (2, 2, []), info
    alive = [node["address"] for node in info["nodes"] if node["alive"]]
    assert sorted(alive) == sorted(item["address"] for item in expected.values())
    assert all(ipaddress.ip_address(address) in cluster.cluster_cidr for address in alive), (alive, cluster.cluster_cidr)


def test_a_tp2_serve_over_ray_starts_and_tp3_is_refused_for_want_of_gpus(cluster):
    serve = ["vllm", "serve", "demo-model", "--distributed-executor-backend", "ray"]
    tp2 = cluster.run(HEAD, "docker", "exec", "--env", "VLLMOPS_STANDIN_INIT_S=0", "vllmops-ray-head",
                      "timeout", "25", *serve, "--tensor-parallel-size", "2", "--port", "8011")
    assert tp2.returncode == 124 and "Application startup complete." in tp2.stdout, tp2.stdout[-2000:]
    tp3 = cluster.run(HEAD, "docker", "exec", "--env", "VLLMOPS_STANDIN_PLACEMENT_WAIT_S=2", "vllmops-ray-head",
                      *serve, "--tensor-parallel-size", "3", "--port", "8012")
    assert tp3.returncode == 1 and "No available node types can fulfill resource request" in tp3.stdout, tp3.stdout[-2000:]


def test_the_endpoint_answers_from_this_machine_with_the_key_only(cluster):
    key, name = cluster.vars["vllm_serve_api_key"], cluster.vars["vllm_serve_served_model_name"]
    assert cluster.get("/health")[0] == 200
    status, models = cluster.get("/v1/models", key)
    assert status == 200 and [model["id"] for model in models["data"]] == [name], models
    assert cluster.complete("Say hello", 5)["usage"]["completion_tokens"] == 5
    assert cluster.get("/v1/models")[0] == 401
    # the sandbox's proxy passes /metrics with the key (api_proxy_metrics), never without
    assert cluster.get("/metrics")[0] == 401 and cluster.client.request("/metrics", key=key)[0] == 200


def test_vllm_runs_tp2_with_the_api_key_in_a_0600_file_only(cluster):
    args = cluster.vllm_args()
    assert args[args.index("--tensor-parallel-size") + 1] == "2", args
    assert cluster.vars["vllm_serve_api_key"] not in json.dumps(args)
    assert cluster.on(HEAD, "stat", "--format", "%a", "/etc/vllmops/vllm.env") == "600"


def _container(cluster, node: str, name: str) -> dict:
    return json.loads(cluster.on(node, "docker", "inspect", name))[0]


def test_the_rdma_node_s_serving_containers_get_its_verbs_device_and_ipc_lock_and_the_other_none(cluster):
    # node2 has an InfiniBand port (ray_cluster.NODE2_RDMA); node1 none: NCCL uses sockets there.
    unit = cluster.on(WORKER, "cat", "/etc/systemd/system/vllmops-ray-worker.service")
    assert "--device /dev/infiniband/uverbs0" in unit and "--cap-add IPC_LOCK" in unit, unit
    worker = _container(cluster, WORKER, "vllmops-ray-worker")
    assert [device["PathOnHost"] for device in worker["HostConfig"]["Devices"] or []] == ["/dev/infiniband/uverbs0"]
    assert "IPC_LOCK" in (worker["HostConfig"]["CapAdd"] or []) and not worker["HostConfig"]["Privileged"]
    assert "NCCL_IB_HCA==mlx5_0:1" in worker["Config"]["Env"] and "NCCL_IB_DISABLE=0" in worker["Config"]["Env"]
    cluster.on(WORKER, "docker", "exec", "vllmops-ray-worker", "test", "-c", "/dev/infiniband/uverbs0")
    for name in ("vllmops-ray-head", "vllmops-vllm"):
        unit = cluster.on(HEAD, "cat", f"/etc/systemd/system/{name}.service")
        assert "--device" not in unit and "IPC_LOCK" not in unit, unit
        found = _container(cluster, HEAD, name)
        assert not found["HostConfig"]["Devices"] and "IPC_LOCK" not in (found["HostConfig"]["CapAdd"] or [])
        assert "NCCL_IB_DISABLE=1" in found["Config"]["Env"]


def test_each_node_keeps_its_own_interface_and_address_in_vllm_s_ray_workers(cluster):
    """vLLM's Ray executor copies the head's NCCL_*/VLLM_* values to its workers unless they are listed in
    ray_non_carry_over_env_vars.json: node2's cluster port is clu0, node1's is not."""
    seen = {}
    for line in cluster.on(HEAD, "journalctl", "--unit", "vllmops-vllm", "--output", "cat", "--grep",
                           "RayWorkerWrapper ip=").splitlines():
        address, env = re.search(r"ip=([\d.]+)\) environment: (\{.*\})", line).groups()
        seen[address] = json.loads(env)  # the last start's wins
    for node in RAY_UNITS:
        mine = dict(line.split("=", 1) for line in cluster.on(node, "cat", "/etc/vllmops/cluster.env").splitlines()
                    if "=" in line and not line.startswith("#"))
        assert seen[mine["VLLM_HOST_IP"]] == {name: mine.get(name) for name in seen[mine["VLLM_HOST_IP"]]}, node
    assert seen[cluster.cluster_ip(WORKER)]["NCCL_SOCKET_IFNAME"] == "=clu0"
    assert seen[cluster.cluster_ip(HEAD)]["NCCL_SOCKET_IFNAME"] != "=clu0"


def test_ray_and_vllm_containers_have_the_memory_limit_derived_from_their_node(cluster):
    """host_memory's limit (the node's MemTotal less the reserve for the OS, the defaults here), swap included, on
    every container of ours that serves: Ray's on each node, vLLM's on the head."""
    for node, ray_unit in RAY_UNITS.items():
        limit = container_memory(cluster.on(node, "cat", "/proc/meminfo")) * 1024 * 1024
        for container in [ray_unit] + (["vllmops-vllm"] if node == HEAD else []):
            host = _container(cluster, node, container)["HostConfig"]
            assert (host["Memory"], host["MemorySwap"]) == (limit, limit), (node, container, limit)
