"""Multi-node modes and the module lookup the vLLM facts rest on."""

import sys
from pathlib import Path

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.vllm_facts import (
    module_exists,
    multinode_modes,
    probe_vllm,
)
from ansible_collections.vllmops.cluster.plugins.module_utils.vllm_source import VllmSource, VllmSourceError
from memory_files import MemoryFiles

NATIVE = {"--nnodes", "--node-rank", "--master-addr", "--headless"}
DATA_PARALLEL = {"--data-parallel-address", "--data-parallel-size-local", "--headless"}


@pytest.mark.parametrize(("flags", "ray_executor", "expected"), [
    ({"--distributed-executor-backend"}, True, {"ray": True, "native": False, "data_parallel": False}),
    ({"--distributed-executor-backend"}, False, {"ray": False, "native": False, "data_parallel": False}),
    (set(), True, {"ray": False, "native": False, "data_parallel": False}),
    (NATIVE | DATA_PARALLEL, False, {"ray": False, "native": True, "data_parallel": True}),
    (NATIVE - {"--headless"}, False, {"ray": False, "native": False, "data_parallel": False}),
])
def test_multinode_modes(flags, ray_executor, expected):
    assert multinode_modes(flags, ray_executor) == expected


def test_a_module_is_a_file_or_a_package():
    files = MemoryFiles({"/site/vllm/executor/ray_utils.py": "", "/site/vllm/v1/executor/__init__.py": ""})
    assert module_exists(files, "/site", "vllm.executor.ray_utils")
    assert module_exists(files, "/site", "vllm.v1.executor")
    assert not module_exists(files, "/site", "vllm.v1.executor.ray_utils")


class SiteFiles:
    """A laid-out vLLM tree on this machine, read the way the probe reads an image."""

    def read_bytes(self, path):
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError:
            return None

    def read_text(self, path):
        data = self.read_bytes(path)
        return None if data is None else data.decode()


@pytest.fixture(scope="module")
def site_0_10_2():
    sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "tests/sandbox"))
    import vllm_sources

    site = vllm_sources.CACHE / "site-0.10.2"
    if not (site / "vllm" / "__init__.py").exists():
        vllm_sources.install_layout("0.10.2", site)
    return str(site)


def test_the_probe_reports_the_parsers(site_0_10_2):
    facts = probe_vllm(SiteFiles(), site_0_10_2, {"vllm": "0.10.2"})
    assert "qwen3_coder" in facts["tool_parsers"] and "qwen3" in facts["reasoning_parsers"]
    assert facts["parsers_known"] == {"tool": True, "reasoning": True}


def test_parsers_it_cannot_read_are_empty_and_said_unknown(site_0_10_2, monkeypatch):
    def unreadable(self):
        raise VllmSourceError("no")

    monkeypatch.setattr(VllmSource, "reasoning_parsers", unreadable)
    facts = probe_vllm(SiteFiles(), site_0_10_2, {"vllm": "0.10.2"})
    assert facts["reasoning_parsers"] == [] and facts["parsers_known"] == {"tool": True, "reasoning": False}
