"""nccl_facts over sysfs fixture trees of four host kinds."""

import os

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import NcclFactsError, ipv4_mapped_gid, nccl_facts

LINK_LOCAL_V1 = ("fe80:0000:0000:0000:4e5d:3cff:fe12:3456", "IB/RoCE v1")
LINK_LOCAL_V2 = ("fe80:0000:0000:0000:4e5d:3cff:fe12:3456", "RoCE v2")


def ip_json(*links):
    """`ip -j addr show` shaped data: (ifname, [(address, prefixlen), ...])."""
    return [{"ifname": name, "operstate": "UP",
             "addr_info": [{"family": "inet6" if ":" in a else "inet", "local": a, "prefixlen": p} for a, p in addrs]}
            for name, addrs in links]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text + "\n")


def netdev(sysfs, name, pci, mtu=1500, speed=10000):
    write(f"{sysfs}/class/net/{name}/mtu", str(mtu))
    write(f"{sysfs}/class/net/{name}/speed", str(speed))
    write(f"{sysfs}/class/net/{name}/operstate", "up")
    if pci:
        os.makedirs(f"{sysfs}/devices/{pci}/net/{name}", exist_ok=True)
        os.symlink(f"../../../devices/{pci}", f"{sysfs}/class/net/{name}/device")


def rdma(sysfs, dev, pci, gids, link_layer="Ethernet", state="4: ACTIVE", ndev=None, uverbs=None):
    """An RDMA device on a PCI function; gids: [(gid, type)] by index; uverbs: its verbs device's number."""
    os.makedirs(f"{sysfs}/devices/{pci}/infiniband/{dev}", exist_ok=True)
    if uverbs is not None:
        write(f"{sysfs}/class/infiniband/{dev}/device/infiniband_verbs/uverbs{uverbs}/ibdev", dev)
    base = f"{sysfs}/class/infiniband/{dev}/ports/1"
    write(f"{base}/state", state)
    write(f"{base}/link_layer", link_layer)
    for index, (gid, kind) in enumerate(gids):
        write(f"{base}/gids/{index}", gid)
        write(f"{base}/gid_attrs/types/{index}", kind)
        write(f"{base}/gid_attrs/ndevs/{index}", ndev or "")
    write(f"{base}/gids/{len(gids)}", "0000:0000:0000:0000:0000:0000:0000:0000")  # an empty slot


def dgx_spark(sysfs, cluster_ip, mtu=9000):
    """DGX Spark: 10G management port, Wi-Fi, one CX-7 with RoCE twins."""
    netdev(sysfs, "enP7s7", "0007:01:00.0")
    netdev(sysfs, "wlP9s9", "0009:01:00.0", speed=-1)
    netdev(sysfs, "enp1s0f0np0", "0000:01:00.0", mtu=mtu, speed=200000)
    netdev(sysfs, "enp1s0f1np1", "0000:01:00.1", mtu=mtu, speed=200000)
    mapped = ipv4_mapped_gid(cluster_ip)
    rdma(sysfs, "rocep1s0f0", "0000:01:00.0", [LINK_LOCAL_V1, LINK_LOCAL_V2], ndev="enp1s0f0np0")
    rdma(sysfs, "rocep1s0f1", "0000:01:00.1",
         [LINK_LOCAL_V1, LINK_LOCAL_V2, (mapped, "IB/RoCE v1"), (mapped, "RoCE v2")], ndev="enp1s0f1np1")
    # The twin of the same port on the second PCIe link: only link-local GIDs.
    rdma(sysfs, "roceP2p1s0f1", "0002:01:00.1", [LINK_LOCAL_V1, LINK_LOCAL_V2], ndev="enp1s0f1np1")
    return ip_json(("lo", [("127.0.0.1", 8)]), ("enP7s7", [("192.168.1.101", 24)]), ("wlP9s9", [("192.168.8.23", 24)]),
                   ("enp1s0f0np0", []), ("enp1s0f1np1", [(cluster_ip, 24), ("fe80::4e5d:3cff:fe12:3456", 64)]))


def test_dgx_spark_picks_the_cx7_port_and_the_twin_with_the_ipv4_gid(tmp_path):
    sysfs = str(tmp_path)
    facts = nccl_facts(dgx_spark(sysfs, "10.10.10.1"), sysfs, address="10.10.10.1", nccl_version="2.27.7")
    assert facts["interface"]["name"] == "enp1s0f1np1"
    assert facts["interface"]["network"] == "10.10.10.0/24"
    assert facts["interface"]["speed_mbps"] == 200000
    assert facts["transport"] == "roce"
    assert facts["nccl_ib_hca"] == ["rocep1s0f1:1"]
    assert facts["roce_v2_ipv4_gid_index"] == 3
    env = facts["recommended_env"]
    assert env == {"VLLM_HOST_IP": "10.10.10.1", "NCCL_SOCKET_IFNAME": "=enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
                   "TP_SOCKET_IFNAME": "enp1s0f1np1", "UCX_NET_DEVICES": "rocep1s0f1:1", "NCCL_IB_DISABLE": "0",
                   "NCCL_IB_HCA": "=rocep1s0f1:1"}  # no GID index: NCCL >= 2.21 chooses it
    assert any("roceP2p1s0f1:1" in w for w in facts["warnings"])


def test_gid_index_only_for_old_nccl_or_when_forced(tmp_path):
    sysfs = str(tmp_path)
    data = dgx_spark(sysfs, "10.10.10.2")
    assert nccl_facts(data, sysfs, address="10.10.10.2", nccl_version="2.20.5")["recommended_env"]["NCCL_IB_GID_INDEX"] == "3"
    assert nccl_facts(data, sysfs, address="10.10.10.2", force_gid_index=True)["recommended_env"]["NCCL_IB_GID_INDEX"] == "3"


def test_cluster_cidr_finds_the_address(tmp_path):
    sysfs = str(tmp_path)
    facts = nccl_facts(dgx_spark(sysfs, "10.10.10.7"), sysfs, cidr="10.10.10.0/24")
    assert facts["recommended_env"]["VLLM_HOST_IP"] == "10.10.10.7"
    assert facts["ray_node_ip_address"] == "10.10.10.7"


def test_mtu_1500_on_roce_is_warned(tmp_path):
    sysfs = str(tmp_path)
    facts = nccl_facts(dgx_spark(sysfs, "10.10.10.1", mtu=1500), sysfs, address="10.10.10.1")
    assert any("MTU 1500" in w for w in facts["warnings"])


def test_pcie_host_without_rdma_uses_sockets(tmp_path):
    sysfs = str(tmp_path)
    netdev(sysfs, "eno1", "0000:c1:00.0", speed=25000)
    data = ip_json(("lo", [("127.0.0.1", 8)]), ("eno1", [("10.0.5.20", 16)]), ("docker0", [("172.17.0.1", 16)]))
    facts = nccl_facts(data, sysfs, cidr="10.0.0.0/16")
    assert facts["transport"] == "socket"
    assert facts["recommended_env"]["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in facts["recommended_env"]
    assert facts["recommended_env"]["UCX_NET_DEVICES"] == "eno1"
    assert facts["warnings"] == []


def test_infiniband_host(tmp_path):
    sysfs = str(tmp_path)
    netdev(sysfs, "enp0s1", "0000:00:01.0")
    netdev(sysfs, "ibp12s0", "0000:0c:00.0", mtu=2044, speed=400000)
    for i, pci in enumerate(("0000:0c:00.0", "0000:4d:00.0")):
        rdma(sysfs, f"mlx5_{i}", pci, [("fe80:0000:0000:0000:0c42:a103:0062:9a3c", "IB/RoCE v1")],
             link_layer="InfiniBand", uverbs=i)
    # mlx5_1 is a second rail whose IPoIB interface is down: still ACTIVE on the fabric, but not this netdev's.
    data = ip_json(("enp0s1", [("192.168.0.10", 24)]), ("ibp12s0", [("172.16.0.10", 16)]))
    devfs = tmp_path / "dev"
    for node in ("uverbs0", "uverbs1", "rdma_cm"):
        write(f"{devfs}/infiniband/{node}", "")
    facts = nccl_facts(data, sysfs, address="172.16.0.10", devfs=str(devfs))
    assert facts["transport"] == "ib"
    assert facts["nccl_ib_hca"] == ["mlx5_0:1"]
    # the chosen device's verbs node and the RDMA connection manager; not the other rail's
    assert facts["container_devices"] == [f"{devfs}/infiniband/uverbs0", f"{devfs}/infiniband/rdma_cm"]
    assert "NCCL_IB_GID_INDEX" not in facts["recommended_env"]
    assert facts["warnings"] == []  # an IB MTU of 2044 is normal


def test_address_on_no_interface_names_what_was_found(tmp_path):
    sysfs = str(tmp_path)
    data = dgx_spark(sysfs, "10.10.10.1")
    with pytest.raises(NcclFactsError) as err:
        nccl_facts(data, sysfs, address="10.20.0.1")
    message = str(err.value)
    assert "10.20.0.1" in message
    assert "enP7s7 (192.168.1.101/24)" in message and "enp1s0f1np1 (10.10.10.1/24" in message


def test_down_port_is_not_used(tmp_path):
    sysfs = str(tmp_path)
    netdev(sysfs, "eth1", "0000:03:00.0", mtu=9000)
    rdma(sysfs, "mlx5_0", "0000:03:00.0", [(ipv4_mapped_gid("10.1.0.5"), "RoCE v2")], state="1: DOWN", ndev="eth1")
    facts = nccl_facts(ip_json(("eth1", [("10.1.0.5", 24)])), sysfs, address="10.1.0.5")
    assert facts["transport"] == "socket"
    assert facts["recommended_env"]["NCCL_IB_DISABLE"] == "1"


def test_rdma_port_without_a_verbs_device_node_gives_the_containers_none_and_says_so(tmp_path):
    sysfs, devfs = str(tmp_path / "sys"), str(tmp_path / "dev")
    data = dgx_spark(sysfs, "10.10.10.1")
    write(f"{sysfs}/class/infiniband/rocep1s0f1/device/infiniband_verbs/uverbs1/ibdev", "rocep1s0f1")
    facts = nccl_facts(data, sysfs, address="10.10.10.1", devfs=devfs)
    assert facts["nccl_ib_hca"] == ["rocep1s0f1:1"] and facts["container_devices"] == []
    assert any("rocep1s0f1 have no verbs device" in w for w in facts["warnings"])
    write(f"{devfs}/infiniband/uverbs1", "")
    facts = nccl_facts(data, sysfs, address="10.10.10.1", devfs=devfs)
    assert facts["container_devices"] == [f"{devfs}/infiniband/uverbs1"]  # no rdma_cm on this host
    assert not any("verbs device" in w for w in facts["warnings"])


def test_a_host_on_sockets_needs_no_device(tmp_path):
    sysfs = str(tmp_path)
    netdev(sysfs, "eno1", "0000:c1:00.0")
    facts = nccl_facts(ip_json(("eno1", [("10.0.5.20", 16)])), sysfs, cidr="10.0.0.0/16", devfs=str(tmp_path))
    assert facts["container_devices"] == []
