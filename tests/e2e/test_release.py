"""Issue 37 on the sandbox: a release - vLLM's units and environment on every node, the API proxy's configuration
and key on the head, the model version the served path points at - is switched and rolled back whole. A failed
start that moved vLLM's port leaves the proxy forwarding to the port vLLM listens on again; a failed start with
a model update leaves every node serving the old weights, file for file; a copy cut on node2 changes nothing that
serves, and the next run completes it; playbooks/rollback.yml after a key rotation serves the previous release,
its key back on the controller."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import INVENTORY, ROOT
from test_model import HUB_LOG

sys.path.insert(0, str(ROOT / "tests/sandbox"))
from api_client import secrets_dir

MODEL = "/srv/models/sandbox-tiny"
PROXY_CONF = "/etc/vllmops/api-proxy/nginx.conf"
RELEASES = "/etc/vllmops/releases"
TAGS = "model,api_proxy,vllm_serve"


def said(run) -> str:
    return " ".join(run.stdout.split()).replace("''", "'")  # the yaml callback folds lines and doubles quotes


def served_files(sandbox, node: str) -> dict:
    """name -> sha256 of every file under the served path, as sha256sum reads them through the link."""
    out = sandbox.on(node, "sh", "-c", f"cd {MODEL}/ && find . -type f -exec sha256sum {{}} +")
    return {line.split(None, 1)[1].strip(): line.split(None, 1)[0] for line in out.splitlines()}


def model_label(sandbox, node: str) -> str:
    return json.loads(sandbox.on(node, "docker", "inspect", "-f", "{{json .Config.Labels}}", "vllmops-vllm"))["io.vllmops.model"]


def index(sandbox, node: str) -> dict:
    return json.loads(sandbox.on(node, "cat", f"{RELEASES}/index.json"))


def failing(sandbox) -> dict:
    """The inventory's flags without the recipe's --enable-auto-tool-choice: vLLM starts, then refuses a request with
    tools, which readiness asks (test_recipe.py)."""
    return dict(sandbox.serve_vars["vllm_serve_args"], enable_auto_tool_choice=None)


def publish_weights_variant(repo: str, tag: str) -> str:
    """The tiny model with other weights bytes (a metadata entry in model.safetensors' header; the tensors are the
    same) published on the hub stand-in as REPO; returns its revision. Every node lacks the whole weights file."""
    tiny = Path(subprocess.run([sys.executable, str(ROOT / "tests/sandbox/serving/real_vllm.py"), "model"],
                               capture_output=True, text=True, check=True).stdout.strip())
    with tempfile.TemporaryDirectory() as copy:
        for path in tiny.iterdir():
            shutil.copyfile(path, Path(copy) / path.name)
        weights = (Path(copy) / "model.safetensors").read_bytes()
        size = struct.unpack("<Q", weights[:8])[0]
        header = json.loads(weights[8:8 + size])
        header["__metadata__"] = dict(header.get("__metadata__") or {}, vllmops_test=tag)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        (Path(copy) / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + weights[8 + size:])
        return subprocess.run([sys.executable, str(ROOT / "tests/sandbox/hub.py"), "publish", "--root", str(HUB_LOG.parent),
                               "--repo", repo, "--source", copy], capture_output=True, text=True, check=True).stdout.strip()


def test_a_failing_start_with_a_port_change_and_a_model_update_goes_back_whole(sandbox):
    """One change moves vLLM's port (the proxy forwards to the new one) and updates the model (a new version beside
    the served one, the link flipped), and does not come up: every node goes back whole - the proxy forwards to the
    port vLLM listens on again and a client with its key is served, the served path holds the old version's files,
    the containers carry the old model's digest."""
    before = {node: (index(sandbox, node), sandbox.container(node)["args"]) for node in sandbox.nodes}
    conf = sandbox.on(sandbox.head, "cat", PROXY_CONF)
    old = {node: served_files(sandbox, node) for node in sandbox.nodes}
    digest = model_label(sandbox, sandbox.head)
    revision = publish_weights_variant("sandbox/tiny-llama-v2", "v2")
    run = sandbox.deploy(failing(sandbox), tags=TAGS, extra={"vllm_serve_port": 8011, "model_hub_repo": "sandbox/tiny-llama-v2",
                                                             "model_hub_revision": revision})
    assert run.returncode != 0
    assert "Rolled back every node to the last working configuration: healthy again." in said(run), said(run)[-3000:]
    # the proxy came back with vLLM: it forwards to the port vLLM listens on, and a client with its key is served
    assert sandbox.on(sandbox.head, "cat", PROXY_CONF) == conf
    assert sandbox.client.request("/v1/models")[0] == 200
    assert sandbox.complete()["choices"][0]["text"]
    assert {node: (index(sandbox, node), sandbox.container(node)["args"]) for node in sandbox.nodes} == before
    for node in sandbox.nodes:
        assert served_files(sandbox, node) == old[node], node
        assert model_label(sandbox, node) == digest, node
        # the new version stays beside the old one (a later run needs no copy), outside what serves
        assert len(sandbox.on(node, "ls", "/srv/models/.vllmops-versions/sandbox-tiny").split()) >= 4  # 2 versions, 2 manifests


def test_a_copy_cut_on_node2_changes_nothing_that_serves_and_the_next_run_completes_it(sandbox):
    old = {node: served_files(sandbox, node) for node in sandbox.nodes}
    digest = model_label(sandbox, sandbox.head)
    revision = publish_weights_variant("sandbox/tiny-llama-v3", "v3")
    new = {"model_hub_repo": "sandbox/tiny-llama-v3", "model_hub_revision": revision}
    head_ip = sandbox.on(sandbox.head, "sh", "-c", ". /etc/vllmops/cluster.env; echo $VLLM_HOST_IP")
    # node2 lets 512 KiB of the model's stream in, then nothing: the copy stalls mid-file and times out.
    sandbox.on(sandbox.worker, "sh", "-c", "nft add table inet vllmops_test_cut && nft add chain inet vllmops_test_cut input "
               "'{ type filter hook input priority -10 ; }' && nft add rule inet vllmops_test_cut input "
               f"ip saddr {head_ip} tcp sport 29701 quota over 512 kbytes drop")
    try:
        cut = sandbox.deploy(tags=TAGS, extra={**new, "model_copy_idle_timeout": 5})
    finally:
        sandbox.on(sandbox.worker, "nft", "delete", "table", "inet", "vllmops_test_cut", check=False)
    assert cut.returncode != 0
    assert f"copying the model to {MODEL}" in said(cut), said(cut)[-3000:]
    for node in sandbox.nodes:
        assert served_files(sandbox, node) == old[node], node
        assert model_label(sandbox, node) == digest, node
    assert sandbox.complete()["choices"][0]["text"]

    done = sandbox.deploy(tags=TAGS, extra=new)
    assert done.returncode == 0, said(done)[-3000:]
    served = {node: served_files(sandbox, node) for node in sandbox.nodes}
    assert served[sandbox.head] == served[sandbox.worker] != old[sandbox.head]
    assert model_label(sandbox, sandbox.head) == model_label(sandbox, sandbox.worker) != digest
    assert sandbox.complete()["choices"][0]["text"]

    # back to the inventory's model: the old version is still on every node (the previous release's), nothing copied
    back = sandbox.deploy(tags=TAGS)
    assert back.returncode == 0, said(back)[-3000:]
    assert "nothing to copy" in said(back)
    assert {node: served_files(sandbox, node) for node in sandbox.nodes} == old
    assert model_label(sandbox, sandbox.head) == digest


def test_rollback_yml_after_a_key_rotation_serves_the_previous_release_with_its_key(sandbox):
    key_file = secrets_dir(INVENTORY) / "api-key"
    old_key = key_file.read_text().strip()
    args = sandbox.container(sandbox.head)["args"]
    last_good = index(sandbox, sandbox.head)["last_good"]
    key_file.rename(key_file.with_suffix(".before-test"))  # the next deploy generates a new key: a rotation
    try:
        rotated = sandbox.deploy(dict(sandbox.serve_vars["vllm_serve_args"], max_num_seqs=3), tags=TAGS)
        assert rotated.returncode == 0, said(rotated)[-3000:]
        new_key = key_file.read_text().strip()
        assert new_key != old_key
        assert sandbox.client.request("/v1/models", key=old_key)[0] == 401
        assert "--max-num-seqs" in sandbox.container(sandbox.head)["args"]
        assert index(sandbox, sandbox.head)["previous"] == last_good

        back = sandbox.playbook("playbooks/rollback.yml")
        assert back.returncode == 0, back.stdout[-4000:]
        assert f"Back on the previous release {last_good}" in " ".join(back.stdout.split())
        # the key that release holds serves, and is the one on the controller again
        assert key_file.read_text().strip() == old_key
        assert sandbox.client.request("/v1/models", key=old_key)[0] == 200
        assert sandbox.client.request("/v1/models", key=new_key)[0] == 401
        assert sandbox.container(sandbox.head)["args"] == args
        assert sandbox.complete()["choices"][0]["text"]
        assert [index(sandbox, node)["last_good"] for node in sandbox.nodes] == [last_good] * 2
        status = " ".join(sandbox.playbook("playbooks/status.yml").stdout.split())
        assert f"release: {last_good} on every node" in status, status[-3000:]
    finally:
        key_file.with_suffix(".before-test").unlink(missing_ok=True)
    # What serves now is the inventory's configuration (the release it deployed before the rotation).
