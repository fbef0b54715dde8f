"""The count proof: what one response really streamed, read back from its bytes.

The hot path counts tokens from per-chunk usage as reads arrive (for timing); it
believes the server. After the level, ``prove`` re-reads every kept response
byte by byte with the general SSE parser and ``json``, and counts from each
source on its own: token ids in the chunks (``return_token_ids``), per-chunk
usage (``continuous_usage_stats``), the final ``usage``, and the model's
tokenizer over the streamed text. ``judge`` applies measurement rule 1:

- exact sources (token ids, per-chunk usage, final usage) must agree with each
  other and with the request, else the request is invalid (``usage_mismatch``
  names every count; ``count_mismatch`` when they agree on a count that is not
  the one asked for);
- a request is *verified* when an exact source besides the final usage agrees
  (token ids, or per-chunk usage whose text does not contradict it), or when the
  tokenizer's count of the text lies within ``TEXT_TOLERANCE`` of it;
- otherwise it is *unverified*: its count rests on the server's word alone.

Re-encoding generated text need not give back the generated ids (a byte-level
BPE merges differently; random-weight models emit odd sequences), so the
tokenizer count is inexact by nature: ``text_tolerance(n)`` is max(2, 2% of n).
"""

from __future__ import annotations

import enum
import json
import json.scanner
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from actors.loadgen.client import chunk_text
from actors.loadgen.records import RequestRecord, StreamProof
from actors.loadgen.sse import DONE, SSEParser

__all__ = ["prove", "judge", "Verdict", "Judgement", "text_tolerance", "TEXT_TOLERANCE"]

#: The tokenizer's count verifies within max(absolute, relative x n) tokens of n.
TEXT_TOLERANCE = (2, 0.02)


def text_tolerance(n: int) -> int:
    """Tokens by which a text-tokenizer count of ``n`` tokens may differ and still verify."""
    absolute, relative = TEXT_TOLERANCE
    return max(absolute, int(relative * n))


class Verdict(enum.StrEnum):
    """What the proof says of one request's output count."""

    VERIFIED = "verified"
    UNVERIFIED = "unverified"  # the server's usage alone, or text beyond the tolerance
    USAGE_MISMATCH = "usage_mismatch"  # exact sources disagree with each other
    COUNT_MISMATCH = "count_mismatch"  # they agree, on a count other than the request's


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    count: int | None  # the proven output count (None: nothing counted it)
    source: str  # what proved it: "token ids", "per-chunk usage", "tokenizer", "usage only"
    detail: str = ""


_decode = json.JSONDecoder().decode  # on str: no per-event encoding detection
# the decoder's own (C) scanner: one JSON value from an index, without ``decode``'s wrapper
# and whitespace regex; an event is taken only when that value spans it exactly (else
# ``_decode`` judges it, as ``json.loads`` would)
_scan_once = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # (stub)


def _event_json(text: str) -> Any:
    """``json.loads(text)``, faster for the common case (no surrounding whitespace)."""
    try:
        value, end = _scan_once(text, 0)
    except (StopIteration, ValueError):
        return _decode(text)
    return value if end == len(text) else _decode(text)


def _payloads(body: list[tuple[bool, bytes]]) -> Iterator[bytes]:
    """The SSE bytes of a response: framed reads (whole HTTP chunks) unframed."""
    for framed, data in body:
        if not framed:
            yield data
            continue
        pos, n = 0, len(data)
        while pos < n:
            nl = data.index(b"\r\n", pos)
            size = int(data[pos:nl], 16)
            yield data[nl + 2:nl + 2 + size]
            pos = nl + 4 + size


def prove(rec: RequestRecord, tokenizer: Any | None = None) -> StreamProof:
    """Count ``rec``'s response from its kept body (then dropped) by every source.

    Raises nothing on a malformed body: what cannot be parsed counts nothing (the
    hot path has already classified protocol errors)."""
    proof = StreamProof()
    parser = SSEParser()
    ids, usage_ok, ids_ok = 0, True, True
    texts: list[str] = []
    try:
        events = parser.feed(b"".join(_payloads(rec.body))) + parser.flush()
    except ValueError:  # a framed read that is not whole chunks: count what parses
        events = parser.flush()
    rec.body = []
    for data in events:
        if data == DONE:
            continue
        try:
            ev = _event_json(data.decode("utf-8"))
        except ValueError:
            continue
        if not isinstance(ev, dict) or "error" in ev:
            continue
        usage = ev.get("usage") if isinstance(ev.get("usage"), dict) else None
        choices = ev.get("choices") or []
        if not choices:
            if usage is not None:  # the final usage-only event
                proof.final_usage = usage.get("completion_tokens")
                proof.final_prompt = usage.get("prompt_tokens")
            continue
        choice = choices[0] if isinstance(choices[0], dict) else {}
        text = chunk_text(choice)
        chunk_ids = choice.get("token_ids")
        if not text and not chunk_ids:
            continue  # a role-only or empty chunk carries no token
        proof.chunks += 1
        texts.append(text)
        if isinstance(chunk_ids, list):
            ids += len(chunk_ids)
        else:
            ids_ok = False
        if usage is not None and usage.get("completion_tokens") is not None:
            proof.chunk_usage = usage["completion_tokens"]
        else:
            usage_ok = False
    if proof.chunks:
        proof.token_ids = ids if ids_ok else None
        if not usage_ok:
            proof.chunk_usage = None
    proof.text = "".join(texts)
    if tokenizer is not None and proof.token_ids is None and proof.text:
        proof.text_tokens = len(tokenizer.encode(proof.text, add_special_tokens=False).ids)
    rec.proof = proof
    return proof


def judge(proof: StreamProof, want: int) -> Judgement:
    """Measurement rule 1 for one request that asked for ``want`` output tokens."""
    exact = {name: n for name, n in (("token ids", proof.token_ids),
                                     ("per-chunk usage", proof.chunk_usage),
                                     ("usage", proof.final_usage)) if n is not None}
    said = ", ".join(f"{name} {n}" for name, n in exact.items())
    if proof.text_tokens is not None:
        said += f"{', ' if said else ''}tokenizer {proof.text_tokens}"
    if len(set(exact.values())) > 1:
        return Judgement(Verdict.USAGE_MISMATCH, proof.token_ids, "", f"counts disagree: {said}")
    count = next(iter(exact.values()), None)
    if count is not None and count != want:
        return Judgement(Verdict.COUNT_MISMATCH, count, "", f"{said} (asked {want})")
    text_ok = (proof.text_tokens is not None
               and abs(proof.text_tokens - want) <= text_tolerance(want))
    if proof.token_ids is not None:
        return Judgement(Verdict.VERIFIED, want, "token ids")
    if proof.text_tokens is not None and not text_ok:
        return Judgement(Verdict.UNVERIFIED, count, "usage, text disagrees",
                         f"the text is {proof.text_tokens} tokens by the model's tokenizer "
                         f"(tolerance {text_tolerance(want)}): {said}")
    if proof.chunk_usage is not None:
        return Judgement(Verdict.VERIFIED, want, "per-chunk usage")
    if text_ok:
        return Judgement(Verdict.VERIFIED, count if count is not None else want, "tokenizer")
    if count is None:
        return Judgement(Verdict.UNVERIFIED, None, "none",
                         f"no count at all: no token ids, no usage, {proof.chunks} chunks")
    return Judgement(Verdict.UNVERIFIED, count, "usage only",
                     "no count of the streamed tokens besides the final usage (no token ids, "
                     "no per-chunk usage, no tokenizer)")
