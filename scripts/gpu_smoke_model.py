#!/usr/bin/env python3
"""A tiny random Llama for scripts/gpu-smoke.sh, made offline:  gpu_smoke_model.py OUT_DIR

Used only when tests/sandbox/serving/make_tiny_model.py (the same recipe) is absent. Needs torch,
transformers and tokenizers (vLLM's venv has them): a byte-level BPE tokenizer trained on
transformers' own sources, a minimal chat template, seeded random bf16 weights as safetensors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 4096
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    corpus = [str(p) for p in sorted(Path(transformers.__file__).parent.glob("*.py"))[:60]]
    bpe = ByteLevelBPETokenizer()
    bpe.train(corpus, vocab_size=VOCAB, min_frequency=2, special_tokens=["<s>", "</s>", "<pad>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", model_max_length=2048)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
