"""Run one level: warm-up, rounds, /metrics sampling, self-check, aggregation.

A level is a ``Level`` (``actors.contracts.traffic``). Closed loop (``c=N``): exactly N
requests in flight; each worker starts its next request when one ends, until the round's
request count is issued (the fixed shape's older ``request_rate``: Poisson arrivals, at
most N in flight). Open loop (``rate=R/s``, ``trace xS``): each request sent at its time in
a schedule fixed by the seed (``schedule``), at most ``workload.max_in_flight`` in flight.
With a request list (``RequestPlan``) each round sends the whole list, each request with its
own prompt and exact output length.

Shards: with ``shards`` > 1 the level's streams, requests and arrival rate are split
over that many processes on this node (``shards``: spawned per level, each with its own
loop and connections, in step at every round). A round's wall time runs from the first
shard's start to the last shard's end; the client self-check takes the worst shard.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from actors.contracts.config import Workload
from actors.contracts.metrics import ClientProfile, MetricsFormat, MetricsSample, read_sample
from actors.contracts.results import ClientHealth, LevelResult
from actors.contracts.slo import SLO
from actors.contracts.states import LevelStatus
from actors.contracts.traffic import Level, LevelKind, RequestPlan, arrival_offsets
from actors.loadgen.aggregate import (
    CHAT_TEMPLATE_MAX_OVERHEAD,
    CPU_LIMIT,
    LAG_LIMIT_MS,
    aggregate_level,
)
from actors.loadgen.client import build_body, stream_request
from actors.loadgen.hostload import HostMeter
from actors.loadgen.pool import PASS_SIZE, ConnectionPool, stream_request_lean
from actors.loadgen.prompts import PromptFactory
from actors.loadgen.proof import prove
from actors.loadgen.records import RequestRecord
from actors.loadgen.selfcheck import LagMonitor, cpu_seconds
from actors.loadgen.shards import ShardOutcome, Sync, run_sharded, share
from actors.loadgen.stats import percentile

__all__ = ["LevelRunner", "shard_main", "aggregate_level", "CHAT_TEMPLATE_MAX_OVERHEAD",
           "LAG_LIMIT_MS", "CPU_LIMIT", "TRANSPORTS"]

#: connections an open-loop level opens before its first round
OPEN_LOOP_CONNECTIONS = 16

#: Client transports: ``lean`` (``pool``, ``http1``: raw sockets read from one epoll set, the
#: faster) and ``aiohttp``.
TRANSPORTS = ("lean", "aiohttp")


class LevelRunner:
    """Runs levels against one server. ``client`` is its engine's profile (metrics path and
    names, per-chunk usage, whether to ask for each chunk's token ids;
    ``actors.contracts.metrics``; None: no metrics read); ``transport`` picks the HTTP
    client, ``shards`` the processes a level is spread over, ``coalesce_s`` the lean
    transport's read coalescing when busy (0: none), ``pass_size`` the most sockets it reads
    in one loop callback (smaller: shorter loop turns, more CPU). ``tokenizer`` (the model's
    ``tokenizers.Tokenizer``) counts the streamed text for the count proof. An ``https://``
    server is measured with the aiohttp transport (the lean one speaks plain HTTP)."""

    def __init__(self, base_url: str, model: str, workload: Workload, prompts: PromptFactory,
                 client: ClientProfile | None = None, time_scale: float = 1.0,
                 api_key: str | None = None, transport: str = "lean", shards: int = 1,
                 coalesce_s: float = 0.001, pass_size: int = PASS_SIZE,
                 tokenizer: Any | None = None, slo: SLO | None = None,
                 plan: RequestPlan | None = None):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, not {transport!r}")
        if base_url.startswith("https://"):
            transport = "aiohttp"
        if shards < 1:
            raise ValueError("shards must be at least 1")
        if pass_size < 1:
            raise ValueError("pass_size must be at least 1")
        client = client if client is not None else ClientProfile(
            metrics_format=MetricsFormat.NONE)
        self._init = dict(base_url=base_url, model=model, workload=workload, prompts=prompts,
                          client=client, time_scale=time_scale, api_key=api_key,
                          transport=transport, coalesce_s=coalesce_s, pass_size=pass_size,
                          tokenizer=tokenizer, plan=plan)
        self.transport, self.shards, self.coalesce_s = transport, shards, coalesce_s
        self.pass_size = pass_size
        self.base_url = base_url.rstrip("/")
        self.model, self.workload, self.prompts = model, workload, prompts
        self.client = client
        self.metrics_path = client.metrics_path
        self.time_scale = time_scale
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.per_chunk_usage, self.token_ids = client.per_chunk_usage, client.token_ids
        self.tokenizer = tokenizer
        self.path = "/v1/chat/completions" if workload.api == "chat" else "/v1/completions"
        self.url = self.base_url + self.path
        self.last_records: list[RequestRecord] = []
        self.slo = slo  # goodput's per-request limits (aggregation only, in this process)
        self.plan = plan  # the request list (None: the workload's fixed shape)

    # -- requests ---------------------------------------------------------------------------
    def _session(self, concurrency: int) -> aiohttp.ClientSession | ConnectionPool:
        w = self.workload
        if self.transport == "lean":
            return ConnectionPool(self.base_url, w.connect_timeout_s, w.stall_timeout_s,
                                  coalesce_s=self.coalesce_s, pass_size=self.pass_size)
        timeout = aiohttp.ClientTimeout(total=None, connect=w.connect_timeout_s,
                                        sock_read=w.stall_timeout_s)
        conn = aiohttp.TCPConnector(limit=concurrency + 8, force_close=False)
        return aiohttp.ClientSession(timeout=timeout, connector=conn)

    async def _send(self, session: aiohttp.ClientSession | ConnectionPool,
                    body: dict[str, Any] | bytes, rec: RequestRecord,
                    headers: dict[str, str]) -> None:
        if isinstance(session, ConnectionPool):
            await stream_request_lean(session, self.path, body, rec, headers)
        else:
            if isinstance(body, bytes):  # _prepare builds bytes for the lean pool only
                raise TypeError("a prebuilt request (bytes) needs the lean transport")
            await stream_request(session, self.url, body, rec, headers)

    def _body(self, index: int, salt: int) -> dict[str, Any]:
        w = self.workload
        if self.plan is not None:
            n = len(self.plan.requests)
            req = self.plan.requests[index % n]
            salt += (index // n) * 7919  # a cycled list's next pass: prompts of its own
            return build_body(self.model, w.api,
                              self.prompts.planned(req, salt, w.api == "chat"),
                              req.output_tokens, self.per_chunk_usage, self.token_ids)
        prompt = (self.prompts.make_text(index, salt) if w.api == "chat"
                  else self.prompts.make(index, salt))
        return build_body(self.model, w.api, prompt, w.output_tokens, self.per_chunk_usage,
                          self.token_ids)

    def _targets(self, rec: RequestRecord) -> RequestRecord:
        """``rec`` with its request's own targets, from the request list."""
        if self.plan is not None:
            req = self.plan.requests[rec.index % len(self.plan.requests)]
            rec.want_output = req.output_tokens
            rec.text_prompt = req.text
            rec.want_prompt = None if req.text else req.prompt_tokens
        return rec

    def level_requests(self, lv: Level) -> int:
        """Requests per round at ``lv`` (``Workload.requests_at``)."""
        return self.workload.requests_at(lv, len(self.plan.requests) if self.plan else None)

    def schedule(self, lv: Level, n: int, rnd: int) -> list[float] | None:
        """Send offsets (wall seconds from the round's start) of requests 0..n-1 at an
        open-loop level (``traffic.arrival_offsets``, stretched by the sim's time scale);
        None for a closed loop."""
        w = self.workload
        due = arrival_offsets(lv, n, rnd, w.seed, w.burstiness, self.plan)
        return None if due is None else [t * self.time_scale for t in due]

    def offered_rps(self, lv: Level, n: int) -> float | None:
        """The schedule's request rate (engine time)."""
        if lv.kind is LevelKind.RATE:
            return lv.value
        if lv.kind is LevelKind.TRACE and self.plan is not None and n > 1:
            span = max(r.at_s or 0.0 for r in self.plan.requests[:n])
            return (n - 1) / span * lv.value if span > 0 else None
        return None

    def _prepare(self, session: Any, i: int, rnd: int,
                 salt: int) -> tuple[dict[str, Any] | bytes, dict[str, str]]:
        """Request ``i``'s body (the whole request bytes for the lean transport) and headers."""
        headers = dict(self.headers, **{"X-Request-Id": f"{salt}-{rnd}-{i}"})
        body = self._body(i, salt * 100 + rnd + 1)
        if isinstance(session, ConnectionPool):
            return session.request_bytes(self.path, body, headers), headers
        return body, headers

    def _first_wave(self, session: Any, concurrency: int, indices: list[int], rnd: int,
                    salt: int) -> dict[int, tuple[dict[str, Any] | bytes, dict[str, str]]]:
        """The first 2 x C requests, built ahead, so that building prompts (about a ms each
        for long prompts) does not spread out a burst the server should see at once; later
        ones are built as they start (staggered anyway)."""
        return {i: self._prepare(session, i, rnd, salt) for i in indices[:2 * concurrency]}

    async def _issue(self, session: Any, concurrency: int, indices: list[int], rnd: int,
                     salt: int, out: list[RequestRecord], rate: float | None = None,
                     ready: dict[int, tuple] | None = None,
                     due: list[float] | None = None) -> None:
        """Run the requests ``indices`` with ``concurrency`` in flight (closed loop), or
        arriving at ``rate`` per second of engine time, or each at its ``due`` offset (wall
        seconds from now, by index), at most ``concurrency`` in flight either way.
        ``ready``: requests already built (``_first_wave``); by default built here."""
        counter = iter(indices)
        rng = random.Random(f"{self.workload.seed}-{salt}-{rnd}-{indices[:1]}")
        if ready is None:
            ready = self._first_wave(session, concurrency, indices, rnd, salt)

        def prepare(i: int) -> tuple[dict[str, Any] | bytes, dict[str, str]]:
            return self._prepare(session, i, rnd, salt)

        async def one(i: int, at: float | None = None) -> None:
            rec = self._targets(RequestRecord(index=i, round=rnd, due=at))
            out.append(rec)
            body, headers = ready.pop(i, None) or prepare(i)
            await self._send(session, body, rec, headers)

        async def worker() -> None:
            for i in counter:
                await one(i)

        if due is not None:
            await self._scheduled(one, concurrency, indices, due)
            return
        if rate is None:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(indices)))))
            return
        sem = asyncio.Semaphore(concurrency)

        async def paced(i: int) -> None:
            async with sem:
                await one(i)
        tasks = []
        at = time.perf_counter()
        for i in indices:
            tasks.append(asyncio.ensure_future(paced(i)))
            # rate is in engine time: real inter-arrival = time_scale / rate on average;
            # arrivals follow an absolute schedule, so loop delays do not lower the rate
            at += rng.expovariate(rate / self.time_scale) if self.time_scale else 0.0
            await asyncio.sleep(max(at - time.perf_counter(), 0.0))
        await asyncio.gather(*tasks)

    @staticmethod
    async def _scheduled(one: Callable[[int, float], Awaitable[None]], cap: int,
                         indices: list[int], due: list[float]) -> None:
        """Send each request at ``t0 + due[i]`` (an absolute schedule: a slow turn of the
        loop delays one send, not the rest), at most ``cap`` in flight: an arrival past the
        cap waits, and its record's ``due`` shows how late it went."""
        sem = asyncio.Semaphore(cap)
        t0 = time.perf_counter()

        async def paced(i: int, at: float) -> None:
            async with sem:
                await one(i, at)
        tasks = []
        for i in sorted(indices, key=lambda j: due[j]):
            at = t0 + due[i]
            wait = at - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.ensure_future(paced(i, at)))
        await asyncio.gather(*tasks)

    async def _open_connections(self, session: Any, concurrency: int, level: int,
                                shard: int) -> list[RequestRecord]:
        """C one-token requests at once, so every round starts on open keep-alive connections."""
        recs = [RequestRecord(index=shard * 100_000 + i, round=-2) for i in range(concurrency)]

        async def one(rec: RequestRecord) -> None:
            body = self._body(rec.index, level * 1000 + 998)
            body.update(max_tokens=1, min_tokens=1)
            await self._send(session, body, rec, self.headers)
        await asyncio.gather(*(one(r) for r in recs))
        return recs

    # -- one shard --------------------------------------------------------------------------
    async def run_shard(self, level: Level | int, level_index: int, shard: int = 0,
                        shards: int = 1, sync: Sync | None = None,
                        out: ShardOutcome | None = None) -> ShardOutcome:
        """This process's share of a level: open connections, warm up (discarded unless it
        fails), then the measured rounds."""
        w = self.workload
        lv = level if isinstance(level, Level) else Level.of(level)
        cap = w.in_flight_cap(lv)
        res = out if out is not None else ShardOutcome()
        c = share(cap, shard, shards)
        rate = (w.request_rate / shards if w.request_rate and
                lv.kind is LevelKind.CONCURRENCY else None)
        n = self.level_requests(lv)
        # everything alive now (a Ray worker holds a lot) is moved out of the collector's
        # way, so that the garbage of a million reads does not trigger full passes over it
        gc.freeze()
        try:
            await self._shard(c, w.rounds_for(cap), rate, n, level_index, shard, shards,
                              sync, res, lv)
        finally:
            gc.unfreeze()
        for r in res.records:  # the count proof, after the clock (and the self-check)
            if r.round >= 0 and r.ok:
                prove(r, self.tokenizer)
            r.body = []
        return res

    async def _shard(self, c: int, rounds: int, rate: float | None, n: int, level: int,
                     shard: int, shards: int, sync: Sync | None, res: ShardOutcome,
                     lv: Level | None = None) -> ShardOutcome:
        w = self.workload
        async with self._session(c) as session:
            res.reader = ("aiohttp" if not isinstance(session, ConnectionPool)
                          else "native" if session.native is not None else "python")
            with LagMonitor() as lag:
                res.lags = lag.lags
                cpu0, t0 = cpu_seconds(), time.perf_counter()
                kept0 = 0
                try:
                    # open loop: a few connections ahead (the pool opens more as sends need
                    # them); a wave as wide as the cap queued hundreds of one-token requests
                    # in vLLM before each level (seen on the H200: 239 waiting)
                    opening = min(c, n) if lv is None or lv.kind is LevelKind.CONCURRENCY \
                        else min(c, n, OPEN_LOOP_CONNECTIONS)
                    warm = await self._open_connections(session, opening, level, shard)
                    if w.warmup_requests:
                        await self._issue(session, c,
                                          list(range(shard, w.warmup_requests, shards)), -1,
                                          level * 1000 + 999, warm)
                    failed = [r for r in warm if not r.ok]
                    stop = await sync.agree(bool(failed)) if sync else bool(failed)
                    if failed:  # a server that fails before measuring: report, measure nothing
                        res.records.extend(failed)
                    # the self-check covers the measured rounds, not connecting and warming up
                    lag.lags.clear()
                    cpu0, t0 = cpu_seconds(), time.perf_counter()
                    kept0 = getattr(session, "kept_reads", 0)
                    for rnd in range(0 if stop else rounds):
                        mine = list(range(shard, n, shards))
                        due = self.schedule(lv, n, rnd) if lv is not None else None
                        with lag.paused():  # built before the round's clock starts
                            ready = self._first_wave(session, min(c, 64) if due else c,
                                                     mine, rnd, level * 1000)
                        ts = time.perf_counter()
                        await self._issue(session, c, mine, rnd, level * 1000, res.records,
                                          rate, ready, due)
                        res.rounds.append((rnd, ts, time.perf_counter()))
                        bad = any(not r.ok for r in res.records if r.round == rnd)
                        if await sync.agree(bad) if sync else bad:
                            break  # errors invalidate the level: stop hammering a broken server
                finally:
                    res.cpu_s = cpu_seconds() - cpu0
                    res.busy_s = time.perf_counter() - t0
                    res.reads_kept = getattr(session, "kept_reads", 0) - kept0
        return res

    # -- a level ----------------------------------------------------------------------------
    async def _sample_metrics(self, session: aiohttp.ClientSession,
                              samples: list[MetricsSample]) -> None:
        t0 = time.perf_counter()
        while True:
            await self._sample_once(session, samples)
            await asyncio.sleep(sample_interval(time.perf_counter() - t0))

    async def _sample_once(self, session: aiohttp.ClientSession,
                           samples: list[MetricsSample]) -> None:
        if self.client.metrics_format is MetricsFormat.NONE:
            return
        try:
            async with session.get(self.base_url + self.metrics_path,
                                   headers=self.headers) as resp:
                text = await resp.text()
            samples.append(read_sample(text, time.perf_counter(), self.client))
        except (TimeoutError, aiohttp.ClientError):
            pass

    async def run_level(self, level: Level | int, level_index: int = 0) -> LevelResult:
        w = self.workload
        lv = level if isinstance(level, Level) else Level.of(level)
        concurrency = w.in_flight_cap(lv)
        shards = max(1, min(self.shards, concurrency))
        outs: list[ShardOutcome] = []
        samples: list[MetricsSample] = []
        t_wall = time.perf_counter()
        timed_out = False
        meter = HostMeter()
        meter.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as msession:
            sampler = asyncio.create_task(self._sample_metrics(msession, samples))
            work: Awaitable[object]
            try:
                if shards == 1:
                    outs.append(ShardOutcome())
                    work = self.run_shard(lv, level_index, out=outs[0])
                else:
                    work = run_sharded(shard_main, self._init, lv, level_index,
                                       shards, w.level_timeout_s, outs)
                await asyncio.wait_for(work, timeout=w.level_timeout_s)
            except TimeoutError:
                timed_out = True
            finally:
                sampler.cancel()
            if not timed_out:  # the counters as the level ended (the sampler's last is stale)
                await self._sample_once(msession, samples)
        host_load = meter.stop()
        records = [r for o in outs for r in o.records]
        self.last_records = records  # kept for the per-request artifact
        if timed_out:
            return LevelResult(concurrency=concurrency, level=lv, status=LevelStatus.INVALID,
                               reason=f"level deadline of {w.level_timeout_s:.0f} s "
                                      "passed (server hung?)",
                               errors={"level_timeout": 1}, time_scale=self.time_scale,
                               requests=len(records), wall_s=time.perf_counter() - t_wall,
                               host_load=host_load)
        broken = [o.error for o in outs if o.error]
        if broken:
            return LevelResult(concurrency=concurrency, level=lv, status=LevelStatus.INVALID,
                               reason=f"client shard failed: {broken[0][:300]}",
                               errors={"client_error": len(broken)}, time_scale=self.time_scale,
                               requests=len(records), wall_s=time.perf_counter() - t_wall,
                               host_load=host_load)
        rounds = []
        for rnd in sorted({r for o in outs for r, _, _ in o.rounds}):
            spans = [(s, e) for o in outs for r, s, e in o.rounds if r == rnd]
            rounds.append((rnd, max(e for _, e in spans) - min(s for s, _ in spans)))
        health = ClientHealth(
            loop_lag_p99_ms=max(1e3 * (percentile(o.lags, 99) or 0.0) for o in outs),
            cpu_frac=max(o.cpu_s / o.busy_s if o.busy_s > 0 else 0.0 for o in outs),
            shards=shards, reader=outs[0].reader, reads_kept=sum(o.reads_kept for o in outs),
            events_scanned=sum(r.scanned_events for r in records if r.round >= 0),
            events_json=sum(r.parsed_events for r in records if r.round >= 0))
        result = aggregate_level(concurrency, w, records, rounds, samples, health,
                                 self.time_scale, self.slo, lv,
                                 self.offered_rps(lv, self.level_requests(lv)))
        return result.model_copy(update={"wall_s": time.perf_counter() - t_wall,
                                          "host_load": host_load})


def sample_interval(elapsed_s: float) -> float:
    """Seconds to the next /metrics scrape of a level ``elapsed_s`` old: a tenth of its age
    between 5 ms and 250 ms, so a level of any length gets about ten scrapes or more (a
    sped-up sim's level can be over in 50 ms: one scrape at its start saw nothing run)."""
    return min(0.25, max(0.005, elapsed_s / 10))


def shard_main(init: dict[str, Any], concurrency: Level | int, level: int, shard: int,
               shards: int, barrier: Any, flag: Any, writer: Any, timeout: float) -> None:
    """Entry point of a shard process: run its share, send back a ``ShardOutcome``."""
    try:
        runner = LevelRunner(**init)
        out = asyncio.run(runner.run_shard(concurrency, level, shard, shards,
                                           Sync(barrier, flag, timeout)))
    except BaseException as err:  # noqa: BLE001 - reported to the parent, never lost
        barrier.abort()
        out = ShardOutcome(error=f"shard {shard}: {type(err).__name__}: {err}")
    writer.send(out)
    writer.close()
