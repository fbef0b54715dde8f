"""One streaming request against an OpenAI-compatible server (aiohttp transport).

Matched work: ``ignore_eos``, ``min_tokens = max_tokens = N``, temperature 0 and
``stream_options.include_usage``; ``return_token_ids`` asks for the ids of each chunk's
tokens (vLLM 0.10.2+ and the sim). For timing, a chunk carrying k tokens counts k where
the server says so per chunk (``continuous_usage_stats``, or its token ids); elsewhere one
per non-empty chunk, and the record says the counts are unknown. The counting lives in
``StreamCounter`` so every transport shares it; it also keeps the body for the count
proof (``proof``), which decides whether the counts are true.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import aiohttp

from actors.loadgen.records import RequestRecord
from actors.loadgen.sse import DONE, SSEParser

__all__ = ["build_body", "stream_request", "StreamCounter", "chunk_text"]

# The fast path: a chunk with a non-empty ``choices`` list and per-chunk usage. Inside a JSON
# string a quote is escaped, so ``"completion_tokens":`` can only be a key.
_CHOICE = b'"choices":[{'
_COMPLETION = re.compile(rb'"completion_tokens":(\d+)')
_PROMPT = re.compile(rb'"prompt_tokens":(\d+)')
# without per-chunk usage: a token event lists its ids, or carries non-empty text; one that
# also has a usage object, a finish reason or an error is parsed as JSON
# (the lean transport's scan, ``http1._scan``, reads the same keys)
_IDS = b'"token_ids":['
_TEXT_KEY = b'"text":"'
_CONTENT_KEY = b'"content":"'
_FINISH = b'"finish_reason":"'  # a finish reason that is a string, not null
_USAGE = b'"usage":{'
_TEXT = (_TEXT_KEY, _CONTENT_KEY)
_NOT_FAST = (_USAGE, _FINISH, b'"error"')


def build_body(model: str, api: str, prompt: list[int] | str | list[dict[str, str]],
               output_tokens: int, per_chunk_usage: bool = True,
               token_ids: bool = True) -> dict[str, Any]:
    """A streamed request decoding exactly ``output_tokens``. ``prompt``: token ids or text
    (completions), text or a list of chat messages (chat)."""
    body: dict[str, Any] = {
        "model": model, "max_tokens": output_tokens, "min_tokens": output_tokens,
        "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": per_chunk_usage},
    }
    if token_ids:
        body["return_token_ids"] = True
    if api == "chat":
        body["messages"] = prompt if isinstance(prompt, list) and prompt and \
            isinstance(prompt[0], dict) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def chunk_text(choice: dict[str, Any]) -> str:
    """The text a streamed choice carries (completions ``text``, chat ``delta``)."""
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return delta.get("content") or delta.get("reasoning_content") or ""


class StreamCounter:
    """Turns the bytes of one SSE response into a ``RequestRecord``'s tokens and times.

    ``feed(chunk, now)`` takes one read; every token completed in that read gets
    the read's arrival time ``now``. Events carrying per-chunk usage and a
    non-empty ``choices`` list are read without a JSON parse (the hot path, one
    per token), and so are token events without usage that list their token ids or
    carry non-empty text (``_fast_event``); everything else (the final usage, a finish
    reason, errors) is parsed with ``json``. Every read's bytes are kept in
    ``rec.body`` for ``proof.prove`` (``framed``: whole HTTP chunks, as the lean
    transport's fast path hands them over).
    """

    __slots__ = ("rec", "parser", "last_usage", "done")

    def __init__(self, rec: RequestRecord):
        self.rec = rec
        self.parser = SSEParser()
        self.last_usage = 0
        self.done = False

    def feed(self, chunk: bytes, now: float) -> None:
        self.rec.body.append((False, chunk))
        got = 0
        for data in self.parser.feed(chunk):
            got += self.event(data)
        if got:
            self._arrived(got, now)

    def _arrived(self, got: int, now: float) -> None:
        """``got`` tokens arrived in one read at ``now`` (they share that arrival time; a
        read counted in two parts, scanned tokens then parsed ones, stays one arrival)."""
        rec = self.rec
        if rec.first_token is None:
            rec.first_token = now
        if rec.arrivals and rec.arrivals[-1] == now:
            rec.counts[-1] += got
        else:
            rec.arrivals.append(now)
            rec.counts.append(got)
        rec.chunk_tokens += got

    @property
    def between_events(self) -> bool:
        """No partial event is buffered (a transport may then hand over whole events)."""
        return not (self.parser._buf or self.parser._data)

    def event(self, data: bytes, start: int = 0, end: int | None = None) -> int:
        """Tokens carried by one event's ``data`` payload, ``data[start:end]`` (0 for
        usage-only events, errors and [DONE])."""
        if end is None:
            end = len(data)
        i = data.find(_CHOICE, start, end)
        if i >= 0:
            m = _COMPLETION.search(data, i, end)
            if m is not None:
                self.rec.scanned_events += 1
                return self.usage(int(m.group(1)), data, start, end)
            k = self._fast_event(data, start, i, end)
            if k > 0:
                self.rec.scanned_events += 1
                return k
        return self._slow_event(data[start:end] if start or end != len(data) else data)

    def _fast_event(self, data: bytes, start: int, i: int, end: int) -> int:
        """A token event without usage, counted as ``_slow_event`` would count it: its ids
        (exact), else one token for non-empty text; 0: leave it to the JSON parse."""
        find = data.find
        for marker in _NOT_FAST:
            if find(marker, start, end) >= 0:
                return 0
        j = find(_IDS, i, end)
        if j >= 0:
            close = find(b"]", j, end)
            if close <= j + len(_IDS):  # no list end, or an empty list
                return 0
            return data.count(b",", j, close) + 1
        for marker in _TEXT:
            t = find(marker, i, end)
            if t >= 0:
                t += len(marker)
                if t >= end or data[t] == 34:  # 34: '"', an empty text
                    return 0
                self.rec.counts_known = False
                return 1
        return 0

    def usage(self, n: int, data: bytes | memoryview, start: int = 0,
              end: int | None = None) -> int:
        """Per-chunk usage in ``data[start:end]`` (one event or several whole ones) said
        ``completion_tokens: n``: records it and returns the tokens new since the last."""
        k = n - self.last_usage
        self.last_usage = n
        rec = self.rec
        rec.completion_tokens = n
        if rec.prompt_tokens is None:
            p = _PROMPT.search(data, start, len(data) if end is None else end)
            rec.prompt_tokens = int(p.group(1)) if p else None
        return k if k > 0 else 0

    def framed(self, n: int, data: bytes | memoryview, now: float) -> int:
        """The lean transport's fast path: ``data`` is one read of whole HTTP chunks, each
        one token event, the last with per-chunk usage ``n``, that arrived at ``now``. Keeps
        the read (a copy where it is a view of a reused buffer) and records the tokens new
        since the last (returned). One call per read: ``usage`` inlined once it has the
        prompt's count."""
        rec = self.rec
        raw = data if type(data) is bytes else bytes(data)
        rec.body.append((True, raw))
        rec.scanned_events += raw.count(b"\n\n")
        if rec.prompt_tokens is None:
            k = self.usage(n, raw)
        else:
            k = n - self.last_usage
            self.last_usage = rec.completion_tokens = n
        if k > 0:
            self._arrived(k, now)
            return k
        return 0

    def tallied(self, k: int, exact: bool, data: bytes | memoryview, now: float) -> int:
        """The lean transport's fast path without per-chunk usage: ``data`` is one read of
        whole HTTP chunks, each one token event, ``k`` tokens in all (``exact``: counted
        from token ids; else one per event with text), that arrived at ``now``. Keeps the
        read and records the tokens; returns ``k``."""
        rec, raw = self.rec, data if type(data) is bytes else bytes(data)
        rec.body.append((True, raw))
        if not exact:
            rec.counts_known = False
        rec.scanned_events += raw.count(b"\n\n")
        self._arrived(k, now)
        return k

    def _slow_event(self, data: bytes) -> int:
        if data == DONE:
            self.done = True
            return 0
        ev = json.loads(data)
        rec = self.rec
        if not isinstance(ev, dict):
            raise ValueError(f"event is not a JSON object: {data[:80]!r}")
        if "error" in ev:
            rec.error = "server_error"
            rec.error_detail = str(ev["error"])[:300]
            return 0
        usage = ev.get("usage")
        choices = ev.get("choices") or []
        k = 0
        if choices:
            rec.parsed_events += 1
            choice = choices[0] if isinstance(choices[0], dict) else {}
            ids = choice.get("token_ids")
            if usage and usage.get("completion_tokens") is not None:
                k = usage["completion_tokens"] - self.last_usage
                self.last_usage = usage["completion_tokens"]
            elif isinstance(ids, list):
                k = len(ids)
            elif chunk_text(choice):
                k = 1
                rec.counts_known = False
        if usage:
            rec.prompt_tokens = usage.get("prompt_tokens")
            rec.completion_tokens = usage.get("completion_tokens")
        return k if k > 0 else 0

    def finish(self, now: float) -> None:
        """The stream ended: take any unterminated event, then check for ``[DONE]``."""
        tail = self.parser.flush()
        if tail:
            got = sum(self.event(d) for d in tail)
            if got:
                self.rec.arrivals.append(now)
                self.rec.counts.append(got)
                self.rec.chunk_tokens += got
                if self.rec.first_token is None:
                    self.rec.first_token = now
        if not self.done and self.rec.error is None:
            self.rec.error = "truncated"
            self.rec.error_detail = "stream ended without [DONE]"


async def stream_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                         rec: RequestRecord, headers: dict[str, str] | None = None) -> None:
    """Send ``body`` to ``url`` and fill ``rec``; errors are classified into ``rec.error``."""
    counter = StreamCounter(rec)
    rec.start = time.perf_counter()
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                rec.error = f"http_{resp.status}"
                rec.error_detail = (await resp.text())[:300]
                return
            async for chunk in resp.content.iter_any():
                counter.feed(chunk, time.perf_counter())
            counter.finish(time.perf_counter())
    except TimeoutError:
        rec.error = "stall"
        rec.error_detail = "no data within the stall timeout"
    except aiohttp.ClientConnectorError as err:
        rec.error = "connect"
        rec.error_detail = str(err)[:300]
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError) as err:
        rec.error = "disconnect"
        rec.error_detail = str(err)[:300]
    except (aiohttp.ClientError, ValueError, UnicodeDecodeError) as err:
        rec.error = "protocol"
        rec.error_detail = f"{type(err).__name__}: {err}"[:300]
    finally:
        rec.end = time.perf_counter()
