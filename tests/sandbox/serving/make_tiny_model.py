#!/usr/bin/env python3
"""A tiny Llama model for the sandbox, made offline (no hub is reachable):

    make_tiny_model.py OUT_DIR

Runs inside the real-vLLM sandbox image, with the image's own torch,
transformers and tokenizers: random weights (seeded, so every build makes the
same files), a byte-level BPE tokenizer trained on text that ships in the
image, and a minimal chat template. ~5 MB; vLLM's CPU backend serves it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 4096
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def corpus() -> list[str]:
    """Text every image of this recipe holds: the Python sources of transformers' docs strings."""
    import transformers
    root = Path(transformers.__file__).parent
    return [str(p) for p in sorted(root.glob("models/llama/*.py"))] + [str(p) for p in sorted(root.glob("*.py"))[:40]]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train(corpus(), vocab_size=VOCAB, min_frequency=2, special_tokens=["<s>", "</s>", "<pad>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", model_max_length=2048)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    # 6 attention and KV heads (head dim 32): tensor parallel sizes 1, 2, 3 and 6 fit it, as vLLM checks them.
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=192, intermediate_size=384, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": tokenizer.bos_token_id,
                                                             "eos_token_id": tokenizer.eos_token_id}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
