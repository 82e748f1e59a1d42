"""The image as the engine describes it, reduced to what an operator needs."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.summary import (
    architecture_refusal,
    docker_architecture,
    entrypoint_kind,
    env_map,
    summarize_image,
)

INSPECT = {
    "Id": "sha256:abc", "RepoTags": ["vllm/vllm-openai:v0.16.0"], "Architecture": "arm64", "Os": "linux",
    "Size": 123, "Config": {"Env": ["PATH=/usr/bin", "CUDA_VERSION=12.8.1", "HOME=/root", "EMPTY=", "A=b=c"],
                            "Entrypoint": ["vllm", "serve"], "Labels": None},
}


def test_env_keeps_only_what_serving_depends_on():
    summary = summarize_image(INSPECT, host_arch="arm64")
    assert summary["env"] == {"PATH": "/usr/bin", "CUDA_VERSION": "12.8.1"}
    assert summary["labels"] == {} and summary["repo_digests"] == []


def test_env_map_splits_at_the_first_equals_sign():
    assert env_map(["A=b=c", "EMPTY=", "BARE"]) == {"A": "b=c", "EMPTY": "", "BARE": ""}


@pytest.mark.parametrize(("image_arch", "host_arch", "mismatch"), [
    ("arm64", "arm64", False),
    ("amd64", "arm64", True),
    ("x86_64", "amd64", False),  # spelled the kernel's way
    ("arm64", "aarch64", False),  # the host as ansible_facts.architecture says it
    ("arm64", "x86_64", True),
    ("amd64", "aarch64", True),  # an amd64 image on DGX Spark
    ("", "amd64", False),  # unknown: not flagged
])
def test_architecture_mismatch(image_arch, host_arch, mismatch):
    summary = summarize_image(dict(INSPECT, Architecture=image_arch), host_arch=host_arch)
    assert summary["architecture_mismatch"] is mismatch


@pytest.mark.parametrize(("kernel", "docker"), [
    ("x86_64", "amd64"), ("aarch64", "arm64"), ("AARCH64", "arm64"), ("amd64", "amd64"), ("arm64", "arm64"),
    ("armv7l", "arm"), ("i686", "386"), ("ppc64le", "ppc64le"), ("s390x", "s390x"), ("mips64", "mips64"), ("", ""),
])
def test_docker_architecture(kernel, docker):
    assert docker_architecture(kernel) == docker


def test_an_image_for_another_architecture_is_refused_naming_both_and_what_to_do():
    summary = summarize_image(dict(INSPECT, Id="sha256:" + "ab" * 32, Variant="v8"), host_arch="x86_64")
    message = architecture_refusal("vllm/vllm-openai:v0.16.0", summary, machine="x86_64")
    assert message.startswith("image vllm/vllm-openai:v0.16.0 (sha256:abababababab) is built for the CPU "
                              "architecture arm64 (variant v8), but this host is amd64 (x86_64): ")
    assert "'exec format error'" in message
    assert "docker pull --platform linux/amd64" in message and "--platform linux/amd64" in message
    assert "multi-arch image (a manifest list that includes linux/amd64)" in message


def test_an_amd64_image_on_dgx_spark_names_arm64():
    summary = summarize_image(dict(INSPECT, Architecture="amd64"), host_arch="aarch64")
    message = architecture_refusal("demo/vllm:1", summary, machine="aarch64")
    assert "built for the CPU architecture amd64, but this host is arm64 (aarch64)" in message
    assert "linux/arm64" in message and "variant" not in message


@pytest.mark.parametrize("image_arch", ["arm64", "aarch64", ""])
def test_an_image_that_runs_here_or_does_not_say_is_not_refused(image_arch):
    summary = summarize_image(dict(INSPECT, Architecture=image_arch), host_arch="aarch64")
    assert architecture_refusal("demo/vllm:1", summary, machine="aarch64") is None


@pytest.mark.parametrize(("entrypoint", "cmd", "kind"), [
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], None, "api_server"),
    (["vllm", "serve"], None, "vllm serve"),
    (["/opt/venv/bin/vllm"], ["serve", "model"], "vllm serve"),
    (["/bin/sh", "-c"], ["exec vllm serve $MODEL"], "vllm serve"),
    (None, ["bash"], "other"),
    (["/usr/bin/vllmx"], None, "other"),
])
def test_entrypoint_kind(entrypoint, cmd, kind):
    assert entrypoint_kind(entrypoint, cmd) == kind
