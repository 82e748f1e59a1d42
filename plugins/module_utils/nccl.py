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


def _pci_function(sysfs: str, link: str) -> str | None:
    """The PCI function (0000:01:00.1) a netdev's or an RDMA device's ``device`` link points at."""
    path = os.path.join(sysfs, link, "device")
    return os.path.basename(os.path.realpath(path)) if os.path.exists(path) else None


def _pci_slot(function: str | None) -> str | None:
    """0002:01:00.1 -> 01:00.1: the bus, device and function without the PCI domain."""
    return function.split(":", 1)[1] if function and function.count(":") == 2 else None


def rdma_device(sysfs: str, name: str) -> dict:
    """One RDMA device: its PCI function, system image GUID, netdevs and ports (state, link layer, GID table)."""
    ports = []
    base_dir = os.path.join(sysfs, "class/infiniband", name)
    ports_dir = os.path.join(base_dir, "ports")
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
    netdevs = sorted({g["ndev"] for p in ports for g in p["gids"] if g["ndev"]}
                     | set(_listdir(os.path.join(base_dir, "device/net"))))
    return {"name": name, "pci": _pci_function(sysfs, f"class/infiniband/{name}"),
            "sys_image_guid": _read(os.path.join(base_dir, "sys_image_guid")) or None,
            "netdevs": netdevs, "ports": ports}


def verbs_devices(sysfs: str, devfs: str, dev: str) -> list[str]:
    """The verbs character devices (devfs/infiniband/uverbsN) of one RDMA device that exist under devfs."""
    names = _listdir(os.path.join(sysfs, "class/infiniband", dev, "device/infiniband_verbs"))
    return [path for path in (os.path.join(devfs, "infiniband", name) for name in names) if os.path.exists(path)]


def hca_names(value: str | None, known: list[str]) -> list[str]:
    """The RDMA devices an NCCL_IB_HCA value selects among `known`: ``=a:1,b`` exactly those, ``a,b`` those
    whose names start so (NCCL's prefix match), ``^a`` all but those; empty or unset: none (the caller decides)."""
    value = (value or "").strip()
    if not value:
        return []
    exclude, exact = value.startswith("^"), False
    value = value.lstrip("^")
    if value.startswith("="):
        exact, value = True, value[1:]
    wanted = [entry.split(":")[0] for entry in value.split(",") if entry.strip()]

    def named(dev: str) -> bool:
        return any(dev == want if exact else dev.startswith(want) for want in wanted)
    return [dev for dev in known if named(dev) != exclude]


def container_devices(sysfs: str, devfs: str, hca: list[str]) -> tuple[list[str], list[str]]:
    """The device nodes a container needs for the chosen ports (``dev:port``), those that exist under devfs;
    and the RDMA devices that have none there (NCCL inside could not open them)."""
    devices, missing = [], []
    for dev in sorted({entry.split(":")[0] for entry in hca}):
        present = verbs_devices(sysfs, devfs, dev)
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


def _roce_v2(gid: dict) -> bool:
    return (gid["type"] or "").lower().startswith("roce v2")


def roce_v2_ipv4_index(port: dict, address: str, netdev: str) -> int | None:
    wanted = ipv4_mapped_gid(address)
    for gid in port["gids"]:
        if _roce_v2(gid) and ipaddress.IPv6Address(gid["gid"]).exploded == wanted and gid["ndev"] in (None, netdev):
            return gid["index"]
    return None


def _nccl_older_than_auto_gid(nccl_version: str | None) -> bool:
    if not nccl_version:
        return False
    parts = [int(p) for p in nccl_version.split(".")[:2] if p.isdigit()]
    return tuple(parts) < GID_AUTO_NCCL


# What each RDMA device is to the cluster link (rdma_devices[].role).
ROLES = {
    "cluster port": "the cluster interface's own",
    "twin": "the other PCI function of the cluster port (half of its bandwidth)",
    "second cable": "the adapter's other port, cabled (a ring)",
    "second cable twin": "the other PCI function of the second cable's port",
}


def _link_roles(sysfs: str, name: str, netdev_rdma: list[str]) -> dict:
    """Every RDMA device of the cluster link -> (its role, ROLES; rdma_device()). The cluster port's devices sit on
    the cluster netdev's PCI function, or their GIDs name that netdev. On RoCE the link has more halves, on the same
    adapter (the same system image GUID): the cluster port's twin functions share its PCI slot (bus, device,
    function) in another PCI domain - a DGX Spark's two PCIe x4 links to one QSFP port, each on its own netdev -;
    the adapter's other port has another function number (the lowest PCI domain stands for it, its other
    functions are its twins). Whether each is ACTIVE and usable is the caller's to judge."""
    devices = {dev: rdma_device(sysfs, dev) for dev in _listdir(os.path.join(sysfs, "class/infiniband"))}
    roles = {dev: "cluster port" for dev, info in devices.items() if dev in netdev_rdma or name in info["netdevs"]}
    cluster_slots = {_pci_slot(devices[dev]["pci"]) for dev in roles} - {None}
    guids = {devices[dev]["sys_image_guid"] for dev in roles} - {None}
    roce = all(p["link_layer"] == "Ethernet" for dev in roles for p in devices[dev]["ports"])
    same_adapter = sorted((info["pci"] or dev, dev) for dev, info in devices.items()
                          if roce and dev not in roles and info["sys_image_guid"] in guids)
    other_slots = set()
    for pci, dev in same_adapter:
        slot = _pci_slot(pci)
        if slot in cluster_slots:
            roles[dev] = "twin"
        else:
            roles[dev] = "second cable twin" if slot in other_slots else "second cable"
            other_slots.add(slot)
    return {dev: (roles[dev], devices[dev]) for dev in sorted(roles)}


def _judge_ports(role: str, info: dict, address: str, netdev: str) -> None:
    """Mark each port of a link device: whether it carries the cluster address, and whether NCCL can use it."""
    for port in info["ports"]:
        port["roce_v2_ipv4_gid_index"] = None
        if port["link_layer"] != "Ethernet":
            port["carries_cluster_address"] = True  # InfiniBand: IPoIB address, addressing by LID/GUID
            port["usable"] = True
        elif role == "cluster port":
            port["roce_v2_ipv4_gid_index"] = roce_v2_ipv4_index(port, address, netdev)
            port["carries_cluster_address"] = port["usable"] = port["roce_v2_ipv4_gid_index"] is not None
        else:
            # A twin or a second cable reaches its peer through its own GIDs: a RoCE v2 link-local one (built from
            # its own netdev's MAC) does, an IPv4 address on its netdev is not needed.
            port["carries_cluster_address"] = False
            port["usable"] = any(_roce_v2(gid) for gid in port["gids"])
        port["used"] = port["active"] and port["usable"]


def _link_warnings(link: dict, name: str, address: str) -> list[str]:
    warnings = []
    # A second cable's twin matters only where that cable is in: its first function is ACTIVE.
    cabled = {_pci_slot(info["pci"]) for role, info in link.values()
              if role == "second cable" and any(p["active"] for p in info["ports"])}
    for dev, (role, info) in link.items():
        label = f"{', '.join(info['netdevs']) or 'no netdev'}, PCI {info['pci'] or '?'}"
        for port in info["ports"]:
            hca = f"{dev}:{port['port']}"
            if role == "cluster port" and port["active"] and not port["usable"]:
                warnings.append(f"RDMA port(s) {hca} on {name} carry no RoCE v2 GID for {address} and are left out of "
                                "NCCL_IB_HCA")
            elif (role == "twin" or (role == "second cable twin" and _pci_slot(info["pci"]) in cabled)) \
                    and not port["active"]:
                warnings.append(f"{hca} ({label}), {ROLES[role]}, is {port['state'] or 'not ACTIVE'}: NCCL gets "
                                "half of that port's bandwidth. Bring its netdev up (ip link set DEV up, or "
                                "cluster_network_manage: true) and check that the cable gives both PCI functions a "
                                "link")
            elif role != "cluster port" and port["active"] and not port["usable"]:
                warnings.append(f"{hca} ({label}), {ROLES[role]}, is ACTIVE but has no RoCE v2 GID (its netdev "
                                "has no IPv6 link-local address?) and is left out of NCCL_IB_HCA")
    return warnings


def nccl_facts(ip_addr: list[dict], sysfs: str, address: str | None = None, cidr: str | None = None,
               nccl_version: str | None = None, force_gid_index: bool = False, devfs: str = "/dev") -> dict:
    interfaces = interfaces_from_ip_json(ip_addr)
    interface, entry = find_cluster_interface(interfaces, address, cidr)
    name = interface["name"]
    netdev = netdev_facts(sysfs, name)
    network = ipaddress.ip_interface(f"{entry['address']}/{entry['prefixlen']}").network
    link = _link_roles(sysfs, name, netdev["rdma_devices"])
    rdma, hca, gid_index = [], [], None
    for dev, (role, info) in link.items():
        _judge_ports(role, info, entry["address"], name)
        rdma.append(dict(info, role=role))
        for port in info["ports"]:
            if port["used"]:
                hca.append(f"{dev}:{port['port']}")
                if gid_index is None and role == "cluster port":
                    gid_index = port["roce_v2_ipv4_gid_index"]
    warnings = _link_warnings(link, name, entry["address"])
    link_layers = {p["link_layer"] for d in rdma for p in d["ports"] if p["used"]}
    transport = "socket" if not hca else ("ib" if link_layers == {"InfiniBand"} else "roce")
    pin_gid = transport == "roce" and gid_index is not None and (force_gid_index or _nccl_older_than_auto_gid(nccl_version))
    if pin_gid:
        # One NCCL_IB_GID_INDEX for every HCA: a half whose GID at that index is not RoCE v2 would not connect.
        for dev, (role, info) in link.items():
            for port in info["ports"]:
                at = next((g for g in port["gids"] if g["index"] == gid_index), None)
                if port["used"] and role != "cluster port" and not (at and _roce_v2(at)):
                    hca.remove(f"{dev}:{port['port']}")
                    port["used"] = False
                    warnings.append(f"{dev}:{port['port']}, {ROLES[role]}, has no RoCE v2 GID at index "
                                    f"{gid_index}, the one NCCL_IB_GID_INDEX gives every HCA (NCCL older than 2.21, "
                                    "or nccl_force_gid_index): it is left out. NCCL 2.21 or newer picks each "
                                    "port's GID itself and uses it")
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
    if pin_gid:
        env["NCCL_IB_GID_INDEX"] = str(gid_index)
    if transport == "roce" and netdev["mtu"] and netdev["mtu"] < 9000:
        warnings.append(f"{name} has MTU {netdev['mtu']}: RoCE wants jumbo frames (9000) on every node and switch "
                        "port, or NCCL runs well below line rate")
    if netdev["operstate"] not in (None, "up", "unknown"):
        warnings.append(f"{name} is {netdev['operstate']}")
    devices, without_node = container_devices(sysfs, devfs, hca)
    if without_node:
        warnings.append(f"RDMA device(s) {', '.join(without_node)} have no verbs device under {devfs}/infiniband "
                        "(is ib_uverbs loaded?): the containers get none, and NCCL in them uses TCP sockets")
    rdma_cm = os.path.join(devfs, "infiniband", "rdma_cm")
    return {
        "interface": {"name": name, "address": entry["address"], "prefixlen": entry["prefixlen"],
                      "network": str(network), "mtu": netdev["mtu"], "speed_mbps": netdev["speed_mbps"],
                      "operstate": netdev["operstate"]},
        "rdma_devices": rdma,
        "nccl_ib_hca": hca,
        "container_devices": devices,
        # Every RDMA device of the host: what an NCCL_IB_HCA set by hand may name (rdma_container_devices).
        "verbs_devices": {dev: verbs_devices(sysfs, devfs, dev)
                          for dev in _listdir(os.path.join(sysfs, "class/infiniband"))},
        "rdma_cm": rdma_cm if os.path.exists(rdma_cm) else None,
        "roce_v2_ipv4_gid_index": gid_index,
        "transport": transport,
        "ray_node_ip_address": entry["address"],
        "recommended_env": env,
        "warnings": warnings,
    }


def rdma_container_devices(facts: dict, nccl_ib_hca: str | None) -> list[str]:
    """The device nodes the serving containers get for the NCCL_IB_HCA they run with (the cluster environment's,
    which an operator may have set by hand): each selected device's verbs nodes, and rdma_cm."""
    verbs = facts.get("verbs_devices") or {}
    devices = [path for dev in hca_names(nccl_ib_hca, sorted(verbs)) for path in verbs[dev]]
    return [*devices, facts["rdma_cm"]] if devices and facts.get("rdma_cm") else devices


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
