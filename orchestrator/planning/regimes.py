"""A trial's value at each load regime: the objective, subject to the SLOs.

The terms are the spec's (``orchestrator.spec.search``): a regime's value is the objective at
its level, or the geometric mean over its levels; its ``violation`` is how far the worst
level misses an SLO (``metric / limit - 1``, the largest over levels and limits: <= 0 meets
every SLO, the sign Optuna's ``constraints_func`` expects). A level that may not win (not
valid, unverified, ``sim_behind``: ``planning.eligibility``) gives the regime no value (the
trial is a failure there, never a bad number). The same functions
score measured results and the performance model's predictions (``LevelMetrics`` alike).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from actors.contracts.config import TrialConfig
from actors.contracts.results import LevelMetrics, TrialResult
from orchestrator.planning.eligibility import may_win
from orchestrator.spec import SLO, SweepSpec
from orchestrator.spec.search import Objective

__all__ = ["RegimeScore", "level_objective", "goodput_share", "score_levels", "trial_scores",
           "meets_slo", "best_per_regime"]

_LIMITS = (("ttft_p99_ms", "ttft_p99_ms"), ("itl_p99_ms", "itl_p99_ms"),
           ("e2e_p99_ms", "e2e_p99_ms"))


@dataclass(frozen=True)
class RegimeScore:
    """One regime of one trial: ``value`` None when a level of it gave no valid measurement."""

    value: float | None
    violation: float = 0.0
    latencies: dict[str, float] = field(default_factory=dict)  # also_minimize metrics

    @property
    def feasible(self) -> bool:
        return self.value is not None and self.violation <= 0


def goodput_share(m: LevelMetrics, slo: SLO) -> float:
    """A lower bound on the share of requests that met every per-request SLO, from the
    level's percentiles, for levels without a measured goodput (the performance model's
    predictions, results written before it was measured): a limit its p99 meets counts as
    met by all (p90: 90%, p50: half, none: 0); the misses of several limits add up (union
    bound)."""
    missed = 0.0
    for limit_name, prefix in (("ttft_p99_ms", "ttft"), ("itl_p99_ms", "itl"),
                               ("e2e_p99_ms", "e2e")):
        limit = getattr(slo, limit_name)
        if limit is None:
            continue
        share = 0.0
        for q, s in (("p99", 1.0), ("p90", 0.9), ("p50", 0.5)):
            v = getattr(m, f"{prefix}_{q}_ms", None)
            if v is not None and v <= limit:
                share = s
                break
        missed += 1.0 - share
    return max(0.0, 1.0 - missed)


def level_objective(m: LevelMetrics, objective: Objective, tp: int, slo: SLO) -> float:
    if objective == Objective.OUTPUT_TOK_S_PER_GPU:
        return m.output_tok_s / tp
    if objective == Objective.GOODPUT:
        if m.goodput_tok_s is not None:  # measured request by request (SLO.met_by)
            return m.goodput_tok_s
        return m.output_tok_s * goodput_share(m, slo)
    return m.output_tok_s


def _violation(m: LevelMetrics, slo: SLO) -> float:
    worst = -math.inf
    for limit_name, metric in _LIMITS:
        limit = getattr(slo, limit_name)
        if limit is None:
            continue
        v = getattr(m, metric)
        worst = max(worst, 1.0 if v is None else v / limit - 1.0)
    return 0.0 if worst == -math.inf else worst


def _gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def score_levels(levels: dict[str, LevelMetrics | None], cfg: TrialConfig, spec: SweepSpec,
                 ) -> dict[str, RegimeScore]:
    """Every regime's score from a trial's levels by key (None or absent: no valid
    measurement)."""
    search = spec.search
    out = {}
    for name, cs in search.regime_levels(spec.workload.levels()).items():
        ms = [levels.get(c) for c in cs]
        if any(m is None for m in ms):
            out[name] = RegimeScore(None)
            continue
        good = [m for m in ms if m is not None]
        vals = [level_objective(m, search.objective, cfg.tp, spec.slo) for m in good]
        viol = max(_violation(m, spec.slo) for m in good)
        lat: dict[str, float] = {}
        for metric in search.also_minimize:
            xs = [getattr(m, metric.value) for m in good]
            if all(x is not None and x > 0 for x in xs):
                lat[metric.value] = _gmean(xs)
        if any(v <= 0 for v in vals):  # no good request at a level: worth nothing, but real
            out[name] = RegimeScore(0.0, viol, lat)
        else:
            out[name] = RegimeScore(_gmean(vals), viol, lat)
    return out


def trial_scores(result: TrialResult, spec: SweepSpec) -> dict[str, RegimeScore]:
    """A measured trial's regime scores; a failed or invalid trial has none anywhere."""
    if spec.search.objective is Objective.SLO_CAPACITY:  # one figure per trial
        cap = result.slo_capacity if result.status.has_measurements() else None
        value = cap.rps_per_gpu if cap is not None else None
        scores = {name: RegimeScore(value if value is not None else (0.0 if cap else None))
                  for name in spec.search.regime_levels(spec.workload.levels())}
    else:
        levels: dict[str, LevelMetrics | None] = {}
        if result.status.has_measurements():
            for lv in result.levels:  # SLOs are the search's constraints, not a filter here
                ok = may_win(lv, trust_usage=spec.workload.trust_usage)
                levels[lv.key] = lv.metrics if ok else None
        scores = score_levels(levels, result.config, spec)
    q = result.quality_verdict
    if q is not None and q.blocks:  # the quality gate is a constraint like an SLO
        extra = 1.0 + max((q.drop_lo or 0.0) - (q.max_drop or 0.0), 0.0)
        scores = {n: RegimeScore(s.value, max(s.violation, 0.0) + extra, s.latencies)
                  for n, s in scores.items()}
    return scores


def meets_slo(score: RegimeScore) -> bool:
    return score.feasible


def best_per_regime(results: list[TrialResult], spec: SweepSpec,
                    ) -> dict[str, tuple[TrialResult, RegimeScore] | None]:
    """The best measured trial of each regime among those meeting every SLO there."""
    best: dict[str, tuple[TrialResult, RegimeScore] | None] = {
        n: None for n in spec.search.regime_levels(spec.workload.levels())}
    for r in results:
        for name, s in trial_scores(r, spec).items():
            cur = best[name]
            if s.feasible and s.value is not None and (
                    cur is None or (cur[1].value or 0) < s.value):
                best[name] = (r, s)
    return best

