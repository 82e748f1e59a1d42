# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An image as the engine describes it (`docker image inspect`), reduced to what an operator needs."""

from __future__ import annotations

import platform
import posixpath
import re

ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
                "ppc64le": "ppc64le", "s390x": "s390x"}
_ENV_PREFIXES = ("CUDA", "NVIDIA_", "NCCL", "VLLM_", "PYTHON", "TORCH", "VIRTUAL_ENV", "LD_LIBRARY")


def host_architecture() -> str:
    machine = platform.machine().lower()
    return ARCH_ALIASES.get(machine, machine)


def env_map(env_list: list | None) -> dict:
    """["KEY=value", ...] (an image's Config.Env) as a mapping."""
    pairs = (item.partition("=") for item in env_list or [])
    return {key: value for key, _sep, value in pairs}


def summarize_image(inspect: dict, host_arch: str | None = None) -> dict:
    config = inspect.get("Config") or {}
    env = env_map(config.get("Env"))
    host_arch = host_arch or host_architecture()
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
        "env": {k: v for k, v in env.items() if k.startswith(_ENV_PREFIXES) or k == "PATH"},
        "labels": config.get("Labels") or {},
        "host_architecture": host_arch,
        "architecture_mismatch": bool(arch) and ARCH_ALIASES.get(arch, arch) != host_arch,
    }


def entrypoint_kind(entrypoint: list | None, cmd: list | None) -> str:
    """How the image starts vLLM: "api_server", "vllm serve" or "other"."""
    words = " ".join((entrypoint or []) + (cmd or []))
    if "vllm.entrypoints.openai.api_server" in words:
        return "api_server"
    if re.search(r"(^|[\s/])vllm\s+serve\b", words) or (entrypoint and posixpath.basename(entrypoint[-1]) == "vllm"):
        return "vllm serve"
    return "other"
