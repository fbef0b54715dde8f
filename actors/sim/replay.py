"""The sim's model core on a request list, offline: mixed lengths, arrivals, shared prefixes.

``simulate_requests`` runs exactly what the load generator sends for one round of a level
(each request's own prompt and output length; a closed loop's ``cap`` streams, or each
request at its arrival offset with at most ``cap`` in flight) through ``SimEngine`` in
simulated time, one scheduler step at a time, with no clock and no HTTP. It backs
``plan --predict`` on a request list and the capacity search's independent check (the
knee computed here, not by the bisection that measures it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from actors.sim.scheduler import Seq, SimEngine

__all__ = ["SimRequest", "ReplayResult", "simulate_requests"]


@dataclass(frozen=True)
class SimRequest:
    prompt_tokens: int
    output_tokens: int
    arrival_s: float | None = None  # None: a closed loop (sent when a stream frees)
    prompt_ids: tuple[int, ...] | None = None  # what the prefix cache hashes


@dataclass(frozen=True)
class ReplayResult:
    requests: int
    duration_s: float
    output_tok_s: float
    requests_s: float
    ttft_ms: list[float]  # per request, in list order
    itl_p99_ms: list[float | None]  # per request: the 99th percentile of its own gaps
    e2e_ms: list[float]
    output_tokens: list[int]
    itl_p50_ms: float | None = None  # over every gap of every request
    max_running: int = 0
    max_waiting: int = 0

    @property
    def ttft_p50_ms(self) -> float:
        return statistics.median(self.ttft_ms)


def _p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def simulate_requests(engine: SimEngine, reqs: list[SimRequest], cap: int,
                      max_steps: int = 5_000_000) -> ReplayResult:
    """One round of ``reqs`` through ``engine``. Closed loop (no arrivals): ``cap`` in
    flight, the next request sent as one ends. Open loop: each at its ``arrival_s`` after
    the round's start (sorted), held back while ``cap`` are in flight."""
    start = engine.now
    open_loop = reqs and reqs[0].arrival_s is not None
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival_s or 0.0) if open_loop \
        else list(range(len(reqs)))
    nxt = 0
    in_flight: dict[str, int] = {}
    gaps: dict[int, list[float]] = {i: [] for i in range(len(reqs))}
    seqs: dict[int, Seq] = {}

    def send(i: int, at: float | None) -> None:
        r = reqs[i]
        seqs[i] = engine.add(str(i), r.prompt_tokens, r.output_tokens, arrival=at,
                             prompt_ids=list(r.prompt_ids) if r.prompt_ids else None)
        in_flight[str(i)] = i

    def due(i: int) -> float:
        return start + (reqs[i].arrival_s or 0.0)

    steps = max_running = max_waiting = 0
    while nxt < len(order) or not engine.idle:
        # hand over every request whose time has come (open loop) or a free stream (closed)
        while nxt < len(order) and len(in_flight) < cap and (
                not open_loop or due(order[nxt]) <= engine.now):
            i = order[nxt]
            send(i, due(i) if open_loop else None)
            nxt += 1
        if engine.idle:
            if nxt >= len(order):
                break
            engine.now = max(engine.now, due(order[nxt]))  # idle until the next arrival
            continue
        out = engine.step()
        steps += 1
        if out is None or steps > max_steps:
            raise RuntimeError("a request can never be scheduled (pool or token budget too "
                               "small for one request)")
        for s in out.emitted:
            if s.prev_token_at is not None and s.last_token_at is not None:
                gaps[int(s.rid)].append(s.last_token_at - s.prev_token_at)
        for s in out.finished:
            in_flight.pop(s.rid, None)
        max_running = max(max_running, len(engine.running) + len(out.finished))
        max_waiting = max(max_waiting, engine.waiting_admitted)
    dur = engine.now - start
    ttft, e2e = [], []
    for i in range(len(reqs)):
        s = seqs[i]
        ttft.append(1e3 * ((s.first_token_at or 0.0) - s.arrival))
        e2e.append(1e3 * ((s.finished_at or 0.0) - s.arrival))
    out_tokens = [r.output_tokens for r in reqs]
    every = [g for gs in gaps.values() for g in gs]
    return ReplayResult(
        requests=len(reqs), duration_s=dur, output_tok_s=sum(out_tokens) / dur if dur else 0.0,
        requests_s=len(reqs) / dur if dur else 0.0, ttft_ms=ttft,
        itl_p99_ms=[None if (p := _p99(gaps[i])) is None else 1e3 * p
                    for i in range(len(reqs))],
        e2e_ms=e2e, output_tokens=out_tokens,
        itl_p50_ms=None if not every else 1e3 * statistics.median(every),
        max_running=max_running, max_waiting=max_waiting)
