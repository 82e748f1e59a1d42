"""What converge (and molecule's re-run of it) left: read only."""

from __future__ import annotations

import json
import re

from conftest import HEAD, RAY_UNITS, WORKER


def test_image_reached_node2_once_and_both_nodes_hold_the_same_image(cluster, first_converge):
    for node in RAY_UNITS:
        assert first_converge[node]["image_copied_to"] == [WORKER], first_converge[node]
    assert len(set(cluster.at_start["images"].values())) == 1, cluster.at_start["images"]


def test_the_rerun_restarted_neither_ray_nor_vllm(cluster, first_converge):
    for node in RAY_UNITS:
        assert cluster.at_start["ray_started"][node] == first_converge[node]["ray_started"], node
    assert cluster.at_start["vllm_started"] == first_converge[HEAD]["vllm_started"]


def test_ray_units_are_enabled_active_and_restart_always(cluster):
    for node, unit in RAY_UNITS.items():
        shown = cluster.on(node, "systemctl", "show", "--property=Restart", "--property=UnitFileState",
                           "--property=ActiveState", unit).splitlines()
        assert sorted(shown) == ["ActiveState=active", "Restart=always", "UnitFileState=enabled"], (node, shown)


def test_ray_has_exactly_the_inventory_nodes_on_the_cluster_network(cluster):
    expected = {node: {"address": cluster.cluster_ip(node), "gpus": 1} for node in RAY_UNITS}
    info = cluster.module("vllmops.cluster.ray_cluster_info", {"expected_nodes": expected, "timeout": 30})
    assert (info["alive_nodes"], info["gpus"], info["unexpected"]) == (2, 2, [])
    alive = [node["address"] for node in info["nodes"] if node["alive"]]
    assert sorted(alive) == sorted(item["address"] for item in expected.values())
    assert all(re.match(r"10\.66\.0\.", address) for address in alive), alive


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
    assert status == 200 and [model["id"] for model in models["data"]] == [name]
    assert cluster.complete("Say hello", 5)["usage"]["completion_tokens"] == 5
    assert cluster.get("/v1/models")[0] == 401
    assert cluster.get("/metrics")[0] == 401 and cluster.get("/metrics", key)[0] == 404  # the proxy's allow list


def test_vllm_runs_tp2_with_the_api_key_in_a_0600_file_only(cluster):
    args = cluster.vllm_args()
    assert args[args.index("--tensor-parallel-size") + 1] == "2", args
    assert cluster.vars["vllm_serve_api_key"] not in json.dumps(args)
    assert cluster.on(HEAD, "stat", "--format", "%a", "/etc/vllmops/vllm.env") == "600"
