"""How the sim hands tokens to its clients: one sink per request, pushed by the engine loop.

Why: at time scale 0 the sim must out-run any client. Waking a handler task per
chunk and going through aiohttp's per-write path cost more than simulating the
token, so the engine loop itself, after a delivery, formats each stream's new
events (one per token, or per ``stream_interval`` tokens) and gives them to the
socket's transport in one write (HTTP/1.1 chunked framing by hand; the handler
has already sent the headers through aiohttp, and ends the body with
``write_eof``). A stream whose socket buffer is backed up (the client fell
behind) is skipped and its events go out together in its next write; the last
write is always made.

Each event carries the text of its tokens (``SimVocab``: k tokens are k tokens of the
sim's tokenizer) and, when asked (``return_token_ids``), their ids. ``StreamOptions``
can make the stream lie on purpose (withheld tokens, inflated usage, duplicates) or
leave sources out, for testing clients.

Contract: ``push()`` is called after the sequence's ``generated`` count moved (or it
finished); it writes what is due and, once the sequence has all its tokens (or
the connection is gone), resolves ``done`` with True (finished normally) or False
(the connection was closed: nothing more may be written).
"""

from __future__ import annotations

import asyncio
import time

from actors.sim.config import StreamOptions
from actors.sim.scheduler import Seq
from actors.sim.vocab import SimVocab

__all__ = ["Sink", "StreamSink", "usage_json"]

_BACKLOG = 1 << 16  # bytes queued in the transport beyond which a due frame waits


def usage_json(seq: Seq, generated: int | None = None) -> str:
    n = seq.generated if generated is None else generated
    return (f'{{"prompt_tokens":{seq.prompt_len},"completion_tokens":{n},'
            f'"total_tokens":{seq.prompt_len + n}}}')


class Sink:
    """A non-streamed request: only completion matters."""

    __slots__ = ("seq", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.seq: Seq | None = None
        self.done: asyncio.Future[bool] = loop.create_future()

    def push(self) -> None:
        seq = self.seq
        if seq is not None and seq.generated >= seq.max_tokens and not self.done.done():
            self.done.set_result(True)


class StreamSink(Sink):
    """An SSE response: ``data: {...}`` chunks, per-chunk usage and token ids if asked,
    final usage and ``[DONE]``. ``interval`` is the stream interval (a chunk every k
    tokens, the first at once); ``disconnect_after`` > 0 drops the connection after that
    many tokens (fault injection); ``trace`` gets the monotonic write time of every token.
    ``body`` is the request (its ``stream_options`` and ``return_token_ids``)."""

    __slots__ = ("transport", "head", "chat", "per_chunk", "include_usage", "interval",
                 "disconnect_after", "trace", "sent", "first", "vocab", "ids", "lie",
                 "events")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport,
                 rid: str, model: str, chat: bool, body: dict, interval: int,
                 disconnect_after: int = 0, trace: list[float] | None = None,
                 vocab: SimVocab | None = None, lie: StreamOptions | None = None):
        super().__init__(loop)
        self.lie = lie if lie is not None else StreamOptions()
        self.vocab = vocab if vocab is not None else SimVocab()
        self.ids = bool(body.get("return_token_ids")) and self.lie.token_ids
        self.events = 0
        opts = body.get("stream_options") or {}
        self.transport, self.chat = transport, chat
        self.head = (f'data: {{"id":"chatcmpl-{rid}","object":"chat.completion.chunk",'
                     f'"created":{int(time.time())},"model":"{model}","choices":'
                     if chat else
                     f'data: {{"id":"cmpl-{rid}","object":"text_completion",'
                     f'"created":{int(time.time())},"model":"{model}","choices":')
        self.per_chunk = bool(opts.get("continuous_usage_stats")) and self.lie.chunk_usage
        self.include_usage = bool(opts.get("include_usage")) and self.lie.final_usage
        self.interval, self.disconnect_after, self.trace = interval, disconnect_after, trace
        self.sent = 0
        self.first = True

    def _write(self, event: str) -> None:
        data = event.encode()
        self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def _streamed(self, n: int) -> int:
        """Tokens really streamed once the usage says ``n`` (fewer when withholding)."""
        w = self.lie.withhold
        if not w:
            return n
        total = self.seq.max_tokens  # type: ignore[union-attr]
        return n * max(total - w, 0) // total

    def _event(self, sent: int, n: int, fin: bool) -> bytes:
        """The chunk-framed event that brings the stream from ``sent`` to ``n`` tokens
        (b"" where withholding leaves it no token and it is not the last)."""
        a, b = self._streamed(sent), self._streamed(n)
        if a == b and not fin:
            return b""
        text = self.vocab.text(a, b)
        ids = f',"token_ids":[{self.vocab.ids_json(a, b)}]' if self.ids else ""
        if self.chat:
            role = '"role":"assistant",' if self.first else ""
            choice = f'[{{"index":0,"delta":{{{role}"content":"{text}"}}{ids},"finish_reason":'
        else:
            choice = f'[{{"index":0,"text":"{text}"{ids},"logprobs":null,"finish_reason":'
        claimed = n if self.lie.inflate_chunk_usage else b
        usage = f',"usage":{usage_json(self.seq, claimed)}' if self.per_chunk else ""  # type: ignore[arg-type]
        reason = '"length"' if fin else "null"
        data = f"{self.head}{choice}{reason}}}]{usage}}}\n\n".encode()
        frame = b"%x\r\n%b\r\n" % (len(data), data)
        self.events += 1
        dup = self.lie.duplicate_every
        return frame + frame if dup and self.events % dup == 0 else frame

    def _close(self) -> None:
        if not self.done.done():
            self.done.set_result(False)

    def push(self) -> None:
        seq = self.seq
        if seq is None or self.done.done():
            return
        if self.transport.is_closing():  # the client went away
            self._close()
            return
        n = seq.generated
        fin = n >= seq.max_tokens
        if n > self.sent and (fin or self.transport.get_write_buffer_size() < _BACKLOG):
            # one event per token (per ``interval`` tokens after the first), all of this
            # push's events in one write: tokens the engine produced in one delivery
            # window reach the socket together, each still its own event
            frames = []
            sent, cut = self.sent, self.disconnect_after
            while sent < n:
                upto = sent + (1 if self.first else self.interval)
                if upto > n:
                    if not fin:
                        break  # a partial interval waits for more tokens
                    upto = n
                if cut and upto > cut:
                    upto = max(cut, sent + 1)
                frames.append(self._event(sent, upto, upto >= seq.max_tokens))
                self.first = False
                if self.trace is not None:
                    self.trace.extend([time.monotonic()] * (upto - sent))
                sent = upto
                if cut and sent >= cut:
                    break
            if frames:
                self.transport.write(b"".join(frames))
            self.sent = sent
            if cut and sent >= cut:
                self.transport.close()  # fault injection: drop the connection mid-stream
                self._close()
                return
        if fin:
            if self.include_usage:
                self._write(f"{self.head}[],\"usage\":{usage_json(seq)}}}\n\n")
            self._write("data: [DONE]\n\n")
            self.done.set_result(True)
