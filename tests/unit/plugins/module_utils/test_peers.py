# ruff: noqa: E501 - the tcp6 rows below are the kernel's, longer than our lines
"""The head's TCP tables, as the kernel writes them, -> the machines connected to its cluster ports that are not
members. The head is 10.88.0.11 (fd00::11); 10.88.0.12 is a member; 10.88.0.13, 10.88.0.14 and fd00::13 are not."""

import ipaddress

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.peers import (
    Connection,
    PeersError,
    cluster_peers,
    find_peers,
    parse_table,
    read_connections,
)

# Ports: 18EB = 6379 (Ray's GCS), 733D = 29501 (vLLM's master port), 0016 = 22.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31001 1 0000000000000000 100 0 0 10 0
   1: 0B00580A:733D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31002 1 0000000000000000 100 0 0 10 0
   2: 0B00580A:18EB 0C00580A:B26E 01 00000000:00000000 00:00000000 00000000     0        0 31003 1 0000000000000000 20 4 30 10 -1
   3: 0B00580A:18EB 0D00580A:C738 01 00000000:00000000 00:00000000 00000000     0        0 31004 1 0000000000000000 20 4 30 10 -1
   4: 0B00580A:18EB 0D00580A:C73A 01 00000000:00000000 00:00000000 00000000     0        0 31005 1 0000000000000000 20 4 30 10 -1
   5: 0B00580A:733D 0D00580A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 31006 1 0000000000000000 20 4 30 10 -1
   6: 0100007F:18EB 0100007F:B26E 01 00000000:00000000 00:00000000 00000000     0        0 31007 1 0000000000000000 20 4 30 10 -1
   7: 0B00580A:18EB 0B00580A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 31008 1 0000000000000000 20 4 30 10 -1
   8: 0B00580A:0016 0E00580A:C738 01 00000000:00000000 00:00000000 00000000     0        0 31009 1 0000000000000000 20 4 30 10 -1
   9: 0B00580A:18EB 0E00580A:C739 06 00000000:00000000 03:00000D6F 00000000     0        0 0 3 0000000000000000
  10: 0B00580A:B26E 0E00580A:18EB 01 00000000:00000000 00:00000000 00000000     0        0 31010 1 0000000000000000 20 4 30 10 -1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:18EB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 32001 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000B00580A:18EB 0000000000000000FFFF00000D00580A:C73B 01 00000000:00000000 00:00000000 00000000     0        0 32002 1 0000000000000000 20 4 30 10 -1
   2: 0000000000000000FFFF00000B00580A:733D 0000000000000000FFFF00000E00580A:9C41 01 00000000:00000000 00:00000000 00000000     0        0 32003 1 0000000000000000 20 4 30 10 -1
   3: 000000FD000000000000000011000000:18EB 000000FD000000000000000013000000:C738 01 00000000:00000000 00:00000000 00000000     0        0 32004 1 0000000000000000 20 4 30 10 -1
   4: 00000000000000000000000001000000:18EB 00000000000000000000000001000000:C739 01 00000000:00000000 00:00000000 00000000     0        0 32005 1 0000000000000000 20 4 30 10 -1
   5: 0000000000000000FFFF00000B00580A:18EB 0000000000000000FFFF00000100007F:C73A 01 00000000:00000000 00:00000000 00000000     0        0 32006 1 0000000000000000 20 4 30 10 -1
   6: 000000FD000000000000000011000000:733D 000000FD000000000000000011000000:C73C 01 00000000:00000000 00:00000000 00000000     0        0 32007 1 0000000000000000 20 4 30 10 -1
"""
RAY, MASTER = 6379, 29501
MEMBERS = ["10.88.0.11", "10.88.0.12"]


def ip(text):
    return ipaddress.ip_address(text)


def connections():
    return parse_table(TCP, "little") + parse_table(TCP6, "little")


def test_an_ipv4_row_reads_as_its_addresses_ports_and_state():
    assert parse_table(TCP, "little")[3] == Connection(ip("10.88.0.11"), RAY, ip("10.88.0.13"), 51000, "01")
    assert parse_table(TCP, "little")[0] == Connection(ip("0.0.0.0"), RAY, ip("0.0.0.0"), 0, "0A")


def test_an_ipv6_row_reads_word_by_word_and_a_mapped_address_as_ipv4():
    rows = parse_table(TCP6, "little")
    assert rows[3] == Connection(ip("fd00::11"), RAY, ip("fd00::13"), 51000, "01")
    assert rows[1] == Connection(ip("10.88.0.11"), RAY, ip("10.88.0.13"), 51003, "01")
    assert rows[4].remote == ip("::1")


def test_a_big_endian_kernel_prints_the_address_in_order():
    row = "   0: 0A58000B:18EB 0A58000D:C738 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0 20 4 30 10 -1"
    assert parse_table("header\n" + row, "big") == [Connection(ip("10.88.0.11"), RAY, ip("10.88.0.13"), 51000, "01")]


@pytest.mark.parametrize(("ports", "known", "peers"), [
    pytest.param([RAY, MASTER], MEMBERS,
                 [("10.88.0.13", RAY), ("10.88.0.13", MASTER), ("10.88.0.14", MASTER), ("fd00::13", RAY)],
                 id="strangers on both ports, IPv4, mapped and IPv6; each (address, port) once"),
    pytest.param([RAY], MEMBERS, [("10.88.0.13", RAY), ("fd00::13", RAY)],
                 id="only the ports asked: ssh (22) and the head's own outgoing connection to :6379 do not count"),
    pytest.param([RAY, MASTER], [*MEMBERS, "10.88.0.13", "fd00:0::13", "spark-2"], [("10.88.0.14", MASTER)],
                 id="known addresses are members, however written; a name in known is harmless"),
    pytest.param([RAY, MASTER], ["::ffff:10.88.0.14"], [("10.88.0.12", RAY), ("10.88.0.13", RAY),
                                                         ("10.88.0.13", MASTER), ("fd00::13", RAY)],
                 id="a known mapped address is its IPv4; the head's own addresses are never peers"),
    pytest.param([22], [], [("10.88.0.14", 22)], id="any port asked"),
    pytest.param([8000], MEMBERS, [], id="a port nobody is connected to"),
])
def test_the_peers_that_are_not_members(ports, known, peers):
    result = find_peers(connections(), ports, known)
    assert result["peers"] == [{"address": address, "local_port": port} for address, port in peers]
    assert result["unknown"] == list(dict.fromkeys(address for address, _port in peers))


def test_loopback_listening_and_closing_sockets_are_never_peers():
    rows = [Connection(ip("10.88.0.11"), RAY, ip(peer), 40000, state)
            for peer, state in [("127.0.0.1", "01"), ("127.3.2.1", "01"), ("::1", "01"), ("10.88.0.13", "0A"),
                                ("10.88.0.13", "06"), ("10.88.0.13", "08")]]
    assert find_peers(rows, [RAY]) == {"peers": [], "unknown": []}


def test_read_from_a_proc_root(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net/tcp").write_text(TCP)
    (tmp_path / "net/tcp6").write_text(TCP6)
    assert read_connections(str(tmp_path), "little") == connections()
    assert cluster_peers([MASTER], MEMBERS, str(tmp_path), "little")["unknown"] == ["10.88.0.13", "10.88.0.14"]


def test_without_tcp6_ipv6_is_disabled_and_that_is_fine(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net/tcp").write_text(TCP)
    assert cluster_peers([RAY, MASTER], MEMBERS, str(tmp_path), "little")["unknown"] == ["10.88.0.13"]


def test_without_tcp_it_says_what_it_could_not_read(tmp_path):
    with pytest.raises(PeersError, match=r"reading .*/net/tcp: no such file"):
        read_connections(str(tmp_path))


def test_a_row_that_is_not_a_socket_is_an_error_naming_it(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net/tcp").write_text(TCP.splitlines()[0] + "\n   0: 0B00580A:18EB 0D00580A 01\n")
    with pytest.raises(PeersError, match=r"net/tcp: line 2 is not a socket .*'0: 0B00580A:18EB 0D00580A 01'"):
        read_connections(str(tmp_path), "little")


def test_this_machines_own_tables_parse():
    # Whatever this machine has open: every row reads (in the host's byte order), nothing raises.
    assert all(isinstance(row, Connection) for row in read_connections())
