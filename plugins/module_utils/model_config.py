# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a model's config.json says about its shape, and the layouts and
contexts vLLM would refuse for it, known before a byte of its weights moves.

One owner of these rules (the vllm_serve role's validation reads them here,
through the model_problems filter). Each is vLLM's own, kept conservative: a
layout is refused only where vLLM would refuse it.

* Tensor parallelism divides the attention heads (vLLM: "Total number of
  attention heads must be divisible by tensor parallel size").
* The KV heads are split when there are at least as many as ranks, and
  replicated otherwise: KV heads % TP == 0 when KV heads >= TP, else
  TP % KV heads == 0 (vLLM's QKVParallelLinear divides one by the other).
* Pipeline parallelism has at least one layer per stage.
* max_model_len is at most the model's longest context: the smallest of the
  length keys config.json gives, times the RoPE scaling factor when one is
  set (vLLM refuses a longer one unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set).
"""

from __future__ import annotations

# The keys vLLM reads a model's longest context from (the smallest one given wins).
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_sequence_length", "max_seq_length", "seq_len")
# RoPE scalings whose factor does not lengthen what max_position_embeddings already says.
ROPE_NOT_LENGTHENING = ("su", "longrope", "llama3")


def _first(config, *keys):
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return None


def text_config(config):
    """The language model's part of a config.json: multimodal models nest it (text_config, llm_config)."""
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, dict) and _first(nested, "num_attention_heads", "n_head", "num_heads") is not None:
            merged = dict(nested)
            merged.setdefault("architectures", config.get("architectures"))
            return merged
    return config


def facts(config):
    """The shape of a model from its config.json (a dict): architectures, heads, KV heads, layers, hidden size,
    head dim, longest context, dtype and quantization. A value the config does not give is None."""
    text = text_config(config)
    heads = _first(text, "num_attention_heads", "n_head", "num_heads")
    kv_heads = _first(text, "num_key_value_heads", "n_head_kv", "num_kv_heads")
    if kv_heads is None and text.get("multi_query"):
        kv_heads = 1
    if kv_heads is None:
        kv_heads = heads
    hidden = _first(text, "hidden_size", "n_embd", "d_model")
    head_dim = text.get("head_dim")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    lengths = [text[key] for key in LENGTH_KEYS if isinstance(text.get(key), int) and text[key] > 0]
    longest = min(lengths) if lengths else None
    rope = text.get("rope_scaling") or {}
    factor = rope.get("factor") if isinstance(rope, dict) else None
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    if longest and isinstance(factor, (int, float)) and factor > 1 and kind not in ROPE_NOT_LENGTHENING:
        if kind == "yarn" and rope.get("original_max_position_embeddings"):
            longest = int(rope["original_max_position_embeddings"] * factor)
        else:
            longest = int(longest * factor)
    quantization = config.get("quantization_config") or text.get("quantization_config") or {}
    return {
        "architectures": list(config.get("architectures") or text.get("architectures") or []),
        "attention_heads": heads,
        "kv_heads": kv_heads,
        "layers": _first(text, "num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": hidden,
        "head_dim": head_dim,
        "max_model_len": longest,
        "dtype": _first(text, "torch_dtype", "dtype") or _first(config, "torch_dtype", "dtype"),
        "quantization": quantization.get("quant_method") if isinstance(quantization, dict) else None,
    }


def _divisors(number, limit):
    return [size for size in range(1, limit + 1) if number % size == 0]


def tp_allowed(shape, tp):
    """Whether vLLM accepts this tensor parallel size for the shape (unknown heads: not refused)."""
    heads, kv_heads = shape.get("attention_heads"), shape.get("kv_heads")
    if heads and heads % tp:
        return False
    if kv_heads:
        return (kv_heads % tp == 0) if kv_heads >= tp else (tp % kv_heads == 0)
    return True


def problems(shape, tensor_parallel_size=1, pipeline_parallel_size=1, max_model_len=None, where="the model"):
    """What vLLM would refuse in this layout and context for this shape: one sentence each, naming the value
    and what would work."""
    found = []
    tp, pp = int(tensor_parallel_size or 1), int(pipeline_parallel_size or 1)
    heads, kv_heads, layers = shape.get("attention_heads"), shape.get("kv_heads"), shape.get("layers")
    if not tp_allowed(shape, tp):
        fits = ", ".join(str(size) for size in _divisors(heads or tp, max(tp * 2, 8)) if tp_allowed(shape, size))
        if heads and heads % tp:
            why = f"vLLM needs the tensor parallel size to divide the model's {heads} attention heads"
        else:
            why = (f"vLLM needs its {kv_heads} KV heads split evenly across the ranks, or each replicated on a whole "
                   "number of them")
        found.append(f"tensor parallel size {tp} does not fit {where}: {why}. Sizes that fit: {fits}; set "
                     "vllm_serve_tensor_parallel_size to one of them and vllm_serve_pipeline_parallel_size so that "
                     "the two multiply to the cluster's GPUs (or serve it on as many GPUs as one of them).")
    if layers and pp > layers:
        found.append(f"pipeline parallel size {pp} is more than the {layers} layers of {where}: each stage needs at "
                     f"least one. Use at most {layers}.")
    longest = shape.get("max_model_len")
    if max_model_len and longest and int(max_model_len) > longest:
        found.append(f"max_model_len {max_model_len} is longer than {where} allows ({longest} tokens, from its "
                     f"config.json): vLLM refuses it at start. Set max_model_len to at most {longest}.")
    return found


# --- Memory -------------------------------------------------------------------------------------------------
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "fp8_inc": 1, "int8": 1}
GIB = 1 << 30


def kv_bytes_per_token(shape, tensor_parallel_size=1, pipeline_parallel_size=1, kv_cache_dtype="auto"):
    """KV cache bytes one token takes on one rank: keys and values of its layers (layers / PP, rounded up) for its
    KV heads (KV heads / TP; one each when TP is larger: vLLM replicates them), in the cache's dtype (the model's
    unless kv_cache_dtype says otherwise). None when the shape is not known."""
    layers, kv_heads, head_dim = shape.get("layers"), shape.get("kv_heads"), shape.get("head_dim")
    if not (layers and kv_heads and head_dim):
        return None
    dtype = shape.get("dtype") if kv_cache_dtype in (None, "", "auto") else kv_cache_dtype
    size = DTYPE_BYTES.get(str(dtype or "bfloat16").replace("torch.", ""), 2)
    tp, pp = int(tensor_parallel_size or 1), int(pipeline_parallel_size or 1)
    return 2 * -(-layers // pp) * max(1, kv_heads // tp) * head_dim * size


def kv_cache_tokens(shape, memory_bytes, block_size, max_model_len, tensor_parallel_size=1,
                    pipeline_parallel_size=1, kv_cache_dtype="auto"):
    """The tokens vLLM's KV cache holds in memory_bytes per rank, as vLLM counts them and logs them ("KV cache
    size: N tokens"): whole blocks of block_size tokens for all of the rank's layers, then as many requests of
    max_model_len as fit (each in whole blocks), times max_model_len."""
    per_token = kv_bytes_per_token(shape, tensor_parallel_size, pipeline_parallel_size, kv_cache_dtype)
    if per_token is None:
        return None
    blocks = int(memory_bytes) // (per_token * int(block_size))
    per_request = -(-int(max_model_len) // int(block_size))
    return int(blocks / per_request * int(max_model_len))


def _gib(count):
    return f"{count / GIB:.1f} GiB"


def memory_problems(shape, settings, weight_bytes, gpu_memory_bytes, where="the model"):
    """Whether one rank's share fits its GPU's memory: the weights / (TP x PP), plus the KV cache (vLLM's own
    kv_cache_memory_bytes when set, else one request of max_model_len, which vLLM needs at least), against the
    GPU's memory x gpu_memory_utilization (on unified memory, what the caller gives: the host's memory less what
    the OS and others hold). Activations and CUDA graphs are not counted: a refusal here is certain, a pass is not
    a promise. One sentence with the numbers and what would fit; [] when it fits or too little is known."""
    tp = int(settings.get("tensor_parallel_size") or 1)
    pp = int(settings.get("pipeline_parallel_size") or 1)
    utilization = float(settings.get("gpu_memory_utilization") or 0.9)
    if not gpu_memory_bytes:
        return []
    budget = int(gpu_memory_bytes * utilization)
    weights = int(weight_bytes or 0) // (tp * pp)
    per_token = kv_bytes_per_token(shape, tp, pp, settings.get("kv_cache_dtype"))
    asked = settings.get("kv_cache_memory_bytes")
    if asked:
        kv, what = int(asked), f"kv_cache_memory_bytes {_gib(int(asked))}"
    elif per_token and settings.get("max_model_len"):
        kv = per_token * int(settings["max_model_len"])
        what = f"the KV cache of one {settings['max_model_len']}-token request ({_gib(kv)})"
    else:
        kv, what = 0, ""
    if weights + kv <= budget:
        return []
    room = budget - weights
    said = (f"one rank of {where} needs more than its GPU holds: weights {_gib(weights)} (of {_gib(weight_bytes or 0)}, "
            f"over TP {tp} x PP {pp})" + (f" + {what}" if what else "") + f" > {_gib(budget)} "
            f"({_gib(gpu_memory_bytes)} x gpu_memory_utilization {utilization}).")
    if room <= 0:
        return [said + " The weights alone do not fit: spread them over more GPUs (a larger TP x PP), or use a "
                       "quantized model."]
    fits = []
    if asked:
        fits.append(f"kv_cache_memory_bytes at most {room} ({_gib(room)})")
    elif per_token:
        fits.append(f"max_model_len at most {room // per_token}")
    needed = (weights + kv) / gpu_memory_bytes
    if needed <= 0.95:
        fits.append(f"gpu_memory_utilization {needed:.2f} or more (where the GPU has that to spare)")
    fits.append("a larger TP x PP (more GPUs for the weights)")
    return [said + " What would fit: " + ", or ".join(fits) + "."]
