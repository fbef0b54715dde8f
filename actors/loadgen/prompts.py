"""Prompts of an exact token length, distinct per request.

For ``/v1/completions`` a prompt is a list of token ids (the OpenAI API accepts
it), so no detokenise/retokenise round trip can change its length. The first
tokens encode the request's index and a per-factory nonce, so no two requests
share a prefix (prefix caching cannot inflate results) unless ``shared_prefix``
asks for one: not within a run, and not across runs against one server either
(trials against an ``external`` endpoint, benchmark runs back to back), which a
fixed seed alone would repeat prompt for prompt.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any

from actors.contracts.traffic import PlannedRequest

__all__ = ["PromptFactory", "usable_token_ids", "load_tokenizer"]


def load_tokenizer(tokenizer_dir: str | None) -> Any | None:
    """The model's ``tokenizers.Tokenizer`` (for sizing chat text), or None when the
    ``tokenizers`` package or a ``tokenizer.json`` is not there."""
    if not tokenizer_dir or not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    return Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))


def usable_token_ids(vocab_size: int, tokenizer_dir: str | None = None) -> list[int]:
    """Ids safe to send: the tokenizer's non-special ids when a tokenizer.json exists."""
    if tokenizer_dir:
        tok = Path(tokenizer_dir) / "tokenizer.json"
        if tok.is_file():
            data = json.loads(tok.read_text())
            special = {t["id"] for t in data.get("added_tokens", []) if t.get("special")}
            vocab = data.get("model", {}).get("vocab", {})
            ids = sorted(i for i in (vocab.values() if isinstance(vocab, dict) else [])
                         if i not in special)
            if ids:
                return ids
    lo = min(100, vocab_size // 2)
    return list(range(lo, vocab_size))


class PromptFactory:
    """Builds token-id prompts of ``length`` tokens; ``shared_prefix`` tokens common to all.

    ``nonce`` (default: drawn at random) enters every prompt, the shared prefix included:
    two factories with the same seed and different nonces never build a common prompt
    prefix; the same seed and nonce rebuild the same prompts exactly."""

    def __init__(self, ids: list[int], length: int, shared_prefix: int = 0, seed: int = 0,
                 tokenizer: Any | None = None, nonce: int | None = None):
        if len(ids) < 2:
            raise ValueError("need at least two usable token ids")
        self.ids, self.length, self.shared_prefix = ids, length, shared_prefix
        self.nonce = random.SystemRandom().getrandbits(32) if nonce is None else nonce
        self._seed = f"{seed}-{self.nonce}"
        rng = random.Random(self._seed)
        self._prefix = rng.choices(ids, k=shared_prefix)
        self._nonce_digits = self._digits(self.nonce, 4)  # the same in every prompt
        self.tokenizer = tokenizer
        self._segments: dict[tuple[int, str], list[int]] = {}

    def _digits(self, n: int, count: int) -> list[int]:
        """``count`` base-|ids| digits of ``n`` as token ids."""
        base, out = len(self.ids), []
        for _ in range(count):
            out.append(self.ids[n % base])
            n //= base
        return out

    def make(self, index: int, salt: int = 0) -> list[int]:
        """The prompt of request ``index`` (``salt`` separates levels and rounds)."""
        rng = random.Random(f"{self._seed}-{salt}-{index}")
        body_len = self.length - self.shared_prefix
        # the index (distinct for |ids|^4 requests), then the nonce (another run's prompts)
        head = (self._digits(index + salt * 1_000_003, 4) + self._nonce_digits)[:body_len]
        tail = rng.choices(self.ids, k=body_len - len(head))  # (one call: built per request)
        return self._prefix + head + tail

    def _segment_ids(self, salt: int, key: str, tokens: int) -> list[int]:
        """A segment's token ids: equal (``salt``, ``key``) give equal tokens (a longer
        segment extends a shorter one), unlike keys or salts share nothing."""
        got = self._segments.get((salt, key))
        if got is None or len(got) < tokens:
            rng = random.Random(f"{self._seed}-{salt}-{key}")
            head = self._digits(zlib.crc32(key.encode()) + salt * 1_000_003, 4)
            got = (head + self._nonce_digits + rng.choices(self.ids, k=max(0, tokens - 8)))
            if len(self._segments) > 4096:
                self._segments.clear()
            self._segments[(salt, key)] = got
        return got[:tokens]

    def planned(self, req: PlannedRequest, salt: int, chat: bool
                ) -> list[int] | str | list[dict[str, str]]:
        """A planned request's prompt: token ids (completions, no text), text (completions
        of text segments), or chat messages (one per run of segments of one role). Text
        from a file starts with a short tag of this run and ``salt`` (level and round), so a
        round's requests share their text's prefixes with each other, never with another
        round's or run's (token ids get the same from their keys)."""
        if not chat:
            if not req.text:
                return [t for s in req.segments for t in self._segment_ids(salt, s.key,
                                                                           s.tokens)]
            return self._tag(salt) + "\n\n".join(
                s.text if s.text is not None else self._words(salt, s.key, s.tokens)
                for s in req.segments)
        msgs: list[dict[str, str]] = []
        for s in req.segments:
            text = s.text if s.text is not None else (
                self._sized_text(self._segment_ids(salt, s.key, s.tokens), s.tokens)
                if self.tokenizer is not None else self._words(salt, s.key, s.tokens))
            if msgs and msgs[-1]["role"] == s.role:
                msgs[-1]["content"] += "\n\n" + text
            else:
                msgs.append({"role": s.role, "content": text})
        if req.text:
            msgs[0]["content"] = self._tag(salt) + msgs[0]["content"]
        return msgs

    def _tag(self, salt: int) -> str:
        return f"r{self.nonce}x{salt} "

    def _words(self, salt: int, key: str, tokens: int) -> str:
        rng = random.Random(f"{self._seed}-{salt}-{key}-t")
        return " ".join([f"r{self.nonce}x{salt}x{zlib.crc32(key.encode())}"]
                        + [rng.choice(_WORDS) for _ in range(tokens - 1)])

    def make_text(self, index: int, salt: int = 0) -> str:
        """A text prompt for chat: ``length`` tokens of the model's tokenizer where there is
        one (decode ids, re-encode, trim or extend until the length holds), else ``length``
        words (what the sim counts). The server's ``usage.prompt_tokens`` is checked."""
        if self.tokenizer is not None:
            return self._sized_text(self.make(index, salt), self.length)
        rng = random.Random(f"{self._seed}-{salt}-{index}-t")
        words = [f"r{self.nonce}x{salt}x{index}"] + [rng.choice(_WORDS)
                                                     for _ in range(self.length - 1)]
        return " ".join(words)


    def _sized_text(self, ids: list[int], n: int, tries: int = 10) -> str:
        tok = self.tokenizer
        if tok is None:
            raise RuntimeError("sizing a text prompt needs the model's tokenizer")
        text = tok.decode(ids)
        for i in range(tries):
            got = tok.encode(text, add_special_tokens=False).ids
            if len(got) == n:
                return text
            if len(got) > n:
                text = tok.decode(got[:n])
            else:
                text = tok.decode(got + ids[i % len(ids):][:n - len(got)])
        return text  # closest found; the level's usage check reports any difference


_WORDS = ("the of and to in is for that on with as by at from this be are it or an was "
          "time data model server token batch cache memory graph queue").split()
