"""cluster_peers as Ansible runs it: the arguments in, the JSON result out, over a proc root made here."""

from __future__ import annotations

import json
import sys

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vllmops.cluster.plugins.modules import cluster_peers

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
# The head 10.88.0.11: the member 10.88.0.12 and the stranger 10.88.0.13 on :6379 (18EB), 10.88.0.13 on :29501 (733D).
TCP = HEADER + """\
   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31001 1 0000000000000000 100 0 0 10 0
   1: 0B00580A:18EB 0C00580A:B26E 01 00000000:00000000 00:00000000 00000000     0        0 31003 1 0000000000000000 20 4 30 10 -1
   2: 0B00580A:18EB 0D00580A:C738 01 00000000:00000000 00:00000000 00000000     0        0 31004 1 0000000000000000 20 4 30 10 -1
   3: 0B00580A:733D 0D00580A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 31006 1 0000000000000000 20 4 30 10 -1
"""
# The module reads in the host's byte order; the table above is a little-endian kernel's (x86, arm64).
pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="the fixture is a little-endian kernel's table")


def run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exit_:
        cluster_peers.main()
    return exit_.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def proc(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net/tcp").write_text(TCP)
    return str(tmp_path)


@pytest.mark.parametrize("check_mode", [False, True])
def test_names_the_stranger_and_changes_nothing(capsys, proc, check_mode):
    rc, result = run(capsys, ports=[6379, "29501"], known=["10.88.0.12"], proc_root=proc, _ansible_check_mode=check_mode)
    assert rc == 0 and result["changed"] is False and "failed" not in result
    assert result["peers"] == [{"address": "10.88.0.13", "local_port": 6379}, {"address": "10.88.0.13", "local_port": 29501}]
    assert result["unknown"] == ["10.88.0.13"]


def test_known_defaults_to_none(capsys, proc):
    _rc, result = run(capsys, ports=[6379], proc_root=proc)
    assert result["unknown"] == ["10.88.0.12", "10.88.0.13"]


def test_fails_in_one_sentence_without_a_tcp_table(capsys, tmp_path):
    rc, result = run(capsys, ports=[6379], proc_root=str(tmp_path))
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == f"reading the connections to ports 6379: reading {tmp_path}/net/tcp: no such file"
