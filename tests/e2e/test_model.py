"""The model role on the sandbox: `make sandbox` published the tiny model on a
local stand-in of the Hugging Face Hub (tests/sandbox/hub.py); node1 downloaded
it once with the image's own huggingface_hub and copied it to node2 over the
cluster network. Re-runs copy nothing; a node that lost or corrupted its copy
gets back exactly what it lacks; bad hub input and a full disk are refused
before anything changes; serving refuses nodes whose models differ."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from conftest import INVENTORY, ROOT

MODEL = "/srv/models/sandbox-tiny"  # a link to the version that serves, beside the others
VERSIONS = "/srv/models/.vllmops-versions/sandbox-tiny"
WEIGHTS = MODEL + "/model.safetensors"
# The hub stand-in's output since `make sandbox` started it: one line per request (Makefile: SANDBOX_HUB_DIR).
HUB_LOG = Path.home() / ".cache/vllmops/hub/vllmops-sandbox.pid.log"


def publish_tiny_variant(repo: str, **config) -> str:
    """Publish the tiny model `make sandbox` made on the hub stand-in as REPO, its config.json changed by CONFIG;
    returns the new revision."""
    tiny = subprocess.run([sys.executable, str(ROOT / "tests/sandbox/serving/real_vllm.py"), "model"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as copy:
        for path in Path(tiny).iterdir():
            (Path(copy) / path.name).write_bytes(path.read_bytes())
        original = json.loads((Path(copy) / "config.json").read_text())
        (Path(copy) / "config.json").write_text(json.dumps(dict(original, **config)))
        return subprocess.run([sys.executable, str(ROOT / "tests/sandbox/hub.py"), "publish", "--root",
                               str(HUB_LOG.parent), "--repo", repo, "--source", copy],
                              capture_output=True, text=True, check=True).stdout.strip()


def _served(sandbox, node) -> str:
    """The version directory the served path points at."""
    return sandbox.on(node, "readlink", "-f", MODEL)


def _manifest(sandbox, node):
    """The manifest of the version that serves."""
    return json.loads(sandbox.on(node, "cat", _served(sandbox, node) + ".vllmops-manifest.json"))


def _said(run) -> str:
    return " ".join(run.stdout.split())  # the YAML callback folds long lines


def _model_run(sandbox, extra=None, ok=True, tags="model"):
    run = sandbox.deploy(tags=tags, extra=extra, echo=False)
    assert (run.returncode == 0) == ok, run.stdout[-5000:]
    return run


def test_the_model_was_downloaded_once_and_copied_to_the_worker(sandbox):
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["vllm_nodes"]["vars"]
    head, worker = _manifest(sandbox, sandbox.head), _manifest(sandbox, sandbox.worker)
    assert head["source"] == {"hub": "sandbox/tiny-llama", "revision": hosts["model_hub_revision"],
                              "endpoint": hosts["model_hub_endpoint"]}
    assert worker["digest"] == head["digest"] and worker["files"].keys() == head["files"].keys()
    # Downloaded once: the hub served each file once (node1), node2's copy came over the cluster network; config.json
    # once more, read before the download to check what the model is.
    fetched = [line.split()[1].rsplit("/", 1)[-1] for line in HUB_LOG.read_text().splitlines()
               if line.startswith("GET /sandbox/tiny-llama/resolve/")]
    assert sorted(fetched) == sorted([*head["files"], "config.json"]), fetched
    # The worker's files are the hub's, byte for byte (sha256sum, not our own hashing).
    for name, entry in head["files"].items():
        assert sandbox.on(sandbox.worker, "sha256sum", f"{MODEL}/{name}").split()[0] == entry["sha256"], name
    # Served from that content: the running rank carries the model's digest.
    for node in sandbox.nodes:
        labels = json.loads(sandbox.on(node, "docker", "inspect", "-f", "{{json .Config.Labels}}", "vllmops-vllm"))
        assert labels["io.vllmops.model"] == head["digest"], node
    assert sandbox.on(sandbox.head, "stat", "--format", "%a", _served(sandbox, sandbox.head) + ".vllmops-manifest.json") == "644"
    # the served path is a link into the versions, named by the digest
    assert _served(sandbox, sandbox.head) == f"{VERSIONS}/{head['digest'][7:23]}"
    assert sandbox.on(sandbox.head, "readlink", MODEL) == f".vllmops-versions/sandbox-tiny/{head['digest'][7:23]}"


def test_a_rerun_copies_nothing_and_a_lost_or_corrupted_copy_is_restored(sandbox):
    head = _manifest(sandbox, sandbox.head)
    total = sum(entry["size"] for entry in head["files"].values())
    rerun = _model_run(sandbox)
    assert f"Every node holds {MODEL} ({head['digest'][:19]}" in _said(rerun)

    # Lost: the served version and the link on the worker, restored from the head (not the hub).
    served = _served(sandbox, sandbox.worker)
    sandbox.on(sandbox.worker, "rm", "-rf", MODEL, served, served + ".vllmops-manifest.json")
    restored = _model_run(sandbox)
    assert f"Copying {len(head['files'])} files" in _said(restored)
    assert f"from {sandbox.head} to {sandbox.worker}." in _said(restored)
    assert _manifest(sandbox, sandbox.worker)["digest"] == head["digest"]
    progress = json.loads(sandbox.on(sandbox.worker, "cat", "/run/vllmops/model-receive.json"))
    assert progress["state"] == "done" and progress["bytes"] == total

    # Corrupted: three bytes of the weights overwritten in place. Only that file travels.
    sandbox.on(sandbox.worker, "sh", "-c", f"printf rot | dd of={WEIGHTS} bs=1 seek=4096 conv=notrunc status=none")
    repaired = _model_run(sandbox)
    size = head["files"]["model.safetensors"]["size"]
    assert "Copying 1 files" in _said(repaired), repaired.stdout[-3000:]
    assert sandbox.on(sandbox.worker, "sha256sum", WEIGHTS).split()[0] == head["files"]["model.safetensors"]["sha256"]
    progress = json.loads(sandbox.on(sandbox.worker, "cat", "/run/vllmops/model-receive.json"))
    assert progress["bytes"] == size
    assert sandbox.healthy()


def test_serving_refuses_a_model_that_differs_between_nodes(sandbox):
    started = {node: sandbox.container(node)["started"] for node in sandbox.nodes}
    sandbox.on(sandbox.worker, "sh", "-c", f"printf rot | dd of={WEIGHTS} bs=1 seek=8192 conv=notrunc status=none")
    refused = sandbox.deploy(tags="vllm_serve", serve_args={**sandbox.serve_vars["vllm_serve_args"], "seed": 7},
                             echo=False)
    assert refused.returncode != 0
    said = _said(refused)
    assert f"on {sandbox.worker} these files changed since their manifest: model.safetensors" in said, said[-3000:]
    assert "Nothing was restarted" in said
    assert {node: sandbox.container(node)["started"] for node in sandbox.nodes} == started
    status = " ".join(sandbox.playbook("playbooks/status.yml").stdout.split())
    assert f"DEGRADED: model files changed since their manifest on: {sandbox.worker}" in status, status[-3000:]
    _model_run(sandbox)  # and the model role puts it right
    assert sandbox.healthy()
    status = " ".join(sandbox.playbook("playbooks/status.yml").stdout.split())
    assert f"model: {_manifest(sandbox, sandbox.head)['digest'][:19]} on every node" in status, status[-3000:]


def test_bad_hub_input_is_one_sentence_and_changes_nothing(sandbox):
    before = {node: _manifest(sandbox, node)["digest"] for node in sandbox.nodes}
    revision = _manifest(sandbox, sandbox.head)["source"]["revision"]
    # A repository that does not exist, and a wrong token, are in tests/unit/plugins/module_utils/test_model_hub.py.
    run = _model_run(sandbox, {"model_hub_repo": "sandbox/tiny-gated", "model_hub_revision": revision}, ok=False)
    assert "sandbox/tiny-gated is gated: accept the model's terms" in _said(run), _said(run)[-2000:]
    run = _model_run(sandbox, {"model_hub_revision": "0" * 40}, ok=False)
    assert f"sandbox/tiny-llama has no revision {'0' * 40}" in _said(run), _said(run)[-2000:]
    with tempfile.TemporaryDirectory() as empty:  # on this machine, the controller
        run = _model_run(sandbox, {"model_source": "controller", "model_controller_path": empty}, ok=False)
        assert f"{empty} on the controller holds no config.json (nothing at all): it is not a model directory." \
            in _said(run), _said(run)[-2000:]
    assert {node: _manifest(sandbox, node)["digest"] for node in sandbox.nodes} == before
    # Refused when config.json was read, before the download: no staging directory was even begun.
    for node in sandbox.nodes:
        assert sandbox.on(node, "ls", "-A", "/srv/models/.vllmops-staging", check=False) == "", node


def test_a_hub_model_the_images_vllm_does_not_register_is_refused_before_any_weight_is_fetched(sandbox, poller):
    """A new model on the hub whose config.json names an architecture the image's vLLM lacks: the model play reads
    config.json through the hub client and refuses, naming it, before the download; the hub served no weight file,
    nothing was written on the nodes, and the cluster kept serving."""
    revision = publish_tiny_variant("sandbox/tiny-unregistered", architectures=["Qwen9ForCausalLM"])
    before = {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes}
    served = len(HUB_LOG.read_text().splitlines())
    with poller() as polls:
        began = time.monotonic()
        run = _model_run(sandbox, {"model_hub_repo": "sandbox/tiny-unregistered", "model_hub_revision": revision,
                                   "vllm_serve_model": "sandbox-unregistered"}, ok=False, tags="image,model")
        took = time.monotonic() - began
    said = _said(run)
    assert f"sandbox/tiny-unregistered@{revision} is Qwen9ForCausalLM (its config.json), which vLLM" in said, said[-3000:]
    assert "does not register" in said and "Nothing was downloaded or copied." in said
    fetched = [line.split()[1] for line in HUB_LOG.read_text().splitlines()[served:] if "/resolve/" in line]
    assert fetched and all(path.endswith("/config.json") for path in fetched), fetched
    for node in sandbox.nodes:
        assert sandbox.on(node, "sh", "-c", "ls -d /srv/models/sandbox-unregistered* "
                          "/srv/models/.vllmops-staging/sandbox-unregistered 2>/dev/null; true") == "", node
    assert {node: (sandbox.container(node), sandbox.unit(node)) for node in sandbox.nodes} == before
    assert polls.failed == 0 and polls.ok > 0, (polls.ok, polls.failed)
    print(f"refused {took:.1f} s after ansible-playbook started (--tags image,model); the hub's file requests: "
          f"{len(fetched)}, all for config.json (HEAD and GET)")


def test_too_little_disk_is_refused_before_any_byte_moves(sandbox):
    small = "/srv/small-disk"
    sandbox.on(sandbox.worker, "sh", "-c", f"mkdir -p {small} && mount -t tmpfs -o size=1m tmpfs {small}")
    try:
        run = _model_run(sandbox, {"vllm_serve_model_dir": small, "model_space_margin": 0}, ok=False)
        said = _said(run)
        total = sum(entry["size"] for entry in _manifest(sandbox, sandbox.head)["files"].values())
        assert f"{small}/sandbox-tiny: the model needs {total / (1 << 20):.1f} MiB more here" in said, said[-3000:]
        assert "1.0 MiB is free" in said or "free (keeping" in said
        # Nothing moved anywhere: not downloaded on the head, not copied to the worker.
        for node in sandbox.nodes:
            assert sandbox.on(node, "ls", "-A", small, check=False) in ("", ), node
    finally:
        sandbox.on(sandbox.worker, "umount", small, check=False)
        for node in sandbox.nodes:
            sandbox.on(node, "rm", "-rf", small, check=False)
