"""The performance model's view of a config as a measurement would look.

``predicted_levels`` runs the sim's model (``actors.sim.predict``) at every concurrency
level of the workload with given profile overrides (what ``calibrate`` fitted) and returns
``LevelMetrics`` that ``regimes.score_levels`` scores like measured ones. The model gives no
ITL p99 and no E2E p99: ITL p50 and E2E p50 + (TTFT p99 - TTFT p50) stand in for them.
``predicted_result`` wraps them as an ok ``TrialResult`` (tests and the search benchmark
"measure" with it). Its error out of sample: ``planning.model_error``.
"""

from __future__ import annotations

import zlib

from actors.contracts.config import TrialConfig
from actors.contracts.hardware import get_hardware
from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import LevelStatus, TrialStatus
from actors.contracts.traffic import Level, LevelKind, arrival_offsets
from actors.engines.sim import sim_settings
from actors.sim.perf import DEFAULT_PROFILE
from actors.sim.predict import build_engine, simulate_closed_loop
from actors.sim.replay import ReplayResult, SimRequest, simulate_requests
from orchestrator.planning.feasibility import family_of
from orchestrator.spec import SweepSpec

__all__ = ["predicted_levels", "predicted_result", "Overrides"]

Overrides = dict[str, dict[str, float]]  # profile -> fitted fields

def sim_requests(spec: SweepSpec, lv: Level, n: int) -> list[SimRequest]:
    """One round of level ``lv`` as the load generator sends it: the request list (or the
    fixed shape), each at its scheduled offset when the level is open loop."""
    w, plan = spec.workload, spec.request_plan()
    due = arrival_offsets(lv, n, 0, w.seed, w.burstiness, plan)
    out = []
    for i in range(n):
        at = None if due is None else due[i]
        if plan is None:
            out.append(SimRequest(w.prompt_tokens, w.output_tokens, at))
            continue
        r = plan.requests[i % len(plan.requests)]
        cycle = i // len(plan.requests)  # a cycled list's next pass shares nothing
        ids = tuple((zlib.crc32(s.key.encode()) + cycle * 7919) * 1_000_003 + j
                    for s in r.segments for j in range(s.tokens))
        out.append(SimRequest(r.prompt_tokens, r.output_tokens, at, ids))
    return out


def _replay_metrics(res: ReplayResult) -> LevelMetrics:
    tt, e2e = sorted(res.ttft_ms), sorted(res.e2e_ms)
    itl = sorted(x for x in res.itl_p99_ms if x is not None)

    def q(xs: list[float], p: float) -> float | None:
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None
    return LevelMetrics(output_tok_s=res.output_tok_s, total_tok_s=res.output_tok_s,
                        requests_s=res.requests_s, ttft_p50_ms=q(tt, 0.5),
                        itl_p50_ms=res.itl_p50_ms,
                        ttft_p99_ms=q(tt, 0.99), itl_p99_ms=q(itl, 0.99),
                        e2e_p50_ms=q(e2e, 0.5), e2e_p99_ms=q(e2e, 0.99),
                        tpot_p50_ms=None)


def predicted_levels(cfg: TrialConfig, spec: SweepSpec, shape: ModelShape,
                     overrides: Overrides | None = None) -> dict[str, LevelMetrics | None]:
    """The model's metrics per level key (None where it cannot schedule a request). The
    fixed shape in a closed loop runs ``simulate_closed_loop``; a request list or an
    open-loop level runs the requests themselves (``actors.sim.replay``)."""
    hw = get_hardware(spec.hardware)
    profile = family_of(cfg) or DEFAULT_PROFILE
    over = (overrides or {}).get(profile, spec.sim.profiles.get(profile))
    w = spec.workload
    plan = spec.request_plan()
    out: dict[str, LevelMetrics | None] = {}
    for lv in w.levels():
        try:
            engine, _ = build_engine(shape, hw, profile, sim_settings(cfg), jitter=0.0,
                                     overrides=over)
            c = w.in_flight_cap(lv)
            if plan is None and lv.kind is LevelKind.CONCURRENCY:
                n = min(w.requests_for(c), 2 * c + 2)
                p = simulate_closed_loop(engine, c, n, w.prompt_tokens, w.output_tokens)
            else:
                n = w.requests_at(lv, len(plan.requests) if plan else None)
                out[lv.key] = _replay_metrics(simulate_requests(
                    engine, sim_requests(spec, lv, n), c))
                continue
        except (RuntimeError, ValueError):
            out[lv.key] = None
            continue
        out[lv.key] = LevelMetrics(
            output_tok_s=p.output_tok_s, total_tok_s=p.total_tok_s,
            requests_s=p.requests / p.duration_s if p.duration_s else 0.0,
            ttft_p50_ms=p.ttft_p50_ms, ttft_p99_ms=p.ttft_p99_ms, itl_p50_ms=p.itl_p50_ms,
            itl_p99_ms=p.itl_p50_ms, tpot_p50_ms=p.tpot_p50_ms, e2e_p50_ms=p.e2e_p50_ms,
            e2e_p99_ms=p.e2e_p50_ms + max(0.0, p.ttft_p99_ms - p.ttft_p50_ms))
    return out


def predicted_result(cfg: TrialConfig, spec: SweepSpec, shape: ModelShape,
                     overrides: Overrides | None = None) -> TrialResult:
    """An ok trial whose levels are the model's predictions (a level it cannot run is
    invalid)."""
    levels = []
    for key, m in predicted_levels(cfg, spec, shape, overrides).items():
        lv = Level.parse(key)
        c = spec.workload.in_flight_cap(lv)
        if m is None:
            levels.append(LevelResult(concurrency=c, level=lv, status=LevelStatus.INVALID,
                                      reason="model"))
        else:
            levels.append(LevelResult(concurrency=c, level=lv, status=LevelStatus.VALID,
                                      metrics=m, requests=1))
    return TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, levels=levels,
                       hardware=spec.hardware, wall_s=1.0)
