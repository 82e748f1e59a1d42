"""gpu_probe on a host before the docker role ran (deploy.yml's preflight runs it there)."""

from conftest import run_module


def test_a_host_without_docker_is_reported_not_crashed():
    rc, result = run_module("gpu_probe", {"docker_cli": "docker-not-installed-here"})
    assert rc == 0, result
    assert "Docker Engine is not installed" in result["docker"]["error"]
    assert any("vllmops.cluster.docker" in sentence for sentence in result["diagnosis"])
    assert "gpus" in result["host"]
