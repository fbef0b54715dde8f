"""What a search has spent against its budget: trials, wall time, GPU-hours.

GPU-hours of a trial are ``tp`` x its duration. Before a trial runs its duration is the
planner's estimate (``forecast.predict_trial`` at time scale 1: a sim trial is costed as
the real engine it imitates would take, not the time-scaled run); once it finished, a real
engine's trial costs its measured wall time, a sim trial still the estimate. Trials that
ran (ok, failed or invalid) count; infeasible ones cost nothing. Wall time is this driver's
plus, after a resume, the wall time of the trials earlier drivers finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from actors.contracts.config import TrialConfig
from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import TrialStatus
from actors.engines import get_adapter
from orchestrator.planning.forecast import predict_trial
from orchestrator.spec import SweepSpec
from orchestrator.spec.search import Budget

__all__ = ["BudgetTracker", "estimate_gpu_hours"]


def estimate_gpu_hours(cfg: TrialConfig, spec: SweepSpec, shape: ModelShape | None) -> float:
    """``tp`` x the planner's real-time duration of the trial, in hours (0 without a shape)."""
    if shape is None:
        return 0.0
    real = spec.model_copy(update={"sim": spec.sim.model_copy(update={"time_scale": 1.0})})
    try:
        return cfg.tp * predict_trial(cfg, real, shape).total_s / 3600
    except (RuntimeError, KeyError, ValueError):  # the model cannot run it: cost unknown
        return 0.0


class BudgetTracker:
    def __init__(self, budget: Budget | None, spec: SweepSpec, shape: ModelShape | None,
                 prior: list[TrialResult], clock: Callable[[], float] = time.monotonic):
        self.budget = budget or Budget()
        self.spec, self.shape, self.clock = spec, shape, clock
        self.t0 = clock()
        self._cache: dict[str, float] = {}
        ran = [r for r in prior if r.status is not TrialStatus.INFEASIBLE]
        self.trials = len(ran)
        # and what profiling the model first cost (``search.profile_first``)
        self.prior_wall_s = sum(r.wall_s or 0.0 for r in ran) + spec.profile_spent_s
        self.gpu_hours = sum(self.cost(r) for r in ran) + spec.profile_spent_s / 3600
        self.in_flight: dict[str, float] = {}

    def estimate(self, cfg: TrialConfig) -> float:
        key = cfg.key()
        if key not in self._cache:
            self._cache[key] = estimate_gpu_hours(cfg, self.spec, self.shape)
        return self._cache[key]

    def cost(self, result: TrialResult) -> float:
        est = self.estimate(result.config)
        if get_adapter(result.config.engine).time_scaled or not result.wall_s:
            return est
        return result.config.tp * result.wall_s / 3600

    def wall_s(self) -> float:
        return self.prior_wall_s + self.clock() - self.t0

    def spent(self, cfg: TrialConfig | None = None) -> str | None:
        """Which budget stops the search (before starting ``cfg``), or None."""
        b = self.budget
        if b.trials is not None and self.trials + len(self.in_flight) >= b.trials:
            return f"trial budget spent ({b.trials} trials)"
        if b.wall_s is not None and self.wall_s() >= b.wall_s:
            return f"wall-time budget spent ({self.wall_s():.0f} of {b.wall_s:.0f} s)"
        if b.gpu_hours is not None:
            committed = self.gpu_hours + sum(self.in_flight.values())
            nxt = self.estimate(cfg) if cfg is not None else 0.0
            if committed + nxt > b.gpu_hours or committed >= b.gpu_hours:
                return (f"GPU-hour budget spent ({committed:.3f} of {b.gpu_hours:g} GPU-h"
                        f"{f'; the next trial needs {nxt:.3f}' if nxt else ''})")
        return None

    def started(self, cfg: TrialConfig) -> None:
        self.in_flight[cfg.key()] = self.estimate(cfg)

    def finished(self, result: TrialResult) -> None:
        self.in_flight.pop(result.key, None)
        if result.status is not TrialStatus.INFEASIBLE:
            self.trials += 1
            self.gpu_hours += self.cost(result)

    def line(self) -> str:
        """Progress against the budget, e.g. ``3/8 trials · 0.04/0.5 GPU-h · 41/600 s``."""
        b = self.budget
        n = self.trials + len(self.in_flight)
        parts = [f"{n}/{b.trials} trials" if b.trials else f"{n} trials",
                 f"{self.gpu_hours:.3f}/{b.gpu_hours:g} GPU-h" if b.gpu_hours
                 else f"{self.gpu_hours:.3f} GPU-h"]
        if b.wall_s:
            parts.append(f"{self.wall_s():.0f}/{b.wall_s:.0f} s")
        return " · ".join(parts)
