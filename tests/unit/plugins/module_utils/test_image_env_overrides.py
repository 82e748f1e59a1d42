"""The network settings an image bakes: reported, and per node replaced by the cluster's or removed (with a
warning naming the image, the variable, its value and what the node uses instead)."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import (
    NETWORK_ENV,
    image_env_overrides,
    nccl_facts,
    network_settings,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.plan import make_plan

IMAGE = "nvcr.io/nvidia/vllm:25.09-py3"
BAKED = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "UCX_NET_DEVICES": "mlx5_0:1",
         "NCCL_IB_HCA": "mlx5_0"}
# What the nccl role writes on a node without RDMA (sockets on clu0) and on one with a RoCE port.
SOCKETS = {"VLLM_HOST_IP": "10.88.0.3", "NCCL_SOCKET_IFNAME": "=clu0", "GLOO_SOCKET_IFNAME": "clu0",
           "TP_SOCKET_IFNAME": "clu0", "UCX_NET_DEVICES": "clu0", "NCCL_IB_DISABLE": "1"}
ROCE = dict(SOCKETS, UCX_NET_DEVICES="rocep1s0f1:1", NCCL_IB_DISABLE="0", NCCL_IB_HCA="=rocep1s0f1:1")


def test_network_settings_are_what_competes_with_cluster_env():
    env = dict(BAKED, NCCL_VERSION="2.21.5-1", NCCL_NVLS_ENABLE="0", UCX_TLS="rc", TP_SOCKET_IFNAME="eth0",
               CUDA_VERSION="12.8.1", PATH="/usr/bin", NVIDIA_VISIBLE_DEVICES="all")
    assert network_settings(env) == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0", "NCCL_NVLS_ENABLE": "0",
                                     "NCCL_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0",
                                     "UCX_NET_DEVICES": "mlx5_0:1", "UCX_TLS": "rc"}
    assert network_settings(None) == {}


@pytest.mark.parametrize(("cluster_env", "replaced", "removed"), [
    (SOCKETS, {"NCCL_SOCKET_IFNAME": "=clu0", "GLOO_SOCKET_IFNAME": "clu0", "UCX_NET_DEVICES": "clu0"},
     ["NCCL_IB_HCA"]),  # sockets: the image's HCA would leak into the container
    (ROCE, {"NCCL_SOCKET_IFNAME": "=clu0", "GLOO_SOCKET_IFNAME": "clu0", "UCX_NET_DEVICES": "rocep1s0f1:1",
            "NCCL_IB_HCA": "=rocep1s0f1:1"}, []),
    ({}, {}, ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "NCCL_IB_HCA"]),  # nulled: all go
])
def test_each_baked_setting_is_replaced_or_removed(cluster_env, replaced, removed):
    found = image_env_overrides(BAKED, cluster_env, "node2", IMAGE)
    assert found["replaced"] == replaced
    assert found["removed"] == removed
    assert len(found["warnings"]) == len(replaced) + len(removed)


def test_the_warnings_name_image_variable_value_and_what_the_node_uses():
    found = image_env_overrides(BAKED, SOCKETS, "node2", IMAGE)
    assert (f"image {IMAGE} sets NCCL_SOCKET_IFNAME=eth0; on node2 the cluster's setting NCCL_SOCKET_IFNAME==clu0 "
            "is used instead") in found["warnings"]
    assert any(w.startswith(f"image {IMAGE} sets NCCL_IB_HCA=mlx5_0; on node2 the cluster's settings leave "
                            "NCCL_IB_HCA unset, so the serving containers get it removed") for w in found["warnings"])


def test_other_baked_settings_and_clean_images_are_left_alone():
    assert image_env_overrides({"NCCL_NVLS_ENABLE": "0", "NCCL_VERSION": "2.21.5"}, SOCKETS, "n", IMAGE) == \
        {"replaced": {}, "removed": [], "warnings": []}
    assert image_env_overrides({}, SOCKETS, "n", IMAGE)["warnings"] == []


def test_every_variable_the_nccl_role_writes_is_one_the_image_may_not_keep(tmp_path):
    (tmp_path / "class/net/clu0").mkdir(parents=True)
    ip = [{"ifname": "clu0", "addr_info": [{"local": "10.88.0.3", "prefixlen": 24, "family": "inet"}]}]
    env = nccl_facts(ip, str(tmp_path), address="10.88.0.3", nccl_version="2.18.1", force_gid_index=True)
    assert set(env["recommended_env"]) <= set(NETWORK_ENV)
    assert {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX"} <= set(NETWORK_ENV)  # written only with RDMA (and old NCCL)


def test_the_plan_gives_each_member_its_own_and_warns_per_node():
    nodes = [{"name": "node1", "address": "10.88.0.2", "gpus": 1, "head": "node1", "cluster_env": ROCE},
             {"name": "node2", "address": "10.88.0.3", "gpus": 1, "head": "node1", "cluster_env": SOCKETS}]
    image = {"id": "sha256:ngc", "name": IMAGE, "vllm_version": "0.10.1", "multinode_modes": ["native"],
             "network_env": BAKED}
    plan = make_plan(nodes, image, model_path="/srv/models/m")
    assert plan["members"]["node1"]["image_env"]["removed"] == []
    assert plan["members"]["node2"]["image_env"] == {
        "replaced": {"NCCL_SOCKET_IFNAME": "=clu0", "GLOO_SOCKET_IFNAME": "clu0", "UCX_NET_DEVICES": "clu0"},
        "removed": ["NCCL_IB_HCA"]}
    assert len(plan["image_env_warnings"]) == 4 + 4
    assert sum("on node2" in w for w in plan["image_env_warnings"]) == 4
    clean = make_plan(nodes, dict(image, network_env={}), model_path="/srv/models/m")
    assert clean["image_env_warnings"] == []
    assert clean["members"]["node2"]["image_env"] == {"replaced": {}, "removed": []}
