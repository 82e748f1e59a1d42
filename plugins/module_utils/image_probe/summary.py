# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An image as the engine describes it (`docker image inspect`), reduced to what an operator needs."""

from __future__ import annotations

import platform
import posixpath
import re

from ansible_collections.vllmops.cluster.plugins.module_utils.image_identity import content_id
from ansible_collections.vllmops.cluster.plugins.module_utils.nccl import network_settings

# The kernel's names (uname -m, ansible_facts.architecture) to Docker's (GOARCH, an image config's "architecture").
ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm",
                "armv6l": "arm", "arm": "arm", "i386": "386", "i686": "386", "386": "386",
                "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}
_ENV_PREFIXES = ("CUDA", "NVIDIA_", "NCCL", "VLLM_", "PYTHON", "TORCH", "VIRTUAL_ENV", "LD_LIBRARY")


def docker_architecture(name: str) -> str:
    """A CPU architecture as Docker spells it: x86_64 -> amd64, aarch64 -> arm64."""
    name = (name or "").lower()
    return ARCH_ALIASES.get(name, name)


def host_architecture() -> str:
    """This host's CPU architecture (what ansible_facts.architecture says), as Docker spells it."""
    return docker_architecture(platform.machine())


def architecture_refusal(image: str, summary: dict, machine: str | None = None) -> str | None:
    """Why `image` cannot run on this host and what to do, or None when it can (or does not say its architecture).

    `summary` is summarize_image's answer; `machine` the host's own name for its architecture (uname -m), shown
    beside Docker's so that it reads like ansible_facts.architecture."""
    if not summary.get("architecture_mismatch"):
        return None
    host = summary["host_architecture"]
    machine = machine or platform.machine()
    variant = f" (variant {summary['variant']})" if summary.get("variant") else ""
    kernel_name = f" ({machine})" if machine and machine != host else ""
    return (f"image {image} ({(summary.get('id') or '?')[:19]}) is built for the CPU architecture "
            f"{summary['architecture']}{variant}, but this host is {host}{kernel_name}: "
            "its Ray and vLLM containers would die with "
            f"'exec format error'. Nothing was started. Give every node the image built for linux/{host}: pull that "
            f"platform (docker pull --platform linux/{host} ...), build it for that platform (docker buildx build "
            f"--platform linux/{host} ...), or use a multi-arch image (a manifest list that includes linux/{host}); "
            "then re-run.")


def env_map(env_list: list | None) -> dict:
    """["KEY=value", ...] (an image's Config.Env) as a mapping."""
    pairs = (item.partition("=") for item in env_list or [])
    return {key: value for key, _sep, value in pairs}


def summarize_image(inspect: dict, host_arch: str | None = None) -> dict:
    config = inspect.get("Config") or {}
    env = env_map(config.get("Env"))
    host_arch = docker_architecture(host_arch) if host_arch else host_architecture()
    arch = inspect.get("Architecture") or ""
    return {
        # This engine's ID (what a container is started from here) and the store-independent content ID
        # (what nodes compare: the containerd image store gives the same image another ID).
        "id": inspect.get("Id"),
        "content_id": content_id(inspect),
        "repo_tags": inspect.get("RepoTags") or [],
        "repo_digests": inspect.get("RepoDigests") or [],
        "architecture": arch,
        "os": inspect.get("Os"),
        "variant": inspect.get("Variant"),
        "size": inspect.get("Size"),
        "created": inspect.get("Created"),
        "entrypoint": config.get("Entrypoint"),
        "cmd": config.get("Cmd"),
        "working_dir": config.get("WorkingDir") or "/",
        "env": {k: v for k, v in env.items() if k.startswith(_ENV_PREFIXES) or k == "PATH"},
        "network_env": network_settings(env),
        "labels": config.get("Labels") or {},
        "host_architecture": host_arch,
        "architecture_mismatch": bool(arch) and docker_architecture(arch) != host_arch,
    }


def entrypoint_kind(entrypoint: list | None, cmd: list | None) -> str:
    """How the image starts vLLM: "api_server", "vllm serve" or "other"."""
    words = " ".join((entrypoint or []) + (cmd or []))
    if "vllm.entrypoints.openai.api_server" in words:
        return "api_server"
    if re.search(r"(^|[\s/])vllm\s+serve\b", words) or (entrypoint and posixpath.basename(entrypoint[-1]) == "vllm"):
        return "vllm serve"
    return "other"
