# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who is connected to this node's cluster ports, read from the kernel's TCP tables.

A node taken out of the inventory whose Ray worker or vLLM rank still runs
keeps reconnecting to the head; no inventory names it any more, only the
head's sockets show it. /proc/net/tcp and /proc/net/tcp6 list every TCP
socket of the network namespace (our containers run with the host's), one
row each: `sl local_address rem_address st ...`, an address as hex 32-bit
words in the host's byte order and a port as 4 hex digits.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass

ESTABLISHED = "01"
TABLES = ("net/tcp", "net/tcp6")


class PeersError(Exception):
    pass


@dataclass(frozen=True)
class Connection:
    local: ipaddress.IPv4Address | ipaddress.IPv6Address
    local_port: int
    remote: ipaddress.IPv4Address | ipaddress.IPv6Address
    remote_port: int
    state: str


def _address(text: str, byteorder: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(text)
    if len(raw) not in (4, 16):
        raise ValueError(f"{text} is neither an IPv4 nor an IPv6 address")
    if byteorder == "little":
        # The kernel prints each 32-bit word of the address as it lies in memory.
        raw = b"".join(raw[word:word + 4][::-1] for word in range(0, len(raw), 4))
    return _unmapped(ipaddress.IPv4Address(raw) if len(raw) == 4 else ipaddress.IPv6Address(raw))


def _unmapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # A dual-stack socket reached over IPv4 lists its peer as ::ffff:a.b.c.d.
    mapped = address.ipv4_mapped if address.version == 6 else None
    return mapped if mapped is not None else address


def _endpoint(text: str, byteorder: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    address, port = text.split(":")
    return _address(address, byteorder), int(port, 16)


def parse_table(text: str, byteorder: str = sys.byteorder) -> list[Connection]:
    """The rows of a /proc/net/tcp or /proc/net/tcp6 text (its first line is the header)."""
    connections = []
    for number, line in enumerate(text.splitlines()[1:], start=2):
        if not line.strip():
            continue
        fields = line.split()
        try:
            local, local_port = _endpoint(fields[1], byteorder)
            remote, remote_port = _endpoint(fields[2], byteorder)
            state = fields[3].upper()
        except (IndexError, ValueError) as err:
            raise PeersError(f"line {number} is not a socket ({err}): {line.strip()!r}") from err
        connections.append(Connection(local, local_port, remote, remote_port, state))
    return connections


def read_connections(proc_root: str = "/proc", byteorder: str = sys.byteorder) -> list[Connection]:
    """Every TCP socket of /proc/net/tcp and /proc/net/tcp6; a missing tcp6 is IPv6 disabled."""
    connections = []
    for table in TABLES:
        path = os.path.join(proc_root, table)
        try:
            with open(path, encoding="ascii") as stream:
                text = stream.read()
        except FileNotFoundError:
            if table == "net/tcp6":
                continue
            raise PeersError(f"reading {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise PeersError(f"reading {path}: {err}") from err
        try:
            connections += parse_table(text, byteorder)
        except PeersError as err:
            raise PeersError(f"reading {path}: {err}") from err
    return connections


def _known(known: list[str]) -> tuple[set[ipaddress.IPv4Address | ipaddress.IPv6Address], set[str]]:
    """The members' addresses as addresses (IPv4-mapped ones as IPv4), and as written (a name stays a name)."""
    addresses = set()
    for entry in known:
        try:
            address = ipaddress.ip_address(str(entry).strip())
        except ValueError:
            continue
        addresses.add(_unmapped(address))
    return addresses, {str(entry).strip() for entry in known}


def _order(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple:
    return address.version, address


def find_peers(connections: list[Connection], ports: list[int], known: list[str] = ()) -> dict:
    """The peers of the established connections to the local `ports` that are neither loopback, nor this
    node itself (an address some socket of this node has as its local one), nor in `known`.

    Returns {"peers": [{"address", "local_port"}...], "unknown": [address...]}, both sorted and without
    repeats (Ray opens several connections from one worker)."""
    ports = {int(port) for port in ports}
    known_addresses, known_names = _known(list(known))
    own = {connection.local for connection in connections if not connection.local.is_unspecified}
    found = set()
    for connection in connections:
        peer = connection.remote
        if connection.state != ESTABLISHED or connection.local_port not in ports:
            continue
        if peer.is_loopback or peer in own or peer in known_addresses or str(peer) in known_names:
            continue
        found.add((peer, connection.local_port))
    ordered = sorted(found, key=lambda item: (_order(item[0]), item[1]))
    return {
        "peers": [{"address": str(peer), "local_port": port} for peer, port in ordered],
        "unknown": [str(peer) for peer in sorted({peer for peer, _port in found}, key=_order)],
    }


def cluster_peers(ports: list[int], known: list[str] = (), proc_root: str = "/proc", byteorder: str = sys.byteorder) -> dict:
    """find_peers over this node's TCP tables under proc_root."""
    return find_peers(read_connections(proc_root, byteorder), ports, known)
