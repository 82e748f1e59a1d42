"""nccl_facts over sysfs fixture trees faithful to real hosts: a DGX Spark (one cable with one or both twins
addressed, a twin down, a ring of two cables, the cluster on its RJ45 port), a PCIe host on plain Ethernet, an
InfiniBand host."""

import os

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import NcclFactsError, ipv4_mapped_gid, nccl_facts, rdma_container_devices


def ip_json(*links):
    """`ip -j addr show` shaped data: (ifname, [(address, prefixlen), ...])."""
    return [{"ifname": name, "operstate": "UP",
             "addr_info": [{"family": "inet6" if ":" in a else "inet", "local": a, "prefixlen": p} for a, p in addrs]}
            for name, addrs in links]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text + "\n")


def pci_dir(sysfs, pci):
    """The PCI function's directory, as /sys/devices holds it."""
    path = f"{sysfs}/devices/pci{pci[:4]}:00/{pci}"
    os.makedirs(path, exist_ok=True)
    return path


def netdev(sysfs, name, pci, mtu=1500, speed=10000, operstate="up"):
    write(f"{sysfs}/class/net/{name}/mtu", str(mtu))
    write(f"{sysfs}/class/net/{name}/speed", str(speed))
    write(f"{sysfs}/class/net/{name}/operstate", operstate)
    if pci:
        os.makedirs(f"{pci_dir(sysfs, pci)}/net/{name}", exist_ok=True)
        os.symlink(pci_dir(sysfs, pci), f"{sysfs}/class/net/{name}/device")


def rdma(sysfs, dev, pci, gids, link_layer="Ethernet", state="4: ACTIVE", ndev=None, uverbs=None, guid=None):
    """An RDMA device on a PCI function (its `device` link, as sysfs has it); gids: [(gid, type)] by index, each
    naming `ndev`; uverbs: its verbs device's number; guid: the adapter's system image GUID."""
    function = pci_dir(sysfs, pci)
    os.makedirs(f"{function}/infiniband/{dev}", exist_ok=True)
    os.makedirs(f"{sysfs}/class/infiniband/{dev}", exist_ok=True)
    os.symlink(function, f"{sysfs}/class/infiniband/{dev}/device")
    if uverbs is not None:
        write(f"{function}/infiniband_verbs/uverbs{uverbs}/ibdev", dev)
    if guid:
        write(f"{sysfs}/class/infiniband/{dev}/sys_image_guid", guid)
    base = f"{sysfs}/class/infiniband/{dev}/ports/1"
    write(f"{base}/state", state)
    write(f"{base}/link_layer", link_layer)
    for index, (gid, kind) in enumerate(gids):
        write(f"{base}/gids/{index}", gid)
        write(f"{base}/gid_attrs/types/{index}", kind)
        write(f"{base}/gid_attrs/ndevs/{index}", ndev or "")
    write(f"{base}/gids/{len(gids)}", "0000:0000:0000:0000:0000:0000:0000:0000")  # an empty slot


# A DGX Spark's ConnectX-7: two QSFP ports, each reached over two PCIe x4 links (PCI domains 0000 and 0002), so each
# port is two PCI functions, each with its own netdev and RDMA device ("twins"). Function 0 is the first port,
# function 1 the second. Every function's GIDs name its own netdev; GIDs 0 and 1 are the link-local address built
# from that netdev's MAC, an IPv4 address on the netdev adds a pair more.
SPARK_FUNCTIONS = {  # netdev: (RDMA device, PCI function, last byte of its MAC; its verbs device is uverbsN)
    "enp1s0f0np0": ("rocep1s0f0", "0000:01:00.0", 0x50),
    "enp1s0f1np1": ("rocep1s0f1", "0000:01:00.1", 0x51),
    "enP2p1s0f0np0": ("roceP2p1s0f0", "0002:01:00.0", 0x52),
    "enP2p1s0f1np1": ("roceP2p1s0f1", "0002:01:00.1", 0x53),
}


def spark_devfs(tmp_path):
    """The host's /dev/infiniband: a verbs device per function, and the RDMA connection manager."""
    for node in ("uverbs0", "uverbs1", "uverbs2", "uverbs3", "rdma_cm"):
        write(f"{tmp_path}/dev/infiniband/{node}", "")
    return f"{tmp_path}/dev"
SPARK_GUID = "4cbb:4703:00f2:1e2a"


def link_local(mac_byte):
    return f"fe80:0000:0000:0000:4e5d:3cff:fe12:34{mac_byte:02x}"


def dgx_spark(sysfs, cluster_ip, mtu=9000, addresses=None, active=("enp1s0f1np1", "enP2p1s0f1np1"), uverbs=True):
    """A DGX Spark: 10G management port, Wi-Fi and the CX-7 above. addresses: netdev -> its IPv4 address (/24);
    by default only the cluster port's first function has one (the common case). active: the functions whose
    port is up (by default both functions of the second QSFP port: one cable)."""
    addresses = {"enp1s0f1np1": cluster_ip} if addresses is None else addresses
    netdev(sysfs, "enP7s7", "0007:01:00.0")
    netdev(sysfs, "wlP9s9", "0009:01:00.0", speed=-1)
    links = [("lo", [("127.0.0.1", 8)]), ("enP7s7", [("192.168.1.101", 24)]), ("wlP9s9", [("192.168.8.23", 24)])]
    for number, (name, (dev, pci, mac)) in enumerate(SPARK_FUNCTIONS.items()):
        up = name in active
        netdev(sysfs, name, pci, mtu=mtu, speed=200000 if up else -1, operstate="up" if up else "down")
        gids = [(link_local(mac), "IB/RoCE v1"), (link_local(mac), "RoCE v2")]
        if name in addresses:
            gids += [(ipv4_mapped_gid(addresses[name]), "IB/RoCE v1"), (ipv4_mapped_gid(addresses[name]), "RoCE v2")]
        rdma(sysfs, dev, pci, gids, ndev=name, guid=SPARK_GUID, state="4: ACTIVE" if up else "1: DOWN",
             uverbs=number if uverbs else None)
        own = [(addresses[name], 24)] if name in addresses else []
        links.append((name, own + ([(f"fe80::4e5d:3cff:fe12:34{mac:02x}", 64)] if up else [])))
    return ip_json(*links)


def test_dgx_spark_one_cable_uses_both_halves_of_the_port(tmp_path):
    """The common case: only the first function of the cabled port has an IPv4 address; its twin reaches the peer's
    twin through its link-local GID. NCCL gets both halves."""
    sysfs = str(tmp_path)
    facts = nccl_facts(dgx_spark(sysfs, "10.10.10.1"), sysfs, address="10.10.10.1", nccl_version="2.27.7",
                       devfs=spark_devfs(tmp_path))
    assert facts["interface"]["name"] == "enp1s0f1np1"
    assert facts["interface"]["network"] == "10.10.10.0/24"
    assert facts["interface"]["speed_mbps"] == 200000
    assert facts["transport"] == "roce"
    assert facts["nccl_ib_hca"] == ["roceP2p1s0f1:1", "rocep1s0f1:1"]
    assert facts["roce_v2_ipv4_gid_index"] == 3
    env = facts["recommended_env"]
    assert env == {"VLLM_HOST_IP": "10.10.10.1", "NCCL_SOCKET_IFNAME": "=enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
                   "TP_SOCKET_IFNAME": "enp1s0f1np1", "UCX_NET_DEVICES": "roceP2p1s0f1:1,rocep1s0f1:1",
                   "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=roceP2p1s0f1:1,rocep1s0f1:1"}  # no GID index: NCCL >= 2.21
    roles = {d["name"]: (d["role"], [p["used"] for p in d["ports"]]) for d in facts["rdma_devices"]}
    assert roles == {"rocep1s0f1": ("cluster port", [True]), "roceP2p1s0f1": ("twin", [True]),
                     "rocep1s0f0": ("second cable", [False]), "roceP2p1s0f0": ("second cable twin", [False])}
    twin = next(d for d in facts["rdma_devices"] if d["name"] == "roceP2p1s0f1")
    assert twin["netdevs"] == ["enP2p1s0f1np1"] and twin["pci"] == "0002:01:00.1"
    # the containers get the verbs devices of both halves
    assert facts["container_devices"] == [f"{tmp_path}/dev/infiniband/{n}" for n in ("uverbs3", "uverbs1", "rdma_cm")]
    assert facts["warnings"] == []  # the other port has no cable: nothing to say


def test_dgx_spark_both_twins_addressed(tmp_path):
    sysfs = str(tmp_path)
    data = dgx_spark(sysfs, "10.10.10.1", addresses={"enp1s0f1np1": "10.10.10.1", "enP2p1s0f1np1": "10.10.11.1"})
    facts = nccl_facts(data, sysfs, address="10.10.10.1", devfs=spark_devfs(tmp_path))
    assert facts["nccl_ib_hca"] == ["roceP2p1s0f1:1", "rocep1s0f1:1"]
    assert facts["warnings"] == []


def test_dgx_spark_ring_of_two_cables_uses_all_four_functions(tmp_path):
    """Three or four Sparks in a ring: both QSFP ports cabled, each to another neighbour (its own subnet)."""
    sysfs = str(tmp_path)
    data = dgx_spark(sysfs, "10.10.10.1", active=tuple(SPARK_FUNCTIONS),
                     addresses={"enp1s0f1np1": "10.10.10.1", "enp1s0f0np0": "10.10.20.1"})
    facts = nccl_facts(data, sysfs, address="10.10.10.1", devfs=spark_devfs(tmp_path))
    assert facts["nccl_ib_hca"] == ["roceP2p1s0f0:1", "roceP2p1s0f1:1", "rocep1s0f0:1", "rocep1s0f1:1"]
    assert {d["name"]: d["role"] for d in facts["rdma_devices"]}["rocep1s0f0"] == "second cable"
    assert facts["warnings"] == []


def test_dgx_spark_twin_down_is_reported_with_half_the_bandwidth(tmp_path):
    sysfs = str(tmp_path)
    facts = nccl_facts(dgx_spark(sysfs, "10.10.10.1", active=("enp1s0f1np1",)), sysfs, address="10.10.10.1",
                       devfs=spark_devfs(tmp_path))
    assert facts["nccl_ib_hca"] == ["rocep1s0f1:1"]
    [warning] = facts["warnings"]
    assert warning.startswith("roceP2p1s0f1:1 (enP2p1s0f1np1, PCI 0002:01:00.1), the other PCI function of the "
                              "cluster port (half of its bandwidth), is 1: DOWN: NCCL gets half of that port's bandwidth")


def test_dgx_spark_cluster_on_the_10g_port_is_plain_ethernet(tmp_path):
    """The cluster network on the RJ45 management port: sockets, the CX-7 is not the cluster's."""
    sysfs = str(tmp_path)
    data = dgx_spark(sysfs, "10.10.10.1")
    facts = nccl_facts(data, sysfs, address="192.168.1.101")
    assert facts["transport"] == "socket" and facts["nccl_ib_hca"] == [] and facts["rdma_devices"] == []
    assert facts["recommended_env"]["NCCL_IB_DISABLE"] == "1"


def test_gid_index_only_for_old_nccl_or_when_forced(tmp_path):
    sysfs = str(tmp_path)
    data = dgx_spark(sysfs, "10.10.10.2")
    old = nccl_facts(data, sysfs, address="10.10.10.2", nccl_version="2.20.5", devfs=spark_devfs(tmp_path))
    assert old["recommended_env"]["NCCL_IB_GID_INDEX"] == "3"
    # one index for every HCA: the twin, whose GIDs end at 1, cannot take part
    assert old["nccl_ib_hca"] == ["rocep1s0f1:1"]
    assert any(w.startswith("roceP2p1s0f1:1, the other PCI function of the cluster port (half of its bandwidth), "
                            "has no RoCE v2 GID at index 3") for w in old["warnings"])
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
    data = dgx_spark(sysfs, "10.10.10.1", active=("enp1s0f1np1",), uverbs=False)
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


@pytest.mark.parametrize(("hca", "devices"), [
    ("=rocep1s0f1:1", ["uverbs1", "rdma_cm"]),
    ("=roceP2p1s0f1:1,rocep1s0f1:1", ["uverbs3", "uverbs1", "rdma_cm"]),
    ("rocep1", ["uverbs0", "uverbs1", "rdma_cm"]),  # a prefix, as NCCL matches it
    ("^rocep1s0f0,roceP2p1s0f0", ["uverbs3", "uverbs1", "rdma_cm"]),  # all but those
    ("", []),
])
def test_containers_get_the_devices_of_the_nccl_ib_hca_they_run_with(tmp_path, hca, devices):
    """An NCCL_IB_HCA set by hand (nccl_env) gives the containers its devices, not the detected ones."""
    sysfs = str(tmp_path / "sys")
    facts = nccl_facts(dgx_spark(sysfs, "10.10.10.1"), sysfs, address="10.10.10.1", devfs=spark_devfs(tmp_path))
    assert rdma_container_devices(facts, hca) == [f"{tmp_path}/dev/infiniband/{n}" for n in devices]
