# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's firewall: which sources may reach which TCP ports of a node,
rendered as one nftables table of our own (family inet), and the same policy
evaluated in Python so that a connection (the controller's SSH session) can be
checked before the rules are loaded.

The table only ever drops TCP connections to the ports it lists, from sources
that are neither members nor (for the API ports) allowed clients; everything
else passes through it untouched (policy accept), so other tables - Docker's,
the distribution's, an operator's - keep deciding about the rest.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass

# Annotations only (never evaluated at run time, `from __future__ import annotations`):
# a port range is (low, high), inclusive; a network an ipaddress.IPv4Network or IPv6Network.

_DIGEST_RE = re.compile(r'comment "vllmops\.cluster firewall sha256:([0-9a-f]+)"')
# The kernel's ephemeral port range on the node: what firewall_ephemeral_ports: auto filters, and what
# deploy.yml's record observes, so that a widened range is never left unfiltered by a fast re-run.
PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


class FirewallError(ValueError):
    """A setting the firewall cannot be built from; the message says which and what to do."""


@dataclass(frozen=True)
class Policy:
    """Members reach every filtered port; API sources reach the API ports, metrics sources the
    metrics ports (the exporters'); nobody else reaches any of them."""

    table: str
    members: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    api_sources: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    filtered_ports: tuple[tuple[int, int], ...]
    api_ports: tuple[tuple[int, int], ...]
    metrics_sources: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    metrics_ports: tuple[tuple[int, int], ...] = ()


# --- ports ---------------------------------------------------------------------------

def parse_ports(value, what: str) -> tuple[int, int]:
    """One port (8000, "8000") or an inclusive range ("10002-10999", "32768 60999" as
    /proc/sys/net/ipv4/ip_local_port_range holds it, "10002:10999")."""
    text = str(value).strip()
    parts = re.split(r"\s*[-:\s]\s*", text) if text else []
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        numbers = []
    if len(numbers) == 1:
        numbers *= 2
    if len(numbers) != 2 or not 1 <= numbers[0] <= numbers[1] <= 65535:
        raise FirewallError(f"{what}: {value!r} is not a TCP port (1-65535) or a range LOW-HIGH")
    return numbers[0], numbers[1]


def read_port_range(path: str = PORT_RANGE) -> str | None:
    """The node's ephemeral port range as LOW-HIGH ("32768-60999"), None when the file is missing; FirewallError
    when it holds no range."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    return _port_text(parse_ports(text, f"the ephemeral port range ({path})"))


def merge_ranges(ranges) -> list[tuple[int, int]]:
    """Sorted, with overlapping and adjacent ranges joined (nftables refuses overlapping set elements)."""
    merged: list[list[int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return [tuple(pair) for pair in merged]


def subtract_ports(ranges, ports) -> list[tuple[int, int]]:
    """The ranges without the given single ports (each range split around them)."""
    result = list(ranges)
    for port in ports:
        split = []
        for low, high in result:
            if low <= port <= high:
                split.extend(part for part in ((low, port - 1), (port + 1, high)) if part[0] <= part[1])
            else:
                split.append((low, high))
        result = split
    return result


def in_ranges(port: int, ranges) -> bool:
    return any(low <= port <= high for low, high in ranges)


# --- addresses -----------------------------------------------------------------------

def parse_networks(values, what: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Addresses and CIDRs, normalised, without duplicates (IPv4 first)."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise FirewallError(f"{what}: {value!r} is not an IP address or a CIDR (10.0.0.5, 10.0.0.0/24, fd00::/64)") from None
    # nftables refuses overlapping elements: one inside another goes (no merging of
    # neighbours, so that the file still names each member's address).
    kept = {n for n in networks
            if not any(other != n and other.version == n.version and n.subnet_of(other) for other in networks)}
    return tuple(sorted(kept, key=lambda n: (n.version, n.network_address, n.prefixlen)))


# --- the policy ----------------------------------------------------------------------

def build_policy(*, members, cluster_ports, api_ports=(), api_sources=(), ephemeral_ports=None,
                 protected_ports=(), table: str = "vllmops", metrics_ports=(), metrics_sources=()) -> Policy:
    """The policy from the settings, or FirewallError naming the value to fix.

    cluster_ports: ports and ranges only members reach. api_ports: ports members and
    api_sources reach; metrics_ports (the exporters'): members and metrics_sources. ephemeral_ports: a range (the node's ip_local_port_range) where
    NCCL, Gloo and ZMQ bind; members only, like the cluster ports; None = not filtered.
    protected_ports: ports never filtered (SSH): a cluster or API port among them is
    refused, and they are cut out of the ephemeral range.
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,31}", table):
        raise FirewallError(f"table: {table!r} is not an nftables table name (letters, digits, underscores)")
    member_networks = parse_networks(members, "firewall members")
    if not member_networks:
        raise FirewallError("firewall members: no address; the cluster's members must be known before their ports are closed to others")
    protected = sorted({parse_ports(port, "SSH port")[0] for port in protected_ports})
    explicit = {"cluster port": [parse_ports(p, "cluster port") for p in cluster_ports],
                "API port": [parse_ports(p, "API port") for p in api_ports],
                "metrics port": [parse_ports(p, "metrics port") for p in metrics_ports]}
    for kind, ranges in explicit.items():
        for port in protected:
            if in_ranges(port, ranges):
                raise FirewallError(
                    f"{kind}s {', '.join(_port_text(r) for r in ranges)} include {port}, the SSH port: the firewall never "
                    "filters SSH; move that service to another port")
    filtered = explicit["cluster port"] + explicit["API port"] + explicit["metrics port"]
    if ephemeral_ports not in (None, ""):
        filtered += subtract_ports([parse_ports(ephemeral_ports, "ephemeral ports")], protected)
    return Policy(table=table, members=member_networks, api_sources=parse_networks(api_sources, "API allowed CIDRs"),
                  filtered_ports=tuple(merge_ranges(filtered)), api_ports=tuple(merge_ranges(explicit["API port"])),
                  metrics_sources=parse_networks(metrics_sources, "metrics allowed CIDRs"),
                  metrics_ports=tuple(merge_ranges(explicit["metrics port"])))


def verdict(policy: Policy, source: str, port: int) -> str:
    """"accept" or "drop": what the table does with a new TCP connection from source to port."""
    address = ipaddress.ip_address(source)
    if any(address in network for network in policy.members):
        return "accept"
    if in_ranges(port, policy.api_ports) and any(address in network for network in policy.api_sources):
        return "accept"
    if in_ranges(port, policy.metrics_ports) and any(address in network for network in policy.metrics_sources):
        return "accept"
    return "drop" if in_ranges(port, policy.filtered_ports) else "accept"


# --- nftables ------------------------------------------------------------------------

def _network_text(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str:
    return str(network.network_address) if network.num_addresses == 1 else str(network)


def _port_text(port_range: tuple[int, int]) -> str:
    low, high = port_range
    return str(low) if low == high else f"{low}-{high}"


def _set(name: str, kind: str, elements) -> list[str]:
    return [f"\tset {name} {{", f"\t\ttype {kind}", "\t\tflags interval",
            f"\t\telements = {{ {', '.join(elements)} }}", "\t}"]


def _body(policy: Policy) -> list[str]:
    """The table's sets and chain: the part the digest covers."""
    lines: list[str] = []
    rules = ['\t\tiif "lo" accept',
             "\t\t# replies to connections this node opened (apt, DNS, NCCL as a client)",
             "\t\tct direction reply accept"]
    for version, family in ((4, "ip"), (6, "ip6")):
        members = [_network_text(n) for n in policy.members if n.version == version]
        if members:
            lines += _set(f"members_v{version}", f"ipv{version}_addr", members)
            rules.append(f"\t\t{family} saddr @members_v{version} accept")
    for kind, sources_all, ports in (("api", policy.api_sources, policy.api_ports),
                                     ("metrics", policy.metrics_sources, policy.metrics_ports)):
        for version, family in ((4, "ip"), (6, "ip6")):
            sources = [_network_text(n) for n in sources_all if n.version == version]
            if sources and ports:
                lines += _set(f"{kind}_clients_v{version}", f"ipv{version}_addr", sources)
                rules.append(f"\t\ttcp dport @{kind}_ports {family} saddr @{kind}_clients_v{version} accept")
        if ports:
            lines += _set(f"{kind}_ports", "inet_service", [_port_text(r) for r in ports])
    if policy.filtered_ports:
        lines += _set("cluster_ports", "inet_service", [_port_text(r) for r in policy.filtered_ports])
        rules.append("\t\ttcp dport @cluster_ports drop")
    lines += ["\tchain input {", "\t\ttype filter hook input priority filter; policy accept;", *rules, "\t}"]
    return lines


def digest(policy: Policy) -> str:
    return hashlib.sha256("\n".join(_body(policy)).encode()).hexdigest()[:16]


def render(policy: Policy, header: str = "") -> str:
    """The nftables file: creates the table if absent, deletes it and defines it anew, in one
    transaction (`nft -f` loads a file atomically), so a reload never leaves the ports open."""
    name = f"inet {policy.table}"
    comment = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join([
        *comment,
        f"table {name}",
        f"delete table {name}",
        f"table {name} {{",
        f'\tcomment "vllmops.cluster firewall sha256:{digest(policy)}"',
        *_body(policy),
        "}",
        "",
    ])


def live_digest(listing: str) -> str | None:
    """The digest in the comment of a loaded table (`nft list table inet NAME`), None without one."""
    found = _DIGEST_RE.search(listing or "")
    return found.group(1) if found else None


def describe(policy: Policy) -> dict:
    """The policy in plain values, for the module's result."""
    return {"table": f"inet {policy.table}", "members": [_network_text(n) for n in policy.members],
            "api_clients": [_network_text(n) for n in policy.api_sources],
            "filtered_ports": [_port_text(r) for r in policy.filtered_ports],
            "api_ports": [_port_text(r) for r in policy.api_ports],
            "metrics_clients": [_network_text(n) for n in policy.metrics_sources],
            "metrics_ports": [_port_text(r) for r in policy.metrics_ports], "digest": digest(policy)}
