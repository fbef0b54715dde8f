"""A small byte-level BPE tokenizer trained here on the Python standard library's text
(nothing downloaded): the model tokenizer for tests that count streamed text."""

from __future__ import annotations

import sysconfig
from pathlib import Path

__all__ = ["make_tokenizer"]


def make_tokenizer(out_dir: Path, vocab_size: int = 2048) -> Path:
    """Write ``tokenizer.json`` into ``out_dir`` (created) and return the directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "tokenizer.json").is_file():
        return out_dir
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))[:60]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    return out_dir
