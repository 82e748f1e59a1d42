"""The image as the engine describes it, reduced to what an operator needs."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.summary import (
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
    ("", "amd64", False),  # unknown: not flagged
])
def test_architecture_mismatch(image_arch, host_arch, mismatch):
    summary = summarize_image(dict(INSPECT, Architecture=image_arch), host_arch=host_arch)
    assert summary["architecture_mismatch"] is mismatch


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
