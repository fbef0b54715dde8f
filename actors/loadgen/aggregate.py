"""Level rules: from raw per-request records to a ``LevelResult`` (pure, no I/O).

``invalid``: any request errored, or its output count is not proven to be the one
asked for (``proof.judge``: exact sources disagreeing with each other are a
``usage_mismatch``, agreeing on another count a ``count_mismatch``; every count
is named in the reason, never averaged in), or its usage reports another prompt
length. Flags on a valid level: ``noisy`` (rounds differ by more than the
workload's band), ``client_bound`` (event-loop lag p99 over ``LAG_LIMIT_MS`` or
loop-thread CPU over ``CPU_LIMIT``), ``unverified`` (some request's count rests on
the server's usage alone), ``itl_spread`` (per-chunk counts unknown: ITL spreads
each request's count evenly over its chunks), ``unpaced`` (sim at time scale 0).

Throughput, total tokens/s and requests/s are each the median over rounds (the mean
of the middle two for an even count); every round is kept. Latencies are pooled over
rounds. ITL is per token: a chunk of k tokens after a gap g counts as k gaps of g/k.
Goodput (only with an ``SLO`` that sets a limit) is the median over rounds of the output
tokens/s of the requests that met every limit on their own (``SLO.met_by``); ``slo_met`` is
the share of measured requests that did.
"""

from __future__ import annotations

from operator import sub

from actors.contracts.config import Workload
from actors.contracts.metrics import MetricsSample
from actors.contracts.results import (
    ClientHealth,
    LevelMetrics,
    LevelResult,
    OpenLoop,
    RoundResult,
    ServerObservation,
)
from actors.contracts.slo import SLO
from actors.contracts.states import LevelFlag, LevelStatus
from actors.contracts.traffic import Level, LevelKind
from actors.loadgen.proof import Judgement, Verdict, judge, prove
from actors.loadgen.records import RequestRecord
from actors.loadgen.stats import median, percentile, percentiles, spread

__all__ = ["aggregate_level", "prompt_matches", "judge_request", "request_itls",
           "CHAT_TEMPLATE_MAX_OVERHEAD", "LAG_LIMIT_MS", "CPU_LIMIT"]

LAG_LIMIT_MS = 5.0
CPU_LIMIT = 0.90
#: Tokens a chat template may add around the user's message (role headers, default system
#: prompt); ``usage.prompt_tokens`` of a chat request must lie in [N, N + this].
CHAT_TEMPLATE_MAX_OVERHEAD = 64


def prompt_matches(w: Workload, prompt_tokens: int | None, want: int | None = None) -> bool:
    """Did the server take the prompt asked (``want`` tokens; None: the workload's)? Exact
    for completions (token-id prompts); for chat the template adds up to
    ``CHAT_TEMPLATE_MAX_OVERHEAD`` tokens. A server that does not report the prompt length
    (no usage at all) is not contradicted."""
    if prompt_tokens is None:
        return True
    asked = w.prompt_tokens if want is None else want
    if w.api == "chat":
        return 0 <= prompt_tokens - asked <= CHAT_TEMPLATE_MAX_OVERHEAD
    return prompt_tokens == asked


def judge_request(w: Workload, rec: RequestRecord) -> Judgement:
    """The proof's verdict on one completed request, against its own targets (its prompt
    length included, unless it was text: its count is the server's tokenizer's)."""
    proof = rec.proof if rec.proof is not None else prove(rec)
    j = judge(proof, rec.want_output or w.output_tokens)
    if j.verdict in (Verdict.VERIFIED, Verdict.UNVERIFIED) and not rec.text_prompt and \
            not prompt_matches(w, rec.prompt_tokens, rec.want_prompt):
        asked = w.prompt_tokens if rec.want_prompt is None else rec.want_prompt
        want = (f"{asked}..{asked + CHAT_TEMPLATE_MAX_OVERHEAD}"
                if w.api == "chat" else str(asked))
        return Judgement(Verdict.COUNT_MISMATCH, j.count, j.source,
                         f"prompt {rec.prompt_tokens} tokens (asked {want})")
    return j


def request_itls(rec: RequestRecord, total: int | None = None) -> list[float]:
    """Per-token gaps of one request. With ``rec.counts_known`` each read's gap is split
    over the tokens it brought; otherwise ``total`` tokens are spread as evenly as whole
    numbers allow over the reads after the first (each read then stands for its share)."""
    arrivals = rec.arrivals
    if len(arrivals) < 2:
        return []
    counts = rec.counts
    if not rec.counts_known and total:
        later = len(arrivals) - 1
        rest = max(total - 1, later)  # the first read's token opens the stream
        base, extra = divmod(rest, later)
        counts = [1] + [base + (1 if j < extra else 0) for j in range(later)]
    gaps = list(map(sub, arrivals[1:], arrivals[:-1]))
    multi = [j for j, k in enumerate(counts[1:len(arrivals)]) if k != 1]
    if not multi:  # one token per read: the gaps are the ITLs
        return gaps
    out: list[float] = []
    prev = 0
    for j in multi:  # only the reads that brought 0 or several tokens are split
        out += gaps[prev:j]
        k = counts[j + 1]
        if k > 0:
            out += [gaps[j] / k] * k
        prev = j + 1
    out += gaps[prev:]
    return out


def aggregate_level(concurrency: int, w: Workload, records: list[RequestRecord],
                    rounds: list[tuple[int, float]], samples: list[MetricsSample],
                    health: ClientHealth, time_scale: float = 1.0,
                    slo: SLO | None = None, level: Level | None = None,
                    offered_rps: float | None = None) -> LevelResult:
    """Turn raw records into a ``LevelResult`` (validity, flags, engine-time metrics).
    An open-loop ``level`` (rate, trace) is measured over its steady window
    (``OpenLoop``); ``offered_rps`` is the rate its schedule asked (engine time)."""
    scale = time_scale if time_scale > 0 else 1.0
    ms = 1e3 / scale
    errors: dict[str, int] = {}
    bad: dict[str, int] = {}  # verdict detail -> requests
    sources: dict[str, int] = {}
    counted: dict[int, int] = {}  # id(rec) -> proven output tokens
    unverified: list[str] = []
    spread_itl = False
    for r in records:
        if r.error:
            errors[r.error] = errors.get(r.error, 0) + 1
            continue
        j = judge_request(w, r)
        if j.verdict in (Verdict.USAGE_MISMATCH, Verdict.COUNT_MISMATCH):
            key = f"{j.verdict.value}: {j.detail}"
            bad[key] = bad.get(key, 0) + 1
            continue
        sources[j.source] = sources.get(j.source, 0) + 1
        counted[id(r)] = j.count or 0
        if j.verdict is Verdict.UNVERIFIED:
            unverified.append(j.detail)
        spread_itl |= not r.counts_known
    mismatches = sum(bad.values())
    flags: list[LevelFlag] = []
    reason = ""
    invalid = bool(errors or mismatches or not records)
    if invalid:
        parts = [f"{n} x {k}" for k, n in sorted(errors.items())]
        parts += [f"{n} x {k}" for k, n in sorted(bad.items(), key=lambda kv: -kv[1])[:4]]
        reason = "; ".join(parts) or "no requests completed"
        first_err = next((r.error_detail for r in records if r.error_detail), "")
        if first_err:
            reason += f" (first: {first_err[:160]})"
    good = _slo_met(records, counted, slo, ms)
    goodput: list[float] = []
    round_results: list[RoundResult] = []
    open_loop = None
    if level is not None and level.kind is not LevelKind.CONCURRENCY:
        round_results, goodput, kept, open_loop = _open_rounds(
            w, records, rounds, counted, good, scale, offered_rps or 0.0)
        if open_loop.late_sends:
            flags.append(LevelFlag.LATE_SENDS)
    for rnd, wall in rounds if open_loop is None else []:
        mine = [r for r in records if r.round == rnd]
        out_tok = sum(counted.get(id(r), 0) for r in mine)
        tot_tok = sum(counted.get(id(r), 0) + (r.prompt_tokens or w.prompt_tokens)
                      for r in mine if id(r) in counted)
        per_s = scale / wall if wall else 0.0
        round_results.append(RoundResult(
            round=rnd, requests=len(mine), duration_s=wall / scale,
            output_tok_s=out_tok * per_s, total_tok_s=tot_tok * per_s,
            requests_s=sum(1 for r in mine if id(r) in counted) * per_s))
        goodput.append(sum(counted[id(r)] for r in mine if id(r) in good) * per_s)
    ok = [r for r in records if id(r) in counted and r.first_token is not None
          and (open_loop is None or id(r) in kept)]
    metrics = None
    if round_results and ok:
        metrics = _metrics(ok, counted, round_results, ms, scale)
        if slo is not None and not slo.empty:
            met = [r for r in ok if id(r) in good]
            metrics = metrics.model_copy(update={
                "goodput_tok_s": median(goodput) or 0.0,
                "slo_met": len(met) / max(1, sum(1 for r in ok if r.round >= 0))})
        if metrics.round_spread > w.noise_band:
            flags.append(LevelFlag.NOISY)
    if health.loop_lag_p99_ms > LAG_LIMIT_MS or health.cpu_frac > CPU_LIMIT:
        flags.append(LevelFlag.CLIENT_BOUND)
    if unverified and not invalid:
        flags.append(LevelFlag.UNVERIFIED)
        reason = (f"unverified: {len(unverified)} request(s) counted from the server's usage "
                  f"alone ({unverified[0]})")
    if spread_itl:
        flags.append(LevelFlag.ITL_SPREAD)
    if time_scale == 0:
        flags.append(LevelFlag.UNPACED)
    if LevelFlag.LATE_SENDS in flags and not invalid and open_loop is not None:
        reason = reason or (f"late_sends: {open_loop.late_sends} request(s) sent over "
                            f"{w.late_send_ms:g} ms after their scheduled time")
    return LevelResult(
        concurrency=concurrency, level=level, open_loop=open_loop,
        status=LevelStatus.INVALID if invalid else LevelStatus.VALID,
        flags=flags, reason=reason, requests=len(records), metrics=metrics, rounds=round_results,
        errors=errors, count_mismatches=mismatches, count_sources=sources, server=_observe(samples),
        prefix_hit_rate=_prefix_hits(samples),
        client=health, time_scale=time_scale)


def _open_rounds(w: Workload, records: list[RequestRecord], rounds: list[tuple[int, float]],
                 counted: dict[int, int], good: set[int], scale: float, offered: float
                 ) -> tuple[list[RoundResult], list[float], set[int], OpenLoop]:
    """An open-loop level's rounds over their steady windows (``OpenLoop``'s rule)."""
    out: list[RoundResult] = []
    goodput: list[float] = []
    kept: set[int] = set()
    achieved: list[float] = []
    lags: list[float] = []
    scheduled: list[float] = []
    late_s = w.late_send_ms / 1e3 * scale
    left_out = late = 0
    for rnd, _wall in rounds:
        mine = [r for r in records if r.round == rnd]
        if not mine:
            continue
        sends = sorted(r.start for r in mine)
        cut = w.steady_trim * (sends[-1] - sends[0])
        fill = median([r.end - r.start for r in mine if id(r) in counted]) or 0.0
        a, b = sends[0] + max(cut, fill), sends[-1] - cut
        if b <= a:  # one send (or all at once): the round's whole span
            a, b = sends[0], max(r.end for r in mine)
        span = max(b - a, 1e-9)
        if len(sends) > 1 and sends[-1] > sends[0]:
            achieved.append((len(sends) - 1) / (sends[-1] - sends[0]) * scale)
        dues = sorted(r.due for r in mine if r.due is not None)
        if len(dues) > 1 and dues[-1] > dues[0]:
            scheduled.append((len(dues) - 1) / (dues[-1] - dues[0]) * scale)
        for r in mine:
            if r.due is not None:
                lag = r.start - r.due
                lags.append(lag)
                late += lag > late_s
        inside = [r for r in mine if id(r) in counted and a <= r.start <= b]
        kept.update(id(r) for r in inside)
        left_out += sum(1 for r in mine if id(r) in counted) - len(inside)
        out_tok = good_tok = 0
        for r in mine:
            if id(r) not in counted:
                continue
            n = sum(k for t, k in zip(r.arrivals, r.counts, strict=False) if a <= t <= b)
            out_tok += n
            good_tok += n if id(r) in good else 0
        pre = sum((r.prompt_tokens or r.want_prompt or w.prompt_tokens) for r in inside)
        per_s = scale / span
        out.append(RoundResult(round=rnd, requests=len(mine), duration_s=span / scale,
                               output_tok_s=out_tok * per_s,
                               total_tok_s=(out_tok + pre) * per_s,
                               requests_s=sum(1 for r in mine if id(r) in counted
                                              and a <= r.end <= b) * per_s))
        goodput.append(good_tok * per_s)
    p99 = percentile(lags, 99)
    return out, goodput, kept, OpenLoop(
        offered_rps=offered, scheduled_rps=median(scheduled), achieved_rps=median(achieved) or 0.0,
        late_sends=late,
        send_lag_p99_ms=None if p99 is None else p99 * 1e3 / scale,
        window_kept=len(kept), window_left_out=left_out)


def _slo_met(records: list[RequestRecord], counted: dict[int, int], slo: SLO | None,
             ms: float) -> set[int]:
    """The ids of the counted requests that met every limit of ``slo`` on their own."""
    if slo is None or slo.empty:
        return set()
    met = set()
    for r in records:
        if id(r) not in counted or r.first_token is None or r.round < 0:
            continue
        itl = percentile(request_itls(r, counted[id(r)]), 99)
        if slo.met_by((r.first_token - r.start) * ms, None if itl is None else itl * ms,
                      (r.end - r.start) * ms):
            met.add(id(r))
    return met


def _metrics(ok: list[RequestRecord], counted: dict[int, int], rounds: list[RoundResult],
             ms: float, scale: float) -> LevelMetrics:
    """Median-over-rounds throughput and pooled latencies (``ms``: seconds -> engine ms).
    A request read one token per read (its counts known) has its ITLs equal to its chunk
    gaps: they are computed once, and sorted once where that holds for every request."""
    itls: list[float] = []
    gaps: list[float] = []
    same = True  # every request's ITLs are its chunk gaps
    for r in ok:
        gap = list(map(sub, r.arrivals[1:], r.arrivals[:-1]))
        gaps += gap
        if r.counts_known and r.counts[1:].count(1) == len(gap):
            itls += gap
        else:
            same = False
            itls += request_itls(r, counted[id(r)])
    tpots = [(r.arrivals[-1] - r.first_token) / (counted[id(r)] - 1)  # type: ignore[operator]
             for r in ok if counted[id(r)] > 1]
    ttfts = [r.first_token - r.start for r in ok]  # type: ignore[operator]
    e2es = [r.end - r.start for r in ok]
    tputs = [rr.output_tok_s for rr in rounds]
    ttft50, ttft90, ttft99 = percentiles(ttfts, (50, 90, 99))
    gap50, gap99 = percentiles(gaps, (50, 99))
    itl50, itl99 = (gap50, gap99) if same else percentiles(itls, (50, 99))
    e2e50, e2e99 = percentiles(e2es, (50, 99))
    return LevelMetrics(
        output_tok_s=median(tputs) or 0.0,
        total_tok_s=median([rr.total_tok_s or 0.0 for rr in rounds]) or 0.0,
        requests_s=median([rr.requests_s or 0.0 for rr in rounds]) or 0.0,
        ttft_p50_ms=_ms(ttft50, ms), ttft_p90_ms=_ms(ttft90, ms), ttft_p99_ms=_ms(ttft99, ms),
        itl_p50_ms=_ms(itl50, ms), itl_p99_ms=_ms(itl99, ms),
        tpot_p50_ms=_ms(median(tpots), ms),
        e2e_p50_ms=_ms(e2e50, ms), e2e_p99_ms=_ms(e2e99, ms),
        decode_tok_s_per_req_p50=_per_s(median(tpots), scale),
        chunk_gap_p50_ms=_ms(gap50, ms), chunk_gap_p99_ms=_ms(gap99, ms),
        round_spread=spread(tputs))


def _per_s(seconds: float | None, scale: float) -> float | None:
    """Tokens per engine second from a real-time gap; None when the gap is 0 (every token
    arrived in one read: nothing to divide)."""
    return None if not seconds or seconds <= 0 else scale / seconds


def _ms(seconds: float | None, factor: float) -> float | None:
    return None if seconds is None else seconds * factor


def _prefix_hits(samples: list[MetricsSample]) -> float | None:
    """Hits / queries of the server's prefix cache over the level (first to last sample)."""
    got = [s for s in samples if s.prefix_queries_total is not None
           and s.prefix_hits_total is not None]
    if len(got) < 2:
        return None
    q = (got[-1].prefix_queries_total or 0.0) - (got[0].prefix_queries_total or 0.0)
    h = (got[-1].prefix_hits_total or 0.0) - (got[0].prefix_hits_total or 0.0)
    return h / q if q > 0 else None


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
        block_size=last.block_size, num_blocks=last.num_blocks, **_pace(samples))


def _pace(samples: list[MetricsSample]) -> dict[str, float | None]:
    """The sim's punctuality over the level: its counters' change from the first sample
    to the last (empty where the server reports none)."""
    have = [s for s in samples if s.sim_paced_tokens is not None]
    if len(have) < 2:
        return {}
    a, b = have[0], have[-1]
    tokens = (b.sim_paced_tokens or 0.0) - (a.sim_paced_tokens or 0.0)
    if tokens <= 0:
        return {"sim_paced_tokens": 0.0}
    late = (b.sim_late_tokens or 0.0) - (a.sim_late_tokens or 0.0)
    lag = (b.sim_lag_token_s or 0.0) - (a.sim_lag_token_s or 0.0)
    first = (b.sim_first_tokens or 0.0) - (a.sim_first_tokens or 0.0)
    late_first = (b.sim_late_first_tokens or 0.0) - (a.sim_late_first_tokens or 0.0)
    lost = (b.sim_behind_s or 0.0) - (a.sim_behind_s or 0.0)
    wall = b.t - a.t
    return {"sim_paced_tokens": tokens, "sim_late_share": late / tokens,
            "sim_lag_mean_ms": 1e3 * lag / tokens,
            "sim_late_first_share": late_first / first if first > 0 else None,
            "sim_lost_share": lost / wall if wall > 0 else None}
