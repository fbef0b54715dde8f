"""Request files as planned requests: Mooncake traces, prompt files, ShareGPT, multi-turn.

``read_requests(path, source, count_text)`` returns ``PlannedRequest``s in file order, or
raises ``SpecError`` (exit 2) naming the file and the line (JSONL) or record (JSON) and the
field. Formats (``FileSource.format``; ``auto`` tells by the first record):

- ``mooncake``: AIPerf's trace fields as they are: ``input_length``, ``output_length``,
  optional ``timestamp`` (ms) and ``hash_ids``. Hash id ``h`` stands for ``block_tokens``
  tokens shared by every request that lists it (the last block of a prompt may be short);
  prompt tokens beyond the listed blocks are the request's own.
- ``prompts``: ``prompt`` text and ``output_tokens`` (``vllm bench serve``'s custom
  dataset), optional ``timestamp``.
- ``sharegpt``: a JSON list of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}``; as ``vllm bench serve`` does, the first human
  turn is the prompt and the first reply's token count the output length (records with
  fewer than two turns are skipped and counted).

Multi-turn (``mooncake`` and ``prompts``): rows with ``conversation_id`` and ``turn``
(1, 2, ... in file order per conversation). Turn k's prompt carries the conversation's
earlier turns with their reference replies: length rows send ``input_length`` new tokens
per turn after the history (the previous turns' inputs and ``output_length`` replies);
text rows need each earlier turn's ``reply`` text. Every config sees the same prompts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from actors.contracts.traffic import FileSource, PlannedRequest, Segment
from orchestrator.errors import SpecError

__all__ = ["read_requests", "MAX_FILE_BYTES", "MAX_REQUESTS", "MAX_TOKENS"]

MAX_FILE_BYTES = 1 << 30
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 1 << 20  # one request's prompt or output: far past any model's context


class _Turns:
    """A conversation's history so far: the segments every later turn starts with."""

    def __init__(self) -> None:
        self.history: dict[str, tuple[list[Segment], int]] = {}  # id -> (segments, last turn)

    def extend(self, where: str, conv: str, turn: int, own: list[Segment],
               reply: Segment | None) -> list[Segment]:
        prev, last = self.history.get(conv, ([], 0))
        if turn != last + 1:
            raise SpecError(f"{where}: conversation {conv!r} turn {turn} follows turn {last}; "
                            "list each conversation's turns in order, from 1")
        segs = prev + own
        if reply is None:
            self.history[conv] = (segs, turn)  # checked when a later turn needs it
        else:
            self.history[conv] = (segs + [reply], turn)
        return segs


def _int(row: dict[str, Any], field: str, where: str, lo: int = 1,
         hi: int = MAX_TOKENS) -> int:
    v = row.get(field)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SpecError(f"{where}: {field} must be an integer in [{lo}, {hi}] (got {v!r})")
    return v


def _timestamp(row: dict[str, Any], where: str) -> float | None:
    t = row.get("timestamp")
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, int | float) or t < 0:
        raise SpecError(f"{where}: timestamp must be milliseconds >= 0 (got {t!r})")
    return float(t) / 1e3


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise SpecError(f"{path}: line {n}: not JSON ({err.msg} at column "
                                f"{err.colno})") from None
            if not isinstance(row, dict):
                raise SpecError(f"{path}: line {n}: each line must be a JSON object, got "
                                f"{type(row).__name__}")
            yield n, row


def _format(path: Path, first: dict[str, Any] | list[Any] | None) -> str:
    if isinstance(first, list) or path.suffix == ".json":
        return "sharegpt"
    if first and "input_length" in first:
        return "mooncake"
    if first and "prompt" in first:
        return "prompts"
    raise SpecError(f"{path}: line 1: cannot tell the format (Mooncake rows have "
                    "input_length, prompt rows have prompt); set requests.format")


def _mooncake(i: int, row: dict[str, Any], where: str, block: int, turns: _Turns
              ) -> PlannedRequest:
    n_in = _int(row, "input_length", where)
    n_out = _int(row, "output_length", where)
    ids = row.get("hash_ids") or []
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                            for h in ids):
        raise SpecError(f"{where}: hash_ids must be a list of integers (got {ids!r})")
    conv = row.get("conversation_id")
    if conv is not None:
        turn = _int(row, "turn", where, 1, MAX_REQUESTS)
        c = str(conv)
        own = [Segment(key=f"c{c}t{turn}", tokens=n_in)]
        reply = Segment(key=f"c{c}t{turn}r", tokens=n_out, role="assistant")
        segs = turns.extend(where, c, turn, own, reply)
        return PlannedRequest(segments=tuple(segs), output_tokens=n_out,
                              at_s=_timestamp(row, where), conversation=c, turn=turn)
    segs, left = [], n_in
    for h in ids:
        if left <= 0:
            break
        segs.append(Segment(key=f"h{h}", tokens=min(block, left)))
        left -= block
    if left > 0:
        segs.append(Segment(key=f"u{i}", tokens=left))
    return PlannedRequest(segments=tuple(segs), output_tokens=n_out,
                          at_s=_timestamp(row, where))


def _text(row: dict[str, Any], field: str, where: str) -> str:
    v = row.get(field)
    if not isinstance(v, str) or not v.strip():
        raise SpecError(f"{where}: {field} must be non-empty text (got {v!r:.60})")
    return v


def _prompt_row(i: int, row: dict[str, Any], where: str, count: Callable[[str], int],
                turns: _Turns) -> PlannedRequest:
    text = _text(row, "prompt", where)
    n_out = _int(row, "output_tokens", where)
    own = [Segment(key=f"u{i}", tokens=max(1, count(text)), text=text)]
    conv = row.get("conversation_id")
    if conv is None:
        return PlannedRequest(segments=tuple(own), output_tokens=n_out,
                              at_s=_timestamp(row, where))
    c, turn = str(conv), _int(row, "turn", where, 1, MAX_REQUESTS)
    prev, last = turns.history.get(c, ([], 0))
    if prev and prev[-1].role != "assistant":
        raise SpecError(f"{where}: conversation {c!r} turn {turn} needs turn {last}'s "
                        "reference reply: give that row a reply text")
    reply_text = row.get("reply")
    reply = None
    if reply_text is not None:
        reply = Segment(key=f"c{c}t{turn}r", tokens=max(1, count(_text(row, "reply", where))),
                        text=reply_text, role="assistant")
    segs = turns.extend(where, c, turn, own, reply)
    return PlannedRequest(segments=tuple(segs), output_tokens=n_out,
                          at_s=_timestamp(row, where), conversation=c, turn=turn)


def _sharegpt(path: Path, count: Callable[[str], int]) -> tuple[list[PlannedRequest], int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as err:
        raise SpecError(f"{path}: not JSON ({err.msg} at line {err.lineno} column "
                        f"{err.colno})") from None
    if not isinstance(data, list):
        raise SpecError(f"{path}: a ShareGPT file is a JSON list of records, got "
                        f"{type(data).__name__}")
    out: list[PlannedRequest] = []
    skipped = 0
    for n, rec in enumerate(data):
        where = f"{path}: record {n}"
        turns = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(turns, list):
            raise SpecError(f"{where}: needs a conversations list")
        texts = [v for t in turns[:2] if isinstance(t, dict)
                 and isinstance(v := t.get("value"), str) and v.strip()]
        if len(texts) < 2:
            skipped += 1
            continue
        prompt, reply = texts
        out.append(PlannedRequest(segments=(Segment(key=f"u{len(out)}", tokens=max(
            1, count(prompt)), text=prompt),), output_tokens=min(MAX_TOKENS, max(
                1, count(reply)))))
    return out, skipped


def read_requests(path: Path, source: FileSource, count: Callable[[str], int]
                  ) -> tuple[list[PlannedRequest], int]:
    """The file's requests in order (at most ``source.limit``) and how many records were
    skipped (ShareGPT records without a reply); ``SpecError`` for anything malformed."""
    if not path.is_file():
        raise SpecError(f"workload.requests.path: {path} does not exist (a path relative "
                        "to the spec's folder, or absolute)")
    size = path.stat().st_size
    if size == 0:
        raise SpecError(f"{path}: the request file is empty")
    if size > MAX_FILE_BYTES:
        raise SpecError(f"{path}: {size:,} bytes; a request file may have at most "
                        f"{MAX_FILE_BYTES:,} (cut it, or use requests.limit on a shorter one)")
    fmt: str = source.format
    if fmt == "auto":
        fmt = "sharegpt" if path.suffix == ".json" else _format(path, next(
            (row for _, row in _lines(path)), None))
    limit = min(source.limit or MAX_REQUESTS, MAX_REQUESTS)
    if fmt == "sharegpt":
        got, skipped = _sharegpt(path, count)
        out = got[:limit]
    else:
        out, skipped, turns = [], 0, _Turns()
        for n, row in _lines(path):
            where = f"{path}: line {n}"
            if fmt == "mooncake":
                out.append(_mooncake(len(out), row, where, source.block_tokens, turns))
            else:
                out.append(_prompt_row(len(out), row, where, count, turns))
            if len(out) >= limit:
                break
    if not out:
        raise SpecError(f"{path}: no usable request ({skipped} records skipped)")
    timed = [r.at_s is not None for r in out]
    if any(timed) and not all(timed):
        line = timed.index(False) if timed[0] else timed.index(True)
        raise SpecError(f"{path}: request {line + 1} {'lacks' if timed[0] else 'has'} a "
                        "timestamp: give every request one, or none")
    return out, skipped
