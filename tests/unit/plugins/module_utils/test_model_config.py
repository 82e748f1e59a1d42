"""A model's shape read from its config.json, and the layouts and contexts vLLM refuses for it, each refusal naming
the value and what would work. The configs are the published config.json values of real models (trimmed)."""

import pytest
from ansible_collections.vllmops.cluster.plugins.module_utils.model_config import (
    facts,
    kv_bytes_per_token,
    kv_cache_tokens,
    memory_problems,
    problems,
    tp_allowed,
)

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


# --- memory -------------------------------------------------------------------------------------------------
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_hidden_layers": 32,
             "hidden_size": 4096, "max_position_embeddings": 4096, "torch_dtype": "float16"}


@pytest.mark.parametrize("config, tp, per_token, source", [
    # "For a 7B model with 32 layers, 32 heads, 128 dimensional heads, and FP16 precision, this works out to
    # approximately 524,288 bytes per token." (systemoverflow.com, "What is KV Cache and Why Does It Dominate Memory")
    (LLAMA2_7B, 1, 524_288, "published"),
    # Llama-3.1-8B's config.json: 32 layers, 8 KV heads of 128; bf16. 128 KiB per token, a quarter of Llama-2-7B's
    # (GQA: 8 KV heads for 32 query heads).
    (LLAMA31_8B, 1, 131_072, "config.json"),
    (LLAMA31_8B, 2, 65_536, "config.json, each rank holds 4 KV heads"),
    (LLAMA31_8B, 16, 16_384, "config.json, 8 KV heads replicated: one per rank"),
])
def test_kv_bytes_per_token_match_published_figures(config, tp, per_token, source):
    assert kv_bytes_per_token(facts(config), tensor_parallel_size=tp) == per_token, source


def test_a_2048_token_sequence_of_llama2_7b_takes_1_07_gb():
    # "Llama-2-7B with B=1, S=2048, L=32, n_kv=32, head_dim=128, fp16 (2 bytes) -> 1.07 GB" (torchedup.dev, KV Cache Size)
    assert kv_bytes_per_token(facts(LLAMA2_7B)) * 2048 == 1_073_741_824


def test_pp_stages_hold_their_layers_and_an_fp8_cache_halves_it():
    assert kv_bytes_per_token(facts(LLAMA31_8B), pipeline_parallel_size=3) == 2 * 11 * 8 * 128 * 2
    assert kv_bytes_per_token(facts(LLAMA31_8B), kv_cache_dtype="fp8") == 65_536


def test_kv_cache_tokens_counts_whole_blocks_and_whole_requests_as_vllm_logs_them():
    tiny = {"layers": 2, "kv_heads": 6, "head_dim": 32, "dtype": "bfloat16"}  # 1536 bytes per token
    # 64 MiB, blocks of 128 tokens: 341 blocks; requests of 256 tokens take 2 blocks: 170.5 of them x 256
    assert kv_cache_tokens(tiny, 64 << 20, 128, 256) == 43_648
    assert kv_cache_tokens(tiny, 64 << 20, 128, 200) == 34_100  # a request still takes 2 whole blocks
    assert kv_cache_tokens({}, 64 << 20, 128, 256) is None


GB10 = 128 << 30  # unified memory


def test_a_fitting_rank_is_not_refused():
    settings = {"tensor_parallel_size": 2, "max_model_len": 32768, "gpu_memory_utilization": 0.85}
    assert memory_problems(facts(LLAMA31_8B), settings, 16 << 30, GB10) == []
    assert memory_problems(facts(LLAMA31_8B), settings, 16 << 30, 0) == []  # the GPU's memory not known


def test_a_kv_cache_larger_than_the_gpu_is_refused_with_the_numbers_and_what_fits():
    settings = {"tensor_parallel_size": 2, "kv_cache_memory_bytes": 1 << 40, "gpu_memory_utilization": 0.5}
    [problem] = memory_problems(facts(LLAMA31_8B), settings, 16 << 30, GB10, where="/srv/models/llama")
    assert problem.startswith("one rank of /srv/models/llama needs more than its GPU holds: weights 8.0 GiB (of 16.0 "
                              "GiB, over TP 2 x PP 1) + kv_cache_memory_bytes 1024.0 GiB > 64.0 GiB (128.0 GiB x "
                              "gpu_memory_utilization 0.5).")
    assert f"kv_cache_memory_bytes at most {56 << 30} (56.0 GiB)" in problem


def test_a_context_whose_one_request_does_not_fit_names_the_longest_that_does():
    settings = {"max_model_len": 1 << 20, "gpu_memory_utilization": 0.9}  # 1M tokens of Llama-2-7B: 512 GiB
    [problem] = memory_problems(facts(LLAMA2_7B), settings, 13 << 30, 80 << 30)
    room = int((80 << 30) * 0.9) - (13 << 30)
    assert f"max_model_len at most {room // 524_288}" in problem and "the KV cache of one 1048576-token" in problem


def test_weights_that_do_not_fit_ask_for_more_gpus():
    [problem] = memory_problems(facts(LLAMA31_8B), {"max_model_len": 1024}, 140 << 30, 80 << 30)
    assert "The weights alone do not fit" in problem
