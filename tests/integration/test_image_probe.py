"""image_probe against real images on the real Docker Engine, through Ansible."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import content_id
from conftest import BIN, ROOT, run_module
from probe_images import FOREIGN_ARCH

FIXTURES = ROOT / "tests/fixtures/vllm/serve_flags"
CACHE_DIR = Path("/var/cache/vllmops/image_probe")


def truth(version: str) -> dict:
    return json.loads((FIXTURES / f"{version}.json").read_text())


@pytest.mark.parametrize(("version", "entrypoint", "site"), [
    ("0.6.3.post1", "api_server", "/usr/local/lib/python3.11/dist-packages"),
    ("0.10.2", "vllm serve", "/opt/venv/lib/python3.11/site-packages"),
    ("0.16.0", "vllm serve", "/usr/local/lib/python3.11/dist-packages"),
    ("0.33.0", "vllm serve", "/usr/local/lib/python3.11/dist-packages"),
])
def test_vllm_images_report_what_their_vllm_accepts(probe_images, version, entrypoint, site):
    rc, result = run_module("image_probe", {"image": probe_images[f"vllm-{version}"]})
    assert rc == 0, result.get("msg")
    assert result["changed"] is False
    vllm = result["vllm"]
    assert vllm["version"] == version
    assert vllm["entrypoint"] == entrypoint
    assert result["python"]["site_packages"] == site
    assert result["python"]["version"] == "3.11"
    assert vllm["flags"] == truth(version)["flags"]
    assert vllm["architectures"] == truth(version)["architectures"]
    assert result["image"]["env"]["CUDA_VERSION"] == "12.8.1"
    assert result["image"]["architecture_mismatch"] is False


def test_packages_and_multinode_modes(probe_images):
    _, new = run_module("image_probe", {"image": probe_images["vllm-0.33.0"]})
    assert new["packages"]["ray"] == "2.40.0"
    assert new["packages"]["transformers"] == "4.46.3"
    assert new["packages"]["torch"] is None and new["torch"] is None  # this image holds no torch (ngc-vllm does:
    # tests/integration/test_image_probe_native.py reads its version and CUDA)
    assert new["vllm"]["multinode"] == {"ray": True, "native": True, "data_parallel": True}
    _, old = run_module("image_probe", {"image": probe_images["vllm-0.6.3.post1"]})
    assert old["packages"]["ray"] is None
    assert old["vllm"]["multinode_modes"] == ["ray"]


def test_filler_and_many_layers_change_nothing(probe_images):
    _, small = run_module("image_probe", {"image": probe_images["vllm-0.16.0"], "use_cache": False})
    _, big = run_module("image_probe", {"image": probe_images["big"], "use_cache": False})
    assert big["image"]["size"] > small["image"]["size"] + 2 * 1024**3
    assert big["vllm"] == small["vllm"]


def test_overlay_layouts(probe_images):
    _, deleted = run_module("image_probe", {"image": probe_images["deleted-vllm"]})
    assert deleted["vllm"] is None  # removed in a later layer: the whiteout hides it
    assert deleted["python"]["version"] == "3.11"
    _, linked = run_module("image_probe", {"image": probe_images["symlinked"]})
    assert linked["vllm"]["version"] == "0.16.0"


def test_created_container_backend_gives_the_same_answer(probe_images):
    _, overlay = run_module("image_probe", {"image": probe_images["vllm-0.16.0"], "use_cache": False})
    rc, container = run_module("image_probe", {"image": probe_images["vllm-0.16.0"], "use_cache": False,
                                               "backend": "container"})
    assert rc == 0, container.get("msg")
    assert container["backend"] == "container"
    assert container["vllm"] == overlay["vllm"]
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=io.vllmops.probe=1"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []


def test_an_image_for_another_cpu_architecture_is_refused(probe_images):
    image = probe_images["foreign-arch"]  # arm64 on this amd64 host (amd64 on an arm64 one)
    rc, result = run_module("image_probe", {"image": image})
    assert rc != 0 and result["failed"] is True
    host = result["image"]["host_architecture"]
    assert result["image"]["architecture"] == FOREIGN_ARCH != host
    assert f"image {image} (sha256:" in result["msg"]
    assert f"built for the CPU architecture {FOREIGN_ARCH}, but this host is {host}" in result["msg"]
    assert "exec format error" in result["msg"]
    assert f"docker pull --platform linux/{host}" in result["msg"] and "multi-arch image" in result["msg"]
    # Report only: the facts, and the same sentence as a warning.
    rc, report = run_module("image_probe", {"image": image, "fail_on_invalid": False})
    assert rc == 0
    assert report["image"]["architecture_mismatch"] is True
    assert report["warnings"] == [result["msg"]]
    assert report["vllm"]["version"] == "0.16.0"


def test_the_image_role_refuses_it_before_anything_changes(tmp_path, probe_images):
    """The image play of deploy.yml on a node that holds an image of another CPU architecture: the run stops
    there (before the model, the plan, Ray and vLLM), naming the image, both architectures and what to do."""
    image = probe_images["foreign-arch"]
    book = tmp_path / "image.yml"
    book.write_text(json.dumps([
        {"name": "The serving image", "hosts": "localhost", "gather_facts": False, "any_errors_fatal": True,
         "roles": [{"role": "vllmops.cluster.image", "vars": {"image_name": image}}]},
        {"name": "What deploy.yml does next", "hosts": "localhost", "gather_facts": False,
         "tasks": [{"name": "Restart Ray and vLLM", "ansible.builtin.debug": {"msg": "RESTARTED"}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = " ".join(proc.stdout.split())  # messages wrap over lines
    assert f"is built for the CPU architecture {FOREIGN_ARCH}" in out, out[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 2, out[-3000:]  # a host failed (not 4: unreachable, nor 1: an error of Ansible's)
    assert "RESTARTED" not in out
    assert "changed=0" in out.rsplit("PLAY RECAP", 1)[-1] and "failed=1" in out.rsplit("PLAY RECAP", 1)[-1]


def test_unknown_flag_fails_with_one_paragraph(probe_images):
    rc, result = run_module("image_probe", {
        "image": probe_images["vllm-0.16.0"],
        "flags": {"tensor_parallel_size": 2, "num_scheduler_steps": 10, "enable_prefix_caching": True}})
    assert rc != 0
    assert result["failed"] is True
    assert "--num-scheduler-steps" in result["msg"]
    assert "vLLM 0.16.0" in result["msg"]
    assert "did you mean --async-scheduling" in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_the_same_flag_is_fine_on_06(probe_images):
    rc, result = run_module("image_probe", {"image": probe_images["vllm-0.6.3.post1"],
                                            "flags": ["--num-scheduler-steps", "10", "-tp", "2"]})
    assert rc == 0, result.get("msg")
    assert result["validation"]["ok"] is True


def test_report_only_and_architectures(probe_images):
    rc, result = run_module("image_probe", {
        "image": probe_images["vllm-0.6.3.post1"], "fail_on_invalid": False,
        "flags": {"max_num_seqs": 8}, "model_architectures": ["Qwen3ForCausalLM", "LlamaForCausalLM"]})
    assert rc == 0
    validation = result["validation"]
    assert validation["ok"] is False
    assert validation["argv"] == ["--max-num-seqs", "8"]
    assert validation["unsupported_architectures"] == ["Qwen3ForCausalLM"]
    rc, newer = run_module("image_probe", {"image": probe_images["vllm-0.33.0"],
                                           "model_architectures": ["Qwen3ForCausalLM"]})
    assert rc == 0 and newer["validation"]["ok"] is True


def test_deprecated_flag_is_accepted_with_a_warning(probe_images):
    rc, result = run_module("image_probe", {"image": probe_images["vllm-0.16.0"],
                                            "flags": ["--disable-log-requests"]})
    assert rc == 0
    assert result["validation"]["deprecated_flags"] == ["--disable-log-requests"]
    assert any("deprecated" in w for w in result["warnings"])


def test_check_mode_gives_the_same_answer(probe_images):
    _, normal = run_module("image_probe", {"image": probe_images["vllm-0.10.2"]})
    _, checked = run_module("image_probe", {"image": probe_images["vllm-0.10.2"]}, check=True)
    assert checked["vllm"] == normal["vllm"]
    assert checked["changed"] is False


def _content_id(name):
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", name], capture_output=True, text=True,
                                        check=True).stdout)[0]
    return inspect["Id"], content_id(inspect)


def test_cache_follows_the_content_id(probe_images):
    image = probe_images["no-vllm"]
    retagged = "vllmops-test/probe-retag:latest"
    subprocess.run(["docker", "tag", image, retagged], check=True)
    try:
        image_id, content = _content_id(retagged)
        for stale in CACHE_DIR.glob(content.replace(":", "_") + "-*.json"):
            stale.unlink()
        _, first = run_module("image_probe", {"image": retagged})
        _, second = run_module("image_probe", {"image": retagged})
        assert (first["cached"], second["cached"]) == (False, True)
        assert first["image"]["content_id"] == content
        # A new image under the same tag has new content: probed afresh, not answered from the old one's cache.
        subprocess.run(["docker", "tag", probe_images["vllm-0.16.0"], retagged], check=True)
        new_id, new_content = _content_id(retagged)
        for stale in CACHE_DIR.glob(new_content.replace(":", "_") + "-*.json"):
            stale.unlink()
        _, third = run_module("image_probe", {"image": retagged})
        assert third["image"]["id"] == new_id != image_id
        assert third["image"]["content_id"] == new_content != content
        assert third["cached"] is False
        assert third["vllm"]["version"] == "0.16.0"
    finally:
        subprocess.run(["docker", "rmi", retagged], capture_output=True, check=False)


@pytest.mark.parametrize(("image_key", "args", "message"), [
    (None, {"image": "vllmops-test/does-not-exist:1"}, "is not on this host's Docker Engine"),
    ("no-vllm", {"flags": ["--port", "8000"]}, "has no vLLM"),
    ("no-python", {"flags": ["--port", "8000"]}, "no Python found"),
])
def test_bad_input_gives_a_clear_message(probe_images, image_key, args, message):
    if image_key:
        args = dict(args, image=probe_images[image_key])
    rc, result = run_module("image_probe", args)
    assert rc != 0
    assert message in result["msg"]
    assert "Traceback" not in json.dumps(result)  # ansible-core adds "exception: (traceback unavailable)"


def test_no_python_and_no_vllm_are_reported_not_failed(probe_images):
    rc, result = run_module("image_probe", {"image": probe_images["no-python"]})
    assert rc == 0
    assert result["python"] is None and result["vllm"] is None
    assert "no Python found" in result["notes"][0]


def test_docker_not_answering(probe_images):
    rc, result = run_module("image_probe", {"image": probe_images["vllm-0.16.0"]},
                            env={"DOCKER_HOST": "unix:///tmp/vllmops-no-docker.sock"})
    assert rc != 0
    assert "Docker Engine does not answer on this host" in result["msg"]
