"""``model_fingerprint``: which weights a quality run measured, cheaply.

A delta against the reference is paired over the same questions *and the same weights*.
A model folder rewritten between two trials of one sweep (a node lost and the model made
again, a resume after retraining, a copy swapped in place) keeps its path and its trial
keys, so the pairing would silently compare two models. The fingerprint is a sha256 over
each weight, config and tokenizer file's name and size and its first and last MiB: any
retraining or re-quantisation changes those bytes, and an 8B model's 16 GB are not read.
It is not a proof that two folders are byte-identical, only that they are not different
in the ways that happen.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["model_fingerprint"]

_PATTERNS = ("config.json", "*.safetensors", "*.bin", "*.pt", "tokenizer.json",
             "tokenizer.model")
_EDGE = 1 << 20  # bytes read at each end of a file


def model_fingerprint(model_dir: str | None) -> str | None:
    """16 hex digits for the folder's weights; None when ``model_dir`` is not a local
    folder (a hub name) or holds none of the files above."""
    if not model_dir:
        return None
    root = Path(model_dir)
    if not root.is_dir():
        return None
    files = sorted({p for pat in _PATTERNS for p in root.glob(pat) if p.is_file()})
    if not files:
        return None
    h = hashlib.sha256()
    for p in files:
        size = p.stat().st_size
        h.update(f"{p.name}\0{size}\0".encode())
        with open(p, "rb") as f:
            h.update(f.read(_EDGE))
            if size > 2 * _EDGE:
                f.seek(size - _EDGE)
                h.update(f.read(_EDGE))
    return h.hexdigest()[:16]
