"""image_probe on an NGC-like image (tests/sandbox/probe_images.py ngc-vllm): the system NCCL, CUDA from the
toolkit's files, torch's build and the network settings its ENV bakes - through Ansible, on the real engine."""

import pytest
from conftest import run_module
from probe_images import NGC_CUDA, NGC_ENV, NGC_NCCL

TORCH_SITE = "/usr/local/lib/python3.11/dist-packages"


@pytest.fixture(scope="module", params=["overlay2", "container"])
def ngc(request, probe_images):
    rc, result = run_module("image_probe", {"image": probe_images["ngc-vllm"], "use_cache": False,
                                            "backend": request.param})
    assert rc == 0, result.get("msg")
    return request.param, result


def test_system_nccl_from_the_library_file_name(ngc):
    backend, result = ngc
    nccl = result["nccl"]
    assert result["packages"]["nvidia-nccl"] is None  # no pip nvidia-nccl-cu12: torch loads the system library
    assert nccl["source"] == "system"
    assert nccl["version"] == NGC_NCCL
    assert nccl["path"].endswith("-linux-gnu/libnccl.so.2")
    # Overlay layers list /usr/lib/<arch>-linux-gnu cheaply: the versioned name. A created container cannot list
    # it without copying the directory (GBs in a real image): dpkg's record of libnccl2 and its file list.
    assert nccl["found_by"] == ("file name" if backend == "overlay2" else "dpkg libnccl2")


def test_cuda_from_the_toolkit_when_the_env_does_not_say(ngc):
    _, result = ngc
    assert "CUDA_VERSION" not in result["image"]["env"]
    assert result["cuda"] == {"version": NGC_CUDA[1], "source": "/usr/local/cuda/version.json"}


def test_torch_and_its_cuda_from_its_own_files(ngc):
    _, result = ngc
    torch = result["torch"]
    assert torch["version"] == result["packages"]["torch"]
    assert torch["version"].startswith("2.") and torch["version"].endswith("+cpu")  # the CPU wheel of /opt/wheels
    assert torch["cuda"] is None  # a CPU build says so in torch/version.py
    assert len(torch["git_version"]) == 40
    assert torch["path"] == f"{TORCH_SITE}/torch"


def test_baked_network_settings_are_reported(ngc):
    _, result = ngc
    assert result["image"]["network_env"] == dict(sorted(NGC_ENV.items()))  # NCCL_VERSION is no setting
    assert result["vllm"]["version"] == "0.33.0"
    assert result["vllm"]["entrypoint"] == "other"  # NGC's /opt/nvidia/nvidia_entrypoint.sh
