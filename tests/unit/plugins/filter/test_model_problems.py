"""The vllm_serve role's check of a rank's settings against the model's config.json: the plan's parallel sizes and
max_model_len in any spelling vLLM accepts, every problem at once, none for a layout that fits."""

from ansible_collections.vllmops.cluster.plugins.filter.model_problems import _model_problems

# The sandbox's tiny model (tests/sandbox/serving/make_tiny_model.py)
TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 192, "num_attention_heads": 6, "num_key_value_heads": 6,
        "num_hidden_layers": 2, "max_position_embeddings": 2048}


def test_the_sandboxs_layouts_fit_its_model():
    for tp in (1, 2, 3, 6):
        assert _model_problems(TINY, {"tensor_parallel_size": tp, "max_model_len": 256}) == []


def test_a_third_gpu_on_a_four_head_model_is_refused_naming_the_path():
    four_heads = dict(TINY, num_attention_heads=4, num_key_value_heads=2, hidden_size=128)
    [problem] = _model_problems(four_heads, {"tensor_parallel_size": 3, "pipeline_parallel_size": 1},
                                "/srv/models/sandbox-tiny")
    assert problem.startswith("tensor parallel size 3 does not fit /srv/models/sandbox-tiny")


def test_max_model_len_is_read_in_any_spelling():
    for key in ("max_model_len", "max-model-len", "--max-model-len"):
        [problem] = _model_problems(TINY, {key: 4096})
        assert "max_model_len 4096" in problem and "at most 2048" in problem


def test_pipeline_stages_beyond_the_layers_and_a_bad_tp_are_reported_together():
    assert len(_model_problems(TINY, {"tensor_parallel_size": 4, "pipeline_parallel_size": 3})) == 2


def test_a_kv_cache_larger_than_the_nodes_memory_is_refused_with_the_numbers():
    settings = {"tensor_parallel_size": 2, "max_model_len": 256, "kv_cache_memory_bytes": 1 << 40,
                "gpu_memory_utilization": 0.6}
    [problem] = _model_problems(TINY, settings, "/srv/models/sandbox-tiny", 5 << 20, 24 << 30)
    assert "+ kv_cache_memory_bytes 1024.0 GiB > 14.4 GiB (24.0 GiB x gpu_memory_utilization 0.6)" in problem
    assert _model_problems(TINY, dict(settings, kv_cache_memory_bytes=64 << 20), "m", 5 << 20, 24 << 30) == []
    assert _model_problems(TINY, settings, "m") == []  # memory unknown: not checked
