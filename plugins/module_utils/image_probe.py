# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Docker image holds, read from its files: Python, vLLM (version,
`vllm serve` flags, model architectures, multi-node modes) and the packages
that matter for serving. Never runs the image, never imports vLLM.

Results are cached on the host by image ID: an image never changes under its
ID, so a second probe of it costs one `docker image inspect`.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import posixpath
import re
import socket
import tempfile
import urllib.parse

from ansible_collections.vllmops.cluster.plugins.module_utils.image_files import (
    CreatedContainer,
    ImageFilesError,
    OverlayLayers,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_cli import (
    describe_unknown,
    settings_to_argv,
    validate_argv,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSource, VllmSourceError

# Bump when what the probe extracts changes: cached results of older probes are ignored.
PROBE_VERSION = 1

_ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
                 "ppc64le": "ppc64le", "s390x": "s390x"}
_PYTHON_DIRS = ("/usr/local/lib", "/usr/lib", "/opt/conda/lib", "/root/.local/lib")
_VENV_ROOTS = ("/opt", "/", "/workspace", "/app")
_PACKAGES = {"ray": "ray", "torch": "torch", "transformers": "transformers",
             "nvidia_nccl": "nvidia-nccl", "triton": "triton", "flashinfer_python": "flashinfer"}
_RAY_EXECUTOR_MODULES = ("vllm.executor.ray_gpu_executor", "vllm.executor.ray_distributed_executor",
                         "vllm.v1.executor.ray_distributed_executor", "vllm.v1.executor.ray_executor",
                         "vllm.executor.ray_utils", "vllm.v1.executor.ray_utils")


class ProbeError(Exception):
    """A probe failure with the message an operator needs."""


def host_architecture() -> str:
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def cache_dir() -> str:
    if os.geteuid() == 0:
        return "/var/cache/vllmops/image_probe"
    return os.path.join(os.path.expanduser("~"), ".cache", "vllmops", "image_probe")


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def _engine_socket() -> str | None:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://"):]
    return path if os.access(path, os.R_OK | os.W_OK) else None


class Docker:
    """The docker CLI through a run(argv, binary=False) -> (rc, out, err) callable.

    `docker image inspect` is also asked of the engine's API socket directly
    when it is reachable: the answer is the same JSON without starting a
    client process, which is most of what a cached probe costs."""

    def __init__(self, run, binary: str = "docker") -> None:
        self.run = run
        self.binary = binary

    def _inspect_api(self, image: str) -> dict | None:
        path = _engine_socket()
        if path is None:
            return None
        try:
            conn = _UnixHTTPConnection(path, timeout=30)
            conn.request("GET", f"/images/{urllib.parse.quote(image, safe='')}/json")
            response = conn.getresponse()
            body = response.read()
            conn.close()
        except OSError:
            return None
        if response.status != 200:
            return None  # the CLI gives the operator-facing error
        return json.loads(body)

    def check_engine(self) -> None:
        rc, _out, err = self.run([self.binary, "version", "--format", "{{.Server.Version}}"])
        if rc != 0:
            raise ProbeError("Docker Engine does not answer on this host (" + err.strip()[-300:] +
                             "); start it, or apply the vllmops.cluster.docker role")

    def inspect(self, image: str) -> dict:
        found = self._inspect_api(image)
        if found is not None:
            return found
        rc, out, err = self.run([self.binary, "image", "inspect", image])
        if rc != 0:
            self.check_engine()
            raise ProbeError(f"image {image} is not on this host's Docker Engine ({err.strip()[-300:]}); "
                             "pull it or copy it here first (the vllmops.cluster.image role does)")
        return json.loads(out)[0]


# -- image summary -------------------------------------------------------------

def _env_map(env_list: list | None) -> dict:
    pairs = (item.partition("=") for item in env_list or [])
    return {key: value for key, _sep, value in pairs}


def summarize_image(inspect: dict) -> dict:
    config = inspect.get("Config") or {}
    env = _env_map(config.get("Env"))
    host_arch = host_architecture()
    arch = inspect.get("Architecture") or ""
    return {
        "id": inspect.get("Id"),
        "repo_tags": inspect.get("RepoTags") or [],
        "repo_digests": inspect.get("RepoDigests") or [],
        "architecture": arch,
        "os": inspect.get("Os"),
        "variant": inspect.get("Variant"),
        "size": inspect.get("Size"),
        "created": inspect.get("Created"),
        "entrypoint": config.get("Entrypoint"),
        "cmd": config.get("Cmd"),
        "env": {k: v for k, v in env.items()
                if k.startswith(("CUDA", "NVIDIA_", "NCCL", "VLLM_", "PYTHON", "TORCH", "VIRTUAL_ENV", "LD_LIBRARY"))
                or k == "PATH"},
        "labels": config.get("Labels") or {},
        "host_architecture": host_arch,
        "architecture_mismatch": bool(arch) and _ARCH_ALIASES.get(arch, arch) != host_arch,
    }


def entrypoint_kind(entrypoint: list | None, cmd: list | None) -> str:
    words = " ".join((entrypoint or []) + (cmd or []))
    if "vllm.entrypoints.openai.api_server" in words:
        return "api_server"
    if re.search(r"(^|[\s/])vllm\s+serve\b", words) or (entrypoint and posixpath.basename(entrypoint[-1]) == "vllm"):
        return "vllm serve"
    return "other"


# -- Python and packages -------------------------------------------------------

def _fixed_site_dirs(env: dict) -> list[str]:
    """Where pip puts packages, for readers that cannot list directories cheaply."""
    roots = [env["VIRTUAL_ENV"]] if env.get("VIRTUAL_ENV") else []
    roots += ["/usr/local", "/usr", "/opt/venv", "/opt/conda", "/venv", "/root/.local"]
    dirs = [e for e in (env.get("PYTHONPATH") or "").split(":") if e]
    for root in roots:
        for minor in range(14, 7, -1):
            for sub in ("site-packages", "dist-packages"):
                dirs.append(f"{root}/lib/python3.{minor}/{sub}")
    return [*dirs, "/usr/lib/python3/dist-packages"]


def _candidate_site_dirs(files, env: dict) -> list[str]:
    if not files.cheap_listing:
        return [d for d in _fixed_site_dirs(env)
                if files.read_bytes(posixpath.join(d, "vllm/__init__.py")) is not None or files.is_dir(d)]
    candidates: list[str] = []
    for entry in (env.get("PYTHONPATH") or "").split(":"):
        if entry:
            candidates.append(entry)
    prefixes = [env["VIRTUAL_ENV"] + "/lib"] if env.get("VIRTUAL_ENV") else []
    for path_entry in (env.get("PATH") or "").split(":"):
        if path_entry.endswith("/bin") and path_entry not in ("/usr/bin", "/bin", "/usr/local/bin", "/sbin",
                                                              "/usr/sbin", "/usr/local/sbin"):
            prefixes.append(path_entry[:-4] + "/lib")
    prefixes += list(_PYTHON_DIRS)
    for root in _VENV_ROOTS:
        for name in files.listdir(root) or []:
            prefixes.append(posixpath.join(root, name, "lib"))
    seen = set()
    for prefix in prefixes:
        if prefix in seen:
            continue
        seen.add(prefix)
        for name in files.listdir(prefix) or []:
            if re.fullmatch(r"python3(\.\d+)?", name):
                for sub in ("site-packages", "dist-packages"):
                    candidates.append(posixpath.join(prefix, name, sub))
    candidates.append("/usr/lib/python3/dist-packages")
    return [c for c in dict.fromkeys(candidates) if files.is_dir(c)]


def _python_version(site_dir: str, env: dict) -> str | None:
    match = re.search(r"python(3\.\d+)", site_dir)
    version = match.group(1) if match else None
    if env.get("PYTHON_VERSION") and (version is None or env["PYTHON_VERSION"].startswith(version)):
        return env["PYTHON_VERSION"]
    return version


def _python_executables(files) -> list[str]:
    found = []
    if not files.cheap_listing:
        for path in ("/usr/local/bin/python3", "/usr/bin/python3", "/opt/venv/bin/python3", "/opt/conda/bin/python3"):
            if files.exists(path):
                found.append(path)
        return found
    for directory in ("/usr/local/bin", "/usr/bin", "/opt/conda/bin", "/opt/venv/bin"):
        for name in files.listdir(directory) or []:
            if re.fullmatch(r"python3(\.\d+)?", name):
                found.append(posixpath.join(directory, name))
    return found


def _dist_versions(files, site_dir: str) -> dict:
    versions = {}
    if not files.cheap_listing:
        return versions
    for name in files.listdir(site_dir) or []:
        match = re.fullmatch(r"(.+?)-(\d[^-]*)\.(dist-info|egg-info)", name)
        if match:
            versions[match.group(1).lower().replace("-", "_").replace(".", "_")] = match.group(2)
    return versions


_VERSION_FILES = {"torch": "torch/version.py", "ray": "ray/_version.py", "transformers": "transformers/__init__.py",
                  "triton": "triton/__init__.py"}
_VERSION_ASSIGN = re.compile(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:(?:__version__|version)\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def _version_from_file(files, path: str) -> str | None:
    text = files.read_text(path)
    match = _VERSION_ASSIGN.search(text) if text else None
    return match.group(1) if match else None


def _nccl_header_version(files, site_dir: str) -> str | None:
    """NCCL's version from the header pip's nvidia-nccl package installs."""
    header = files.read_text(posixpath.join(site_dir, "nvidia/nccl/include/nccl.h"))
    if header:
        parts = [re.search(rf"#define NCCL_{p}\s+(\d+)", header) for p in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return None


def _vllm_version(files, site_dir: str, dists: dict) -> str | None:
    if "vllm" in dists:
        return dists["vllm"]
    for rel in ("vllm/_version.py", "vllm/version.py"):
        version = _version_from_file(files, posixpath.join(site_dir, rel))
        if version:
            return version
    return None


def probe_files(files, env: dict) -> dict:
    """Python, packages and vLLM from an image's files."""
    site_dirs = _candidate_site_dirs(files, env)
    executables = _python_executables(files)
    if not site_dirs and not executables:
        return {"python": None, "vllm": None, "packages": dict.fromkeys(_PACKAGES.values()),
                "notes": ["no Python found (no python3 in /usr/bin, /usr/local/bin, /opt, and no site-packages)"]}
    vllm_dir = next((d for d in site_dirs if files.read_bytes(posixpath.join(d, "vllm/__init__.py")) is not None),
                    None)
    main_dir = vllm_dir or (site_dirs[0] if site_dirs else None)
    dists = _dist_versions(files, main_dir) if main_dir else {}
    packages = {}
    for dist_prefix, label in _PACKAGES.items():
        packages[label] = next((v for k, v in dists.items() if k == dist_prefix or k.startswith(dist_prefix + "_")),
                               None)
        if packages[label] is None and main_dir and dist_prefix in _VERSION_FILES:
            packages[label] = _version_from_file(files, posixpath.join(main_dir, _VERSION_FILES[dist_prefix]))
    if packages["nvidia-nccl"] is None and main_dir:
        packages["nvidia-nccl"] = _nccl_header_version(files, main_dir)
    python = {"version": _python_version(main_dir or "", env), "executables": executables,
              "site_packages": main_dir, "searched": site_dirs}
    if vllm_dir is None:
        return {"python": python, "vllm": None, "packages": packages,
                "notes": [f"no vllm package in {', '.join(site_dirs) or 'any site-packages'}"]}
    return {"python": python, "vllm": probe_vllm(files, vllm_dir, dists), "packages": packages, "notes": []}


def probe_vllm(files, site_dir: str, dists: dict) -> dict:
    source = VllmSource(lambda rel: files.read_text(posixpath.join(site_dir, rel)))
    flags = source.serve_flags()
    known = flags.flags
    ray_executor = "--distributed-executor-backend" in known and any(
        source.exists(name) for name in _RAY_EXECUTOR_MODULES)
    multinode = {
        "ray": ray_executor,
        "native": {"--nnodes", "--node-rank", "--master-addr", "--headless"} <= known,
        "data_parallel": {"--data-parallel-address", "--data-parallel-size-local", "--headless"} <= known,
    }
    try:
        architectures = source.architectures()
    except VllmSourceError:
        architectures = []
    return {
        "version": _vllm_version(files, site_dir, dists),
        "path": posixpath.join(site_dir, "vllm"),
        "flags": sorted(known),
        "negatable_flags": sorted(flags.negatable),
        "store_true_flags": sorted(flags.store_true),
        "value_boolean_flags": sorted(flags.value_booleans),
        "deprecated_flags": sorted(flags.deprecated),
        "parser_features": source.parser_features(),
        "architectures": architectures,
        "multinode": multinode,
        "multinode_modes": [mode for mode, ok in multinode.items() if ok],
    }


# -- cache ------------------------------------------------------------------------

def _cache_path(image_id: str, directory: str) -> str:
    safe = image_id.replace(":", "_").replace("/", "_")
    return os.path.join(directory, f"{safe}-v{PROBE_VERSION}.json")


def read_cache(image_id: str, directory: str) -> dict | None:
    try:
        with open(_cache_path(image_id, directory), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_cache(image_id: str, directory: str, result: dict) -> None:
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".probe-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        os.replace(tmp, _cache_path(image_id, directory))
    except OSError:
        pass  # a cache that cannot be written only costs speed


# -- the probe ----------------------------------------------------------------------

def open_image_files(docker: Docker, inspect: dict, backend: str = "auto"):
    if backend in ("auto", "overlay2"):
        try:
            return OverlayLayers.from_graph_driver(inspect.get("GraphDriver") or {}), "overlay2"
        except ImageFilesError as err:
            if backend == "overlay2":
                raise ProbeError(f"cannot read the image's layers directly: {err}") from err
    try:
        return CreatedContainer(docker.run, docker.binary, inspect["Id"]), "container"
    except ImageFilesError as err:
        raise ProbeError(str(err)) from err


def probe_image(docker: Docker, image: str, use_cache: bool = True, cache_directory: str | None = None,
                backend: str = "auto") -> dict:
    inspect = docker.inspect(image)
    summary = summarize_image(inspect)
    directory = cache_directory or cache_dir()
    if use_cache:
        cached = read_cache(summary["id"], directory)
        if cached is not None:
            cached["image"] = summary
            cached["cached"] = True
            return cached
    files, backend = open_image_files(docker, inspect, backend)
    try:
        found = probe_files(files, _env_map((inspect.get("Config") or {}).get("Env")))
    except (ImageFilesError, VllmSourceError) as err:
        raise ProbeError(f"reading {image}: {err}") from err
    finally:
        files.close()
    if found["vllm"] is not None:
        found["vllm"]["entrypoint"] = entrypoint_kind(summary["entrypoint"], summary["cmd"])
    result = {"python": found["python"], "vllm": found["vllm"], "packages": found["packages"],
              "notes": found["notes"], "backend": backend, "probe_version": PROBE_VERSION}
    if use_cache:
        write_cache(summary["id"], directory, result)
    return dict(result, image=summary, cached=False)


def validate(result: dict, flags=None, model_architectures=None) -> dict:
    """Check flags and model architectures against a probe result."""
    vllm = result.get("vllm")
    validation = {"ok": True, "argv": [], "unknown_flags": [], "deprecated_flags": [],
                  "unsupported_architectures": [], "messages": []}
    if vllm is None:
        validation["ok"] = False
        validation["messages"].append(
            f"image {result['image']['id'][:19]} has no vLLM ({'; '.join(result.get('notes') or [])}): "
            "nothing to validate against")
        return validation
    if flags is not None:
        argv = settings_to_argv(flags, vllm)
        checked = validate_argv(argv, vllm)
        validation.update(argv=argv, unknown_flags=checked["unknown_flags"],
                          deprecated_flags=checked["deprecated_flags"])
        if checked["unknown_flags"]:
            validation["messages"].append(describe_unknown(checked["unknown_flags"], vllm["version"]))
    if model_architectures:
        known = set(vllm["architectures"])
        missing = [a for a in model_architectures if a not in known]
        validation["unsupported_architectures"] = missing
        if missing:
            validation["messages"].append(
                f"vLLM {vllm['version']} in this image does not register the model architecture(s) "
                f"{', '.join(missing)} (from the model's config.json); use an image whose vLLM supports them")
    validation["ok"] = not validation["unknown_flags"] and not validation["unsupported_architectures"]
    return validation
