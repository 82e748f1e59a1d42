"""Multi-node modes and the module lookup the vLLM facts rest on."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.image_probe.vllm_facts import module_exists, multinode_modes
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
