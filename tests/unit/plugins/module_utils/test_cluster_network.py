"""The cluster link's settings are checked on every node before any node's network manager gets them."""

from __future__ import annotations

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.cluster_network import problems


def facts(ssh="192.168.1.101", default="enP7s7", **interfaces):
    """Ansible's network and env facts of a DGX Spark: interface -> its IPv4 address ('' for none)."""
    interfaces = {"lo": "127.0.0.1", "enP7s7": "192.168.1.101", "enp1s0f1np1": "", "enP2p1s0f1np1": "", **interfaces}
    found = {"ansible_interfaces": list(interfaces), "ansible_default_ipv4": {"interface": default},
             "ansible_env": {"SSH_CONNECTION": f"192.168.1.5 50022 {ssh} 22"} if ssh else {}}
    for name, address in interfaces.items():
        found["ansible_" + name.replace("-", "_")] = {"device": name, **({"ipv4": {"address": address}} if address else {}),
                                                      "ipv6": [{"address": "fe80::1", "prefix": "64"}]}
    return found


def spark(addresses, **kwargs):
    return {"interfaces": [{"name": n, **({"address": a} if a else {})} for n, a in addresses.items()],
            "facts": facts(**kwargs.pop("facts", {})), **kwargs}


def two_sparks(**changes):
    nodes = {"spark-1": spark({"enp1s0f1np1": "10.10.10.1/24", "enP2p1s0f1np1": "10.10.11.1/24"}),
             "spark-2": spark({"enp1s0f1np1": "10.10.10.2/24", "enP2p1s0f1np1": "10.10.11.2/24"})}
    nodes.update(changes)
    return nodes


def test_two_sparks_both_twins_addressed_pass():
    assert problems(two_sparks()) == []


def test_a_twin_without_an_address_passes():
    """Only the first function addressed: the twin is brought up with its MTU (its link-local GID serves)."""
    assert problems(two_sparks(**{"spark-1": spark({"enp1s0f1np1": "10.10.10.1/24", "enP2p1s0f1np1": ""}),
                                  "spark-2": spark({"enp1s0f1np1": "10.10.10.2/24", "enP2p1s0f1np1": ""})})) == []


def test_the_ssh_interface_is_refused():
    nodes = two_sparks(**{"spark-2": spark({"enP7s7": "192.168.1.102/24"}, facts={"ssh": "192.168.1.102",
                                                                                   "enP7s7": "192.168.1.102"})})
    assert "spark-2: enP7s7 carries this SSH session (192.168.1.102): the role never changes the interface Ansible " \
           "reaches the node through. List the cluster link's interfaces only" in problems(nodes)


def test_the_default_route_interface_is_refused_without_ssh():
    nodes = two_sparks(**{"spark-2": spark({"enp1s0f1np1": "10.10.10.2/24"}, facts={"ssh": None, "default": "enp1s0f1np1"})})
    assert any(p.startswith("spark-2: enp1s0f1np1 holds the default route") for p in problems(nodes))


@pytest.mark.parametrize(("entry", "expected"), [
    ({"name": "enp9s0"}, "spark-2 has no interface enp9s0 (it has enP2p1s0f1np1, enP7s7, enp1s0f1np1, lo)"),
    ({"name": "enp1s0f1np1", "address": "10.10.10.2"}, "spark-2: enp1s0f1np1's address '10.10.10.2' is not an "
                                                      "address with its prefix length (10.10.10.1/24)"),
    ({"name": "enp1s0f1np1", "address": "10.10.10.0/24"}, "spark-2: enp1s0f1np1's address 10.10.10.0/24 is its "
                                                         "network's network address"),
    ({"name": "enp1s0f1np1", "address": "10.10.10.2/24", "mtu": 65000}, "spark-2: enp1s0f1np1's MTU 65000 is not "
                                                                       "between 1280 and 9216"),
    ({"name": "enp1s0f1np1", "adress": "10.10.10.2/24"}, "spark-2: enp1s0f1np1 has settings this role does not "
                                                        "know: adress (name, address, mtu)"),
    ("enp1s0f1np1", "spark-2: each item of cluster_network_interfaces is a mapping with a name"),
])
def test_a_bad_entry_is_named(entry, expected):
    nodes = two_sparks(**{"spark-2": {"interfaces": [entry], "facts": facts()}})
    assert any(p.startswith(expected) for p in problems(nodes)), problems(nodes)


def test_an_address_given_twice_or_without_a_peer():
    nodes = two_sparks(**{"spark-2": spark({"enp1s0f1np1": "10.10.10.1/24", "enP2p1s0f1np1": "10.10.12.2/24"})})
    found = problems(nodes)
    assert "10.10.10.1 is given to spark-1 (enp1s0f1np1) and spark-2 (enp1s0f1np1): each address once" in found
    assert any(p.startswith("spark-2: no other node has an address in 10.10.12.0/24") for p in found)
    assert any(p.startswith("spark-1: no other node has an address in 10.10.11.0/24") for p in found)


def test_an_address_another_interface_holds_is_refused():
    nodes = two_sparks(**{"spark-2": spark({"enp1s0f1np1": "192.168.1.101/24"})})
    assert any(p.startswith("spark-2: 192.168.1.101/24 for enp1s0f1np1 is already enP7s7's address") for p in problems(nodes))


def test_the_cluster_address_and_cidr_must_be_the_links():
    nodes = two_sparks(**{"spark-2": spark({"enp1s0f1np1": "10.10.10.2/24", "enP2p1s0f1np1": "10.10.11.2/24"},
                                           cluster_address="10.10.10.9")})
    assert any(p.startswith("spark-2: its cluster address (nccl_cluster_address) 10.10.10.9 is not among")
               for p in problems(nodes))
    assert any(p.startswith("spark-1: none of the addresses given to its cluster link")
               for p in problems(two_sparks(), cidr="10.20.0.0/16"))


def test_no_interfaces_listed_is_refused():
    assert problems({"spark-1": {"interfaces": [], "facts": facts()}})[0].startswith(
        "spark-1: cluster_network_manage is true but cluster_network_interfaces is []")
