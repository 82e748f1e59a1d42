"""The firewall's policy: ports and addresses parsed, SSH never filtered, the
verdict table, and the rendered nftables file (checked by the kernel's own
parser where this machine lets us: `nft -c` as root)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.firewall import (
    FirewallError,
    build_policy,
    digest,
    live_digest,
    merge_ranges,
    parse_ports,
    read_port_range,
    render,
    subtract_ports,
    verdict,
)

# The sandbox's shape: two members on a cluster and a management network,
# the controller on the management network, the API open to that network.
SANDBOX = dict(
    members=["10.88.0.2", "10.88.0.3", "10.87.0.2", "10.87.0.3"],
    cluster_ports=[6379, 6800, 6801, "10002-10999", 29501, 29700, 8000],
    api_ports=[8000],
    api_sources=["10.87.0.0/24"],
    ephemeral_ports="32768\t60999\n",
    protected_ports=[22],
)


@pytest.mark.parametrize(("value", "expected"), [
    (8000, (8000, 8000)), ("8000", (8000, 8000)), ("10002-10999", (10002, 10999)),
    ("32768\t60999\n", (32768, 60999)), ("10002:10999", (10002, 10999)), (" 1 - 65535 ", (1, 65535)),
])
def test_ports_parse(value, expected):
    assert parse_ports(value, "port") == expected


@pytest.mark.parametrize("value", ["", "0", "65536", "10-5", "http", "1-2-3", "8000.5"])
def test_bad_ports_are_refused_by_name(value):
    with pytest.raises(FirewallError, match=r"cluster port: .* is not a TCP port"):
        parse_ports(value, "cluster port")


def test_ranges_merge_and_split():
    assert merge_ranges([(8000, 8000), (6800, 6800), (6801, 6801), (10, 20), (15, 30)]) == [
        (10, 30), (6800, 6801), (8000, 8000)]
    assert subtract_ports([(32768, 60999)], [40022, 22]) == [(32768, 40021), (40023, 60999)]
    assert subtract_ports([(22, 22), (21, 23)], [22]) == [(21, 21), (23, 23)]


# source, port, verdict - what a user of the sandbox would see
VERDICTS = [
    ("10.88.0.3", 6379, "accept"),      # a member reaches the GCS
    ("10.87.0.3", 40000, "accept"),     # ...and NCCL's ephemeral listeners, by its management address too
    ("10.88.0.9", 6379, "drop"),        # an outsider on the cluster network: Ray closed
    ("10.88.0.9", 8000, "drop"),        # ...and the API: not an allowed CIDR
    ("10.87.0.9", 8000, "accept"),      # an outsider on the management network reaches the API
    ("10.87.0.9", 29501, "drop"),       # ...but not the rendezvous
    ("10.87.0.9", 10500, "drop"),       # ...nor a Ray worker port
    ("10.87.0.9", 45000, "drop"),       # ...nor an ephemeral port
    ("10.87.0.1", 22, "accept"),        # SSH is never filtered
    ("203.0.113.7", 22, "accept"),
    ("203.0.113.7", 443, "accept"),     # another service of the host: not ours to filter
    ("2001:db8::7", 6379, "drop"),      # IPv6 outsiders too (the table is inet)
]


@pytest.mark.parametrize(("source", "port", "expected"), VERDICTS)
def test_verdicts(source, port, expected):
    assert verdict(build_policy(**SANDBOX), source, port) == expected


def test_ssh_port_inside_the_ephemeral_range_is_cut_out():
    policy = build_policy(**dict(SANDBOX, protected_ports=[22, 40022]))
    assert verdict(policy, "10.88.0.9", 40022) == "accept"
    assert verdict(policy, "10.88.0.9", 40021) == "drop"


@pytest.mark.parametrize(("setting", "kind"), [("cluster_ports", "cluster port"), ("api_ports", "API port")])
def test_an_ssh_port_among_the_filtered_ones_is_refused(setting, kind):
    with pytest.raises(FirewallError, match=rf"{kind}s .*include 2222, the SSH port"):
        build_policy(**dict(SANDBOX, protected_ports=[2222], **{setting: [2000, "2200-2300"]}))


@pytest.mark.parametrize(("change", "message"), [
    ({"members": []}, "no address"),
    ({"members": ["node1"]}, r"firewall members: 'node1' is not an IP address"),
    ({"api_sources": ["10.87.0.0/33"]}, "API allowed CIDRs"),
    ({"table": "vllm ops"}, "not an nftables table name"),
])
def test_bad_settings_name_the_value(change, message):
    with pytest.raises(FirewallError, match=message):
        build_policy(**dict(SANDBOX, **change))


def test_members_collapse_and_no_ephemeral_filtering():
    policy = build_policy(members=["10.0.0.0/24", "10.0.0.7", "fd00::1"], cluster_ports=[6379], ephemeral_ports="")
    assert [str(n) for n in policy.members] == ["10.0.0.0/24", "fd00::1/128"]
    assert policy.filtered_ports == ((6379, 6379),)
    assert verdict(policy, "192.0.2.1", 40000) == "accept"


def test_rendered_file():
    text = render(build_policy(**SANDBOX), header="Ansible managed")
    assert text.startswith("# Ansible managed\ntable inet vllmops\ndelete table inet vllmops\ntable inet vllmops {\n")
    assert "elements = { 10.87.0.2, 10.87.0.3, 10.88.0.2, 10.88.0.3 }" in text
    assert "elements = { 6379, 6800-6801, 8000, 10002-10999, 29501, 29700, 32768-60999 }" in text
    chain = text[text.index("chain input"):]
    # order matters: members and API clients are accepted before the drop
    assert chain.index("@members_v4 accept") < chain.index("@api_clients_v4 accept") < chain.index("@cluster_ports drop")
    assert "members_v6" not in text and "api_clients_v6" not in text
    assert live_digest(text) == digest(build_policy(**SANDBOX))


def test_digest_follows_the_rules_only():
    policy = build_policy(**SANDBOX)
    assert digest(policy) == digest(build_policy(**dict(SANDBOX, members=list(reversed(SANDBOX["members"])))))
    assert digest(policy) != digest(build_policy(**dict(SANDBOX, api_sources=[])))
    assert live_digest("table inet vllmops {\n}\n") is None


# The node exporters (vllmops_node_exporter): members and the metrics CIDRs only.
METRICS = dict(SANDBOX, metrics_ports=[9100], metrics_sources=["192.0.2.0/28"])


@pytest.mark.parametrize(("source", "port", "expected"), [
    ("192.0.2.5", 9100, "accept"),     # the Prometheus server
    ("192.0.2.5", 8000, "drop"),       # ...which is no API client
    ("192.0.2.5", 6379, "drop"),       # ...nor a member
    ("10.87.0.9", 9100, "drop"),       # an API client is no metrics client
    ("10.88.0.3", 9100, "accept"),     # members reach the exporters
])
def test_metrics_verdicts(source, port, expected):
    assert verdict(build_policy(**METRICS), source, port) == expected


def test_metrics_rules_appear_only_with_metrics_ports():
    text = render(build_policy(**METRICS))
    chain = text[text.index("chain input"):]
    assert chain.index("@metrics_clients_v4 accept") < chain.index("@cluster_ports drop")
    assert "set metrics_ports" in text and "9100" in text[text.index("set cluster_ports"):]
    # without them the table (and its digest) is what it was before metrics existed: no reload on upgrade
    assert "metrics" not in render(build_policy(**SANDBOX))
    assert digest(build_policy(**dict(SANDBOX, metrics_sources=["192.0.2.0/28"]))) == digest(build_policy(**SANDBOX))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft"), reason="nft -c needs root and nftables")
@pytest.mark.parametrize("settings", [
    SANDBOX,
    dict(SANDBOX, members=["10.0.0.1", "fd00::1", "fd00::/64"], api_sources=["0.0.0.0/0", "::/0"]),
    dict(SANDBOX, api_sources=[], api_ports=[], ephemeral_ports=None),
    dict(METRICS, metrics_sources=["192.0.2.0/28", "2001:db8::/64"]),
])
def test_the_kernel_accepts_the_rendered_file(settings):
    """`nft -c` only checks (nothing is loaded): the kernel parses our sets and rules."""
    proc = subprocess.run(["nft", "-c", "-f", "-"], input=render(build_policy(**settings)), text=True,
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("text", "expected"), [
    ("32768\t60999\n", "32768-60999"),   # as the kernel writes it
    ("1024 65000\n", "1024-65000"),       # widened by hand (sysctl -w): the record sees the same text as the firewall
])
def test_the_node_s_ephemeral_range_as_the_firewall_and_the_record_read_it(tmp_path, text, expected):
    """One reader for the firewall (firewall_ephemeral_ports: auto) and deploy.yml's record (issue 38)."""
    (tmp_path / "range").write_text(text)
    assert read_port_range(str(tmp_path / "range")) == expected
    assert read_port_range(str(tmp_path / "missing")) is None


def test_a_range_the_firewall_cannot_read_is_refused_by_name(tmp_path):
    (tmp_path / "range").write_text("garbage\n")
    with pytest.raises(FirewallError, match=r"the ephemeral port range \(.*range\): 'garbage\\n' is not a TCP port"):
        read_port_range(str(tmp_path / "range"))
