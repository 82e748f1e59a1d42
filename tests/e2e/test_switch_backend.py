"""Changing how the cluster runs: both nodes as a Ray deployment (the Ray
stand-in image, since vLLM refuses Ray on CPU); then real vLLM's Ray-free
multi-node mode on an image without Ray. Refused, failed and
successful switches; Ray stops only once vLLM serves without it. The last
switch runs at -vvv with an HF token added to vllm_serve_env: neither it nor
the API key is printed, or found in a unit, a process's arguments or a
journal; both reach vLLM through the 0600 environment file only. Leaves the
sandbox as the inventory describes it, that token in vLLM's environment
file aside."""

from __future__ import annotations

import secrets
import subprocess
import sys

from conftest import ROOT, exposed, leaks

RAY_UNITS = {0: "vllmops-ray-head", 1: "vllmops-ray-worker"}
RAY_TOKEN, RAY_SESSIONS = "/etc/vllmops/ray/auth_token", "/var/lib/vllmops/ray"
ENV_FILE = "/etc/vllmops/vllm.env"


def _standin_archive() -> str:
    out = subprocess.run([sys.executable, str(ROOT / "tests/sandbox/serving/serving_image.py"), "archive"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _units(sandbox) -> dict:
    """Node -> (its vLLM unit's text, its Ray unit's text)."""
    return {node: (sandbox.unit(node), sandbox.unit(node, RAY_UNITS[i])) for i, node in enumerate(sandbox.nodes)}


def _ray_running(sandbox) -> bool:
    return all(sandbox.active(node, RAY_UNITS[i]) for i, node in enumerate(sandbox.nodes))


def test_ray_then_the_ray_free_mode(sandbox, poller):
    # The stand-in serves completions only (no chat, no tools): its recipe sets no tool-call parser.
    ray = {"vllmops_image": "vllmops-sandbox/vllm-openai:v0.33.0", "image_archive": _standin_archive(),
           "vllmops_backend": "ray", "vllmops_recipe": str(ROOT / "tests/sandbox/recipes/sandbox-standin.yml")}
    # 1. a Ray deployment: the head's vLLM over Ray, node2's vLLM rank gone (Ray's worker is all it runs)
    run = sandbox.deploy(extra=ray, tags="image,firewall,ray_cluster,vllm_serve")
    assert run.returncode == 0, run.stdout[-3000:]
    assert _ray_running(sandbox)
    assert "--distributed-executor-backend ray" in sandbox.unit(sandbox.head).replace("\\\n", "")
    assert sandbox.unit(sandbox.worker) == ""
    assert sandbox.complete()["choices"][0]["text"]
    # the stand-in's Ray (2.60) has token authentication: a 0600 token on each node, Ray's session files closed
    for i, node in enumerate(sandbox.nodes):
        assert sandbox.on(node, "stat", "--format", "%a", RAY_TOKEN, RAY_SESSIONS).split() == ["600", "700"], node
        assert "RAY_AUTH_TOKEN_PATH=" + RAY_TOKEN in sandbox.unit(node, RAY_UNITS[i]).replace("\\\n", "")

    # 2. the real image has no Ray: asking for Ray is refused, with Ray and vLLM untouched
    before = sandbox.container(sandbox.head)
    with poller() as polls:
        run = sandbox.deploy(extra={"vllmops_backend": "ray"}, tags="image,ray_cluster,vllm_serve")
    assert run.returncode != 0
    assert "has no Ray" in run.stdout
    assert polls.failed == 0 and _ray_running(sandbox)
    assert sandbox.container(sandbox.head) == before

    # 3. a switch to the Ray-free mode that passes every check of the image's flags, but real vLLM refuses to start
    # (64 KiB of KV cache cannot hold one request of max_model_len 256): rolled back onto Ray on every node
    units = _units(sandbox)
    too_small = dict(sandbox.serve_vars["vllm_serve_args"], kv_cache_memory_bytes=65536)
    run = sandbox.deploy(too_small, tags="image,ray_cluster,vllm_serve")
    assert run.returncode != 0
    assert "did not come up with the new configuration: kv_cache_too_small" in " ".join(run.stdout.split())
    assert "Rolled back every node to the last working configuration: healthy again" in run.stdout
    assert _ray_running(sandbox)
    assert _units(sandbox) == units
    assert "--distributed-executor-backend ray" in sandbox.unit(sandbox.head).replace("\\\n", "")
    assert sandbox.unit(sandbox.worker) == "" and sandbox.container(sandbox.worker) == {}
    assert sandbox.complete()["choices"][0]["text"]

    # 4. the inventory's configuration: real vLLM on both nodes without Ray; Ray's units gone. At -vvv, with an HF
    # token in vllm_serve_env: every rank started once, neither secret printed or exposed on a node.
    found = {"API key": sandbox.client.key, "HF token": "hf_e2e" + secrets.token_hex(16)}
    env = dict(sandbox.serve_vars["vllm_serve_env"], HF_TOKEN=found["HF token"])
    starts = {node: sandbox.starts(node) for node in sandbox.nodes}
    run = sandbox.deploy(tags="image,firewall,ray_cluster,vllm_serve", extra={"vllm_serve_env": env}, args=("-vvv",),
                         echo=False)
    assert run.returncode == 0, run.stdout[-3000:]
    assert {node: sandbox.starts(node) for node in sandbox.nodes} == {n: c + 1 for n, c in starts.items()}
    assert "--headless" in sandbox.container(sandbox.worker)["args"]
    assert sandbox.complete()["system_fingerprint"].startswith("vllm-0.32.0-tp2")
    for i, node in enumerate(sandbox.nodes):
        assert sandbox.unit(node, RAY_UNITS[i]) == "" and not sandbox.active(node, RAY_UNITS[i])
        assert sandbox.on(node, "ls", "/etc/vllmops", check=False).split().count("ray") == 0, "Ray's token left behind"
    assert len(run.stdout) > 50_000  # -vvv: every task's result, connection and module transfer
    assert leaks(run.stdout + run.stderr, found) == [], "the -vvv run printed a secret"
    for node in sandbox.nodes:
        assert sandbox.on(node, "stat", "--format", "%a %U", ENV_FILE) == "600 root"
        assert leaks(sandbox.on(node, "cat", ENV_FILE), found) == list(found), node  # they were given: the test can fail
        assert leaks(exposed(sandbox, node), found) == [], node
    assert [sandbox.client.request("/v1/models", key=key, timeout=30)[0] for key in (None, "not-" + found["API key"], True)] \
        == [401, 401, 200]
