"""``servesweep calibrate SWEEP``: fit a sim profile's factors to measured trials.

Each measured valid level is a point (trial config, concurrency, output tok/s,
ITL p50, TTFT p50). The fit minimises the mean squared log error of the
model's predictions over those points by coordinate search over the
profile's efficiency and overhead factors (``FITTABLE``), in log space,
within bounds. Trials are grouped by engine family: a vLLM trial (or a sim
trial with the vLLM profile) calibrates the ``vllm`` profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from actors.contracts.hardware import get_hardware
from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from actors.engines.sim import sim_settings
from actors.sim.perf import FITTABLE, get_profile
from actors.sim.predict import build_engine, simulate_closed_loop
from orchestrator.planning.feasibility import family_of
from orchestrator.spec import SweepSpec

__all__ = ["Point", "CalibrationResult", "collect_points", "predict_points", "calibrate"]

BOUNDS = {"gemm_eff": (0.05, 1.0), "mem_eff": (0.05, 1.0), "eager_us_per_layer": (0.0, 5000.0),
          "graph_us_per_layer": (0.0, 1000.0), "sched_us_per_seq": (0.0, 1000.0),
          "fp8_weight_eff": (0.2, 1.0), "admit_us_per_running": (0.0, 5000.0)}
# TTFT in a closed loop depends on queueing the model only roughly captures: it is shown and
# weighs little, so it cannot drag the factors that set throughput and ITL
WEIGHTS = {"output_tok_s": 1.0, "itl_p50_ms": 1.0, "ttft_p50_ms": 0.05}


@dataclass(frozen=True)
class Point:
    trial: TrialResult
    concurrency: int
    measured: dict[str, float]
    spec: SweepSpec | None = None  # the sweep it was measured in (workload, hardware)


@dataclass
class CalibrationResult:
    profile: str
    fitted: dict[str, float]
    start: dict[str, float]
    error_before: float  # mean |relative error| of throughput and ITL over every point
    error_after: float
    rows: list[dict] = field(default_factory=list)
    evaluations: int = 0


def collect_points(results: list[TrialResult],
                   spec: SweepSpec | None = None) -> dict[str, list[Point]]:
    """Valid measured levels grouped by the profile they calibrate."""
    groups: dict[str, list[Point]] = {}
    for r in results:
        fam = family_of(r.config)
        if fam is None:  # no sim profile models the engine (an external endpoint)
            continue
        for lv in r.levels:
            if lv.status != "valid" or lv.metrics is None:
                continue
            m = {k: getattr(lv.metrics, k) for k in WEIGHTS}
            m = {k: v for k, v in m.items() if v is not None and v > 0}
            if "output_tok_s" in m:
                groups.setdefault(fam, []).append(Point(r, lv.concurrency, m, spec))
    return groups


def predict_points(points: list[Point], spec: SweepSpec, shape: ModelShape, profile: str,
                   overrides: dict[str, float]) -> list[dict[str, float]]:
    out = []
    for p in points:
        s = p.spec or spec
        hw, w = get_hardware(s.hardware), s.workload
        c = p.trial.config
        cfg = sim_settings(c)
        engine, _ = build_engine(shape, hw, profile, cfg, jitter=0.0, overrides=overrides)
        pred = simulate_closed_loop(engine, p.concurrency, min(w.requests_for(p.concurrency),
                                                               2 * p.concurrency + 2),
                                    w.prompt_tokens, w.output_tokens)
        out.append({"output_tok_s": pred.output_tok_s, "itl_p50_ms": pred.itl_p50_ms,
                    "ttft_p50_ms": pred.ttft_p50_ms})
    return out


def _loss(points: list[Point], preds: list[dict[str, float]]) -> float:
    total = weight = 0.0
    for p, pr in zip(points, preds):
        for k, v in p.measured.items():
            if pr.get(k, 0) > 0:
                total += WEIGHTS[k] * math.log(pr[k] / v) ** 2
                weight += WEIGHTS[k]
    return total / weight if weight else 0.0


def _mean_abs_error(points: list[Point], preds: list[dict[str, float]]) -> float:
    """Mean |relative error| of the fitted metrics (throughput and ITL)."""
    errs = [abs(pr[k] / v - 1) for p, pr in zip(points, preds) for k, v in p.measured.items()
            if pr.get(k, 0) > 0 and WEIGHTS[k] >= 1.0]
    return sum(errs) / len(errs) if errs else 0.0


def _nelder_mead(f, x0: list[float], step: float, max_evals: int) -> tuple[list[float], float, int]:
    """Minimise ``f`` from ``x0`` (a point in log space) with the Nelder-Mead simplex."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)]
                            for i in range(n)]
    values = [f(x) for x in simplex]
    evals = len(values)
    while evals < max_evals:
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-7:
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(refl)
        evals += 1
        if fr < values[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(exp)
            evals += 1
            simplex[-1], values[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(con)
            evals += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = con, fc
            else:  # shrink towards the best point
                best = simplex[0]
                for i in range(1, n + 1):
                    simplex[i] = [b + 0.5 * (x - b) for b, x in zip(best, simplex[i])]
                    values[i] = f(simplex[i])
                    evals += 1
    i = min(range(n + 1), key=values.__getitem__)
    return simplex[i], values[i], evals


def calibrate(points: list[Point], spec: SweepSpec, shape: ModelShape, profile: str,
              max_evals: int = 80) -> CalibrationResult:
    """Nelder-Mead in log space from the profile's current factors; before/after errors."""
    start = {k: float(getattr(get_profile(profile, spec.sim.profiles.get(profile)), k))
             for k in FITTABLE}
    # fit only what the points constrain (no FP8-weight trial says nothing of fp8_weight_eff)
    cfgs = [p.trial.config for p in points]
    needs = {"fp8_weight_eff": any(c.weights == "fp8" for c in cfgs),
             "eager_us_per_layer": any(not c.cuda_graphs for c in cfgs),
             "graph_us_per_layer": any(c.cuda_graphs for c in cfgs)}
    keys = [k for k in FITTABLE if needs.get(k, True)]

    def unpack(x: list[float]) -> dict[str, float]:
        out = dict(start)
        for k, v in zip(keys, x):
            lo, hi = BOUNDS[k]
            out[k] = min(hi, max(lo, math.exp(v) - 1e-3))
        return out

    def loss(x: list[float]) -> float:
        return _loss(points, predict_points(points, spec, shape, profile, unpack(x)))

    x0 = [math.log(start[k] + 1e-3) for k in keys]
    before_preds = predict_points(points, spec, shape, profile, start)
    best_x, _, evals = _nelder_mead(loss, x0, 0.4, max_evals)
    current = unpack(best_x)
    after_preds = predict_points(points, spec, shape, profile, current)
    rows = []
    for p, b, a in zip(points, before_preds, after_preds):
        for k, v in p.measured.items():
            rows.append({"trial": p.trial.config.label(), "concurrency": p.concurrency,
                         "metric": k, "measured": v, "before": b[k], "after": a[k],
                         "err_before": b[k] / v - 1, "err_after": a[k] / v - 1})
    return CalibrationResult(profile, {k: round(v, 4) for k, v in current.items()}, start,
                             _mean_abs_error(points, before_preds),
                             _mean_abs_error(points, after_preds), rows, evals)
