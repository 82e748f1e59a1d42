# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which network a node's cluster traffic takes, and the environment that
pins Ray, vLLM, NCCL, Gloo and UCX to it.

Inputs are the host's addresses (``ip -j addr show``) and its sysfs tree
(``/sys`` or a fixture), so tests point the code at recorded trees:

* ``/sys/class/net/<if>/{mtu,speed,operstate}`` and
  ``/sys/class/net/<if>/device/infiniband/<dev>`` (netdev -> RDMA device);
* ``/sys/class/infiniband/<dev>/ports/<n>/{state,link_layer}`` and the GID
  table ``gids/<i>``, ``gid_attrs/types/<i>``, ``gid_attrs/ndevs/<i>``;
* ``/sys/class/infiniband/<dev>/device/infiniband_verbs/uverbs<n>``: the
  verbs character device a process opens for that RDMA device
  (``/dev/infiniband/uverbs<n>``); a container needs it, with
  ``/dev/infiniband/rdma_cm`` where the host has it, or NCCL inside falls
  back to TCP sockets.

Facts from shared/notes/rdma.md: judge ports by sysfs state (4: ACTIVE), not
ibdev2netdev; the right GID is the RoCE v2 one holding the IPv4-mapped
cluster address (::ffff:a.b.c.d), not "the first RoCE v2 entry"; twins of
one port may hold it at different indexes, or not at all; NCCL >= 2.21 picks
the GID itself, so NCCL_IB_GID_INDEX is recommended only for older NCCL.
"""

from __future__ import annotations

import ipaddress
import os

GID_AUTO_NCCL = (2, 21)
# What the environment below pins on each node: its address, interfaces, RDMA devices and GID. An image that
# bakes one of these (ENV NCCL_SOCKET_IFNAME=eth0) names an interface of the machine it was built on: the
# serving containers never keep the image's value (image_env_overrides).
NETWORK_ENV = ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES",
               "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX")
# Image ENV that names the package's version, not a setting NCCL reads (nvidia/cuda images: NCCL_VERSION=2.25.1-1).
_NOT_SETTINGS = ("NCCL_VERSION",)


class NcclFactsError(Exception):
    """A failure with the message an operator needs."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def interfaces_from_ip_json(ip_addr: list[dict]) -> list[dict]:
    """`ip -j addr show` -> [{name, addresses: [{address, prefixlen}]}] (IPv4 and IPv6)."""
    found = []
    for link in ip_addr:
        addresses = [{"address": a["local"], "prefixlen": int(a["prefixlen"]), "family": a.get("family")}
                     for a in link.get("addr_info", []) if "local" in a]
        found.append({"name": link["ifname"], "addresses": addresses, "operstate": link.get("operstate")})
    return found


def find_cluster_interface(interfaces: list[dict], address: str | None, cidr: str | None) -> tuple[dict, dict]:
    """The interface and address that carry the cluster traffic."""
    if not address and not cidr:
        raise NcclFactsError("give the node's cluster address or the cluster CIDR")
    network = ipaddress.ip_network(cidr, strict=False) if cidr else None
    for interface in interfaces:
        for entry in interface["addresses"]:
            ip = ipaddress.ip_address(entry["address"])
            if (address and ip == ipaddress.ip_address(address)) or (not address and network and ip in network):
                return interface, entry
    seen = "; ".join(f"{i['name']} ({', '.join(a['address'] + '/' + str(a['prefixlen']) for a in i['addresses']) or 'no address'})"
                     for i in interfaces)
    wanted = f"address {address}" if address else f"an address in {cidr}"
    raise NcclFactsError(f"no interface of this host has the cluster {wanted}; interfaces found: {seen}. "
                         "Set the node's cluster address (nccl_cluster_address) to an address it has, "
                         "or bring up the cluster network")


def netdev_facts(sysfs: str, name: str) -> dict:
    base = os.path.join(sysfs, "class/net", name)
    speed = _read(os.path.join(base, "speed"))
    mtu = _read(os.path.join(base, "mtu"))
    return {
        "mtu": int(mtu) if mtu and mtu.isdigit() else None,
        "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
        "operstate": _read(os.path.join(base, "operstate")),
        "rdma_devices": _listdir(os.path.join(base, "device/infiniband")),
    }


def rdma_device(sysfs: str, name: str) -> dict:
    """One RDMA device: ports with state, link layer and GID table."""
    ports = []
    ports_dir = os.path.join(sysfs, "class/infiniband", name, "ports")
    for port in _listdir(ports_dir):
        base = os.path.join(ports_dir, port)
        state = _read(os.path.join(base, "state")) or ""
        gids = []
        for index in sorted(_listdir(os.path.join(base, "gids")), key=lambda s: int(s) if s.isdigit() else 0):
            gid = _read(os.path.join(base, "gids", index))
            if not gid or gid.replace(":", "").strip("0") == "":
                continue  # an empty slot
            gids.append({"index": int(index), "gid": gid,
                         "type": _read(os.path.join(base, "gid_attrs/types", index)),
                         "ndev": _read(os.path.join(base, "gid_attrs/ndevs", index))})
        ports.append({"port": int(port), "state": state, "active": state.startswith("4"),
                      "link_layer": _read(os.path.join(base, "link_layer")), "gids": gids})
    return {"name": name, "ports": ports}


def container_devices(sysfs: str, devfs: str, hca: list[str]) -> tuple[list[str], list[str]]:
    """The device nodes a container needs for the chosen ports (``dev:port``), those that exist under devfs;
    and the RDMA devices that have none there (NCCL inside could not open them)."""
    devices, missing = [], []
    for dev in sorted({entry.split(":")[0] for entry in hca}):
        verbs = [os.path.join(devfs, "infiniband", name)
                 for name in _listdir(os.path.join(sysfs, "class/infiniband", dev, "device/infiniband_verbs"))]
        present = [path for path in verbs if os.path.exists(path)]
        devices.extend(present)
        if not present:
            missing.append(dev)
    rdma_cm = os.path.join(devfs, "infiniband", "rdma_cm")
    if devices and os.path.exists(rdma_cm):
        devices.append(rdma_cm)
    return devices, missing


def ipv4_mapped_gid(address: str) -> str:
    """::ffff:10.0.0.1 as the kernel prints GIDs: 0000:...:ffff:0a00:0001."""
    packed = ipaddress.IPv6Address("::ffff:" + address).exploded
    return packed


def roce_v2_ipv4_index(port: dict, address: str, netdev: str) -> int | None:
    wanted = ipv4_mapped_gid(address)
    for gid in port["gids"]:
        if (gid["type"] or "").lower().startswith("roce v2") and \
                ipaddress.IPv6Address(gid["gid"]).exploded == wanted and gid["ndev"] in (None, netdev):
            return gid["index"]
    return None


def _nccl_older_than_auto_gid(nccl_version: str | None) -> bool:
    if not nccl_version:
        return False
    parts = [int(p) for p in nccl_version.split(".")[:2] if p.isdigit()]
    return tuple(parts) < GID_AUTO_NCCL


def nccl_facts(ip_addr: list[dict], sysfs: str, address: str | None = None, cidr: str | None = None,
               nccl_version: str | None = None, force_gid_index: bool = False, devfs: str = "/dev") -> dict:
    interfaces = interfaces_from_ip_json(ip_addr)
    interface, entry = find_cluster_interface(interfaces, address, cidr)
    name = interface["name"]
    netdev = netdev_facts(sysfs, name)
    network = ipaddress.ip_interface(f"{entry['address']}/{entry['prefixlen']}").network
    # RDMA devices on this network: mapped from the netdev, or whose GIDs name it.
    candidates = set(netdev["rdma_devices"])
    for dev in _listdir(os.path.join(sysfs, "class/infiniband")):
        for port_name in _listdir(os.path.join(sysfs, "class/infiniband", dev, "ports")):
            ndevs = os.path.join(sysfs, "class/infiniband", dev, "ports", port_name, "gid_attrs/ndevs")
            if any(_read(os.path.join(ndevs, i)) == name for i in _listdir(ndevs)):
                candidates.add(dev)
    devices, hca, gid_index = [], [], None
    for dev in sorted(candidates):
        info = rdma_device(sysfs, dev)
        for port in info["ports"]:
            port["roce_v2_ipv4_gid_index"] = None
            if port["link_layer"] == "Ethernet":
                port["roce_v2_ipv4_gid_index"] = roce_v2_ipv4_index(port, entry["address"], name)
                carries = port["roce_v2_ipv4_gid_index"] is not None
            else:
                carries = True  # InfiniBand: IPoIB address, addressing by LID/GUID
            port["carries_cluster_address"] = carries
            if port["active"] and carries:
                hca.append(f"{dev}:{port['port']}")
                if gid_index is None:
                    gid_index = port["roce_v2_ipv4_gid_index"]
        devices.append(info)
    link_layers = {p["link_layer"] for d in devices for p in d["ports"] if f"{d['name']}:{p['port']}" in hca}
    transport = "socket" if not hca else ("ib" if link_layers == {"InfiniBand"} else "roce")
    env = {
        "VLLM_HOST_IP": entry["address"],
        "NCCL_SOCKET_IFNAME": "=" + name,
        "GLOO_SOCKET_IFNAME": name,
        "TP_SOCKET_IFNAME": name,
        "UCX_NET_DEVICES": ",".join(hca) if hca else name,
        "NCCL_IB_DISABLE": "0" if hca else "1",
    }
    if hca:
        env["NCCL_IB_HCA"] = "=" + ",".join(hca)
    if transport == "roce" and gid_index is not None and (force_gid_index or _nccl_older_than_auto_gid(nccl_version)):
        env["NCCL_IB_GID_INDEX"] = str(gid_index)
    warnings = []
    if transport == "roce" and netdev["mtu"] and netdev["mtu"] < 9000:
        warnings.append(f"{name} has MTU {netdev['mtu']}: RoCE wants jumbo frames (9000) on every node and switch "
                        "port, or NCCL runs well below line rate")
    if netdev["operstate"] not in (None, "up", "unknown"):
        warnings.append(f"{name} is {netdev['operstate']}")
    twins_without = [f"{d['name']}:{p['port']}" for d in devices for p in d["ports"]
                     if p["active"] and not p["carries_cluster_address"]]
    if twins_without:
        warnings.append(f"RDMA port(s) {', '.join(twins_without)} on {name} carry no RoCE v2 GID for "
                        f"{entry['address']} and are left out of NCCL_IB_HCA")
    devices, without_node = container_devices(sysfs, devfs, hca)
    if without_node:
        warnings.append(f"RDMA device(s) {', '.join(without_node)} have no verbs device under {devfs}/infiniband "
                        "(is ib_uverbs loaded?): the containers get none, and NCCL in them uses TCP sockets")
    return {
        "interface": {"name": name, "address": entry["address"], "prefixlen": entry["prefixlen"],
                      "network": str(network), "mtu": netdev["mtu"], "speed_mbps": netdev["speed_mbps"],
                      "operstate": netdev["operstate"]},
        "rdma_devices": devices,
        "nccl_ib_hca": hca,
        "container_devices": devices,
        "roce_v2_ipv4_gid_index": gid_index,
        "transport": transport,
        "ray_node_ip_address": entry["address"],
        "recommended_env": env,
        "warnings": warnings,
    }


def network_settings(image_env: dict) -> dict:
    """The image ENV that tunes or pins the cluster network (NCCL_*, GLOO_*, UCX_*, TP_SOCKET_IFNAME, VLLM_HOST_IP):
    what the nccl role's cluster.env competes with."""
    return {name: value for name, value in sorted((image_env or {}).items())
            if name not in _NOT_SETTINGS
            and (name.startswith(("NCCL_", "GLOO_", "UCX_")) or name in NETWORK_ENV)}


def image_env_overrides(image_env: dict, cluster_env: dict, node: str, image: str) -> dict:
    """What the serving containers of `node` must not take from the image's ENV: for each NETWORK_ENV variable
    the image sets, the node's cluster.env value replaces it (docker run --env-file) or, where cluster.env does
    not set it, the variable is removed (docker run --env NAME, with NAME unset in the docker client's own
    environment, deletes the image's value). Returns {"replaced": {name: node value}, "removed": [names],
    "warnings": [one sentence per variable]}."""
    replaced, removed, warnings = {}, [], []
    for name in NETWORK_ENV:
        if name not in (image_env or {}):
            continue
        baked = f"image {image} sets {name}={image_env[name]}"
        if name in (cluster_env or {}):
            replaced[name] = cluster_env[name]
            warnings.append(f"{baked}; on {node} the cluster's setting {name}={cluster_env[name]} is used instead")
        else:
            removed.append(name)
            warnings.append(f"{baked}; on {node} the cluster's settings leave {name} unset, so the serving "
                            "containers get it removed (the library's own default applies)")
    return {"replaced": replaced, "removed": removed, "warnings": warnings}
