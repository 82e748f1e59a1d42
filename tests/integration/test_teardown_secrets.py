"""Teardown removes every file on a node that holds a secret - vLLM's environment (the API key, the HF token
in vllm_serve_env) and the copies kept for a rollback, besides the proxy's files and Ray's token that go with
their units - unless teardown_keep_secrets, and names them (issue 38). teardown.yml's own play runs on this
machine with the node's paths moved under a temporary directory; only tasks/teardown_node.yml (units,
containers, firewall: a real node's) is left out, and its removals of the proxy's files and Ray's token
are done by hand in its place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAY = yaml.safe_load((ROOT / "playbooks/teardown.yml").read_text())[0]
SECRETS = ["vllm.env", "releases", "last-good/vllm.env", "previous/vllm.env"]
# The releases kept for a rollback: copies of vLLM's environment and the proxy's configuration, and the API key.
RELEASE_FILES = ["releases/r-0123456789ab/files/vllm.env", "releases/r-0123456789ab/files/nginx.conf", "releases/r-0123456789ab/secret"]
OTHERS = ["cluster.env", "last-good/member.json", "last-good/vllmops-vllm.service", "previous/plan.json"]


def _node(root: Path) -> dict:
    """A node's files under root, and the settings that point the play at them."""
    for name in [*(name for name in SECRETS if name != "releases"), *RELEASE_FILES, *OTHERS, "ray/auth_token", "api-proxy/nginx.conf",
                 "api-proxy/tls/0123.key"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("VLLM_API_KEY=k\nHF_TOKEN=hf_x\n" if name.endswith(".env") else "x\n")
    return {"vllm_serve_env_file": str(root / "vllm.env"), "vllm_serve_releases_dir": str(root / "releases"),
            "vllm_serve_last_good_dir": str(root / "last-good"),
            "vllm_serve_previous_dir": str(root / "previous"), "vllmops_api_proxy_dir": str(root / "api-proxy"),
            "vllmops_ray_token_file": str(root / "ray/auth_token"), "vllmops_cluster_env_file": str(root / "cluster.env")}


def _stand_in_for_teardown_node() -> dict:
    return {"name": "What tasks/teardown_node.yml removes with the units", "ansible.builtin.file": {"path": "{{ item }}", "state": "absent"},
            "loop": ["{{ vllmops_api_proxy_dir }}", "{{ vllmops_ray_token_file | dirname }}"]}


@pytest.fixture(scope="module")
def teardown(tmp_path_factory):
    """Two teardowns: one plain, one with teardown_keep_secrets. Their nodes' roots and what each said."""
    tmp = tmp_path_factory.mktemp("teardown")
    (tmp / "playbooks").mkdir()
    (tmp / "roles").symlink_to(ROOT / "roles")  # the play reads the vllm_serve role's defaults from ../roles
    (tmp / "playbooks/tasks").symlink_to(ROOT / "playbooks/tasks")
    plays, roots = [], {}
    for name, keep in (("plain", False), ("keep", True)):
        roots[name] = tmp / name
        tasks = [_stand_in_for_teardown_node() if "tasks/teardown_node.yml" in str(task) else task for task in PLAY["tasks"]]
        plays.append({**PLAY, "name": name, "hosts": "localhost", "connection": "local", "become": False, "tasks": tasks,
                      "vars": {**PLAY["vars"], **_node(roots[name]), "teardown_keep_secrets": keep,
                               "ansible_python_interpreter": sys.executable}})
    (tmp / "playbooks/teardown.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               PATH=f"{BIN}:{os.environ['PATH']}", HOME=str(tmp))  # the API key's lookup writes under HOME
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp / "playbooks/teardown.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    said = {play["play"]["name"]: next(task["hosts"]["localhost"]["msg"] for task in play["tasks"]
                                       if task["task"]["name"].startswith("Name the files that held a secret"))
            for play in json.loads(proc.stdout)["plays"]}
    return roots, said


def test_every_file_holding_a_secret_is_gone_and_named(teardown):
    roots, said = teardown
    root = roots["plain"]
    assert [name for name in SECRETS if (root / name).exists()] == []
    assert [name for name in OTHERS if not (root / name).exists()] == [], "the rest of the configuration stays"
    assert said["plain"][0] == "localhost: removed:"
    for name in [*SECRETS, "api-proxy", "ray/auth_token"]:
        assert any(line.startswith(f"{root / name} - ") for line in said["plain"]), name


def test_teardown_keep_secrets_keeps_vllms_environment_and_says_so(teardown):
    roots, said = teardown
    root = roots["keep"]
    assert [name for name in SECRETS if not (root / name).exists()] == []
    kept = said["keep"][said["keep"].index("kept (teardown_keep_secrets):") + 1:]
    assert kept == [str(root / name) for name in SECRETS]


def test_the_files_are_looked_for_before_teardown_node_removes_some_and_removed_after_the_units_stop():
    names = [str(task) for task in PLAY["tasks"]]
    look = next(i for i, task in enumerate(PLAY["tasks"]) if "ansible.builtin.stat" in task)
    node = next(i for i, name in enumerate(names) if "tasks/teardown_node.yml" in name)
    secrets = next(i for i, name in enumerate(names) if "tasks/teardown_secrets.yml" in name)
    assert look < node < secrets
