"""A model's shape read from its config.json, and the layouts and contexts vLLM refuses for it, each refusal naming
the value and what would work. The configs are the published config.json values of real models (trimmed)."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.model_config import facts, problems, tp_allowed

# Hugging Face config.json files, the keys that matter here.
LLAMA31_8B = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "hidden_size": 4096, "max_position_embeddings": 131072,
              "rope_scaling": {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192},
              "torch_dtype": "bfloat16"}
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28, "num_key_value_heads": 4,
             "num_hidden_layers": 28, "hidden_size": 3584, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
QWEN25_7B_YARN = dict(QWEN25_7B, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
FALCON_7B = {"architectures": ["FalconForCausalLM"], "n_head": 71, "multi_query": True, "n_layer": 32,
             "hidden_size": 4544, "torch_dtype": "bfloat16"}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "n_head": 12, "n_layer": 12, "n_embd": 768, "n_positions": 1024}
LLAVA = {"architectures": ["LlavaForConditionalGeneration"],
         "text_config": {"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                         "hidden_size": 4096, "max_position_embeddings": 4096},
         "quantization_config": {"quant_method": "awq"}}
GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "num_attention_heads": 16, "num_key_value_heads": 8,
             "num_hidden_layers": 42, "hidden_size": 3584, "head_dim": 256, "max_position_embeddings": 8192}


@pytest.mark.parametrize("config, shape", [
    (LLAMA31_8B, {"architectures": ["LlamaForCausalLM"], "attention_heads": 32, "kv_heads": 8, "layers": 32,
                  "hidden_size": 4096, "head_dim": 128, "max_model_len": 131072, "dtype": "bfloat16",
                  "quantization": None}),
    (QWEN25_7B_YARN, {"architectures": ["Qwen2ForCausalLM"], "attention_heads": 28, "kv_heads": 4, "layers": 28,
                      "hidden_size": 3584, "head_dim": 128, "max_model_len": 131072, "dtype": "bfloat16",
                      "quantization": None}),
    (FALCON_7B, {"architectures": ["FalconForCausalLM"], "attention_heads": 71, "kv_heads": 1, "layers": 32,
                 "hidden_size": 4544, "head_dim": 64, "max_model_len": None, "dtype": "bfloat16", "quantization": None}),
    (GPT2, {"architectures": ["GPT2LMHeadModel"], "attention_heads": 12, "kv_heads": 12, "layers": 12,
            "hidden_size": 768, "head_dim": 64, "max_model_len": 1024, "dtype": None, "quantization": None}),
    (LLAVA, {"architectures": ["LlavaForConditionalGeneration"], "attention_heads": 32, "kv_heads": 8, "layers": 32,
             "hidden_size": 4096, "head_dim": 128, "max_model_len": 4096, "dtype": None, "quantization": "awq"}),
    (GEMMA2_9B, {"architectures": ["Gemma2ForCausalLM"], "attention_heads": 16, "kv_heads": 8, "layers": 42,
                 "hidden_size": 3584, "head_dim": 256, "max_model_len": 8192, "dtype": None, "quantization": None}),
], ids=["llama3.1-8b (llama3 rope: no longer)", "qwen2.5-7b yarn x4", "falcon-7b multi-query", "gpt2 old keys",
        "llava text_config", "gemma2 head_dim given"])
def test_the_shape_comes_from_the_config_whatever_its_keys(config, shape):
    assert facts(config) == shape


@pytest.mark.parametrize("heads, kv_heads, tp, allowed", [
    (32, 8, 1, True), (32, 8, 2, True), (32, 8, 8, True),
    (32, 8, 16, True),    # 8 KV heads, each on 2 ranks
    (32, 8, 3, False),    # 32 heads do not divide by 3
    (28, 4, 3, False), (28, 4, 4, True), (28, 4, 8, False),  # Qwen2.5-7B on 3 or 8 GPUs
    (48, 8, 12, False),   # heads divide, but 12 ranks cannot share 8 KV heads evenly
    (24, 6, 4, False),    # 6 KV heads do not split across 4 ranks
    (24, 6, 6, True), (6, 6, 3, True), (71, 1, 2, False), (12, 12, 4, True),
])
def test_tensor_parallelism_follows_vllms_head_and_kv_head_rules(heads, kv_heads, tp, allowed):
    assert tp_allowed({"attention_heads": heads, "kv_heads": kv_heads}, tp) is allowed


def test_a_fitting_layout_and_context_is_not_refused():
    assert problems(facts(LLAMA31_8B), tensor_parallel_size=8, pipeline_parallel_size=2, max_model_len=131072) == []
    assert problems(facts(QWEN25_7B), tensor_parallel_size=2, max_model_len=None) == []
    assert problems({}, tensor_parallel_size=3, pipeline_parallel_size=5, max_model_len=10**6) == []  # nothing known


def test_tp_that_does_not_divide_the_heads_is_refused_naming_the_sizes_that_fit():
    [problem] = problems(facts(QWEN25_7B), tensor_parallel_size=3, where="/srv/models/qwen")
    assert problem.startswith("tensor parallel size 3 does not fit /srv/models/qwen")
    assert "28 attention heads" in problem
    assert "Sizes that fit: 1, 2, 4;" in problem and "vllm_serve_tensor_parallel_size" in problem


def test_tp_that_splits_the_kv_heads_unevenly_is_refused_naming_them():
    [problem] = problems({"attention_heads": 48, "kv_heads": 8}, tensor_parallel_size=12)
    assert "8 KV heads" in problem and "Sizes that fit: 1, 2, 4, 8, 16" in problem


def test_pp_beyond_the_layers_is_refused():
    [problem] = problems(facts(GPT2), pipeline_parallel_size=16)
    assert "pipeline parallel size 16 is more than the 12 layers" in problem and "at most 12" in problem


@pytest.mark.parametrize("config, asked, longest", [
    (GPT2, 2048, 1024),
    (QWEN25_7B, 65536, 32768),
    (QWEN25_7B_YARN, 262144, 131072),
    (LLAMA31_8B, 262144, 131072),
])
def test_a_context_longer_than_the_model_allows_is_refused_with_its_limit(config, asked, longest):
    [problem] = problems(facts(config), max_model_len=asked)
    assert f"max_model_len {asked} is longer than" in problem and f"at most {longest}." in problem
    assert problems(facts(config), max_model_len=longest) == []


def test_every_problem_is_reported_at_once():
    assert len(problems(facts(GPT2), tensor_parallel_size=5, pipeline_parallel_size=13, max_model_len=4096)) == 3
