"""The system NCCL, the CUDA toolkit and torch's build, read from an image's files (table-driven)."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.native import (
    cuda_version,
    dpkg_versions,
    native_facts,
    nccl_report,
    nccl_version_in_library,
    system_nccl,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.packages import torch_build
from memory_files import MemoryFiles

LIB = "/usr/lib/x86_64-linux-gnu"
SITE = "/usr/local/lib/python3.12/dist-packages"
DPKG_STATUS = """Package: libc6
Status: install ok installed
Version: 2.39-0ubuntu8.4

Package: libnccl2
Status: install ok installed
Priority: optional
Architecture: amd64
Source: nccl
Version: 2.25.1-1+cuda12.8
Description: NVIDIA Collective Communication Library (NCCL) Runtime
 NCCL (pronounced "Nickel") is a stand-alone library of standard collective
 communication routines for GPUs.

Package: libnccl-dev
Status: deinstall ok config-files
Version: 2.19.3-1+cuda12.3
"""
# torch/version.py as torch's build writes it (tools/generate_torch_version.py): a CUDA wheel, and the CPU wheel.
TORCH_CUDA = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.9.0+cu128'
debug = False
cuda: Optional[str] = '12.8'
git_version = '0fabc3ba44823f257e70ce397d989c8de5e362c1'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""
TORCH_CPU = TORCH_CUDA.replace("2.9.0+cu128", "2.13.0+cpu").replace("'12.8'", "None")


def files(tree: dict, cheap=True) -> MemoryFiles:
    return MemoryFiles(tree, cheap_listing=cheap)


@pytest.mark.parametrize(("tree", "env", "cheap", "expected"), [
    # NGC / nvidia/cuda layout: libnccl.so.2 -> libnccl.so.2.21.5 (MemoryFiles holds both names as files).
    ({f"{LIB}/libnccl.so.2": "x", f"{LIB}/libnccl.so.2.21.5": "x", f"{LIB}/libnccl.so": "x"}, {}, True,
     {"version": "2.21.5", "path": f"{LIB}/libnccl.so.2", "found_by": "file name"}),
    # Two versioned files left by an upgrade: the newest (numerically, 2.9 < 2.21).
    ({"/usr/lib/aarch64-linux-gnu/libnccl.so.2": "x", "/usr/lib/aarch64-linux-gnu/libnccl.so.2.9.9": "x",
      "/usr/lib/aarch64-linux-gnu/libnccl.so.2.21.5": "x"}, {}, True,
     {"version": "2.21.5", "path": "/usr/lib/aarch64-linux-gnu/libnccl.so.2", "found_by": "file name"}),
    # No versioned name: dpkg's record (the Debian revision and +cuda dropped).
    ({f"{LIB}/libnccl.so.2": "x", "/var/lib/dpkg/status": DPKG_STATUS}, {}, True,
     {"version": "2.25.1", "path": f"{LIB}/libnccl.so.2", "found_by": "dpkg libnccl2"}),
    # No name, no dpkg: the image's NCCL_VERSION (nvidia/cuda sets it where it installs libnccl2).
    ({f"{LIB}/libnccl.so.2": "x"}, {"NCCL_VERSION": "2.23.4-1"}, True,
     {"version": "2.23.4", "path": f"{LIB}/libnccl.so.2", "found_by": "image ENV NCCL_VERSION"}),
    # Last: the library's own version string.
    ({f"{LIB}/libnccl.so.2": "\x7fELF\0\0NCCL version %s\0" + "2.27.7+cuda12.9\0"}, {}, True,
     {"version": "2.27.7", "path": f"{LIB}/libnccl.so.2", "found_by": "library version string"}),
    ({f"{LIB}/libnccl.so.2": "\x7fELF stripped of everything"}, {}, True,
     {"version": None, "path": f"{LIB}/libnccl.so.2", "found_by": None}),
    # A reader that cannot list: dpkg's record and its file list, never the library itself.
    ({f"{LIB}/libnccl.so.2": "x", "/var/lib/dpkg/status": DPKG_STATUS,
      "/var/lib/dpkg/info/libnccl2:amd64.list": f"/.\n/usr\n{LIB}/libnccl.so.2.25.1\n{LIB}/libnccl.so.2\n"}, {}, False,
     {"version": "2.25.1", "path": f"{LIB}/libnccl.so.2", "found_by": "dpkg libnccl2"}),
    ({f"{LIB}/libnccl.so.2": "x"}, {"NCCL_VERSION": "2.23.4-1"}, False, None),
    ({"/usr/bin/python3": "x", "/var/lib/dpkg/status": "Package: libc6\nStatus: install ok installed\n"}, {}, True, None),
])
def test_system_nccl(tree, env, cheap, expected):
    assert system_nccl(files(tree, cheap), env) == expected


def test_the_library_is_read_only_without_a_cheaper_source():
    class Counting(MemoryFiles):
        def __init__(self, tree):
            super().__init__(tree)
            self.reads = []

        def read_bytes(self, path):
            self.reads.append(path)
            return super().read_bytes(path)

    tree = Counting({f"{LIB}/libnccl.so.2": "NCCL version %s 2.21.5+cuda12.4", f"{LIB}/libnccl.so.2.21.5": "x"})
    assert system_nccl(tree, {})["version"] == "2.21.5"
    assert not any("libnccl" in path for path in tree.reads)


@pytest.mark.parametrize(("data", "version"), [
    (b"\0NCCL version %s\0002.21.5+cuda12.4\0", "2.21.5"),
    (b"banner: NCCL version 2.18.1+cuda12.1\n", "2.18.1"),
    (b"12.2.21.5+cuda12.4", None),  # not a version on its own
    (b"", None),
    (None, None),
])
def test_nccl_version_in_library(data, version):
    assert nccl_version_in_library(data) == version


def test_dpkg_versions_only_installed_packages():
    assert dpkg_versions(DPKG_STATUS, ("libnccl2", "libnccl-dev")) == {"libnccl2": "2.25.1-1+cuda12.8"}
    assert dpkg_versions(None, ("libnccl2",)) == {}


def test_pip_nccl_is_what_torch_loads():
    tree = files({f"{LIB}/libnccl.so.2": "x", f"{LIB}/libnccl.so.2.21.5": "x"})
    pip = nccl_report(tree, {}, "2.27.3", SITE)
    assert pip == {"version": "2.27.3", "source": "pip", "path": f"{SITE}/nvidia/nccl/lib/libnccl.so.2",
                   "found_by": "nvidia-nccl package",
                   "system": {"version": "2.21.5", "path": f"{LIB}/libnccl.so.2", "found_by": "file name"}}
    system = nccl_report(tree, {}, None, SITE)
    assert (system["version"], system["source"], system["path"]) == ("2.21.5", "system", f"{LIB}/libnccl.so.2")
    assert nccl_report(files({"/usr/bin/python3": "x"}), {}, None, SITE) is None


@pytest.mark.parametrize(("tree", "env", "cheap", "expected"), [
    ({"/usr/local/cuda/version.json": '{"cuda": {"version": "12.8.1"}}'}, {"CUDA_VERSION": "12.9.0"}, True,
     {"version": "12.9.0", "source": "env CUDA_VERSION"}),
    ({"/usr/local/cuda/version.json": '{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}, '
                                      '"cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": "12.8.90"}}'},
     {}, False, {"version": "12.8.1", "source": "/usr/local/cuda/version.json"}),
    ({"/usr/local/cuda/version.txt": "CUDA Version 11.0.228\n"}, {}, False,
     {"version": "11.0.228", "source": "/usr/local/cuda/version.txt"}),
    ({"/usr/local/cuda/version.json": "not json", "/usr/local/cuda/version.txt": "CUDA Version 10.2.89"}, {}, True,
     {"version": "10.2.89", "source": "/usr/local/cuda/version.txt"}),
    ({"/usr/local/cuda-12.4/lib64/x": "", "/usr/local/cuda-12.10/lib64/x": "", "/usr/local/cuda-9.2/bin/x": ""},
     {}, True, {"version": "12.10", "source": "/usr/local/cuda-12.10"}),
    ({"/usr/local/cuda-12.4/lib64/x": ""}, {}, False, None),
    ({"/usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127": "", "/usr/lib/x86_64-linux-gnu/libcudart.so.12": ""},
     {}, True, {"version": "12.4.127", "source": "libcudart.so.12.4.127"}),
    ({"/usr/bin/python3": ""}, {}, True, None),
])
def test_cuda_version(tree, env, cheap, expected):
    assert cuda_version(files(tree, cheap), env) == expected


@pytest.mark.parametrize(("tree", "dist_version", "expected"), [
    ({f"{SITE}/torch/version.py": TORCH_CUDA}, None,
     {"version": "2.9.0+cu128", "cuda": "12.8", "git_version": "0fabc3ba44823f257e70ce397d989c8de5e362c1"}),
    ({f"{SITE}/torch/version.py": TORCH_CPU}, "2.13.0+cpu",
     {"version": "2.13.0+cpu", "cuda": None, "git_version": "0fabc3ba44823f257e70ce397d989c8de5e362c1"}),
    # torch 1.x wrote a plain `cuda = '11.3'`.
    ({f"{SITE}/torch/version.py": "__version__ = '1.12.1+cu113'\ndebug = False\ncuda = '11.3'\n"}, None,
     {"version": "1.12.1+cu113", "cuda": "11.3", "git_version": None}),
    # The dist-info's version wins; a version.py that does not parse gives nothing more.
    ({f"{SITE}/torch/version.py": "this is not python ("}, "2.5.1", {"version": "2.5.1", "cuda": None, "git_version": None}),
    ({f"{SITE}/torch/__init__.py": ""}, "2.5.1", {"version": "2.5.1", "cuda": None, "git_version": None}),
])
def test_torch_build(tree, dist_version, expected):
    assert torch_build(files(tree), SITE, dist_version) == dict(expected, path=f"{SITE}/torch")


def test_no_torch():
    assert torch_build(files({f"{SITE}/ray/__init__.py": ""}), SITE, None) is None
    assert torch_build(files({}), None, None) is None


def test_native_facts_of_an_ngc_like_image():
    tree = files({f"{LIB}/libnccl.so.2": "x", f"{LIB}/libnccl.so.2.21.5": "x",
                  "/usr/local/cuda/version.json": '{"cuda": {"version": "12.8.1"}}',
                  f"{SITE}/torch/version.py": TORCH_CUDA})
    facts = native_facts(tree, {}, SITE, {"torch": "2.9.0+cu128", "nvidia-nccl": None})
    assert facts["torch"]["cuda"] == "12.8"
    assert facts["cuda"] == {"version": "12.8.1", "source": "/usr/local/cuda/version.json"}
    assert (facts["nccl"]["version"], facts["nccl"]["source"]) == ("2.21.5", "system")
