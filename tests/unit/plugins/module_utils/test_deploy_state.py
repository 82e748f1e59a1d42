"""A node's record of the last completed deploy: a re-run is converged only
when the inputs and everything observed are equal; each difference is named."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils import deploy_state

RUN = None  # the observations that run commands are replaced below


@pytest.fixture()
def node(tmp_path, monkeypatch):
    """Files of ours under tmp_path; the other observations are fixed (no systemd, docker, dpkg here)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "cluster.env").write_text("VLLM_HOST_IP=10.0.0.1\n")
    (etc / "vllm.env").write_text("KEY=secret\n")
    os.chmod(etc / "vllm.env", 0o600)
    (etc / "health.json").write_text("{}")
    state = {"units": {"vllmops-vllm.service": "active enabled"}, "containers": {"vllmops-vllm": "running sha256:a"}}
    monkeypatch.setattr(deploy_state, "units", lambda patterns, run: dict(state["units"]))
    monkeypatch.setattr(deploy_state, "containers", lambda label, images, host: dict(state["containers"]))
    monkeypatch.setattr(deploy_state, "packages", lambda patterns, run: {"docker.io": "20.10"})
    monkeypatch.setattr(deploy_state, "nft_tables", lambda names, run: {"inet vllmops": "d1"})
    monkeypatch.setattr(deploy_state, "addresses", lambda run: ["eth1 10.0.0.1/24"])
    monkeypatch.setattr(deploy_state, "gpus", lambda run: [])
    monkeypatch.setattr(deploy_state, "answers", lambda urls: {u: 200 for u in urls})
    spec = {"files": [str(etc / "**")], "files_excluded": [str(etc / "health.json")], "units": ["vllmops*"]}
    return etc, state, spec, str(tmp_path / "var" / "deploy-state.json")


def test_no_record_is_not_converged(node):
    _, _, _, record = node
    assert deploy_state.check(record, "inputs-1", RUN) == (False, ["no record of a completed deploy on this node"])


def test_the_same_inputs_and_node_are_converged(node):
    etc, _, spec, record = node
    deploy_state.write(record, "inputs-1", spec, RUN)
    assert os.stat(record).st_mode & 0o777 == 0o600
    (etc / "health.json").write_text('{"changed": "at runtime"}')  # excluded
    assert deploy_state.check(record, "inputs-1", RUN) == (True, [])


def test_other_inputs_are_not_converged(node):
    _, _, spec, record = node
    deploy_state.write(record, "inputs-1", spec, RUN)
    converged, reasons = deploy_state.check(record, "inputs-2", RUN)
    assert not converged and reasons == ["the settings or the collection changed since the last completed deploy"]


def test_each_difference_is_named(node):
    etc, state, spec, record = node
    deploy_state.write(record, "inputs-1", spec, RUN)
    (etc / "cluster.env").write_text("VLLM_HOST_IP=10.0.0.9\n")
    os.chmod(etc / "vllm.env", 0o644)
    (etc / "new.conf").write_text("x")
    state["units"]["vllmops-vllm.service"] = "- enabled"
    state["containers"] = {}
    converged, reasons = deploy_state.check(record, "inputs-1", RUN)
    assert not converged
    text = "\n".join(reasons)
    assert f"files: {etc / 'cluster.env'}: " in text
    assert f"files: {etc / 'vllm.env'}: " in text and "0600" in text and "0644" in text
    assert f"files: {etc / 'new.conf'}: absent -> " in text
    assert "units: vllmops-vllm.service: active enabled -> - enabled" in text
    assert "containers: vllmops-vllm: running sha256:a -> absent" in text
    assert len(reasons) == 5


def test_check_observes_what_the_record_says_it_observed(node):
    etc, _, spec, record = node
    deploy_state.write(record, "inputs-1", {**spec, "files": [str(etc / "cluster.env")]}, RUN)
    (etc / "vllm.env").write_text("not observed\n")
    assert deploy_state.check(record, "inputs-1", RUN) == (True, [])


def test_a_damaged_or_foreign_record_counts_as_none(node):
    _, _, _, record = node
    os.makedirs(os.path.dirname(record))
    for text in ("{not json", json.dumps({"schema": "other/1"}), "[]"):
        with open(record, "w") as handle:
            handle.write(text)
        assert deploy_state.read(record) is None
        assert not deploy_state.check(record, "x", RUN)[0]


def test_forget(node):
    _, _, spec, record = node
    assert deploy_state.forget(record) is False
    deploy_state.write(record, "i", spec, RUN)
    assert deploy_state.forget(record) is True and not os.path.exists(record)


def test_links_are_compared_by_target(tmp_path):
    (tmp_path / "a").write_text("a")
    os.symlink("a", tmp_path / "link")
    assert deploy_state.files([str(tmp_path / "*")], [])[str(tmp_path / "link")] == "-> a"


def test_privacy_addresses_which_rotate_by_themselves_do_not_count():
    out = ("2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
           "2: eth0    inet6 2001:db8::1234/64 scope global temporary dynamic \\       valid_lft 86000sec\n"
           "2: eth0    inet6 2001:db8::1/64 scope global \\       valid_lft forever\n")
    assert deploy_state.addresses(lambda argv: (0, out)) == ["eth0 10.0.0.1/24", "eth0 2001:db8::1/64"]
