"""The plan role through ansible-playbook: two simulated hosts (local
connections), fed with image facts of the shape image_probe returns (the real
probe of real vLLM images is tested in test_image_probe.py), each host with its
own variables - what an operator's inventory gives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def plan(tmp_path, ray_version, modes, backend="auto", heads=("n1", "n1"), vllm_version="0.33.0", limit=None):
    facts = {"image": {"id": "sha256:" + "ab" * 32}, "packages": {"ray": ray_version},
             "vllm": {"version": vllm_version, "multinode_modes": modes}}
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "vllmops_head_host": head, "plan_node_ip": f"10.0.0.{i + 1}"}
             for i, (name, head) in enumerate(zip(("n1", "n2"), heads, strict=True))}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {"vllm_nodes": {"hosts": hosts}}}}))
    (tmp_path / "plan.yml").write_text(json.dumps([{
        "name": "Plan", "hosts": "vllm_nodes", "gather_facts": False,
        "vars": {"image_facts": facts, "vllmops_image": "demo/vllm:1", "vllmops_backend": backend,
                 "plan_gpus_per_node": 1, "vllm_serve_model": "demo"},
        "roles": [{"role": "vllmops.cluster.plan"}],
        "tasks": [{"name": "Show the plan", "ansible.builtin.debug": {"var": "vllmops_plan"}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "plan.yml"),
                           *(["--limit", limit] if limit else [])],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    try:
        tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    except (ValueError, KeyError, IndexError) as err:
        raise AssertionError(f"no playbook result (rc={proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}") from err
    plans = {host: result["vllmops_plan"] for task in tasks if task["task"]["name"] == "Show the plan"
             for host, result in task["hosts"].items()}
    return proc.returncode, proc.stdout, plans


@pytest.mark.parametrize(("ray_version", "modes", "backend", "mode"), [
    (None, ["ray", "native"], "auto", "mp-multinode"),          # an image without Ray: the Ray-free mode
    ("2.40.0", ["ray", "native"], "ray", "ray"),                 # Ray when asked, on an image that has it
    ("2.40.0", ["ray"], "auto", "ray"),                          # an older vLLM with Ray
])
def test_every_host_gets_the_same_plan(tmp_path, ray_version, modes, backend, mode):
    rc, out, plans = plan(tmp_path, ray_version, modes, backend)
    assert rc == 0, out[-3000:]
    assert set(plans) == {"n1", "n2"} and plans["n1"] == plans["n2"]
    got = plans["n1"]
    assert (got["mode"], got["backend"]) == (mode, "ray" if mode == "ray" else "mp")
    assert got["head"] == "n1" and got["tensor_parallel_size"] == 2
    assert [got["members"][host]["rank"] for host in ("n1", "n2")] == [0, 1]
    if mode == "mp-multinode":
        assert got["members"]["n2"]["serve_flags"] == {"nnodes": 2, "node_rank": 1, "master_addr": "10.0.0.1",
                                                       "master_port": 29501, "headless": True}


def test_two_heads_are_refused_naming_the_hosts(tmp_path):
    rc, out, _ = plan(tmp_path, None, ["native"], heads=("n1", "n2"))
    assert rc != 0
    assert "n1 names n1 as the head, n2 names n2" in out


def test_ray_on_an_image_without_it_is_refused(tmp_path):
    rc, out, _ = plan(tmp_path, None, ["ray", "native"], backend="ray")
    assert rc != 0 and "demo/vllm:1 has no Ray" in out


def test_an_image_with_neither_mode_is_refused(tmp_path):
    rc, out, _ = plan(tmp_path, None, ["ray"], vllm_version="0.6.3.post1")
    assert rc != 0 and "neither with Ray" in out


def test_a_play_on_fewer_hosts_than_the_inventory_is_refused(tmp_path):
    # the service would restart on node1 alone, TP re-derived from half the GPUs
    rc, out, plans = plan(tmp_path, None, ["ray", "native"], limit="n1")
    assert rc != 0 and plans == {}
    assert "n2 failed earlier in this run or were left out by --limit" in out


@pytest.mark.parametrize(("ray_version", "token_auth"), [("2.40.0", False), ("2.60.0", True)])
def test_ray_runs_with_token_auth_where_the_image_has_it_and_warns_where_not(tmp_path, ray_version, token_auth):
    rc, out, plans = plan(tmp_path, ray_version, ["ray", "native"], backend="ray")
    assert rc == 0, out[-3000:]
    assert {key: plans["n1"]["ray"][key] for key in ("version", "token_auth")} == {"version": ray_version,
                                                                                   "token_auth": token_auth}
    warning = f"demo/vllm:1 has Ray {ray_version}, which has no token authentication (Ray >= 2.52 has it)"
    assert (warning in out) is not token_auth, out[-3000:]
    assert ("(no auth: Ray 2.40.0)" if not token_auth else "(token auth)") in plans["n1"]["summary"]
