"""An image that bakes network settings (the NGC-like probe image: NCCL_SOCKET_IFNAME=eth0, NCCL_IB_HCA=mlx5_0 ...)
planned on two nodes whose cluster environments differ: the real probe reports them, the plan role replaces or
removes them per node with a warning, the unit template carries the removals, and a container started with the
unit's own environment arguments sees the node's values and none of the image's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# n1 uses RDMA (its cluster.env sets every variable the image bakes), n2 sockets (no NCCL_IB_HCA: the image's leaks).
CLUSTER_ENV = {
    "n1": {"VLLM_HOST_IP": "10.0.0.1", "NCCL_SOCKET_IFNAME": "=clu0", "GLOO_SOCKET_IFNAME": "clu0",
           "TP_SOCKET_IFNAME": "clu0", "UCX_NET_DEVICES": "rocep1s0f1:1", "NCCL_IB_DISABLE": "0",
           "NCCL_IB_HCA": "=rocep1s0f1:1"},
    "n2": {"VLLM_HOST_IP": "10.0.0.2", "NCCL_SOCKET_IFNAME": "=enp1s0", "GLOO_SOCKET_IFNAME": "enp1s0",
           "TP_SOCKET_IFNAME": "enp1s0", "UCX_NET_DEVICES": "enp1s0", "NCCL_IB_DISABLE": "1"},
}


def run_plan(tmp_path, image):
    hosts = {}
    for name, env in CLUSTER_ENV.items():
        env_file = tmp_path / f"{name}.env"
        env_file.write_text("# written by the nccl role\n" + "".join(f"{k}={v}\n" for k, v in env.items()))
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "vllmops_head_host": "n1", "vllmops_cluster_env_file": str(env_file)}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {"vllm_nodes": {"hosts": hosts}}}}))
    unit = {"name": "vllmops-vllm-test", "image_id": "{{ vllmops_plan.members[inventory_hostname].image_id }}",
            "entrypoint": "vllm", "env_files": []}
    (tmp_path / "plan.yml").write_text(json.dumps([{
        "name": "Plan", "hosts": "vllm_nodes", "gather_facts": False,
        "vars": {"vllmops_image": image, "plan_gpus_per_node": 1, "vllm_serve_model": "demo",
                 "vllmops_node_gpus": [{"index": 0}]},
        "roles": [{"role": "vllmops.cluster.plan"}],
        "tasks": [
            {"name": "Render the serving unit", "ansible.builtin.template": {
                "src": str(ROOT / "roles/vllmops/templates/vllmops-container.service.j2"),
                "dest": str(tmp_path) + "/{{ inventory_hostname }}.service", "mode": "0644"},
             "vars": {"vllmops_unit": unit}},
            {"name": "Render a unit of another image", "ansible.builtin.template": {
                "src": str(ROOT / "roles/vllmops/templates/vllmops-container.service.j2"),
                "dest": str(tmp_path) + "/{{ inventory_hostname }}-other.service", "mode": "0644"},
             "vars": {"vllmops_unit": dict(unit, image_id="sha256:" + "cd" * 32)}},
            {"name": "Show the plan", "ansible.builtin.debug": {"var": "vllmops_plan"}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "plan.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    plan = next(t for t in tasks if t["task"]["name"] == "Show the plan")["hosts"]["n1"]["vllmops_plan"]
    warnings = [w for t in tasks for result in t["hosts"].values() for w in result.get("warnings", [])]
    return plan, warnings


def environment_arguments(unit_text: str) -> list[str]:
    """The --env / --env-file arguments of the unit's docker run, in order."""
    start = unit_text[unit_text.index("ExecStart="):]
    command = start[:start.index("\n\n")].replace("\\\n", " ")
    return [arg for pair in re.findall(r"(--env(?:-file)? \S+)", command) for arg in pair.split(" ", 1)]


def test_baked_network_settings_are_replaced_or_removed_per_node(tmp_path, probe_images):
    image = probe_images["ngc-vllm"]
    plan, warnings = run_plan(tmp_path, image)
    assert plan["members"]["n1"]["image_env"] == {"removed": [], "replaced": {
        "NCCL_SOCKET_IFNAME": "=clu0", "GLOO_SOCKET_IFNAME": "clu0", "UCX_NET_DEVICES": "rocep1s0f1:1",
        "NCCL_IB_HCA": "=rocep1s0f1:1"}}
    assert plan["members"]["n2"]["image_env"]["removed"] == ["NCCL_IB_HCA"]
    assert (f"image {image} sets NCCL_SOCKET_IFNAME=eth0; on n2 the cluster's setting NCCL_SOCKET_IFNAME==enp1s0 "
            "is used instead") in warnings
    assert any(w.startswith(f"image {image} sets NCCL_IB_HCA=mlx5_0; on n2 the cluster's settings leave NCCL_IB_HCA "
                            "unset") for w in warnings)
    assert len(warnings) == 8  # 4 baked variables x 2 nodes, each said once

    n1, n2 = ((tmp_path / f"{name}.service").read_text() for name in ("n1", "n2"))
    assert "UnsetEnvironment" not in n1 and "--env NCCL" not in n1
    assert "UnsetEnvironment=NCCL_IB_HCA\n" in n2
    assert "  --env NCCL_IB_HCA \\\n" in n2
    assert "--env NCCL_IB_HCA" not in (tmp_path / "n2-other.service").read_text()  # not the serving image's unit

    # What the container of each node sees, started with its unit's own environment arguments.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "UCX_", "TP_", "VLLM_"))}
    for name, text in (("n1", n1), ("n2", n2)):
        seen = subprocess.run(["docker", "run", "--rm", *environment_arguments(text), "--entrypoint", "/usr/bin/env",
                               image], capture_output=True, text=True, check=True, env=clean).stdout
        container = dict(line.split("=", 1) for line in seen.splitlines() if "=" in line)
        assert {k: container.get(k) for k in CLUSTER_ENV[name]} == CLUSTER_ENV[name]
        assert "mlx5_0" not in seen and "eth0" not in seen  # nothing of the image's network settings is left
