"""ray_cluster's choice between Ray and vLLM's Ray-free multi-node mode, from what image_probe reports.

Runs the role's backend step with ansible-playbook on localhost, fed with
probe results of the shape image_probe returns (the real probe of the real
vLLM images is tested in test_image_probe.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def choose(tmp_path, backend, ray_version, modes, vllm_version="0.33.0"):
    facts = {"image": {"id": "sha256:" + "ab" * 32}, "packages": {"ray": ray_version},
             "vllm": {"version": vllm_version, "multinode_modes": modes}}
    book = tmp_path / "choose.yml"
    book.write_text(json.dumps([{
        "name": "Choose", "hosts": "localhost", "gather_facts": False,
        "vars": {"ray_cluster_backend": backend, "ray_cluster_image": "demo/vllm:1", "ray_cluster_head_host": "localhost",
                 "ray_cluster_port": 6379, "_ray_cluster_image_facts": facts, "_ray_cluster_head_ip": "10.0.0.1"},
        "tasks": [
            {"ansible.builtin.set_fact": {"_ray_cluster_gpus": 1}},
            {"ansible.builtin.include_role": {"name": "vllmops.cluster.ray_cluster", "tasks_from": "backend.yml"}},
            {"ansible.builtin.debug": {"msg": "CHOSEN={{ ray_cluster_backend_effective }}"}},
        ]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout


@pytest.mark.parametrize(("backend", "ray_version", "modes", "chosen"), [
    ("auto", "2.40.0", ["ray", "native"], "ray"),
    ("auto", None, ["ray", "native", "data_parallel"], "native"),
    ("native", "2.40.0", ["ray", "native"], "native"),
    ("ray", "2.40.0", ["ray"], "ray"),
])
def test_the_backend_follows_the_image(tmp_path, backend, ray_version, modes, chosen):
    rc, out = choose(tmp_path, backend, ray_version, modes)
    assert rc == 0, out
    assert f"CHOSEN={chosen}" in out


def test_an_image_without_ray_or_the_ray_free_mode_fails_with_the_reason(tmp_path):
    rc, out = choose(tmp_path, "auto", None, ["ray"], vllm_version="0.6.3.post1")
    assert rc != 0
    assert "has no Ray" in out and "neither Ray nor a vLLM with the Ray-free mode" in out


def test_forcing_ray_on_an_image_without_it_fails(tmp_path):
    rc, out = choose(tmp_path, "ray", None, ["ray", "native"])
    assert rc != 0 and "cannot run a Ray cluster: it has no Ray" in out


def test_forcing_native_on_a_vllm_without_it_fails(tmp_path):
    rc, out = choose(tmp_path, "native", "2.40.0", ["ray"], vllm_version="0.10.2")
    assert rc != 0 and "has no --nnodes/--node-rank/--master-addr/--headless" in out
