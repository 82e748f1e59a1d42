# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Docker image holds, read from its files: Python, vLLM (version,
`vllm serve` flags, model architectures, multi-node modes) and the packages
that matter for serving. Never runs the image, never imports vLLM.

Results are cached on the host by the image's content ID (see cache), which
every image store gives the same image.
"""

from __future__ import annotations

from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_files import (
    CreatedContainer,
    ImageFilesError,
    OverlayLayers,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.cache import cache_dir, read_cache, write_cache
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.chat_template import HostFiles, check_chat_template
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.imports import (
    CHECKOUT_BASES,
    is_checkout,
    locate_vllm,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.native import native_facts
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.packages import (
    PACKAGES,
    dist_versions,
    package_versions,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.site import (
    candidate_site_dirs,
    python_executables,
    python_version,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.summary import (
    entrypoint_kind,
    env_map,
    summarize_image,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.vllm_facts import probe_vllm
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSourceError

# Bump when what the probe extracts changes: cached results of older probes are ignored.
PROBE_VERSION = 5  # 5: vllm.tool_parsers, reasoning_parsers, parsers_known


class ProbeError(Exception):
    """A probe failure with the message an operator needs."""


def inspect_image(docker: DockerClient, image: str) -> dict:
    try:
        found = docker.image_inspect(image)
    except DockerError as err:
        if err.unreachable:
            raise ProbeError(f"Docker Engine does not answer on this host ({err}); start it, or apply the "
                             "vllmops.cluster.docker role") from err
        raise ProbeError(f"inspecting {image}: {err}") from err
    if found is None:
        raise ProbeError(f"image {image} is not on this host's Docker Engine; pull it or copy it here first "
                         "(the vllmops.cluster.image role does)")
    return found


def probe_files(files, env: dict) -> dict:
    """Python, packages and vLLM from an image's files (an image_files reader)."""
    site_dirs = candidate_site_dirs(files, env)
    executables = python_executables(files)
    if not site_dirs and not executables:
        return {"python": None, "vllm": None, "packages": dict.fromkeys(PACKAGES.values()),
                "notes": ["no Python found (no python3 in /usr/bin, /usr/local/bin, /opt, and no site-packages)"]}
    install = locate_vllm(files, env, site_dirs)
    main_dir = _interpreter_site_dir(files, install, site_dirs, env)
    dists = dist_versions(files, main_dir) if main_dir else {}
    packages = package_versions(files, main_dir, dists)
    python = {"version": python_version(main_dir or "", env), "executables": executables,
              "site_packages": main_dir, "searched": site_dirs,
              "vllm_install": install.kind if install else None, "vllm_install_via": install.via if install else None}
    if install is None:
        return {"python": python, "vllm": None, "packages": packages,
                "notes": [f"no vllm package in {', '.join(site_dirs) or 'any site-packages'}, nor a checkout "
                          f"under {', '.join(CHECKOUT_BASES)}"]}
    notes = []
    if install.kind == "checkout":
        notes.append(f"vLLM found only as a checkout in {install.root}: no Python of the image points at it "
                     "(no PYTHONPATH, .pth or editable install), so `import vllm` may fail in the image")
    return {"python": python, "vllm": probe_vllm(files, install.root, _vllm_dists(install, dists)),
            "packages": packages, "notes": notes}


def _interpreter_site_dir(files, install, site_dirs: list[str], env: dict) -> str | None:
    """The site directory whose packages (torch, ray, ...) the vLLM found imports: where vLLM was found through,
    the interpreter's own for a checkout (on PYTHONPATH or not)."""
    if install and install.site_dir and not (install.kind == "pythonpath" and is_checkout(files, install.root)):
        return install.site_dir
    pythonpath = set((env.get("PYTHONPATH") or "").split(":"))
    return next((d for d in site_dirs if d not in pythonpath), site_dirs[0] if site_dirs else None)


def _vllm_dists(install, dists: dict) -> dict:
    """The distributions vllm_facts reads vLLM's version from: the version its (editable) install recorded, none
    for a checkout (its vllm/_version.py counts)."""
    if install.version:
        return dict(dists, vllm=install.version)
    if install.kind in ("checkout", "pythonpath") and install.site_dir != install.root:
        return {k: v for k, v in dists.items() if k != "vllm"}
    return dists


def open_image_files(docker: DockerClient, inspect: dict, backend: str = "auto"):
    """(reader, backend name): overlay2 layer directories when allowed and readable, else a created container.

    The containerd image store (GraphDriver "overlayfs", no directories: its snapshots are not per image) is
    always read through a created container."""
    if backend in ("auto", "overlay2"):
        try:
            return OverlayLayers.from_graph_driver(inspect.get("GraphDriver") or {}), "overlay2"
        except ImageFilesError as err:
            if backend == "overlay2":
                raise ProbeError(f"cannot read the image's layers directly: {err}") from err
    try:
        return CreatedContainer(docker, inspect["Id"]), "container"
    except ImageFilesError as err:
        raise ProbeError(str(err)) from err


def probe_image(docker: DockerClient, image: str, use_cache: bool = True, cache_directory: str | None = None,
                backend: str = "auto", chat_template: str | None = None) -> dict:
    """The probe's result (cached per image); with `chat_template` (a path) also its `chat_template` check, which
    reads the image each time (it depends on the flags, not only on the image)."""
    inspect = inspect_image(docker, image)
    summary = summarize_image(inspect)
    directory = cache_directory or cache_dir()
    cache_key = summary["content_id"] or summary["id"]
    cached = read_cache(directory, cache_key, PROBE_VERSION) if use_cache else None
    if cached is not None and chat_template is None:
        return dict(cached, image=summary, cached=True)
    files, used_backend = open_image_files(docker, inspect, backend)
    try:
        result = cached or _probe(files, inspect, summary, image, used_backend)
        template = None
        if chat_template is not None:
            vllm_dir = (result["vllm"] or {}).get("path")
            template = check_chat_template(files, chat_template, summary["working_dir"], vllm_dir, HostFiles())
    except ImageFilesError as err:
        raise ProbeError(f"reading {image}: {err}") from err
    finally:
        files.close()
    if use_cache and cached is None:
        write_cache(directory, cache_key, PROBE_VERSION, result)
    extra = {"chat_template": template} if template is not None else {}
    return dict(result, image=summary, cached=cached is not None, **extra)


def _probe(files, inspect: dict, summary: dict, image: str, backend: str) -> dict:
    try:
        env = env_map((inspect.get("Config") or {}).get("Env"))
        found = probe_files(files, env)
        found.update(native_facts(files, env, (found["python"] or {}).get("site_packages"), found["packages"]))
    except (ImageFilesError, VllmSourceError) as err:
        raise ProbeError(f"reading {image}: {err}") from err
    if found["vllm"] is not None:
        found["vllm"]["entrypoint"] = entrypoint_kind(summary["entrypoint"], summary["cmd"])
    return {"python": found["python"], "vllm": found["vllm"], "packages": found["packages"],
            "torch": found["torch"], "cuda": found["cuda"], "nccl": found["nccl"],
            "notes": found["notes"], "backend": backend, "probe_version": PROBE_VERSION}
