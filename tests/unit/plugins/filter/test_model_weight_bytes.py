"""The memory check counts the weights vLLM loads: a repository that ships its weights twice (safetensors and
Meta's original .pth) is not counted twice, and tokenizers and configuration are not weights."""

from __future__ import annotations

import pytest
from ansible_collections.vllmops.cluster.plugins.filter.model_weight_bytes import FilterModule

WEIGHT_BYTES = FilterModule().filters()["model_weight_bytes"]
GB = 10**9


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"model-00001-of-00002.safetensors": {"size": 5 * GB}, "model-00002-of-00002.safetensors": {"size": 3 * GB},
                  "model.safetensors.index.json": {"size": 30_000}, "tokenizer.json": {"size": 9_000_000},
                  "config.json": {"size": 700}}, 8 * GB, id="sharded safetensors"),
    pytest.param({"model.safetensors": {"size": 16 * GB}, "original/consolidated.00.pth": {"size": 16 * GB},
                  "original/tokenizer.model": {"size": 2_000_000}}, 16 * GB,
                 id="Llama-3 layout: the original .pth beside the safetensors is not loaded"),
    pytest.param({"pytorch_model.bin": {"size": 2 * GB}, "config.json": {"size": 700}}, 2 * GB, id="bin only"),
    pytest.param({"model-q4.gguf": {"size": 4 * GB}}, 4 * GB, id="gguf"),
    pytest.param({"config.json": {"size": 700}}, 0, id="no weights listed"),
    pytest.param({}, 0, id="empty"),
])
def test_the_weights_vllm_loads_are_counted_once(files, expected):
    assert WEIGHT_BYTES(files) == expected
