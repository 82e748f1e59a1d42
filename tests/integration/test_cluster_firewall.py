"""cluster_firewall as an operator runs it, in check mode only (this machine's own
firewall is never changed): the ruleset is built, validated by the kernel
(`nft -c`) and diffed; SSH lockouts and bad settings are refused before anything
loads. Loading, reloading and removal run on the sandbox's nodes (tests/e2e/test_firewall.py)."""

import os
import shutil
from pathlib import Path

import pytest
from conftest import run_module

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft"), reason="nft -c needs root and nftables")

# A table name of the test's own: check mode never loads it, and nothing here may touch inet vllmops.
BASE = {"table": "vllmopstest", "members": ["10.88.0.2", "10.88.0.3", "10.87.0.2"],
        "cluster_ports": ["6379", "10002-10999", "29501"], "api_ports": ["8000"],
        "api_allowed_cidrs": ["10.87.0.0/24"], "ephemeral_ports": "auto", "ssh_ports": [22]}


def test_check_mode_validates_and_predicts(tmp_path):
    path = tmp_path / "firewall.nft"
    rc, result = run_module("cluster_firewall", dict(BASE, path=str(path), ssh_client="10.87.0.1"), check=True)
    assert rc == 0, result
    assert result["changed"] and result["live"] == "absent" and result["validated"]
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    assert f"{low}-{high}" in result["policy"]["filtered_ports"]
    assert "\t\ttcp dport @cluster_ports drop" in result["diff"]["after"]
    assert not path.exists()


def test_a_cluster_port_on_the_ssh_port_is_refused(tmp_path):
    rc, result = run_module("cluster_firewall", dict(BASE, path=str(tmp_path / "f.nft"), cluster_ports=["2200-2300"],
                                                     ssh_ports=[2222]), check=True)
    assert rc != 0
    assert "cluster ports 2200-2300 include 2222, the SSH port" in result["msg"]


@pytest.mark.parametrize(("change", "message"), [
    ({"members": ["node1"]}, "'node1' is not an IP address"),
    ({"ephemeral_ports": "40000"}, None),  # one port is a valid range
    ({"api_allowed_cidrs": ["10.87.0.0/40"]}, "API allowed CIDRs"),
    ({"ssh_client": "controller"}, "'controller' is not an IP address"),
])
def test_bad_settings_are_refused_by_name(tmp_path, change, message):
    rc, result = run_module("cluster_firewall", dict(BASE, path=str(tmp_path / "f.nft"), **change), check=True)
    if message is None:
        assert rc == 0, result
    else:
        assert rc != 0 and message in result["msg"], result


def test_absent_predicts_the_file_removal(tmp_path):
    path = tmp_path / "firewall.nft"
    path.write_text("table inet vllmopstest {}\n")
    rc, result = run_module("cluster_firewall", {"state": "absent", "table": "vllmopstest", "path": str(path)},
                            check=True)
    assert rc == 0 and result["changed"] and path.exists(), result
