"""Two inventories whose directories share a name share the default secrets directory
(~/.vllmops/secrets/<name>): the first deploy records its inventory directory there, and any other
inventory is refused the directory at its first use, with one sentence saying what to set (issue 38).
The directory itself stays where existing deployments keep it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.vllmops.cluster.plugins.lookup.secrets_dir import OWNER_FILE, owner_problem

ROOT = Path(__file__).resolve().parents[4]
DEFAULTS = yaml.safe_load((ROOT / "roles/vllmops/defaults/main.yml").read_text())
sys.path.insert(0, str(ROOT / "tests/sandbox"))
from api_client import secrets_dir as harness_secrets_dir  # noqa: E402


@pytest.fixture()
def two_inventories(tmp_path):
    """Two inventory directories named prod, and a secrets directory that the first one owns."""
    first, second = tmp_path / "site-a" / "prod", tmp_path / "site-b" / "prod"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    secrets = tmp_path / "home" / ".vllmops" / "secrets" / "prod"
    secrets.mkdir(parents=True)
    (secrets / OWNER_FILE).write_text(f"{first}\n")
    return first, second, secrets


@pytest.mark.parametrize(("record", "inventory", "refused"), [
    pytest.param(None, "first", False, id="nothing-recorded-yet"),
    pytest.param("first", "first", False, id="its-owner"),
    pytest.param("link-to-first", "first", False, id="its-owner-through-a-link"),
    pytest.param("first", "second", True, id="another-inventory-of-the-same-name"),
    pytest.param("first", "", False, id="no-inventory-directory"),
    pytest.param("first", "None", False, id="a-host-list"),
])
def test_only_the_inventory_recorded_may_use_the_directory(two_inventories, tmp_path, record, inventory, refused):
    first, second, secrets = two_inventories
    (tmp_path / "link").symlink_to(first)
    paths = {"first": str(first), "second": str(second), "link-to-first": str(tmp_path / "link"), "": "", "None": "None"}
    if record is None:
        (secrets / OWNER_FILE).unlink()
    else:
        (secrets / OWNER_FILE).write_text(paths[record] + "\n")
    problem = owner_problem(str(secrets), paths[inventory])
    assert (problem is not None) == refused
    if refused:
        assert str(first) in problem and str(second) in problem
        assert "set vllmops_cluster_name (or vllmops_secrets_dir) for one of them" in problem
        assert problem.count(". ") == 0, "one sentence"


# vllmops_secrets_dir's default, rendered as a play renders it, the collection's lookup included (in a
# process of its own: Ansible's collection loader must be installed before anything imports ansible_collections).
RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader([sys.argv[1]])
defaults, variables = json.loads(sys.argv[2]), json.loads(sys.argv[3])
variables.setdefault("vllmops_cluster_name", trust_as_template(defaults["vllmops_cluster_name"]))
try:
    print(json.dumps({"dir": Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(defaults["vllmops_secrets_dir"]))}))
except Exception as err:
    print(json.dumps({"error": str(err)}))
"""


def render(home: Path, inventory_dir: str, **settings) -> dict:
    proc = subprocess.run([sys.executable, "-c", RENDER, str(ROOT / "collections"), json.dumps(DEFAULTS),
                           json.dumps({"inventory_dir": inventory_dir, **settings})],
                          env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_the_default_stays_where_existing_deployments_keep_their_secrets(two_inventories, monkeypatch):
    first, _, secrets = two_inventories
    home = secrets.parents[2]
    monkeypatch.setenv("HOME", str(home))  # the test harness's client reads the same directory
    (secrets / OWNER_FILE).unlink()  # a directory made by an earlier release: nothing recorded
    assert render(home, str(first)) == {"dir": str(secrets)}
    assert harness_secrets_dir(first) == secrets


def test_another_inventory_of_the_same_name_is_refused_until_it_names_its_cluster(two_inventories):
    first, second, secrets = two_inventories
    home = secrets.parents[2]
    assert render(home, str(first)) == {"dir": str(secrets)}
    refused = render(home, str(second))["error"]
    assert f"belongs to the inventory {first}, not to this one ({second})" in refused
    assert "set vllmops_cluster_name (or vllmops_secrets_dir) for one of them" in refused
    assert render(home, str(second), vllmops_cluster_name="prod-b") == {"dir": str(secrets.parent / "prod-b")}


def test_the_api_proxy_role_records_the_owner_where_the_lookup_reads_it():
    tasks = yaml.safe_load((ROOT / "roles/api_proxy/tasks/secrets_owner.yml").read_text())
    record = next(task for task in tasks[0]["block"] if "ansible.builtin.copy" in task)["ansible.builtin.copy"]
    assert record["dest"] == "{{ vllmops_secrets_dir }}/" + OWNER_FILE
    assert record["content"] == "{{ inventory_dir | realpath }}\n" and record["force"] is False
    main = yaml.safe_load((ROOT / "roles/api_proxy/tasks/main.yml").read_text())
    assert main[0].get("ansible.builtin.import_tasks") == "secrets_owner.yml", "recorded on every deploy, proxy or not"
