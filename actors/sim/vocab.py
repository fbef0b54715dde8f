"""The sim's tokens: ids and the text they decode to, so a chunk of k tokens is k tokens.

With the model's tokenizer (``tokenizer.json`` in a directory) the sim emits only
"word" tokens: ids whose text is a space and letters and that encode back to
exactly that one id. A pre-tokenizer that splits on spaces (byte-level BPE, as
Llama 3 and GPT-2 have) then re-encodes any run of them to the same ids, so a
client's tokenizer count of the streamed text is exact. Without a tokenizer,
token ``i`` is the text `` t<i>`` (the client then counts from ids and usage).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["SimVocab"]

_WORD = re.compile(r"^ [A-Za-z]{2,12}$")
_MAX = 2048  # word tokens kept: enough variety, a fast start


class SimVocab:
    """``ids(start, end)`` and ``text(start, end)``: tokens ``start..end-1`` of a stream."""

    def __init__(self, tokenizer_dir: str | None = None):
        self.pairs = self._words(tokenizer_dir) if tokenizer_dir else []
        if not self.pairs:
            self.pairs = [(i, f" t{i}") for i in range(100, 100 + _MAX)]
        self._ids = [i for i, _ in self.pairs]
        self._texts = [t for _, t in self.pairs]
        self._json = [str(i) for i in self._ids]

    @staticmethod
    def _words(tokenizer_dir: str) -> list[tuple[int, str]]:
        path = Path(tokenizer_dir) / "tokenizer.json"
        if not path.is_file():
            raise ValueError(f"no tokenizer.json in {tokenizer_dir}")
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        vocab = json.loads(path.read_text()).get("model", {}).get("vocab", {})
        out: list[tuple[int, str]] = []
        for tid in sorted(vocab.values() if isinstance(vocab, dict) else []):
            text = tok.decode([tid])
            if _WORD.match(text) and tok.encode(text, add_special_tokens=False).ids == [tid]:
                out.append((tid, text))
                if len(out) >= _MAX:
                    break
        return out

    def text(self, start: int, end: int) -> str:
        n = len(self._texts)
        return "".join(self._texts[p % n] for p in range(start, end))

    def ids_json(self, start: int, end: int) -> str:
        """The ids as a JSON list's inside (``"12,7,9"``)."""
        n = len(self._json)
        return ",".join(self._json[p % n] for p in range(start, end))
