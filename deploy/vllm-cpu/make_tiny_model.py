#!/usr/bin/env python3
"""Build a tiny random-weight Llama model that vLLM (CPU) can serve.

    <venv-vllm>/bin/python deploy/vllm-cpu/make_tiny_model.py OUT_DIR [--seed N]

No downloads: the tokenizer is a byte-level BPE (vocab ~4096) trained with the
`tokenizers` library on a bounded, sorted subset of the Python standard
library's .py files; the model is `LlamaForCausalLM` (hidden 128, 2 layers,
4 heads, 2 KV heads) with random weights from a fixed seed, saved with
`save_pretrained` (safetensors, bfloat16). Takes about 10 s, about 3 MB.
Idempotent: exits 0 at once if OUT_DIR/config.json and tokenizer.json exist.
The output depends only on the seed, the stdlib sources and library versions.
"""
from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import time
from pathlib import Path

VOCAB_SIZE = 4096
TEXT_BUDGET_BYTES = 3_000_000  # bounded corpus: a few seconds of BPE training
SPECIALS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def corpus(budget: int) -> list[str]:
    """Sorted stdlib .py files (no tests), up to `budget` bytes, deterministic."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    used = 0
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if rel[0] in ("test", "site-packages", "lib2to3", "idlelib") or "tests" in rel:
            continue
        try:
            t = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(t)
        used += len(t.encode("utf-8"))
        if used >= budget:
            break
    if not texts:
        sys.exit(f"no .py files found under {root}")
    return texts


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts = corpus(TEXT_BUDGET_BYTES)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    print(f"tokenizer: vocab {len(fast)} from {len(texts)} stdlib files")
    return fast


def build_model(out: Path, tok, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config.bos_token_id = tok.bos_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: LlamaForCausalLM {n/1e6:.2f}M params, bfloat16, seed {seed}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(args.out_dir).resolve()
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        print(f"tiny model already present at {out}; nothing to do")
        return 0
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    tok = build_tokenizer(out)
    build_model(out, tok, args.seed)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"wrote {out} ({size/1e6:.1f} MB) in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
