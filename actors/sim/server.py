"""The sim engine's OpenAI-compatible HTTP server (aiohttp).

Endpoints: ``/health``, ``/v1/models``, ``/v1/completions`` and
``/v1/chat/completions`` (SSE streaming with ``usage``, per-chunk usage when
``stream_options.continuous_usage_stats``), ``/metrics`` (Prometheus text) and
``stream_interval`` k > 1 sends a chunk every k tokens (the first at once), as vLLM's
``--stream-interval`` does; per-chunk usage says how many tokens each carried.
``/sim/trace`` (when started with ``--trace``: the monotonic time each token
was written, per ``X-Request-Id``; the load generator's accuracy benchmark
reads it as ground truth) and ``/sim/arrivals`` (with ``--trace``: when each
request reached the handler), so a client's TTFT can be set against the server's.

One engine loop runs the ``SimEngine``: each iteration's simulated duration
is slept for ``duration * time_scale`` of real time (0: as fast as possible),
then every sequence that produced a token gets it: the loop pushes each
request's sink, which writes the SSE frame straight to its socket
(``actors.sim.stream``). Startup prints log lines in
the imitated engine's own format (see ``actors.sim.startup_log``) and then
``Starting sim server on http://HOST:PORT``; ``--port 0`` lets the OS choose.

Faults (``SimServerConfig.fault``): ``oom`` exits at start with a CUDA-OOM-like
message, ``crash_after:N`` exits after N finished requests, ``stall_after:N``
stops emitting after N generated tokens (health stays OK: a hang),
``unhealthy`` answers /health with 503 forever, ``slow_start:S`` sleeps S
seconds first; for client tests ``disconnect_after:N`` drops each stream after
N tokens, ``error_every:N`` answers every Nth request with HTTP 500 and
``short_by:K`` decodes K fewer tokens than asked. ``SimServerConfig.stream``
(``StreamOptions``) leaves count sources out or makes the stream lie (withheld
tokens, inflated usage, duplicated events); ``tokenizer`` gives the tokens the text
of a real tokenizer's words.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid

from aiohttp import web

from actors.sim.config import SimServerConfig
from actors.sim.metrics_text import render_metrics
from actors.sim.pace import Pace
from actors.sim.scheduler import Seq
from actors.sim.startup_log import oom_lines, startup_lines, stats_line
from actors.sim.stream import Sink, StreamSink, usage_json
from actors.sim.vocab import SimVocab

__all__ = ["SimServer", "main"]


def _log(line: str) -> None:
    print(line, flush=True)


class SimServer:
    """Holds the engine, the HTTP app and the engine loop."""

    def __init__(self, cfg: SimServerConfig):
        self.cfg = cfg
        self.engine, self.memory = cfg.build()
        self.vocab = SimVocab(cfg.tokenizer)
        self.scale = cfg.time_scale
        self.wake = asyncio.Event()
        self.finished_requests = 0
        self.requests_seen = 0
        self.behind_s = 0.0
        self.pace = Pace()
        self._behind_logged = 0.0
        self._step_ends = 0.0
        self._woken_at = time.monotonic()
        self._started = time.monotonic()
        self.trace: dict[str, list[float]] | None = {} if cfg.trace else None
        self.arrivals: dict[str, float] | None = {} if cfg.trace else None
        self.stalled = False
        self._dirty: dict[Sink, None] = {}  # sinks with tokens to push, in emission order
        self._stats_prev = (0, 0, time.monotonic())
        self.app = web.Application()
        self.app.add_routes([
            web.get("/health", self.health), web.get("/v1/models", self.models),
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat), web.get("/metrics", self.metrics),
            web.get("/sim/trace", self.get_trace), web.get("/sim/arrivals", self.get_arrivals),
        ])

    # -- engine loop ------------------------------------------------------------------------
    async def engine_loop(self) -> None:
        target = time.monotonic()
        while True:
            if self.engine.idle or self.stalled:
                self.wake.clear()
                await self.wake.wait()
                target = self._woken_at  # a loop that wakes late is late too
            out = self.engine.step()
            if out is None:  # nothing schedulable: wait for a change
                self.wake.clear()
                await self.wake.wait()
                target = self._woken_at
                continue
            target += out.duration * self.scale
            self._step_ends = target  # wall time the step just taken ends (sim: engine.now)
            delay = target - time.monotonic()
            if self.scale == 0:  # unpaced: run iterations for ~10 ms between flushes, so
                # each stream gets the tokens of several iterations in one write (one event
                # each, as from a server whose client lags) and the sim out-runs the client
                self._deliver(out)
                deadline = time.perf_counter() + 0.01
                while time.perf_counter() < deadline and not self.stalled:
                    more = self.engine.step()
                    if more is None:
                        break
                    self._deliver(more)
                self._flush()
                await asyncio.sleep(0)
                continue
            await asyncio.sleep(max(delay, 0.0))
            self._deliver(out)
            self._flush()
            lag = time.monotonic() - target  # how late this step's tokens went out
            self.pace.step(len(out.emitted), lag, out.duration * self.scale,
                           sum(1 for q in out.emitted if q.generated == 1))
            if lag > 0.05:  # fell behind (overloaded host): do not burst to catch up
                self._behind(lag)
                target = time.monotonic()

    def _wake(self) -> None:
        """Wake the engine loop; the first wake since it slept sets when it was due."""
        if not self.wake.is_set():
            self._woken_at = time.monotonic()
        self.wake.set()

    def _sim_now(self) -> float:
        """Sim time now: inside the step being slept, ``engine.now`` (its end) less the
        wall time left of it; otherwise ``engine.now``."""
        left = self._step_ends - time.monotonic()
        if self.scale > 0 and left > 0:
            return self.engine.now - left / self.scale
        return self.engine.now

    def _deliver(self, out) -> None:
        """Note which requests have new tokens (``_flush`` pushes them); apply faults."""
        fault = self.cfg.fault
        if fault.kind == "stall_after" and self.engine.generation_tokens_total >= fault.value:
            self.stalled = True
            _log("WARNING sim: stalling (fault injection); health stays OK")
        dirty = self._dirty
        for seq in out.emitted:
            dirty[seq.user] = None
        for _ in out.finished:
            self.finished_requests += 1
            if fault.kind == "crash_after" and self.finished_requests >= fault.value:
                _log("ERROR sim: engine core died unexpectedly (fault injection)")
                os._exit(3)

    def _flush(self) -> None:
        """Push every request that got tokens since the last flush (one frame each)."""
        dirty, self._dirty = self._dirty, {}
        for sink in dirty:
            sink.push()

    def _behind(self, seconds: float) -> None:
        """Real time lost because the host could not keep the pace: results understate.
        Said (and so flagged) once the loss passes 0.1 s and 1% of the server's uptime: a
        burst of requests parsed at once costs a one-off few tens of ms, not the pace."""
        self.behind_s += seconds
        now = time.monotonic()
        if self.behind_s < max(0.1, 0.01 * (now - self._started)):
            return
        if now - self._behind_logged > 5:
            self._behind_logged = now
            _log(f"WARNING sim: engine loop behind real time by {self.behind_s:.2f} s in total "
                 f"(host too slow for time_scale={self.scale}); measured speed understates "
                 "the model: raise sim.time_scale")

    async def stats_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.stats_interval_s)
            p0, g0, t0 = self._stats_prev
            now = time.monotonic()
            e = self.engine
            _log(stats_line(self.cfg.profile, (e.prompt_tokens_total - p0) / (now - t0),
                            (e.generation_tokens_total - g0) / (now - t0), len(e.running),
                            e.waiting_admitted, e.kv_usage,
                            e.cache.hit_rate if e.cache else 0.0))
            self._stats_prev = (e.prompt_tokens_total, e.generation_tokens_total, now)

    # -- handlers ---------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if self.cfg.fault.kind == "unhealthy":
            return web.Response(status=503, text="unhealthy (fault injection)")
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "owned_by": "servesweep-sim",
            "max_model_len": self.cfg.max_model_len}
            for name in (self.cfg.served_name, *self.cfg.aliases)]})

    async def metrics(self, request: web.Request) -> web.Response:
        text = render_metrics(self.cfg, self.engine, self.memory, self.behind_s, self.pace)
        return web.Response(text=text, content_type="text/plain")

    async def get_trace(self, request: web.Request) -> web.Response:
        if self.trace is None:
            return web.json_response({"error": "start the server with --trace"}, status=404)
        return web.json_response(self.trace)

    async def get_arrivals(self, request: web.Request) -> web.Response:
        if self.arrivals is None:
            return web.json_response({"error": "start the server with --trace"}, status=404)
        return web.json_response(self.arrivals)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    def _bad(self, msg: str) -> web.Response:
        return web.json_response({"error": {"message": msg, "type": "BadRequestError",
                                            "code": 400}}, status=400)

    def _prompt(self, body: dict, chat: bool) -> list[int] | None:
        """The prompt as token ids (what the prefix cache hashes): a completion's ids as
        sent; text is counted by words, each word's hash its id; a chat template adds a
        few tokens per message and 3 at the end."""
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return None
            ids: list[int] = []
            for m in msgs:
                ids += [hash(("<msg>", str(m.get("role", ""))))] * 4
                ids += [hash(w) for w in str(m.get("content", "")).split()]
            return ids + [0, 0, 0]
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return prompt
        if isinstance(prompt, str):
            return [hash(w) for w in prompt.split()] or [0]
        return None

    def _output_len(self, body: dict, rid: str) -> int:
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        min_tokens = int(body.get("min_tokens") or 0)
        if body.get("ignore_eos") or min_tokens >= max_tokens:
            return max_tokens
        # without ignore_eos the "model" stops at an EOS somewhere in [min, max]
        h = int.from_bytes(uuid.uuid5(uuid.NAMESPACE_OID, rid).bytes[:4], "big")
        return max(1, min_tokens + h % (max_tokens - min_tokens + 1))

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        arrived = time.monotonic()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._bad("body is not JSON")
        prompt_ids = self._prompt(body, chat)
        if prompt_ids is None:
            return self._bad("prompt (token ids or text) or messages required")
        plen = len(prompt_ids)
        rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        if self.arrivals is not None:
            self.arrivals[rid] = arrived
        n_out = self._output_len(body, rid)
        fault = self.cfg.fault
        self.requests_seen += 1
        if fault.kind == "error_every" and self.requests_seen % max(int(fault.value), 1) == 0:
            return web.json_response({"error": {"message": "injected failure", "type":
                                                "InternalServerError", "code": 500}}, status=500)
        if fault.kind == "short_by":
            n_out = max(1, n_out - int(fault.value))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if plen + max_tokens > self.cfg.max_model_len:  # as vLLM: the request's worst case
            return self._bad(f"This model's maximum context length is {self.cfg.max_model_len} "
                             f"tokens. However, you requested {plen + max_tokens} tokens.")
        stream = bool(body.get("stream"))
        loop = asyncio.get_running_loop()
        resp: web.StreamResponse | None = None
        if stream:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
            await resp.prepare(request)
            await resp.write(b"")  # the headers go out now: frames follow on the transport
            trace = self.trace.setdefault(rid, []) if self.trace is not None else None
            sink: Sink = StreamSink(
                loop, request.transport, rid, self.cfg.served_name, chat,  # type: ignore[arg-type]
                body, self.cfg.stream_interval,
                int(fault.value) if fault.kind == "disconnect_after" else 0, trace,
                self.vocab, self.cfg.stream)
        else:
            sink = Sink(loop)
        seq = self.engine.add(rid, plen, n_out, user=sink, arrival=self._sim_now(),
                              prompt_ids=prompt_ids)
        sink.seq = seq
        self._wake()
        try:
            finished = await sink.done
            if resp is None:
                return self._whole(seq, chat)
            if finished:
                await resp.write_eof()
            return resp
        finally:
            if seq.state in ("waiting", "running"):
                self.engine.abort(seq)

    def _whole(self, seq: Seq, chat: bool) -> web.Response:
        text = self.vocab.text(0, seq.generated)
        choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                   "finish_reason": "length"} if chat else
                  {"index": 0, "text": text, "finish_reason": "length"})
        return web.json_response({
            "id": f"cmpl-{seq.rid}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": self.cfg.served_name, "choices": [choice],
            "usage": json.loads(usage_json(seq))})


async def _serve(cfg: SimServerConfig) -> None:
    fault = cfg.fault
    if fault.kind == "slow_start":
        await asyncio.sleep(fault.value)
    server = SimServer(cfg)
    if fault.kind == "oom" or server.memory.kv_tokens < cfg.max_model_len:
        for line in oom_lines(cfg, server.memory):
            _log(line)
        sys.exit(1)
    t0 = time.monotonic()
    for line in startup_lines(cfg, server.memory):
        _log(line)
    runner = web.AppRunner(server.app, access_log=None, handle_signals=False)
    await runner.setup()
    tls = None
    if cfg.tls_cert:
        import ssl

        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    site = web.TCPSite(runner, cfg.host, cfg.port, backlog=4096, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    _log(f"INFO sim: init engine took {time.monotonic() - t0:.2f} s")
    scheme = "https" if tls else "http"
    if cfg.profile == "trtllm":
        _log(f"INFO:     Uvicorn running on {scheme}://{cfg.host}:{port} (Press CTRL+C to quit)")
    else:
        _log(f"INFO sim: Starting sim server on {scheme}://{cfg.host}:{port}")
    tasks = [asyncio.create_task(server.engine_loop()), asyncio.create_task(server.stats_loop())]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    _log("INFO sim: shutting down")
    for t in tasks:
        t.cancel()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m actors.sim.server", description=__doc__)
    ap.add_argument("--config", required=True, help="JSON file of a SimServerConfig")
    ap.add_argument("--host", default=None)
    ap.add_argument("--port", type=int, default=None)
    args = ap.parse_args(argv)
    cfg = SimServerConfig.model_validate_json(open(args.config).read())
    updates = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if updates:
        cfg = cfg.model_copy(update=updates)
    asyncio.run(_serve(cfg))


if __name__ == "__main__":
    main()
