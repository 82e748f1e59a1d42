"""Package versions from a site-packages directory."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.packages import (
    dist_versions,
    package_versions,
    vllm_version,
)
from memory_files import MemoryFiles

SITE = "/usr/lib/python3.11/site-packages"


def site(files: dict, cheap=True) -> MemoryFiles:
    return MemoryFiles({f"{SITE}/{rel}": text for rel, text in files.items()}, cheap_listing=cheap)


def test_dist_info_names_give_versions():
    files = site({"ray-2.40.0.dist-info/METADATA": "", "nvidia_nccl_cu12-2.21.5.dist-info/METADATA": "",
                  "Flashinfer.Python-0.2.0.egg-info/PKG-INFO": "", "torch/__init__.py": "",
                  "grpcio-1.76.0.dist-info/METADATA": ""})
    dists = dist_versions(files, SITE)
    assert dists == {"ray": "2.40.0", "nvidia_nccl_cu12": "2.21.5", "flashinfer_python": "0.2.0", "grpcio": "1.76.0"}
    assert package_versions(files, SITE, dists) == {"ray": "2.40.0", "torch": None, "transformers": None,
                                                    "nvidia-nccl": "2.21.5", "triton": None, "flashinfer": "0.2.0",
                                                    "grpcio": "1.76.0"}


@pytest.mark.parametrize(("rel", "text", "package", "version"), [
    ("torch/version.py", "__version__ = '2.5.1+cu124'\ngit_version = 'x'\n", "torch", "2.5.1+cu124"),
    ("ray/_version.py", 'version = "2.9.0"\n', "ray", "2.9.0"),
    ("transformers/__init__.py", '__version__: str = "4.46.3"\n', "transformers", "4.46.3"),
    ("triton/__init__.py", "__version__ = version = '3.1.0'\n", "triton", "3.1.0"),
    # grpc's metadata module, in triple quotes: the containerd image store has no cheap listing of dist-info names
    ("grpc/_grpcio_metadata.py", '__version__ = """1.85.3"""\n', "grpcio", "1.85.3"),
    ("nvidia/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n",
     "nvidia-nccl", "2.21.5"),
    ("nvidia/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n", "nvidia-nccl", None),
])
def test_version_files_when_there_is_no_dist_info(rel, text, package, version):
    files = site({rel: text}, cheap=False)
    assert package_versions(files, SITE, {})[package] == version


def test_vllm_version_prefers_dist_info_then_its_version_module():
    assert vllm_version(site({}), SITE, {"vllm": "0.16.0"}) == "0.16.0"
    assert vllm_version(site({"vllm/version.py": "__version__ = '0.6.3.post1'\n"}), SITE, {}) == "0.6.3.post1"
    assert vllm_version(site({"vllm/__init__.py": ""}), SITE, {}) is None
