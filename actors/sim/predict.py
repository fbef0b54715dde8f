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
    tpot_p50_ms: float  # per request: (end - first token) / (tokens - 1), the median
    e2e_p50_ms: float
    max_running: int
    max_waiting: int
    preemptions: int


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    """The median of values given with repeat counts (the mean of the middle two if even)."""
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    if total == 0:
        return 0.0
    want = (total - 1) // 2, total // 2
    got: list[float] = []
    seen = 0
    for value, w in pairs:
        while len(got) < 2 and want[len(got)] < seen + w:
            got.append(value)
        seen += w
        if len(got) == 2:
            break
    return (got[0] + got[1]) / 2


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _prompt_ids(index: int, prompt_tokens: int, shared_prefix: int) -> list[int] | None:
    """Token ids standing in for request ``index``'s prompt: ``shared_prefix`` tokens every
    request has, the rest its own (None without a shared prefix: nothing to find cached)."""
    if shared_prefix <= 0:
        return None
    own = (index + 1) << 32
    return list(range(shared_prefix)) + [own + j for j in range(prompt_tokens - shared_prefix)]


def simulate_closed_loop(engine: SimEngine, concurrency: int, requests: int,
                         prompt_tokens: int, output_tokens: int,
                         shared_prefix_tokens: int = 0, fast: bool = True) -> LevelPrediction:
    """Run ``requests`` matched-work requests with ``concurrency`` in flight, in sim time;
    ``shared_prefix_tokens`` of each prompt are common to all (the prefix cache finds them).
    ``fast``: take runs of unchanging decode iterations in one go (same results)."""
    start = engine.now
    issued = 0
    done = []
    itls: list[tuple[float, int]] = []  # inter-token gaps, each with how many tokens had it
    max_running = max_waiting = 0
    pre0 = engine.preemptions_total
    for _ in range(min(concurrency, requests)):
        engine.add(str(issued), prompt_tokens, output_tokens,
                   prompt_ids=_prompt_ids(issued, prompt_tokens, shared_prefix_tokens))
        issued += 1
    while not engine.idle:
        run = engine.decode_run() if fast else None
        if run is not None:
            first, rest, batch = run
            itls += [(g, 1) for g in first]
            itls += [(d, batch) for d in rest]
            continue
        out = engine.step()
        if out is None:
            raise RuntimeError("a request can never be scheduled (pool or token budget too "
                               "small for one request)")
        max_running = max(max_running, len(engine.running) + len(out.finished))
        max_waiting = max(max_waiting, engine.waiting_admitted)
        now = engine.now
        itls += [(now - prev, 1) for prev in [s.prev_token_at for s in out.emitted]
                 if prev is not None]
        for seq in out.finished:
            done.append(seq)
            if issued < requests:
                engine.add(str(issued), prompt_tokens, output_tokens,
                           prompt_ids=_prompt_ids(issued, prompt_tokens, shared_prefix_tokens))
                issued += 1
    dur = engine.now - start
    ttft = [(s.first_token_at or 0) - s.arrival for s in done]
    e2e = [(s.finished_at or 0) - s.arrival for s in done]
    tpot = [((s.finished_at or 0) - (s.first_token_at or 0)) / (output_tokens - 1)
            for s in done] if output_tokens > 1 else [0.0]
    out_tokens = len(done) * output_tokens
    return LevelPrediction(
        concurrency=concurrency, requests=len(done), duration_s=dur,
        output_tok_s=out_tokens / dur,
        total_tok_s=len(done) * (prompt_tokens + output_tokens) / dur,
        ttft_p50_ms=1e3 * statistics.median(ttft), ttft_p99_ms=1e3 * _pct(ttft, 0.99),
        itl_p50_ms=1e3 * _weighted_median(itls),
        tpot_p50_ms=1e3 * statistics.median(tpot),
        e2e_p50_ms=1e3 * statistics.median(e2e), max_running=max_running,
        max_waiting=max_waiting, preemptions=engine.preemptions_total - pre0)
