"""``plan --predict``: the performance model's view of every trial, and the sweep's cost.

Predictions use the sim's model for the trial's engine family (a vLLM trial is
predicted with the vLLM profile). Durations: a server start per trial plus,
per level, warm-up and rounds of closed-loop requests at the predicted speed;
for the sim engine real time is simulated time x ``sim.time_scale``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from actors.engines.sim import sim_settings
from actors.sim.hardware import get_hardware
from actors.sim.perf import PROFILES
from actors.sim.predict import build_engine, simulate_closed_loop
from actors.sim.shapes import ModelShape
from orchestrator.feasibility import family_of
from orchestrator.plan import PlannedTrial
from orchestrator.spec import SweepSpec, TrialConfig

__all__ = ["TrialPrediction", "predict_trial", "estimate_startup_s", "predict_sweep"]

#: Seconds to a healthy server, by engine and hardware kind (measured: ENVIRONMENT.md,
#: shared/gpu README; the sim starts in about a second).
STARTUP_S = {("sim", "gpu"): 1.5, ("sim", "cpu"): 1.5, ("vllm", "cpu"): 90.0,
             ("vllm", "gpu"): 100.0, ("trtllm", "gpu"): 150.0, ("external", "gpu"): 1.0,
             ("external", "cpu"): 1.0}


@dataclass(frozen=True)
class TrialPrediction:
    key: str
    label: str
    levels: list[dict]
    startup_s: float
    measure_s: float  # real seconds the levels take

    @property
    def total_s(self) -> float:
        return self.startup_s + self.measure_s


def estimate_startup_s(trial: TrialConfig, hw_kind: str) -> float:
    base = STARTUP_S.get((trial.engine, hw_kind), 100.0)
    if trial.engine == "vllm" and not trial.cuda_graphs:
        base *= 0.7  # no torch.compile, no graph capture
    return base


def predict_trial(trial: TrialConfig, spec: SweepSpec, shape: ModelShape) -> TrialPrediction:
    hw = get_hardware(spec.hardware)
    fam = family_of(trial)
    profile = fam if fam in PROFILES else "vllm"
    cfg = sim_settings(trial)
    w = spec.workload
    scale = spec.sim.time_scale if trial.engine == "sim" else 1.0
    levels = []
    measure = 0.0
    for c in w.concurrency:
        engine, _ = build_engine(shape, hw, profile, cfg, seed=spec.sim.seed, jitter=0.0,
                                 overrides=spec.sim.profiles.get(profile))
        n = w.requests_for(c)
        p = simulate_closed_loop(engine, c, n, w.prompt_tokens, w.output_tokens)
        per_round = p.duration_s
        warm = per_round * min(1.0, w.warmup_requests / n) if w.warmup_requests else 0.0
        measure += (warm + per_round * w.rounds_for(c)) * max(scale, 0.02) + 0.2
        levels.append({k: v for k, v in asdict(p).items() if k != "requests"})
    return TrialPrediction(trial.key(), trial.label(), levels,
                           estimate_startup_s(trial, hw.kind), measure)


def predict_sweep(planned: list[PlannedTrial], spec: SweepSpec,
                  shape: ModelShape | None) -> tuple[list[TrialPrediction], float]:
    """Predictions of the feasible trials and the estimated wall time of the whole sweep."""
    if shape is None:
        return [], 0.0
    preds = [predict_trial(p.config, spec, shape) for p in planned if p.feasible]
    if spec.search.kind == "optuna" and spec.search.budget:
        preds_for_time = preds[: spec.search.budget]
    else:
        preds_for_time = preds
    parallel = max(1, spec.cluster.max_concurrent_trials or 1)
    total = sum(p.total_s + 2.0 for p in preds_for_time) / parallel
    return preds, total
