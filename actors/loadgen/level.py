"""Run one concurrency level: warm-up, rounds, /metrics sampling, self-check, aggregation.

Closed loop: exactly C requests in flight; each worker starts its next request
when one ends, until the round's request count is issued. Open loop
(``request_rate``): Poisson arrivals, at most C in flight.
"""

from __future__ import annotations

import asyncio
import random
import resource
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from actors.engines.base import MetricsSample
from actors.loadgen.client import build_body, stream_request
from actors.loadgen.prompts import PromptFactory
from actors.loadgen.results import (
    ClientHealth,
    LevelMetrics,
    LevelResult,
    RequestRecord,
    RoundResult,
    ServerObservation,
)
from actors.loadgen.stats import median, percentile, spread
from orchestrator.spec import Workload

__all__ = ["LevelRunner", "aggregate_level", "counts_match", "CHAT_TEMPLATE_MAX_OVERHEAD"]

LAG_LIMIT_MS = 5.0
CPU_LIMIT = 0.90
#: Tokens a chat template may add around the user's message (role headers, default system
#: prompt); ``usage.prompt_tokens`` of a chat request must lie in [N, N + this].
CHAT_TEMPLATE_MAX_OVERHEAD = 64


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _LagMonitor:
    """Measures event-loop lag: how late a 5 ms sleep wakes up."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.lags.append(time.perf_counter() - t - 0.005)

    def __enter__(self) -> _LagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()


class LevelRunner:
    """Runs levels against one server. ``parse_metrics`` is the engine adapter's parser."""

    def __init__(self, base_url: str, model: str, workload: Workload, prompts: PromptFactory,
                 parse_metrics: Callable[[str, float], MetricsSample] | None = None,
                 metrics_path: str = "/metrics", time_scale: float = 1.0,
                 api_key: str | None = None, per_chunk_usage: bool = True):
        self.base_url = base_url.rstrip("/")
        self.model, self.workload, self.prompts = model, workload, prompts
        self.parse_metrics, self.metrics_path = parse_metrics, metrics_path
        self.time_scale = time_scale
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.per_chunk_usage = per_chunk_usage
        path = "/v1/chat/completions" if workload.api == "chat" else "/v1/completions"
        self.url = self.base_url + path

    def _session(self, concurrency: int) -> aiohttp.ClientSession:
        w = self.workload
        timeout = aiohttp.ClientTimeout(total=None, connect=w.connect_timeout_s,
                                        sock_read=w.stall_timeout_s)
        conn = aiohttp.TCPConnector(limit=concurrency + 8, force_close=False)
        return aiohttp.ClientSession(timeout=timeout, connector=conn)

    def _body(self, index: int, salt: int) -> dict[str, Any]:
        w = self.workload
        prompt = (self.prompts.make_text(index, salt) if w.api == "chat"
                  else self.prompts.make(index, salt))
        return build_body(self.model, w.api, prompt, w.output_tokens, self.per_chunk_usage)

    async def _issue(self, session: aiohttp.ClientSession, concurrency: int, n: int, rnd: int,
                     salt: int, out: list[RequestRecord]) -> float:
        """Run ``n`` requests with ``concurrency`` in flight; returns the wall time."""
        counter = iter(range(n))
        rate = self.workload.request_rate
        rng = random.Random(f"{self.workload.seed}-{salt}-{rnd}")
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            rec = RequestRecord(index=i, round=rnd)
            out.append(rec)
            headers = dict(self.headers, **{"X-Request-Id": f"{salt}-{rnd}-{i}"})
            await stream_request(session, self.url, self._body(i, salt * 100 + rnd + 1), rec,
                                 headers)

        async def worker() -> None:
            for i in counter:
                await one(i)

        t0 = time.perf_counter()
        if rate is None:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
        else:
            async def paced(i: int) -> None:
                async with sem:
                    await one(i)
            tasks = []
            for i in range(n):
                tasks.append(asyncio.ensure_future(paced(i)))
                # rate is in engine time: real inter-arrival = time_scale / rate on average
                await asyncio.sleep(rng.expovariate(rate / self.time_scale)
                                    if self.time_scale else 0)
            await asyncio.gather(*tasks)
        return time.perf_counter() - t0

    async def _sample_metrics(self, session: aiohttp.ClientSession,
                              samples: list[MetricsSample]) -> None:
        if self.parse_metrics is None:
            return
        url = self.base_url + self.metrics_path
        while True:
            try:
                async with session.get(url, headers=self.headers) as resp:
                    text = await resp.text()
                samples.append(self.parse_metrics(text, time.perf_counter()))
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.25)

    async def run_level(self, concurrency: int, level_index: int = 0) -> LevelResult:
        w = self.workload
        records: list[RequestRecord] = []
        self.last_records = records  # kept for the per-request artifact
        samples: list[MetricsSample] = []
        rounds: list[tuple[int, float]] = []
        t_wall = time.perf_counter()
        async with self._session(concurrency) as session:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as msession:
                sampler = asyncio.create_task(self._sample_metrics(msession, samples))
                try:
                    with _LagMonitor() as lag:
                        cpu0, t0 = _cpu_seconds(), time.perf_counter()
                        work = self._rounds(session, concurrency, level_index, records, rounds)
                        await asyncio.wait_for(work, timeout=w.level_timeout_s)
                        cpu = (_cpu_seconds() - cpu0) / max(time.perf_counter() - t0, 1e-9)
                except asyncio.TimeoutError:
                    return LevelResult(concurrency=concurrency, status="invalid",
                                       reason=f"level deadline of {w.level_timeout_s:.0f} s "
                                              "passed (server hung?)",
                                       errors={"level_timeout": 1}, time_scale=self.time_scale,
                                       requests=len(records), wall_s=time.perf_counter() - t_wall)
                finally:
                    sampler.cancel()
        health = ClientHealth(loop_lag_p99_ms=1e3 * (percentile(lag.lags, 99) or 0.0),
                              cpu_frac=cpu)
        result = aggregate_level(concurrency, w, records, rounds, samples, health,
                                 self.time_scale)
        return result.model_copy(update={"wall_s": time.perf_counter() - t_wall})

    async def _open_connections(self, session: aiohttp.ClientSession, concurrency: int,
                                level: int) -> None:
        """C one-token requests at once, so every round starts on open keep-alive connections."""
        async def one(i: int) -> None:
            body = self._body(i, level * 1000 + 998)
            body.update(max_tokens=1, min_tokens=1)
            await stream_request(session, self.url, body, RequestRecord(index=i, round=-2),
                                 self.headers)
        await asyncio.gather(*(one(i) for i in range(concurrency)))

    async def _rounds(self, session: aiohttp.ClientSession, concurrency: int, level: int,
                      records: list[RequestRecord], rounds: list[tuple[int, float]]) -> None:
        w = self.workload
        await self._open_connections(session, concurrency, level)
        if w.warmup_requests:
            warm: list[RequestRecord] = []
            await self._issue(session, concurrency, max(w.warmup_requests, 1), -1,
                              level * 1000 + 999, warm)
        for rnd in range(w.rounds_for(concurrency)):
            wall = await self._issue(session, concurrency, w.requests_for(concurrency), rnd,
                                     level * 1000, records)
            rounds.append((rnd, wall))
            if any(not r.ok for r in records if r.round == rnd):
                break  # errors invalidate the level: do not keep hammering a broken server


def counts_match(w: Workload, prompt_tokens: int | None, completion_tokens: int | None) -> bool:
    """Did the server do the work asked? Exact for completions (token-id prompts); for chat
    the template adds tokens, so ``usage.prompt_tokens`` may exceed the content by up to
    ``CHAT_TEMPLATE_MAX_OVERHEAD``."""
    if completion_tokens != w.output_tokens or prompt_tokens is None:
        return False
    if w.api == "chat":
        return 0 <= prompt_tokens - w.prompt_tokens <= CHAT_TEMPLATE_MAX_OVERHEAD
    return prompt_tokens == w.prompt_tokens


def _request_itls(rec: RequestRecord) -> list[float]:
    out = []
    for j in range(1, len(rec.arrivals)):
        gap = (rec.arrivals[j] - rec.arrivals[j - 1]) / rec.counts[j]
        out.extend([gap] * rec.counts[j])
    return out


def aggregate_level(concurrency: int, w: Workload, records: list[RequestRecord],
                    rounds: list[tuple[int, float]], samples: list[MetricsSample],
                    health: ClientHealth, time_scale: float = 1.0) -> LevelResult:
    """Turn raw records into a ``LevelResult`` (validity, flags, engine-time metrics)."""
    scale = time_scale if time_scale > 0 else 1.0
    errors: dict[str, int] = {}
    seen: dict[tuple[int | None, int | None], int] = {}  # (prompt, completion) -> requests
    reconciled = False
    for r in records:
        if r.error:
            errors[r.error] = errors.get(r.error, 0) + 1
            continue
        if not counts_match(w, r.prompt_tokens, r.completion_tokens):
            key = (r.prompt_tokens, r.completion_tokens)
            seen[key] = seen.get(key, 0) + 1
        if r.chunk_tokens != r.completion_tokens:
            reconciled = True
    mismatches = sum(seen.values())
    flags: list[str] = []
    obs = _observe(samples)
    reason = ""
    if errors or mismatches or not records:
        parts = [f"{n} x {k}" for k, n in sorted(errors.items())]
        if mismatches:
            want = (f"{w.prompt_tokens}..{w.prompt_tokens + CHAT_TEMPLATE_MAX_OVERHEAD}"
                    if w.api == "chat" else str(w.prompt_tokens))
            got = ", ".join(f"{n} x {p} in / {c} out" for (p, c), n in
                            sorted(seen.items(), key=lambda kv: -kv[1])[:4])
            parts.append(f"{mismatches} request(s) with token counts other than "
                         f"{want} in / {w.output_tokens} out (got {got})")
        reason = "; ".join(parts) or "no requests completed"
        first_err = next((r.error_detail for r in records if r.error_detail), "")
        if first_err:
            reason += f" (first: {first_err[:160]})"
    round_results = []
    for rnd, wall in rounds:
        out_tok = sum(r.completion_tokens or 0 for r in records if r.round == rnd and r.ok)
        n = sum(1 for r in records if r.round == rnd)
        round_results.append(RoundResult(round=rnd, requests=n, duration_s=wall / scale,
                                         output_tok_s=out_tok / wall * scale if wall else 0.0))
    ok = [r for r in records if r.ok and r.first_token is not None]
    metrics = None
    if round_results and ok:
        tputs = [rr.output_tok_s for rr in round_results]
        mid = sorted(round_results, key=lambda rr: rr.output_tok_s)[len(round_results) // 2]
        mid_recs = [r for r in records if r.round == mid.round and r.ok]
        wall = mid.duration_s
        ms = 1e3 / scale
        itls = [x for r in ok for x in _request_itls(r)]
        tpots = [(r.arrivals[-1] - r.first_token) / (r.completion_tokens - 1)
                 for r in ok if r.completion_tokens and r.completion_tokens > 1]
        metrics = LevelMetrics(
            output_tok_s=mid.output_tok_s,
            total_tok_s=sum((r.prompt_tokens or 0) + (r.completion_tokens or 0)
                            for r in mid_recs) / wall if wall else 0.0,
            requests_s=len(mid_recs) / wall if wall else 0.0,
            ttft_p50_ms=_ms(percentile([r.first_token - r.start for r in ok], 50), ms),
            ttft_p90_ms=_ms(percentile([r.first_token - r.start for r in ok], 90), ms),
            ttft_p99_ms=_ms(percentile([r.first_token - r.start for r in ok], 99), ms),
            itl_p50_ms=_ms(percentile(itls, 50), ms), itl_p99_ms=_ms(percentile(itls, 99), ms),
            tpot_p50_ms=_ms(median(tpots), ms),
            e2e_p50_ms=_ms(percentile([r.end - r.start for r in ok], 50), ms),
            e2e_p99_ms=_ms(percentile([r.end - r.start for r in ok], 99), ms),
            decode_tok_s_per_req_p50=(1e3 / _ms(median(tpots), ms)) if tpots else None,
            round_spread=spread(tputs))
        if metrics.round_spread > w.noise_band:
            flags.append("noisy")
    if health.loop_lag_p99_ms > LAG_LIMIT_MS or health.cpu_frac > CPU_LIMIT:
        flags.append("client_bound")
    if reconciled:
        flags.append("usage_reconciled")
    if time_scale == 0:
        flags.append("unpaced")
    return LevelResult(
        concurrency=concurrency, status="invalid" if reason else "valid", flags=flags,
        reason=reason, requests=len(records), metrics=metrics, rounds=round_results,
        errors=errors, count_mismatches=mismatches, server=obs, client=health,
        time_scale=time_scale)


def _ms(seconds: float | None, factor: float) -> float | None:
    return None if seconds is None else seconds * factor


def _observe(samples: list[MetricsSample]) -> ServerObservation:
    if not samples:
        return ServerObservation()

    def vals(attr: str) -> list[float]:
        return [getattr(s, attr) for s in samples if getattr(s, attr) is not None]

    run, wait, kv, pre = vals("running"), vals("waiting"), vals("kv_usage"), \
        vals("preemptions_total")
    last = samples[-1]
    return ServerObservation(
        samples=len(samples), running_max=max(run) if run else None,
        running_p50=median(run), waiting_max=max(wait) if wait else None,
        waiting_p50=median(wait), kv_usage_max=max(kv) if kv else None,
        preemptions=(pre[-1] - pre[0]) if len(pre) >= 2 else None,
        block_size=last.block_size, num_blocks=last.num_blocks)
