"""Nobody gets in on the Ray backend: an outsider (a container on both of the Ray sandbox's networks, not in the
inventory: tests/sandbox/outsider.py) tries every TCP port each node listens on, as `ss` lists them on the node
(not a list of the ports we expect), on each of the node's addresses. It reaches SSH, and what the inventory opens to
its management network as an operator would (the API on the head, for clients; the metrics exporters, for a
Prometheus server: vllmops_api_allowed_cidrs, vllmops_metrics_allowed_cidrs); on the cluster network, SSH only.
Ray's client server is among the listeners (the stand-in carries grpcio, as every vLLM image does: `ray start
--head` opens it then) and is closed to the outsider like every other port of Ray's."""

from __future__ import annotations

import ipaddress

import pytest
from outsider import Outsider
from ray_cluster import HEAD, PREFIX, RAY_UNITS

SSH, API, METRICS = 22, 8000, (9100, 9400)
CLIENT_SERVER = 10001  # vllmops_ray_client_server_port


@pytest.fixture()
def outsider(cluster):
    box = Outsider(f"{PREFIX}-outsider").start([f"{PREFIX}-mgmt", f"{PREFIX}-cluster"], label=PREFIX)
    yield box
    box.remove()


def _listening(cluster, node: str) -> dict[str, set[int]]:
    """Address a listener is bound to ("*" for every address) -> its ports, loopback left out (no one else reaches it)."""
    found: dict[str, set[int]] = {}
    for line in cluster.on(node, "ss", "-Hltn").splitlines():
        address, port = line.split()[3].rsplit(":", 1)
        address = address.strip("[]").split("%")[0]
        if address in ("*", "0.0.0.0", "::"):
            address = "*"
        elif ipaddress.ip_address(address).is_loopback:
            continue
        found.setdefault(address, set()).add(int(port))
    return found


def test_an_outsider_reaches_ssh_and_what_the_inventory_opens_only(cluster, outsider):
    reached, tried = {}, {}
    for node in RAY_UNITS:
        listening = _listening(cluster, node)
        addresses = {"management": cluster.addresses[node], "cluster": cluster.cluster_ip(node)}
        for network, address in addresses.items():
            ports = listening.get("*", set()) | listening.get(address, set())
            tried[node, network] = ports
            outcome = outsider.scan(address, sorted(ports))
            reached[node, network] = {port for port, said in outcome.items() if said == "open"}
            # a port that is not reached is dropped on the way (the firewall), not refused by the node
            assert {said for port, said in outcome.items() if port not in reached[node, network]} <= {"timeout"}, \
                (node, network, outcome)
    # Ray binds its client server (and its agents) to the node's address on the cluster network
    head_ports = tried[HEAD, "management"] | tried[HEAD, "cluster"]
    assert CLIENT_SERVER in head_ports, f"Ray's client server is not listening on the head: {sorted(head_ports)}"
    for (node, network), ports in reached.items():
        opened = ({SSH} | ({API} if node == HEAD else set()) | set(METRICS)) if network == "management" else {SSH}
        assert ports == opened & tried[node, network], \
            f"{node} on its {network} address: the outsider reached {sorted(ports)} of {sorted(tried[node, network])}"
    assert SSH in reached[HEAD, "cluster"] and API in reached[HEAD, "management"], reached
