"""Docker's two image stores in one cluster: node1's engine keeps images in the
classic overlay2 store, node2's in containerd's image store (the default of
new Docker installs; inventories/sandbox/host_vars). The same image has
another ID on each node. `make sandbox` copied it once to each node; a re-run
copies nothing, each rank runs its own node's copy, and the probe reads the
same image on both (the overlay2 layers on node1, a created container on
node2). status.yml's verdict on this cluster is test_benchmark_metrics'."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import yaml
from conftest import INVENTORY

RECEIVED = "/run/vllmops/image-receive.json"
# What differs between two readings of one image in two stores, and why: the engine's own ID and digests,
# the size it counts (compressed or not), how the files were read, and the python executables a reader that
# cannot list directories does not look for.
PER_STORE = {("image", "id"), ("image", "repo_digests"), ("image", "size"), ("backend",), ("cached",),
             ("python", "executables"), ("invocation",), ("changed",)}


def _image() -> str:
    return yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["vllm_nodes"]["vars"]["vllmops_image"]


def _probes(sandbox, image: str) -> dict:
    """Each node's image_probe answer, read afresh (no cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        play = out / "probe.yml"
        play.write_text(yaml.safe_dump([{
            "hosts": "vllm_nodes", "gather_facts": False, "become": True,
            "tasks": [{"vllmops.cluster.image_probe": {"image": image, "use_cache": False}, "register": "found"},
                      {"ansible.builtin.copy": {"content": "{{ found | to_json }}", "dest": f"{out}/{{{{ inventory_hostname }}}}.json"},
                       "delegate_to": "localhost", "become": False}]}]))
        run = sandbox.playbook(str(play))
        assert run.returncode == 0, run.stdout[-3000:]
        return {node: json.loads((out / f"{node}.json").read_text()) for node in sandbox.nodes}


def _without(found: dict, keys: set) -> dict:
    found = json.loads(json.dumps(found))
    for path in keys:
        parent = found
        for key in path[:-1]:
            parent = parent.get(key, {})
        parent.pop(path[-1], None)
    return found


def test_a_cluster_with_both_image_stores_copies_the_image_once_and_reads_it_alike(sandbox):
    image = _image()
    head, worker = sandbox.head, sandbox.worker
    assert sandbox.on(head, "docker", "info", "--format", "{{.Driver}}") == "overlay2"
    assert "io.containerd.snapshotter.v1" in sandbox.on(worker, "docker", "info", "--format", "{{json .DriverStatus}}")
    ids = {node: sandbox.on(node, "docker", "image", "inspect", "--format", "{{.Id}}", image) for node in sandbox.nodes}
    assert ids[head] != ids[worker], ids  # one image, two IDs: what the collection must see through

    # Copied once, by make sandbox: each node's receiver report. A re-run copies nothing and leaves them as they were.
    received = {node: sandbox.on(node, "stat", "--format", "%Y", RECEIVED) for node in sandbox.nodes}
    assert all(json.loads(sandbox.on(node, "cat", RECEIVED))["state"] == "done" for node in sandbox.nodes)
    run = sandbox.deploy(tags="image", echo=False)
    said = " ".join(run.stdout.split())
    assert run.returncode == 0, run.stdout[-4000:]
    assert f"Every node has {image} (content sha256:" in said and "nothing to copy" in said, run.stdout[-4000:]
    changed = sum(int(n) for n in re.findall(r"changed=(\d+)", run.stdout.split("PLAY RECAP", 1)[-1]))
    assert changed == 0, run.stdout[-3000:]
    assert {node: sandbox.on(node, "stat", "--format", "%Y", RECEIVED) for node in sandbox.nodes} == received
    assert {node: sandbox.on(node, "docker", "image", "inspect", "--format", "{{.Id}}", image)
            for node in sandbox.nodes} == ids

    # Each rank runs its own node's copy, by that node's ID.
    for node in sandbox.nodes:
        assert sandbox.on(node, "docker", "inspect", "--format", "{{.Image}}", "vllmops-vllm") == ids[node], node

    # The probe reads the same image on both: same content, same vLLM, same flags and packages.
    probes = _probes(sandbox, image)
    assert probes[head]["backend"] == "overlay2" and probes[worker]["backend"] == "container"
    assert probes[head]["image"]["content_id"] == probes[worker]["image"]["content_id"]
    assert probes[head]["vllm"]["flags"] and probes[head]["vllm"]["version"]
    assert _without(probes[head], PER_STORE) == _without(probes[worker], PER_STORE)
