# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an image holds outside Python's packages, read from its files through an
image_files reader (``files``): the system NCCL as NGC and nvidia/cuda images
ship it, and the CUDA toolkit's version when the image's ENV does not say it.

A reader without cheap listing (a created container copies a whole directory to
list it) is only asked for fixed, small files: CUDA's version.json and
version.txt, and dpkg's database.
"""

from __future__ import annotations

import json
import posixpath
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.packages import torch_build

# Where distributions put libnccl.so.2 (Debian/Ubuntu multiarch, then RPM-style and CUDA's own).
NCCL_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib/sbsa-linux-gnu",
                 "/usr/lib64", "/usr/local/lib", "/usr/local/cuda/lib64")
_NCCL_SONAME = "libnccl.so.2"
_NCCL_FILE = re.compile(r"libnccl\.so\.(2\.\d+\.\d+)")
# NCCL prints its version with this format ("NCCL version 2.21.5+cuda12.4"); the library holds the string
# "2.21.5+cuda12.4" next to it, and a banner "NCCL version 2.21.5+cuda12.4" in some builds.
_NCCL_STRING = re.compile(rb"NCCL version (2\.\d+\.\d+)|(?<![\d.])(2\.\d+\.\d+)\+cuda\d+\.\d+")
_DPKG_STATUS = "/var/lib/dpkg/status"
_DPKG_NCCL = ("libnccl2",)
_CUDA_HOME = "/usr/local/cuda"
_CUDA_DIR = re.compile(r"cuda-(\d+\.\d+)")
_CUDART = re.compile(r"libcudart\.so\.(\d+\.\d+\.\d+)")
_CUDA_TXT = re.compile(r"CUDA Version (\d+\.\d+(?:\.\d+)?)")


def _release(version: str | None) -> str | None:
    """2.21.5 of 2.21.5-1+cuda12.4 (a Debian version) or 2.21.5+cuda12.4 (NCCL's own)."""
    match = re.match(r"\d+\.\d+\.\d+", version or "")
    return match.group(0) if match else None


def dpkg_versions(status: str | None, packages: tuple[str, ...]) -> dict:
    """{package: Debian version} of the installed packages named, from dpkg's status file."""
    found = {}
    for stanza in (status or "").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Package") in packages and fields.get("Status", "").endswith(" installed"):
            found[fields["Package"]] = fields.get("Version")
    return found


def _dpkg_listed(files, package: str, name: str) -> str | None:
    """Where dpkg installed `name` of `package` (its small .list file), for readers that cannot list."""
    for arch in (":amd64", ":arm64", ""):
        listed = files.read_text(f"/var/lib/dpkg/info/{package}{arch}.list") or ""
        found = [line for line in listed.splitlines() if posixpath.basename(line) == name]
        if found:
            return found[0]
    return None


def nccl_version_in_library(data: bytes | None) -> str | None:
    """NCCL's version from the bytes of libnccl.so.2 (the string it prints on init)."""
    match = _NCCL_STRING.search(data or b"")
    return (match.group(1) or match.group(2)).decode() if match else None


def _library_dir(files) -> tuple[str | None, list[str]]:
    """(directory holding libnccl.so.2, its names) through directory listings."""
    for directory in NCCL_LIB_DIRS:
        names = files.listdir(directory) or []
        if _NCCL_SONAME in names:
            return directory, names
    return None, []


def system_nccl(files, env: dict) -> dict | None:
    """The system NCCL: {version, path, found_by}, or None when the image has none.

    The version comes from the cheapest place that has it: the versioned file name the package installs
    (libnccl.so.2 -> libnccl.so.2.21.5), dpkg's record of libnccl2, the image's NCCL_VERSION (nvidia/cuda images
    set it where they install libnccl2), and only then the library's own version string."""
    path, found_by, version = None, None, None
    if files.cheap_listing:
        directory, names = _library_dir(files)
        if directory is None:
            return None
        path = posixpath.join(directory, _NCCL_SONAME)
        versioned = sorted((m.group(1) for m in map(_NCCL_FILE.fullmatch, names) if m),
                           key=lambda v: tuple(int(p) for p in v.split(".")))
        if versioned:
            version, found_by = versioned[-1], "file name"
    packaged = dpkg_versions(files.read_text(_DPKG_STATUS), _DPKG_NCCL) if version is None else {}
    if packaged.get("libnccl2"):
        version, found_by = _release(packaged["libnccl2"]), "dpkg libnccl2"
        path = path or _dpkg_listed(files, "libnccl2", _NCCL_SONAME)
    elif path is None:
        # A reader without cheap listing: only dpkg tells that the library is there; reading libnccl.so.2 to
        # find out would copy the whole library through the engine.
        return None
    if version is None and _release(env.get("NCCL_VERSION")):
        version, found_by = _release(env["NCCL_VERSION"]), "image ENV NCCL_VERSION"
    if version is None:
        # Costly, and last: read_bytes reads the whole library (200-400 MB for CUDA 12 builds, most of it GPU
        # code) into memory to find its version string. Only a library installed without its versioned name and
        # without dpkg comes here, once per image ID (the probe's result is cached).
        version = nccl_version_in_library(files.read_bytes(path))
        found_by = "library version string" if version else None
    return {"version": version, "path": path, "found_by": found_by}


def nccl_report(files, env: dict, pip_version: str | None, site_dir: str | None) -> dict | None:
    """Which NCCL the image's torch and vLLM load: pip's nvidia-nccl-cu* when installed (torch preloads it from
    site-packages/nvidia/nccl/lib before the system's), else the system library."""
    system = system_nccl(files, env)
    if pip_version:
        path = posixpath.join(site_dir, "nvidia/nccl/lib", _NCCL_SONAME) if site_dir else None
        return {"version": pip_version, "source": "pip", "path": path, "found_by": "nvidia-nccl package",
                "system": system}
    if system:
        return dict(system, source="system", system=system)
    return None


def _cuda_from_json(text: str | None) -> str | None:
    try:
        return ((json.loads(text) if text else {}).get("cuda") or {}).get("version")
    except (ValueError, AttributeError):
        return None


def _cuda_from_txt(text: str | None) -> str | None:
    match = _CUDA_TXT.search(text or "")
    return match.group(1) if match else None


def _cuda_dirs(files) -> list[str]:
    """X.Y of each /usr/local/cuda-X.Y, newest first."""
    versions = [m.group(1) for m in map(_CUDA_DIR.fullmatch, files.listdir("/usr/local") or []) if m]
    return sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")), reverse=True)


def _cudart(files) -> str | None:
    for directory in (f"{_CUDA_HOME}/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"):
        for name in files.listdir(directory) or []:
            match = _CUDART.fullmatch(name)
            if match:
                return match.group(1)
    return None


def cuda_version(files, env: dict) -> dict | None:
    """{version, source} of the image's CUDA: its ENV CUDA_VERSION (nvidia/cuda and NGC images set it), else
    /usr/local/cuda/version.json (CUDA 11.1 and later), version.txt (older), the /usr/local/cuda-X.Y directory, or
    libcudart.so.X.Y.Z; None when none says."""
    if env.get("CUDA_VERSION"):
        return {"version": env["CUDA_VERSION"], "source": "env CUDA_VERSION"}
    version = _cuda_from_json(files.read_text(f"{_CUDA_HOME}/version.json"))
    if version:
        return {"version": version, "source": f"{_CUDA_HOME}/version.json"}
    version = _cuda_from_txt(files.read_text(f"{_CUDA_HOME}/version.txt"))
    if version:
        return {"version": version, "source": f"{_CUDA_HOME}/version.txt"}
    if not files.cheap_listing:
        return None
    dirs = _cuda_dirs(files)
    if dirs:
        # Without a version file, /usr/local/cuda (a symlink the reader resolves, not reads) is taken to be the
        # newest cuda-X.Y directory, as update-alternatives leaves it.
        return {"version": dirs[0], "source": f"/usr/local/cuda-{dirs[0]}"}
    version = _cudart(files)
    return {"version": version, "source": "libcudart.so." + version} if version else None


def native_facts(files, env: dict, site_dir: str | None, packages: dict) -> dict:
    """{torch, cuda, nccl} of an image: torch's build (packages.torch_build), the CUDA toolkit, and the NCCL its
    torch and vLLM load."""
    torch = torch_build(files, site_dir, packages.get("torch"))
    return {"torch": torch, "cuda": cuda_version(files, env),
            "nccl": nccl_report(files, env, packages.get("nvidia-nccl"), site_dir)}
