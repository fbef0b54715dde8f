"""Level rules: from raw per-request records to a ``LevelResult`` (pure, no I/O).

``invalid``: any request errored, or its token counts differ from the request
(the counts received are named in the reason, never averaged in). Flags on a
level: ``noisy`` (rounds differ by more than the workload's band), ``client_bound``
(event-loop lag p99 over ``LAG_LIMIT_MS`` or loop-thread CPU over ``CPU_LIMIT``),
``usage_reconciled`` (chunks counted differ from ``usage``), ``unpaced`` (sim at
time scale 0). Latencies are pooled over rounds; throughput is the median round's.
"""

from __future__ import annotations

from actors.engines.base import MetricsSample
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

__all__ = ["aggregate_level", "counts_match", "CHAT_TEMPLATE_MAX_OVERHEAD", "LAG_LIMIT_MS",
           "CPU_LIMIT"]

LAG_LIMIT_MS = 5.0
CPU_LIMIT = 0.90
#: Tokens a chat template may add around the user's message (role headers, default system
#: prompt); ``usage.prompt_tokens`` of a chat request must lie in [N, N + this].
CHAT_TEMPLATE_MAX_OVERHEAD = 64


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
            decode_tok_s_per_req_p50=_per_s(median(tpots), scale),
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


def _per_s(seconds: float | None, scale: float) -> float | None:
    """Tokens per engine second from a real-time gap; None when the gap is 0 (every token
    arrived in one read: nothing to divide)."""
    return None if not seconds or seconds <= 0 else scale / seconds


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
