"""gpu_probe against the real Docker Engine of this machine (which has no GPU), and on a host before the
docker role ran (deploy.yml's preflight runs it there)."""

import subprocess

from conftest import run_module


def probe_containers_left() -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", "label=io.vllmops.probe=gpu"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_a_host_without_docker_is_reported_not_crashed():
    rc, result = run_module("gpu_probe", {"docker_host": "unix:///run/vllmops-no-docker-here.sock"})
    assert rc == 0, result
    assert "Docker Engine is not installed or not running" in result["docker"]["error"]
    assert any("vllmops.cluster.docker" in sentence for sentence in result["diagnosis"])
    assert "gpus" in result["host"]
    # No nvidia-smi here: no GPU process to list, and nothing foreign (preflight reads these on a fresh host).
    assert (result["processes"], result["foreign_processes"], result["processes_error"]) == ([], [], None)


def test_the_engine_is_read_through_its_api():
    rc, result = run_module("gpu_probe", {"passthrough": "auto"})  # no image: no passthrough container
    assert rc == 0, result
    version = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert result["docker"]["server_version"] == version
    assert result["docker"].get("error") is None
    assert "runc" in result["docker"]["runtimes"]


def test_passthrough_without_an_nvidia_runtime_is_diagnosed_and_cleaned_up(probe_images):
    rc, result = run_module("gpu_probe", {"image": probe_images["no-vllm"], "passthrough": "gpus"})
    assert rc == 0, result
    assert result["passthrough"]["mode"] == "gpus"
    assert result["passthrough"]["gpus"] == []
    assert "no NVIDIA runtime hook registered" in result["passthrough"]["error"]
    assert probe_containers_left() == []


def test_a_missing_passthrough_image_is_named_not_pulled():
    rc, result = run_module("gpu_probe", {"image": "vllmops-test/does-not-exist:1", "passthrough": "gpus"})
    assert rc == 0, result
    assert "the passthrough check image is not on this host" in result["passthrough"]["error"]
    assert probe_containers_left() == []


def test_require_gpus_fails_with_the_diagnosis():
    rc, result = run_module("gpu_probe", {"require_gpus": 1})
    assert rc != 0
    assert "usable GPU(s) where 1 are required" in result["msg"]
