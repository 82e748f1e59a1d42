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
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    monkeypatch.setattr(deploy_state, "PORT_RANGE", str(tmp_path / "ip_local_port_range"))
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


def test_a_widened_ephemeral_range_is_a_difference(node, tmp_path):
    """The firewall filters the range it read on the node: ports a widened range adds stay open until the full
    path loads the table again (issue 38)."""
    _, _, spec, record = node
    deploy_state.write(record, "inputs-1", spec, RUN)
    (tmp_path / "ip_local_port_range").write_text("1024\t65000\n")
    assert deploy_state.check(record, "inputs-1", RUN) == (
        False, ["ephemeral_ports: 32768-60999 -> 1024-65000"])


@pytest.mark.parametrize(("revision", "converged"), [
    ("", True),                                              # the model does not come from the hub
    ("6ea5c6cacb986d737dc3af973ab9c64235f82ff8", True),      # a commit cannot move
    ("main", False),                                         # a branch can
    ("v1.0", False),                                         # so can a tag
    ("6ea5c6c", False),                                      # a short hash is resolved by the hub, as a name
    ("6EA5C6CACB986D737DC3AF973AB9C64235F82FF8", False),     # the hub's commits are lower case
])
def test_only_a_commit_of_the_hub_lets_a_run_take_the_fast_path(node, revision, converged):
    """roles/model resolves a branch or a tag on every run; the fast path would skip that (issue 38)."""
    _, _, spec, record = node
    deploy_state.write(record, "inputs-1", spec, RUN)
    found, reasons = deploy_state.check(record, "inputs-1", RUN, revision)
    assert found is converged
    if not converged:
        assert reasons == [f"model_hub_revision {revision!r} is not a commit hash (40 hex digits): only a full run asks "
                           "the hub what it names now; pin the commit to let re-runs take the fast path"]
