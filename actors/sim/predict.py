"""Build a sim engine for a trial and predict a closed-loop level without a clock.

``build_engine`` resolves a trial's settings against the profile's defaults;
``simulate_closed_loop`` runs exactly the work the load generator would send
(C streams, each starting its next request when one ends) in simulated time.
It backs ``servesweep plan --predict`` and the sim's own unit tests.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from actors.contracts.hardware import Hardware
from actors.contracts.shapes import ModelShape
from actors.sim.perf import MemoryPlan, SimConfig, StepModel, get_profile, plan_memory
from actors.sim.scheduler import SimEngine

__all__ = ["build_engine", "resolve_limits", "simulate_closed_loop", "LevelPrediction"]


def resolve_limits(profile_name: str, cfg: SimConfig) -> tuple[int, int]:
    """(max_num_seqs, max_num_tokens) after applying the profile's defaults."""
    prof = get_profile(profile_name)
    seqs = cfg.max_num_seqs or prof.default_max_num_seqs
    tokens = cfg.max_num_tokens or prof.default_max_num_tokens
    return seqs, tokens


def build_engine(shape: ModelShape, hw: Hardware, profile_name: str, cfg: SimConfig,
                 seed: int = 0, jitter: float = 0.005,
                 overrides: dict[str, float] | None = None) -> tuple[SimEngine, MemoryPlan]:
    prof = get_profile(profile_name, overrides)
    seqs, tokens = resolve_limits(profile_name, cfg)
    memory = plan_memory(shape, hw, prof, cfg, seqs, tokens)
    engine = SimEngine(StepModel(shape, hw, prof, cfg), memory, prof, seqs, tokens,
                       jitter=jitter, seed=seed)
    return engine, memory


@dataclass(frozen=True)
class LevelPrediction:
    concurrency: int
    requests: int
    duration_s: float
    output_tok_s: float
    total_tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    e2e_p50_ms: float
    max_running: int
    max_waiting: int
    preemptions: int


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def simulate_closed_loop(engine: SimEngine, concurrency: int, requests: int,
                         prompt_tokens: int, output_tokens: int) -> LevelPrediction:
    """Run ``requests`` matched-work requests with ``concurrency`` in flight, in sim time."""
    start = engine.now
    issued = 0
    done = []
    itls: list[float] = []
    last_token: dict[int, float] = {}
    max_running = max_waiting = 0
    pre0 = engine.preemptions_total
    for _ in range(min(concurrency, requests)):
        engine.add(str(issued), prompt_tokens, output_tokens)
        issued += 1
    while not engine.idle:
        out = engine.step()
        if out is None:
            raise RuntimeError("a request can never be scheduled (pool or token budget too "
                               "small for one request)")
        max_running = max(max_running, len(engine.running) + len(out.finished))
        max_waiting = max(max_waiting, engine.waiting_admitted)
        for seq in out.emitted:
            prev = last_token.get(id(seq))
            if prev is not None:
                itls.append(engine.now - prev)
            last_token[id(seq)] = engine.now
        for seq in out.finished:
            done.append(seq)
            last_token.pop(id(seq), None)
            if issued < requests:
                engine.add(str(issued), prompt_tokens, output_tokens)
                issued += 1
    dur = engine.now - start
    ttft = [(s.first_token_at or 0) - s.arrival for s in done]
    e2e = [(s.finished_at or 0) - s.arrival for s in done]
    out_tokens = len(done) * output_tokens
    return LevelPrediction(
        concurrency=concurrency, requests=len(done), duration_s=dur,
        output_tok_s=out_tokens / dur,
        total_tok_s=len(done) * (prompt_tokens + output_tokens) / dur,
        ttft_p50_ms=1e3 * statistics.median(ttft), ttft_p99_ms=1e3 * _pct(ttft, 0.99),
        itl_p50_ms=1e3 * statistics.median(itls) if itls else 0.0,
        e2e_p50_ms=1e3 * statistics.median(e2e), max_running=max_running,
        max_waiting=max_waiting, preemptions=engine.preemptions_total - pre0)
