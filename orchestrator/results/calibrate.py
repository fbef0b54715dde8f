"""``servesweep calibrate SWEEP``: fit a sim profile's factors to measured trials.

Each measured valid level is a point (trial config, concurrency, output tok/s,
ITL p50, TTFT p50 and p99). The fit minimises the weighted mean squared log
error of the model's predictions over those points (``WEIGHTS``: throughput and
ITL count fully, TTFT p50 a little, TTFT p99 not at all) with scipy's bounded
Powell method over the profile's fitted factors (``FITTED``: efficiencies and
software costs, never a physical constant; see ``actors.sim.profiles``), in
log space, within ``BOUNDS``, from the profile's current values. A factor no
point constrains (no FP8 trial: nothing to say of FP8 efficiency) is left
where it is. Trials are grouped by engine family: a vLLM trial (or a sim trial
with the vLLM profile) calibrates the ``vllm`` profile.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

from actors.contracts.hardware import get_hardware
from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import LevelFlag
from actors.contracts.traffic import LevelKind
from actors.engines.sim import sim_settings
from actors.sim.perf import FITTABLE, HOST_TERMS, BatchShape, get_profile
from actors.sim.predict import build_engine, simulate_closed_loop
from orchestrator.planning.feasibility import family_of
from orchestrator.spec import SweepSpec

__all__ = ["Point", "CalibrationResult", "collect_points", "predict_points", "calibrate"]

BOUNDS = {"gemm_eff": (0.05, 1.0), "mem_eff": (0.05, 1.0), "eager_us_per_layer": (0.0, 5000.0),
          "graph_us_per_layer": (0.0, 1000.0), "piecewise_us_per_layer": (0.0, 2000.0),
          "sched_us_per_seq": (0.0, 1000.0), "step_us": (0.0, 20000.0),
          "launch_overlap": (0.0, 1.0),
          "fp8_weight_eff": (0.2, 1.0), "fp8_gemm_eff": (0.2, 1.0), "fp8_kv_eff": (0.2, 1.0),
          "allreduce_us": (0.0, 500.0), "eager_tp_us_per_layer": (0.0, 5000.0),
          "admit_us_per_running": (0.0, 5000.0), "frontend_us": (0.0, 50000.0),
          "frontend_tok_us": (0.0, 200.0), "frontend_stream_us": (0.0, 5.0),
          "frontend_split_tok_us": (0.0, 500.0),
          "frontend_backlog_steps": (0.0, 500.0),
          "host_scale": (0.25, 4.0)}
# TTFT in a closed loop depends on queueing the model only roughly captures: it is shown and
# weighs little, so it cannot drag the factors that set throughput and ITL; TTFT p99 is shown
# only. TPOT p50 stands in for ITL where a measurement has no ITL (benchmark runs).
WEIGHTS = {"output_tok_s": 1.0, "itl_p50_ms": 1.0, "ttft_p50_ms": 0.05, "ttft_p99_ms": 0.0,
           "tpot_p50_ms": 1.0}
#: the fit moves each factor in asinh(value / scale): like a log far above the scale (a
#: relative change), linear near zero (a cost that starts at zero can still grow)
SCALES = {"gemm_eff": 0.05, "mem_eff": 0.05, "eager_us_per_layer": 20.0,
          "graph_us_per_layer": 2.0, "piecewise_us_per_layer": 5.0, "sched_us_per_seq": 1.0,
          "step_us": 50.0,
          "launch_overlap": 0.5, "fp8_weight_eff": 0.05, "fp8_gemm_eff": 0.05,
          "fp8_kv_eff": 0.05, "allreduce_us": 2.0, "eager_tp_us_per_layer": 20.0,
          "admit_us_per_running": 20.0, "frontend_us": 500.0, "frontend_tok_us": 2.0,
          "frontend_stream_us": 0.05, "frontend_split_tok_us": 2.0,
          "frontend_backlog_steps": 5.0, "host_scale": 0.2}
#: each factor's pull towards where the fit started, per unit of asinh(value / scale): a
#: factor the points barely constrain stays near its value instead of drifting to a bound
#: (an e-fold move costs about what a 15% error on one point does). At 0.05 a fit without
#: the 2048-token prompts found a second basin (1.85 ms admission delay per running
#: sequence, launch overlap 0.14: TTFT 4x too long at c = 256; benchmarks/README.md)
PRIOR = 0.15
#: requests simulated per point at most (a round's count, capped for time)
MAX_REQUESTS = 1024
#: flags of a level whose numbers are not the server's, never fitted
NOT_THE_SERVER = frozenset({LevelFlag.CLIENT_BOUND, LevelFlag.SIM_BEHIND, LevelFlag.LATE_SENDS})
#: the metrics a sweep's level contributes (TPOT is left out: ITL says the same, twice)
LEVEL_METRICS = ("output_tok_s", "itl_p50_ms", "ttft_p50_ms", "ttft_p99_ms")


@dataclass(frozen=True)
class Point:
    trial: TrialResult
    concurrency: int
    measured: dict[str, float]
    spec: SweepSpec | None = None  # the sweep it was measured in (workload, hardware)
    shape: ModelShape | None = None  # the model it served (default: the one calibrated)


@dataclass
class CalibrationResult:
    profile: str
    fitted: dict[str, float]
    start: dict[str, float]
    error_before: float  # mean |relative error| of throughput and ITL over every point
    error_after: float
    rows: list[dict] = field(default_factory=list)
    evaluations: int = 0
    varied: list[str] = field(default_factory=list)  # the factors the points constrained


def collect_points(results: list[TrialResult],
                   spec: SweepSpec | None = None) -> dict[str, list[Point]]:
    """Valid measured levels grouped by the profile they calibrate. A level that did not
    measure the server is left out (``NOT_THE_SERVER``: its client could not keep up, its
    sim fell behind, its sends went late): its throughput is the client's or the host's."""
    groups: dict[str, list[Point]] = {}
    for r in results:
        fam = family_of(r.config)
        if fam is None:  # no sim profile models the engine (an external endpoint)
            continue
        for lv in r.levels:
            if lv.status != "valid" or lv.metrics is None or NOT_THE_SERVER & set(lv.flags):
                continue
            if lv.identity.kind is not LevelKind.CONCURRENCY or (
                    spec is not None and spec.workload.requests is not None):
                continue  # fitted on the fixed shape in a closed loop (what it predicts)
            m = {k: getattr(lv.metrics, k) for k in LEVEL_METRICS}
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
        engine, _ = build_engine(p.shape or shape, hw, profile, cfg, jitter=0.0,
                                 overrides=overrides)
        # the round's own request count: a closed loop ends with a tail where fewer streams
        # run, which a round of few waves feels (2 x c requests: two waves, as the sweep's)
        pred = simulate_closed_loop(engine, p.concurrency,
                                    min(w.requests_for(p.concurrency), MAX_REQUESTS),
                                    w.prompt_tokens, w.output_tokens, w.shared_prefix_tokens)
        out.append({"output_tok_s": pred.output_tok_s, "itl_p50_ms": pred.itl_p50_ms,
                    "ttft_p50_ms": pred.ttft_p50_ms, "ttft_p99_ms": pred.ttft_p99_ms,
                    "tpot_p50_ms": pred.tpot_p50_ms})
    return out


def _front_end(points: list[Point], spec: SweepSpec, shape: ModelShape, profile: str,
               start: dict[str, float]) -> tuple[bool, bool]:
    """What the points can say of the front end, from the model at ``start``:

    - **binds**: its streaming could set some point's decode step (at twice its cost it
      would outlast the engine's step at the point's running count); where it cannot, its
      factors say nothing to the points and stay where they are;
    - **splits**: some point runs more sequences than the engine's output chunk, so its
      steps' outputs are handed over in parts (the split cost, seen apart from the rest)."""
    binds = splits = False
    for p in points:
        s = p.spec or spec
        w, cfg = s.workload, sim_settings(p.trial.config)
        engine, _ = build_engine(p.shape or shape, get_hardware(s.hardware), profile, cfg,
                                 jitter=0.0, overrides=start)
        n = min(p.concurrency, engine.max_num_seqs)
        batch = BatchShape(decode_seqs=n, decode_ctx=n * (w.prompt_tokens + w.output_tokens // 2))
        binds = binds or 2 * engine.model.frontend(n) >= engine.model.engine_time(batch)
        chunk = engine.model.output_chunk
        splits = splits or (chunk is not None and n > chunk)
    return binds, splits


def _residuals(points: list[Point], preds: list[dict[str, float]]) -> list[float]:
    """sqrt(weight) x log(predicted / measured) per point and weighted metric."""
    return [math.sqrt(WEIGHTS[k]) * math.log(max(pr.get(k, 0.0), 1e-12) / v)
            for p, pr in zip(points, preds) for k, v in p.measured.items() if WEIGHTS[k] > 0]


def _loss(points: list[Point], preds: list[dict[str, float]]) -> float:
    """The weighted mean squared log error."""
    weight = sum(WEIGHTS[k] for p in points for k in p.measured if WEIGHTS[k] > 0)
    return sum(r * r for r in _residuals(points, preds)) / weight if weight else 0.0


def _mean_abs_error(points: list[Point], preds: list[dict[str, float]]) -> float:
    """Mean |relative error| of the fitted metrics (throughput and ITL)."""
    errs = [abs(pr[k] / v - 1) for p, pr in zip(points, preds) for k, v in p.measured.items()
            if pr.get(k, 0) > 0 and WEIGHTS[k] >= 1.0]
    return sum(errs) / len(errs) if errs else 0.0


class _Budget(Exception):
    """Raised inside the objective once the evaluation budget is spent."""


def _minimise(f: Callable[[list[float]], list[float]], x0: list[float],
              bounds: list[tuple[float, float]], max_evals: int,
              method: str) -> tuple[list[float], float, int]:
    """scipy from ``x0`` within ``bounds``: ``trf`` (bounded least squares on the residuals
    ``f`` returns, the Jacobian by finite differences) or a scalar ``minimize`` method on
    their sum of squares; the best point seen within ``max_evals`` model evaluations."""
    best: list = [list(x0), math.inf]
    evals = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evals
        if evals >= max_evals:
            raise _Budget
        evals += 1
        r = np.asarray(f([float(t) for t in x]))
        v = float(r @ r)
        if v < best[1]:
            best[0], best[1] = [float(t) for t in x], v
        return r

    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    start = np.clip(np.asarray(x0), lo, hi)
    with contextlib.suppress(_Budget):
        if method == "trf":
            optimize.least_squares(residuals, start, bounds=(lo, hi), method="trf",
                                   diff_step=0.05, max_nfev=max_evals)
        else:
            opts: dict[str, Any] = {"maxfev": max_evals, "xtol": 1e-3, "ftol": 1e-6}
            if method == "nelder-mead":
                opts = {"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-7, "adaptive": True}
            optimize.minimize(lambda x: float(np.sum(residuals(x) ** 2)), start,
                              method=method, bounds=bounds, options=opts)
    return best[0], best[1], evals


def calibrate(points: list[Point], spec: SweepSpec, shape: ModelShape, profile: str,
              max_evals: int = 80, method: str = "trf",
              freeze: frozenset[str] = frozenset(),
              base: dict[str, float] | None = None,
              host: bool = False) -> CalibrationResult:
    """Fit the profile's fitted factors (``FITTED``) in log space from their current values
    (the profile's, the spec's ``sim.profiles``, then ``base``) with scipy's bounded Powell
    (or ``method``), leaving ``freeze`` where it is; before/after errors.

    ``host_scale`` stays where it is unless ``host``: then it is fitted and every one of
    ``HOST_TERMS`` held instead (a short profile of one machine: its host speed is one factor
    over costs fitted on many points, which two levels cannot pull apart one by one), but
    for eager launches where the points have both eager and graphs configs: those are the
    one host cost the points see apart, and the one that varies most by machine (8B eager
    ITL at c=1 ran 13.6-21.4 ms on five H200 nodes, its graphs ITL 4.70-4.89 on four), and
    for the front end's split cost where a point runs more sequences than the engine's
    output chunk (the API server's speed varies by machine apart from the engine core's)."""
    current_values = {**spec.sim.profiles.get(profile, {}), **(base or {})}
    start = {k: float(getattr(get_profile(profile, current_values or None), k))
             for k in FITTABLE}
    # fit only what the points constrain (no FP8-weight trial says nothing of fp8_weight_eff)
    cfgs = [p.trial.config for p in points]
    graphs = any(c.cuda_graphs for c in cfgs)
    needs = {"fp8_weight_eff": any(c.weights == "fp8" for c in cfgs),
             "fp8_gemm_eff": any(c.weights == "fp8" for c in cfgs),
             "fp8_kv_eff": any(c.kv_dtype == "fp8" for c in cfgs),
             "allreduce_us": any(c.tp > 1 for c in cfgs),
             "eager_tp_us_per_layer": any(c.tp > 1 and not c.cuda_graphs for c in cfgs),
             "eager_us_per_layer": any(not c.cuda_graphs for c in cfgs),
             "graph_us_per_layer": graphs,
             "piecewise_us_per_layer": graphs and get_profile(profile).piecewise_graphs}
    front, splits = _front_end(points, spec, shape, profile, start)
    needs |= {"frontend_tok_us": front, "frontend_stream_us": front,
              "frontend_split_tok_us": front, "frontend_backlog_steps": front}
    needs["host_scale"] = host
    if host:
        held = set(HOST_TERMS)
        if graphs and needs["eager_us_per_layer"]:  # both kinds of launch measured
            held.discard("eager_us_per_layer")
        if splits:
            held.discard("frontend_split_tok_us")  # a level above the output chunk
        freeze = freeze | held  # a caller's own freeze still holds
    keys = [k for k in FITTABLE if needs.get(k, True) and k not in freeze]

    def unpack(x: list[float]) -> dict[str, float]:
        out = dict(start)
        for k, v in zip(keys, x):
            lo, hi = BOUNDS[k]
            out[k] = min(hi, max(lo, SCALES[k] * math.sinh(v)))
        return out

    x0 = [math.asinh(start[k] / SCALES[k]) for k in keys]

    def residuals(x: list[float]) -> list[float]:
        pulls = [PRIOR * (a - b) for a, b in zip(x, x0)]
        return _residuals(points, predict_points(points, spec, shape, profile, unpack(x))) \
            + pulls
    before_preds = predict_points(points, spec, shape, profile, start)
    lo_hi = [(math.asinh(BOUNDS[k][0] / SCALES[k]), math.asinh(BOUNDS[k][1] / SCALES[k]))
             for k in keys]
    best_x, _, evals = _minimise(residuals, x0, lo_hi, max_evals, method)
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
                             _mean_abs_error(points, after_preds), rows, evals, keys)
