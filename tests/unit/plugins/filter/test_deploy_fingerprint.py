"""The fingerprint of a deploy changes with every setting of ours, the members
and their addresses, and the controller's files; not with other variables."""

from __future__ import annotations

import os

from ansible_collections.vllmops.cluster.plugins.filter.deploy_fingerprint import deploy_fingerprint
from ansible_collections.vllmops.cluster.plugins.filter.files_fingerprint import files_fingerprint

MEMBERS = ["node1", "node2"]


def _hostvars(**node1):
    return {"node1": {"ansible_host": "10.0.0.1", "vllm_serve_args": {"max_model_len": 256}, **node1},
            "node2": {"ansible_host": "10.0.0.2"}}


def _print(hostvars, extra=None):
    return deploy_fingerprint(hostvars["node1"], MEMBERS, hostvars, extra)


def test_stable():
    assert _print(_hostvars()) == _print(_hostvars())
    assert len(_print(_hostvars())) == 64


def test_settings_of_ours_count_others_do_not():
    base = _print(_hostvars())
    assert _print(_hostvars(vllm_serve_args={"max_model_len": 512})) != base
    assert _print(_hostvars(vllmops_backend="ray")) != base
    assert _print(_hostvars(docker_live_restore=True)) != base
    assert _print(_hostvars(ansible_user="ops")) != base
    assert _print(_hostvars(unrelated_var=1, ansible_check_mode=True, vllmops_fast_rerun=False)) == base
    # the bandwidth check measures, it deploys nothing: `deploy.yml -e network_check=true` keeps the fast path
    assert _print(_hostvars(network_check=True, network_check_min_ratio=0.3, network_check_link_mbps=400)) == base


def test_members_and_their_addresses_count():
    base = _print(_hostvars())
    moved = _hostvars()
    moved["node2"]["ansible_host"] = "10.0.0.9"
    assert _print(moved) != base
    grown = {**_hostvars(), "node3": {"ansible_host": "10.0.0.3"}}
    assert deploy_fingerprint(grown["node1"], [*MEMBERS, "node3"], grown) != base


def test_an_untemplatable_setting_counts_as_its_error():
    class Vars(dict):
        def __getitem__(self, name):
            if name == "vllm_serve_model":
                raise ValueError("undefined variable")
            return super().__getitem__(name)
    hostvars = _hostvars()
    hostvars["node1"] = Vars(hostvars["node1"], vllm_serve_model="x")
    assert len(deploy_fingerprint(hostvars["node1"], MEMBERS, hostvars)) == 64


def test_the_members_order_counts_the_first_is_the_default_head():
    hostvars = _hostvars()
    assert deploy_fingerprint(hostvars["node1"], ["node2", "node1"], hostvars) != _print(hostvars)


def test_the_ansible_version_counts():
    assert _print(_hostvars(), {"ansible_core": "2.21.5"}) != _print(_hostvars(), {"ansible_core": "2.20.10"})


def test_controller_files_count_by_size_and_time(tmp_path):
    archive = tmp_path / "image.tar"
    archive.write_bytes(b"x" * 10)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    base = files_fingerprint([str(archive), str(secrets), ""])
    assert files_fingerprint([str(archive), str(secrets)]) == base
    (secrets / "api-key").write_text("k")
    with_key = files_fingerprint([str(archive), str(secrets)])
    assert with_key != base
    os.utime(archive, ns=(1, 1))
    assert files_fingerprint([str(archive), str(secrets)]) != with_key
    assert files_fingerprint([str(tmp_path / "missing")]) != files_fingerprint([])
