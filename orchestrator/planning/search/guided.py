"""``GuidedSearcher``: the performance model ranks the whole space; measure where it matters.

1. Score every feasible config with the sim's model (``model_view``) at every regime.
2. Uncertainty: ``sigma = error x (1 + new)``, where ``error`` is the model's
   cross-validated relative error (``search.model_error``, else ``model_error()``) and
   ``new`` counts the settings of the config (profile, TP, weight precision, KV dtype,
   graphs) that no measured config of its engine has: a config unlike any measured one is
   less certain.
3. Ask: regimes take turns; a regime's pick is the unmeasured config with the highest
   optimistic value ``prediction x (1 + sigma)`` among those that could meet the SLOs
   (predicted ``violation <= sigma``). With sigma equal everywhere that is the model's best;
   as configs are measured, the untried settings' larger sigma pulls the search to them.
4. Tell: recalibrate the trial's profile on the measured levels of that profile (``refit``:
   ``orchestrator.results.refit.refit_profile``, i.e. ``calibrate``, from the current fit;
   handed down by the controller), re-rank. Without ``refit`` the model stays as given.
   Re-predicting hundreds of configs after each trial would cost more than the trial on
   this machine, so the ``rescore`` configs ranked highest are re-predicted and the rest of
   that profile move by the median ratio of new to old predictions of those.
5. Stop: a regime is settled when its best measured config (meeting the SLOs) beats every
   unmeasured config's optimistic value, i.e. its calibrated prediction by more than sigma;
   the search stops when every regime is, or at the budget.

Every trial is recorded in the regime studies like any other (``StudySearcher._add``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from orchestrator.planning.feasibility import family_of
from orchestrator.planning.model_error import model_error
from orchestrator.planning.model_view import Overrides, predicted_levels
from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.regimes import RegimeScore, best_per_regime, score_levels
from orchestrator.planning.search.study import Proposal, StudySearcher
from orchestrator.spec import SweepSpec

__all__ = ["GuidedSearcher", "NOVEL_FIELDS", "Refit"]

#: (a profile's measured trials, the spec with the current fit as ``sim.profiles``, the
#: shape, the profile, max evaluations, max points) -> the profile's refitted fields
Refit = Callable[[list[TrialResult], SweepSpec, ModelShape, str, int, int],
                 dict[str, float] | None]

#: settings whose unmeasured values make a prediction less certain
NOVEL_FIELDS = ("profile", "tp", "weights", "kv_dtype", "cuda_graphs")


class GuidedSearcher(StudySearcher):
    def __init__(self, planned: list[PlannedTrial], done: dict[str, TrialResult],
                 spec: SweepSpec, storage: str | None, study_name: str,
                 shape: ModelShape | None = None, refit: Refit | None = None,
                 rescore: int = 24, calib_evals: int = 24, calib_points: int = 12):
        super().__init__(planned, done, spec, storage, study_name, shape)
        if shape is None:
            raise ValueError("search.sampler guided needs the model's shape (model.preset, or "
                             "model.path with a local config.json)")
        self.shape: ModelShape = shape
        given = spec.search.model_error
        if given:
            self.error, self.error_source = given, "search.model_error"
        else:
            found = model_error(shape)
            self.error, self.error_source = found.value, found.source
        self.refit = refit
        self.rescore, self.calib_evals, self.calib_points = rescore, calib_evals, calib_points
        self.overrides: Overrides = {k: dict(v) for k, v in spec.sim.profiles.items()}
        self.pred: dict[str, dict[str, RegimeScore]] = {}
        for p in planned:
            if p.feasible:
                self.pred[p.config.key()] = self._predict(p)
        self.by_key = {p.config.key(): p for p in planned}
        self.calibrations = 0

    def _predict(self, p: PlannedTrial) -> dict[str, RegimeScore]:
        levels = predicted_levels(p.config, self.spec, self.shape, self.overrides)
        return score_levels(levels, p.config, self.spec)

    # -- uncertainty and ranking ----------------------------------------------------------------
    def _measured(self) -> list[TrialResult]:
        return [r for r in self.done.values() if r.status.has_measurements()]

    def sigma(self, p: PlannedTrial) -> float:
        seen = [r.config for r in self._measured() if r.config.engine == p.config.engine]
        new = sum(1 for f in NOVEL_FIELDS
                  if all(getattr(c, f) != getattr(p.config, f) for c in seen))
        return self.error * (1 + new)

    def optimistic(self, key: str, regime: str) -> float | None:
        """Prediction x (1 + sigma), None when it cannot meet the SLOs even so."""
        s = self.pred[key][regime]
        sig = self.sigma(self.by_key[key])
        if s.value is None or s.violation > sig:
            return None
        return s.value * (1 + sig)

    def _unmeasured(self) -> list[str]:
        return [k for k in self.pred if k not in self._seen]

    def settled(self, regime: str) -> bool:
        found = best_per_regime(self._measured(), self.spec)[regime]
        if found is None or found[1].value is None:
            return False
        best = found[1].value
        return all((self.optimistic(k, regime) or 0.0) < best for k in self._unmeasured())

    def ranking(self, regime: str) -> list[tuple[float, str]]:
        out = [(u, k) for k in self._unmeasured()
               if (u := self.optimistic(k, regime)) is not None]
        return sorted(out, key=lambda t: (-t[0], t[1]))

    def _propose(self) -> Proposal | None:
        regimes = list(self.regimes)
        for _ in regimes:
            regime = regimes[self._turn % len(regimes)]
            self._turn += 1
            if self.settled(regime):
                continue
            ranked = self.ranking(regime)
            if ranked:
                return self.by_key[ranked[0][1]], None
        self.stop_reason = self.stop_reason or (
            "converged: in every regime the best measured config beats every unmeasured "
            f"config's calibrated prediction by more than the model's error "
            f"({self.error:.0%}, {self.error_source}; more for untried settings)")
        return None

    # -- tell: recalibrate, re-rank ------------------------------------------------------------
    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:
        super().tell(planned, result)
        fam = family_of(result.config)
        if fam is None or not result.status.has_measurements():
            return
        if self._recalibrate(fam):
            self._rerank(fam)

    def _recalibrate(self, fam: str) -> bool:
        if self.refit is None:
            return False
        sim = self.spec.sim.model_copy(update={"profiles": self.overrides})
        spec = self.spec.model_copy(update={"sim": sim})
        mine = [r for r in self._measured() if family_of(r.config) == fam]
        fitted = self.refit(mine, spec, self.shape, fam, self.calib_evals, self.calib_points)
        if fitted is None:
            return False
        self.overrides[fam] = fitted
        self.calibrations += 1
        return True

    def _rerank(self, fam: str) -> None:
        keys = [k for k in self._unmeasured() if family_of(self.by_key[k].config) == fam]
        if not keys:
            return
        top: set[str] = set()
        for regime in self.regimes:
            order = sorted(keys, key=lambda k: -(self.optimistic(k, regime) or 0.0))
            top.update(order[: max(1, self.rescore // len(self.regimes))])
        ratios: dict[str, list[float]] = {r: [] for r in self.regimes}
        for k in top:
            old = self.pred[k]
            new = self._predict(self.by_key[k])
            for r in self.regimes:
                a, b = old[r].value, new[r].value
                if a and b:
                    ratios[r].append(b / a)
            self.pred[k] = new
        for k in keys:
            if k in top:
                continue
            old = self.pred[k]
            self.pred[k] = {r: RegimeScore(
                None if s.value is None else s.value * (
                    statistics.median(ratios[r]) if ratios[r] else 1.0),
                s.violation, s.latencies) for r, s in old.items()}

    # -- reporting ------------------------------------------------------------------------------
    def next_candidates(self, n: int = 3) -> list[PlannedTrial]:
        seen: list[str] = []
        for regime in self.regimes:
            for _, k in self.ranking(regime)[:n]:
                if k not in seen:
                    seen.append(k)
        return [self.by_key[k] for k in seen[:n]]

    def summary_lines(self) -> list[str]:
        lines = super().summary_lines()
        lines.insert(1, f"  model error {self.error:.1%} ({self.error_source}); "
                        f"{self.calibrations} recalibrations; "
                        f"{len(self._unmeasured())} configs unmeasured")
        return lines
