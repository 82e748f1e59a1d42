# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an image's vLLM supports (flags, model architectures, tool-call and reasoning parsers, multi-node modes),
read statically from its source through vllm_source."""

from __future__ import annotations

import posixpath

from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.packages import vllm_version
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSource, VllmSourceError

_RAY_EXECUTOR_MODULES = ("vllm.executor.ray_gpu_executor", "vllm.executor.ray_distributed_executor",
                         "vllm.v1.executor.ray_distributed_executor", "vllm.v1.executor.ray_executor",
                         "vllm.executor.ray_utils", "vllm.v1.executor.ray_utils")


def multinode_modes(known_flags: set, has_ray_executor: bool) -> dict:
    """Which multi-node modes a vLLM supports, from its flags and whether it ships a Ray executor."""
    return {
        "ray": has_ray_executor and "--distributed-executor-backend" in known_flags,
        "native": {"--nnodes", "--node-rank", "--master-addr", "--headless"} <= known_flags,
        "data_parallel": {"--data-parallel-address", "--data-parallel-size-local", "--headless"} <= known_flags,
    }


def module_exists(files, site_dir: str, dotted: str) -> bool:
    """Whether the Python module `dotted` (a .py file or a package) is in site_dir."""
    base = posixpath.join(site_dir, *dotted.split("."))
    return files.read_bytes(base + ".py") is not None or files.read_bytes(base + "/__init__.py") is not None


def probe_vllm(files, site_dir: str, dists: dict) -> dict:
    """The vLLM in site_dir/vllm. VllmSourceError when its flags cannot be derived."""
    source = VllmSource(lambda rel: files.read_text(posixpath.join(site_dir, rel)))
    flags = source.serve_flags()
    known = flags.flags
    multinode = multinode_modes(known, "--distributed-executor-backend" in known
                                and any(module_exists(files, site_dir, name) for name in _RAY_EXECUTOR_MODULES))
    try:
        architectures = source.architectures()
    except VllmSourceError:
        architectures = []
    parsers, parsers_known = {}, {}
    for kind, extract in (("tool", source.tool_parsers), ("reasoning", source.reasoning_parsers)):
        try:
            parsers[kind], parsers_known[kind] = extract(), True
        except VllmSourceError:  # unread: validation does not refuse names it could not check
            parsers[kind], parsers_known[kind] = [], False
    return {
        "version": vllm_version(files, site_dir, dists),
        "path": posixpath.join(site_dir, "vllm"),
        "flags": sorted(known),
        "negatable_flags": sorted(flags.negatable),
        "store_true_flags": sorted(flags.store_true),
        "value_boolean_flags": sorted(flags.value_booleans),
        "deprecated_flags": sorted(flags.deprecated),
        "parser_features": source.parser_features(),
        "architectures": architectures,
        "tool_parsers": parsers["tool"],
        "reasoning_parsers": parsers["reasoning"],
        "parsers_known": parsers_known,
        "multinode": multinode,
        "multinode_modes": [mode for mode, ok in multinode.items() if ok],
    }
