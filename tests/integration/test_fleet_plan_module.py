"""The fleet_plan module through ansible-playbook, as preflight runs it (issue 39): an operator's
vllmops_services list on two nodes is planned (replicas spread, a second model beside them, ports assigned
around the cluster's own), and a list that cannot run fails the play with the service and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODES = [{"name": "node1", "gpus": 2, "address": "10.88.0.2"}, {"name": "node2", "gpus": 1, "address": "10.88.0.3"}]


def run_plan(tmp_path, services):
    """The module's result (the task's host result) for these services."""
    play = [{"name": "Plan", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable},
             "tasks": [{"name": "Plan the services", "vllmops.cluster.fleet_plan": {
                 "services": services, "nodes": NODES, "reserved_ports": {"8000": "the API (vllmops_api_port)",
                                                                          "8100": "a port of the operator's"}}}]}]
    (tmp_path / "plan.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "plan.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_replicas_spread_and_a_second_model_beside_them(tmp_path):
    result = run_plan(tmp_path, [{"name": "tiny", "model": "sandbox/tiny-llama", "replicas": 2},
                                 {"name": "tiny-b", "model": "/srv/models/tiny-b"}])
    assert not result.get("failed"), result.get("msg")
    fleet = result["fleet"]
    tiny, other = fleet["services"]
    assert [replica["nodes"] for replica in tiny["replicas"]] == [["node1"], ["node2"]]
    assert other["replicas"][0]["units"][0]["host"] == "node1" and other["replicas"][0]["units"][0]["gpus"] == [1]
    # 8100 is taken by the cluster: the replicas get the next ports, one per unit of node1.
    assert fleet["upstreams"] == {"tiny": ["10.88.0.2:8101", "10.88.0.3:8101"], "tiny-b": ["10.88.0.2:8102"]}
    assert sorted(fleet["hosts"]["node1"]) == sorted(["vllmops-vllm-tiny-0", "vllmops-vllm-tiny-b-0"])
    assert "tiny: 2 replicas" in result["msg"]


def test_a_gpu_given_twice_fails_the_play_naming_both_services(tmp_path):
    result = run_plan(tmp_path, [{"name": "a", "model": "org/a", "gpus": {"node1": [0]}},
                                 {"name": "b", "model": "org/b", "gpus": {"node1": [0, 1]}}])
    assert result.get("failed")
    assert result["msg"].startswith("Nothing was changed. vllmops_services: ")
    assert "services a and b" in result["msg"] and "GPU(s) 0 of node1" in result["msg"]
    assert "give each GPU to one service" in result["msg"]
