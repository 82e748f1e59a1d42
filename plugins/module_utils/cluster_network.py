# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster link's settings, checked before the node's network manager gets them (role cluster_network).

Each node lists the interfaces of its cluster link (a DGX Spark: both PCI functions of the cabled QSFP port, the
"twins"), each with an optional address (CIDR) and MTU. Nothing is applied when any node has a problem: an interface
the host lacks, the one its SSH session or its default route uses, an address that is not a host address, taken
twice, or with no other node on its subnet, an MTU outside what Ethernet carries, or a cluster address (the nccl
role's) that the link would not hold.
"""

from __future__ import annotations

import ipaddress

MTU_RANGE = (1280, 9216)  # IPv6's minimum; the largest jumbo frame ConnectX and common switches take


def host_addresses(facts: dict) -> dict[str, list[str]]:
    """Interface -> its addresses, from Ansible's network facts (ansible_<if>.ipv4, ipv4_secondaries, ipv6)."""
    found = {}
    for name in facts.get("ansible_interfaces") or []:
        entry = facts.get("ansible_" + name.replace("-", "_").replace(".", "_")) or {}
        ipv4 = [entry["ipv4"]] if isinstance(entry.get("ipv4"), dict) else []
        found[name] = [a["address"] for a in ipv4 + (entry.get("ipv4_secondaries") or []) + (entry.get("ipv6") or [])
                       if a.get("address")]
    return found


def _interface_of(addresses: dict[str, list[str]], address: str | None) -> str | None:
    if not address:
        return None
    return next((name for name, held in addresses.items() if address in held), None)


def _check_entry(host: str, entry, mtu_default: int) -> tuple[list[str], dict | None]:
    """One item of cluster_network_interfaces -> (problems, {name, address, mtu})."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry.get("name"):
        return [f"{host}: each item of cluster_network_interfaces is a mapping with a name (and an optional address "
                f"and mtu); got {entry!r}"], None
    problems, name = [], entry["name"]
    unknown = sorted(set(entry) - {"name", "address", "mtu"})
    if unknown:
        problems.append(f"{host}: {name} has settings this role does not know: {', '.join(unknown)} (name, address, "
                        "mtu)")
    address = entry.get("address") or None
    if address is not None:
        try:
            parsed = ipaddress.ip_interface(str(address))
        except ValueError:
            parsed = None
        if parsed is None or "/" not in str(address):
            problems.append(f"{host}: {name}'s address {address!r} is not an address with its prefix length "
                            "(10.10.10.1/24)")
        elif parsed.network.num_addresses > 2 and parsed.ip in (parsed.network.network_address,
                                                                parsed.network.broadcast_address) \
                and parsed.version == 4:
            problems.append(f"{host}: {name}'s address {address} is its network's "
                            f"{'network' if parsed.ip == parsed.network.network_address else 'broadcast'} address")
    mtu = entry.get("mtu", mtu_default)
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not MTU_RANGE[0] <= mtu <= MTU_RANGE[1]:
        problems.append(f"{host}: {name}'s MTU {mtu!r} is not between {MTU_RANGE[0]} and {MTU_RANGE[1]} (9000: "
                        "jumbo frames, which RoCE wants on every node and switch port)")
    return problems, {"name": name, "address": address, "mtu": mtu}


def problems(nodes: dict, mtu: int = 9000, cidr: str | None = None) -> list[str]:
    """nodes: host -> {interfaces: cluster_network_interfaces, facts: Ansible's network and env facts of the
    host, cluster_address: the nccl role's nccl_cluster_address}. One sentence per problem; empty when the link
    may be set up."""
    found, owners, links = [], {}, {}
    for host, node in sorted(nodes.items()):
        wanted = node.get("interfaces")
        if not isinstance(wanted, list) or not wanted:
            found.append(f"{host}: cluster_network_manage is true but cluster_network_interfaces is "
                         f"{wanted!r}: list the cluster link's interfaces of this node (a DGX Spark: both PCI "
                         "functions of the cabled port, e.g. enp1s0f1np1 and enP2p1s0f1np1)")
            continue
        facts = node.get("facts") or {}
        addresses = host_addresses(facts)
        session = (((facts.get("ansible_env") or {}).get("SSH_CONNECTION")) or "").split()
        ssh_interface = _interface_of(addresses, session[2] if len(session) > 2 else None)
        default_interface = (facts.get("ansible_default_ipv4") or {}).get("interface")
        names, own = [], []
        for entry in wanted:
            entry_problems, item = _check_entry(host, entry, mtu)
            found.extend(entry_problems)
            if item is None:
                continue
            name = item["name"]
            if name in names:
                found.append(f"{host}: {name} is listed twice in cluster_network_interfaces")
            names.append(name)
            if name not in addresses:
                found.append(f"{host} has no interface {name} (it has {', '.join(sorted(addresses)) or 'none'})")
            if name == ssh_interface:
                found.append(f"{host}: {name} carries this SSH session ({session[2]}): the role never changes the "
                             "interface Ansible reaches the node through. List the cluster link's interfaces only")
            elif name == default_interface:
                found.append(f"{host}: {name} holds the default route: the role never changes it (the node could "
                             "lose its way out). List the cluster link's interfaces only")
            if item["address"] and not entry_problems:
                ip = str(ipaddress.ip_interface(item["address"]).ip)
                holder = _interface_of(addresses, ip)
                if holder and holder != name:
                    found.append(f"{host}: {item['address']} for {name} is already {holder}'s address")
                owners.setdefault(ip, []).append(f"{host} ({name})")
                own.append(ipaddress.ip_interface(item["address"]))
        cluster_address = node.get("cluster_address")
        if cluster_address and own and cluster_address not in {str(i.ip) for i in own}:
            found.append(f"{host}: its cluster address (nccl_cluster_address) {cluster_address} is not among the "
                         f"addresses given to its cluster link ({', '.join(str(i) for i in own)})")
        if cidr and own and not any(i.ip in ipaddress.ip_network(cidr, strict=False) for i in own):
            found.append(f"{host}: none of the addresses given to its cluster link "
                         f"({', '.join(str(i) for i in own)}) is in the cluster network nccl_cluster_cidr {cidr}")
        links[host] = own
    for ip, holders in sorted(owners.items()):
        if len(holders) > 1:
            found.append(f"{ip} is given to {' and '.join(holders)}: each address once")
    for host, own in sorted(links.items()):
        for mine in own:
            if len(links) > 1 and not any(i.ip in mine.network for other, theirs in links.items() if other != host
                                          for i in theirs):
                found.append(f"{host}: no other node has an address in {mine.network} ({mine}): nothing on the link "
                             "would answer it. Give both ends of a cable an address in one subnet")
    return found
