"""A minimal, fast OpenAI-style streaming server for client benchmarks (one core).

Speaks just enough HTTP/1.1 (keep-alive, chunked responses) for ``/v1/completions``,
``/v1/chat/completions``, ``/v1/models`` and ``/health``. Every request decodes
exactly ``max_tokens`` tokens; chunks look like vLLM's (about 280 bytes) and carry
per-chunk usage when ``stream_options.continuous_usage_stats`` asks for it.

Pacing: ``--step-ms S`` writes one token to every open stream each S ms (a batch
decode step), so at S ms x C streams the server offers C / S tokens per ms, one
token per read while the client keeps up. ``--step-ms 0`` writes every token at
once (unpaced: reads carry many tokens). It uses uvloop where installed.

    python benchmarks/loadgen_sse_server.py --port 0 --step-ms 2
    -> "Starting SSE server on http://127.0.0.1:PORT", then serves until SIGTERM;
       on exit prints one JSON line {"tokens": N, "cpu_s": ..., "wall_s": ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import time

try:  # optional: a faster event loop for the server side
    import uvloop
except ImportError:  # pragma: no cover - depends on the environment
    uvloop = None

TOKENS = 0


class _Stream:
    __slots__ = ("proto", "n", "i", "tmpl", "tmpl_last", "tail_ev", "prompt_len", "usage")

    def __init__(self, proto: Conn, n: int, head: bytes, usage: bool, chat: bool,
                 prompt_len: int):
        self.proto, self.n, self.i, self.prompt_len = proto, n, 0, prompt_len
        if chat:
            choice = b'[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":'
        else:
            choice = b'[{"index":0,"text":" tok","logprobs":null,"finish_reason":'
        p = b"%d" % prompt_len
        use = (b',"usage":{"prompt_tokens":' + p + b',"total_tokens":%d,"completion_tokens":%d}'
               if usage else b"")
        pre = b"data: " + head + choice
        # one %-format per token: the total and completion counts
        self.tmpl = pre + b'null,"stop_reason":null}]' + use + b"}\n\n"
        self.tmpl_last = pre + b'"length","stop_reason":null}]' + use + b"}\n\n"
        self.tail_ev = (b"data: " + head + b'[],"usage":{"prompt_tokens":' + p +
                        b',"total_tokens":%d,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
                        % (prompt_len + n, n))
        self.usage = usage

    def chunk(self) -> bytes:
        """The next token's SSE event, framed as one HTTP chunk."""
        self.i += 1
        i = self.i
        ev = self.tmpl_last if i == self.n else self.tmpl
        if self.usage:
            ev = ev % (self.prompt_len + i, i)
        return b"%x\r\n%s\r\n" % (len(ev), ev)

    def tail(self) -> bytes:
        ev = self.tail_ev
        return b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev)


class Server:
    def __init__(self, step_s: float):
        self.step_s = step_s
        self.active: list[_Stream] = []
        self.wake = asyncio.Event()
        self.rid = 0

    def start(self, s: _Stream) -> None:
        if self.step_s > 0:
            self.active.append(s)
            self.wake.set()
        else:
            asyncio.get_running_loop().create_task(self._unpaced(s))

    async def _unpaced(self, s: _Stream) -> None:
        global TOKENS
        t = s.proto.transport
        while s.i < s.n:
            if t.is_closing():
                return
            k = min(16, s.n - s.i)
            t.write(b"".join(s.chunk() for _ in range(k)))
            TOKENS += k
            if t.get_write_buffer_size() > 1 << 16:
                await s.proto.drained()
            else:
                await asyncio.sleep(0)
        t.write(s.tail())
        s.proto.done()

    async def ticker(self) -> None:
        """One decode step every ``step_s``: a token to every active stream."""
        global TOKENS
        loop = asyncio.get_running_loop()
        target = loop.time()
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                target = loop.time()
            keep = []
            for s in self.active:
                t = s.proto.transport
                if t.is_closing():
                    continue
                data = s.chunk()
                TOKENS += 1
                if s.i >= s.n:
                    t.write(data + s.tail())
                    s.proto.done()
                else:
                    t.write(data)
                    keep.append(s)
            self.active = keep
            target += self.step_s
            delay = target - loop.time()
            if delay < -self.step_s:  # fell behind: no burst to catch up
                target = loop.time()
            await asyncio.sleep(max(delay, 0))


class Conn(asyncio.Protocol):
    server: Server

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self._drain: asyncio.Future | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:
        self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drain and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    async def drained(self) -> None:
        if self._drain is not None:
            await self._drain

    def done(self) -> None:
        self.busy = False
        if self.buf:
            self.data_received(b"")

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        length = 0
        for h in head[1:]:
            k, _, v = h.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        if len(self.buf) < end + 4 + length:
            return
        body = self.buf[end + 4:end + 4 + length]
        self.buf = self.buf[end + 4 + length:]
        method, path, _ = head[0].split(" ", 2)
        self.handle(method, path, body)

    def _reply(self, status: str, ctype: str, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (status.encode(), ctype.encode(), len(payload), payload))
        if self.buf:
            asyncio.get_running_loop().call_soon(self.data_received, b"")

    def handle(self, method: str, path: str, body: bytes) -> None:
        if path in ("/health", "/ping"):
            return self._reply("200 OK", "text/plain", b"ok")
        if path == "/v1/models":
            return self._reply("200 OK", "application/json",
                               b'{"object":"list","data":[{"id":"m","object":"model"}]}')
        if path not in ("/v1/completions", "/v1/chat/completions") or method != "POST":
            return self._reply("404 Not Found", "text/plain", b"not found")
        req = json.loads(body)
        chat = path.endswith("chat/completions")
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        if chat:
            prompt_len = sum(len(str(m.get("content", "")).split()) for m in req["messages"])
        else:
            p = req.get("prompt")
            prompt_len = len(p) if isinstance(p, list) else len(str(p).split())
        opts = req.get("stream_options") or {}
        self.server.rid += 1
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        head = (b'{"id":"cmpl-%d","object":"%s","created":%d,"model":"m","choices":'
                % (self.server.rid, obj, int(time.time())))
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
        self.busy = True
        self.server.start(_Stream(self, n, head, bool(opts.get("continuous_usage_stats")),
                                  chat, prompt_len))


async def serve(host: str, port: int, step_ms: float) -> None:
    loop = asyncio.get_running_loop()
    server = Server(step_ms / 1e3)
    Conn.server = server
    srv = await loop.create_server(Conn, host, port, backlog=4096)
    print(f"Starting SSE server on http://{host}:{srv.sockets[0].getsockname()[1]}"
          f" (step {step_ms} ms, {'uvloop' if uvloop else 'asyncio'})", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ticker = loop.create_task(server.ticker())
    t0 = time.monotonic()
    await stop.wait()
    ticker.cancel()
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"tokens": TOKENS, "cpu_s": r.ru_utime + r.ru_stime,
                      "wall_s": time.monotonic() - t0}), flush=True)
    srv.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--step-ms", type=float, default=0.0)
    args = ap.parse_args()
    if uvloop is not None:
        uvloop.install()
    asyncio.run(serve(args.host, args.port, args.step_ms))


if __name__ == "__main__":
    main()
