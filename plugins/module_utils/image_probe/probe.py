# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Docker image holds, read from its files: Python, vLLM (version,
`vllm serve` flags, model architectures, multi-node modes) and the packages
that matter for serving. Never runs the image, never imports vLLM.

Results are cached on the host by image ID (see cache).
"""

from __future__ import annotations

import posixpath

from ansible_collections.vllmops.cluster.plugins.module_utils.docker_api import DockerClient, DockerError
from ansible_collections.vllmops.cluster.plugins.module_utils.image_files import (
    CreatedContainer,
    ImageFilesError,
    OverlayLayers,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.cache import cache_dir, read_cache, write_cache
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
PROBE_VERSION = 1


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
    vllm_dir = next((d for d in site_dirs if files.read_bytes(posixpath.join(d, "vllm/__init__.py")) is not None),
                    None)
    main_dir = vllm_dir or (site_dirs[0] if site_dirs else None)
    dists = dist_versions(files, main_dir) if main_dir else {}
    packages = package_versions(files, main_dir, dists)
    python = {"version": python_version(main_dir or "", env), "executables": executables,
              "site_packages": main_dir, "searched": site_dirs}
    if vllm_dir is None:
        return {"python": python, "vllm": None, "packages": packages,
                "notes": [f"no vllm package in {', '.join(site_dirs) or 'any site-packages'}"]}
    return {"python": python, "vllm": probe_vllm(files, vllm_dir, dists), "packages": packages, "notes": []}


def open_image_files(docker: DockerClient, inspect: dict, backend: str = "auto"):
    """(reader, backend name): overlay2 layer directories when allowed and readable, else a created container."""
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
                backend: str = "auto") -> dict:
    inspect = inspect_image(docker, image)
    summary = summarize_image(inspect)
    directory = cache_directory or cache_dir()
    if use_cache:
        cached = read_cache(directory, summary["id"], PROBE_VERSION)
        if cached is not None:
            return dict(cached, image=summary, cached=True)
    files, backend = open_image_files(docker, inspect, backend)
    try:
        found = probe_files(files, env_map((inspect.get("Config") or {}).get("Env")))
    except (ImageFilesError, VllmSourceError) as err:
        raise ProbeError(f"reading {image}: {err}") from err
    finally:
        files.close()
    if found["vllm"] is not None:
        found["vllm"]["entrypoint"] = entrypoint_kind(summary["entrypoint"], summary["cmd"])
    result = {"python": found["python"], "vllm": found["vllm"], "packages": found["packages"],
              "notes": found["notes"], "backend": backend, "probe_version": PROBE_VERSION}
    if use_cache:
        write_cache(directory, summary["id"], PROBE_VERSION, result)
    return dict(result, image=summary, cached=False)
