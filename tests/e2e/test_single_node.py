"""One node: the plan runs vLLM's own executor on it, with no Ray and no
multi-node flags. The sandbox's inventory shrunk to node1 (a copy of it, with
the same group_vars), then the full inventory again."""

from __future__ import annotations

import shutil

import yaml
from conftest import INVENTORY


def test_one_node_runs_without_ray_or_multinode_flags(sandbox, tmp_path):
    single = tmp_path / "single"
    shutil.copytree(INVENTORY / "group_vars", single / "group_vars")
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    group = hosts["all"]["children"]["vllm_nodes"]
    group["hosts"] = {sandbox.head: group["hosts"][sandbox.head]}
    (single / "hosts.yml").write_text(yaml.safe_dump(hosts))

    # The same cluster under another inventory directory: its secrets (the API key, the proxy's CA) stay the sandbox's.
    run = sandbox.deploy(inventory=single, extra={"vllmops_cluster_name": INVENTORY.name})
    assert run.returncode == 0, run.stdout[-3000:]
    assert "mp single-node: 1 node" in run.stdout
    args = sandbox.container(sandbox.head)["args"]
    assert args[args.index("--distributed-executor-backend") + 1] == "mp"
    assert args[args.index("--tensor-parallel-size") + 1] == "1"
    assert "--nnodes" not in args and "--headless" not in args
    fingerprint = sandbox.complete()["system_fingerprint"]  # vLLM names TP > 1 in it: "vllm-0.32.0-tp2-..."
    assert fingerprint.startswith("vllm-0.32.0-") and "-tp" not in fingerprint, fingerprint
    assert sandbox.on(sandbox.head, "systemctl", "is-enabled", "vllmops-vllm-watchdog.timer", check=False) != "enabled"

    # back to both nodes: TP 2 across them again
    run = sandbox.deploy()
    assert run.returncode == 0, run.stdout[-3000:]
    assert "--headless" in sandbox.container(sandbox.worker)["args"]
    assert sandbox.complete()["system_fingerprint"].startswith("vllm-0.32.0-tp2")
