"""``GuidedSearcher``: the performance model ranks the whole space; measure where it matters.

1. Score every feasible config with the sim's model (``model_view``) at every regime.
2. Uncertainty: ``sigma = band x (1 + new)``. ``band`` (per regime) is the largest of the
   model's held-out misses there on the ``WINDOW`` configs measured last (each config's
   prediction just before it was measured, against what it measured, less half the
   measured noise); until there are that many, the model's cross-validated relative error
   (``search.model_error``, else ``model_error()``) where it is larger. A model that keeps
   missing gets a wider band, however confident its prior. ``new`` counts the settings of
   the config (profile, TP, weight precision, KV dtype, graphs) that no measured or
   in-flight config of its engine has: a config unlike any measured one is less certain.
3. Ask: regimes take turns; a regime that is not settled (5.) asks for what settles it.
4. Tell: recalibrate the trial's profile on the measured levels of that profile (``refit``:
   ``orchestrator.results.refit.refit_profile``, i.e. ``calibrate``, from the current fit;
   handed down by the controller), re-rank. Without ``refit`` the model stays as given.
   Re-predicting hundreds of configs after each trial would cost more than the trial on
   this machine, so the ``rescore`` configs ranked highest are re-predicted and the rest of
   that profile move by the median ratio of new to old predictions of those. A resumed
   search replays the ledger's measurements in order, so it stands where it stopped.
5. Settled, in order of what a regime asks for (``_needs``):
   a. every setting value some eligible unmeasured config has (eligible: it could meet the
      SLOs within its sigma; a setting: ``NOVEL_FIELDS`` or an engine extra, such as vLLM's
      output chunk) is measured: otherwise the best-ranked config with such a value. A
      model wrong about a whole setting (eager faster than graphs) is only found out by
      measuring that setting;
   b. the best measured config (meeting the SLOs; the median of its measurements) beats
      every unmeasured config's optimistic value ``prediction x (1 + sigma)``: otherwise
      the unmeasured config with the highest;
   c. its lead is not noise: the best is measured twice (a repeat: the same config, the
      next ``repeat``), and while the runner-up is within the noise of it, the one of the
      two with fewer measurements is measured again, up to ``TIE_REPEATS`` each, and then
      the medians decide (a new runner-up is raced the same way). The noise: half the
      largest spread between one config's repeats (how far one measurement may be from the
      truth) over the square root of the fewer measurements of the two (how far their
      median may be). One lucky measurement never wins a regime.
   The search stops when every regime is settled, or at the budget.
6. Twins: configs that differ only in limits (``LIMITS``: batch sizes, memory share) and
   that the model predicts to the same numbers at a regime are one config there (a limit
   above the regime's load binds nothing): once one is measured or in flight, the others
   are not ranked at that regime (b.), and their measurements pool into one median (c.).
   The model's structure is trusted here, not its numbers: which limits bind at a load.

Every trial is recorded in the regime studies like any other (``StudySearcher._add``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from orchestrator.planning.feasibility import family_of
from orchestrator.planning.model_error import model_error
from orchestrator.planning.model_view import Overrides, predicted_levels
from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.regimes import RegimeScore, score_levels, trial_scores
from orchestrator.planning.search.base import Fits
from orchestrator.planning.search.study import Proposal, StudySearcher
from orchestrator.spec import SweepSpec

__all__ = ["GuidedSearcher", "NOVEL_FIELDS", "Refit"]

#: (a profile's measured trials, the spec with the current fit as ``sim.profiles``, the
#: shape, the profile, max evaluations, max points) -> the profile's refitted fields
Refit = Callable[[list[TrialResult], SweepSpec, ModelShape, str, int, int],
                 dict[str, float] | None]

#: settings whose unmeasured values make a prediction less certain (and every extra's)
NOVEL_FIELDS = ("profile", "tp", "weights", "kv_dtype", "cuda_graphs")
#: limits: where the model predicts two configs that differ only in these to the same numbers
#: at a regime (a batch or memory limit above the regime's load binds nothing), they are one
#: config there
LIMITS = ("max_num_seqs", "max_num_tokens", "graph_max_batch", "gpu_memory_fraction")


class GuidedSearcher(StudySearcher):
    #: held-out errors (the most recent configs) that set the band beside the prior error
    WINDOW = 5
    #: measurements of each config tied with a regime's best before the medians decide
    TIE_REPEATS = 5

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
            found = model_error(shape, profile=spec.model_profile, gpu=spec.hardware)
            self.error, self.error_source = found.value, found.source
        self.refit = refit
        self.rescore, self.calib_evals, self.calib_points = rescore, calib_evals, calib_points
        self.overrides: Overrides = {k: dict(v) for k, v in spec.sim.profiles.items()}
        self.pred: dict[str, dict[str, RegimeScore]] = {}
        self.by_key = {p.config.key(): p for p in planned}
        self.by_identity = {p.config.identity(): p for p in planned if p.feasible}
        for p in planned:
            if p.feasible:
                self.pred[p.config.key()] = self._predict(p)
        #: regime -> trial key -> its class there: configs that differ only in limits
        #: (``LIMITS``) the model predicts to change nothing at that regime
        self.twins = {r: {k: self._class_key(k, r) for k in self.pred} for r in self.regimes}
        self.calibrations = 0
        #: regime -> the model's miss on each config measured there, just before it was
        self.heldout: dict[str, list[float]] = {r: [] for r in self.regimes}
        self.told: list[TrialResult] = []  # measured results, in the order they were told
        self._vals: dict[str, dict[str, list[float]]] = {}  # ``measured``, per regime
        self._pools: dict[str, dict[str, list[float]]] = {}  # ``pooled``, per regime
        self._cache: dict[str, float | None] = {}
        self._flight: dict[str, PlannedTrial] = {}  # asked, not told yet
        self.why: dict[str, str] = {}  # trial key -> the regime and rule that asked for it
        seen, self._seen = self._seen, set()
        for r in done.values():  # replay in order: a resumed search stands where it stopped
            self._seen.add(r.key)
            self._learn(r)
        self._seen = seen

    def _predict(self, p: PlannedTrial) -> dict[str, RegimeScore]:
        levels = predicted_levels(p.config, self.spec, self.shape, self.overrides)
        return score_levels(levels, p.config, self.spec)

    def _class_key(self, key: str, regime: str) -> str:
        """The config without its batching limits, and its predicted numbers at ``regime``
        (six significant digits): equal for configs that are one config there."""
        cfg = self.by_key[key].config.model_copy(update={f: None for f in LIMITS})
        s = self.pred[key][regime]
        nums = [s.value, s.violation, *sorted(s.latencies.items())]
        return cfg.identity() + repr([f"{n:.6g}" if isinstance(n, float) else n for n in nums])

    def twin_class(self, ident: str, regime: str) -> str:
        return self.twins[regime][self.by_identity[ident].config.key()]

    # -- uncertainty and ranking ----------------------------------------------------------------
    def _measured(self) -> list[TrialResult]:
        return self.told

    def band(self, regime: str) -> float:
        """The relative error a prediction at ``regime`` is trusted to: the largest of the
        model's last ``WINDOW`` held-out misses there on this sweep's own configs; until
        there are that many, the prior (``error``) where it is larger. A model that keeps
        missing widens it; a calibrated model that keeps hitting narrows it below the
        prior. Per regime: a model wrong at high concurrency is not doubted at c=1. Each
        miss counts beyond half the measured noise (``noise``): that much is the
        measurement's, not the model's."""
        half = (self.noise() or 0.0) / 2  # a miss this large is the measurement's, not the model's
        recent = [max(0.0, m - half) for m in self.heldout[regime][-self.WINDOW:]]
        if len(recent) < self.WINDOW:
            return max([self.error, *recent])
        return max(recent)

    def _novel(self, p: PlannedTrial) -> list[tuple[str, object]]:
        """The settings of ``p`` (``NOVEL_FIELDS`` and every extra: an engine option such as
        vLLM's output chunk) whose value no measured or running config of its engine has."""
        seen = [c for c in [r.config for r in self.told]
                + [f.config for f in self._flight.values()] if c.engine == p.config.engine]
        fields = [(f, getattr(p.config, f)) for f in NOVEL_FIELDS
                  if all(getattr(c, f) != getattr(p.config, f) for c in seen)]
        return fields + [(f"extra.{k}", v) for k, v in sorted(p.config.extras.items())
                         if all(c.extras.get(k) != v for c in seen)]

    def sigma(self, p: PlannedTrial, regime: str) -> float:
        return self.band(regime) * (1 + len(self._novel(p)))

    def optimistic(self, key: str, regime: str) -> float | None:
        """Prediction x (1 + sigma), None when it cannot meet the SLOs even so."""
        s = self.pred[key][regime]
        sig = self.sigma(self.by_key[key], regime)
        if s.value is None or s.violation > sig:
            return None
        return s.value * (1 + sig)

    def _unmeasured(self) -> list[str]:
        return [k for k in self.pred if k not in self._seen]

    def ranking(self, regime: str) -> list[tuple[float, str]]:
        """Unmeasured configs by optimistic value, best first; a config whose twin at
        ``regime`` is measured or in flight is measured there already."""
        twins = self.twins[regime]
        covered = {twins[k] for k in self._seen | set(self._flight) if k in twins}
        out = [(u, k) for k in self._unmeasured()
               if twins[k] not in covered and (u := self.optimistic(k, regime)) is not None]
        return sorted(out, key=lambda t: (-t[0], t[1]))

    # -- measured values: the median of each config's measurements --------------------------------
    def measured(self, regime: str) -> dict[str, list[float]]:
        """identity -> its measurements meeting the SLOs in ``regime`` (kept until the
        next result is learned)."""
        if regime not in self._vals:
            out: dict[str, list[float]] = {}
            for r in self.told:
                s = trial_scores(r, self.spec)[regime]
                if s.feasible and s.value is not None:
                    out.setdefault(r.config.identity(), []).append(s.value)
            self._vals[regime] = out
        return self._vals[regime]

    def noise(self) -> float | None:
        """The largest spread (max - min over the median) between one config's repeats in
        any regime; None before any config was measured twice."""
        if "noise" not in self._cache:
            spreads = [(max(v) - min(v)) / statistics.median(v)
                       for regime in self.regimes for v in self.measured(regime).values()
                       if len(v) > 1 and statistics.median(v) > 0]
            self._cache["noise"] = max(spreads) if spreads else None
        return self._cache["noise"]

    def pooled(self, regime: str) -> dict[str, list[float]]:
        """identity -> the measurements of its twin class at ``regime`` (one entry per class,
        named by its most measured member): twins are one config there, so their
        measurements are measurements of one thing. Kept until the next result is learned."""
        if regime not in self._pools:
            vals = self.measured(regime)
            members: dict[str, list[str]] = {}
            for ident in vals:
                members.setdefault(self.twin_class(ident, regime), []).append(ident)
            self._pools[regime] = {max(ms, key=lambda i: (len(vals[i]), i)):
                                   [v for i in ms for v in vals[i]] for ms in members.values()}
        return self._pools[regime]

    def best(self, regime: str) -> tuple[str, float, int] | None:
        """(identity, median, measurements) of the regime's best measured config (its twin
        class's measurements pooled)."""
        vals = self.pooled(regime)
        if not vals:
            return None
        ident = max(vals, key=lambda i: (statistics.median(vals[i]), i))
        return ident, statistics.median(vals[ident]), len(vals[ident])

    def _repeat(self, ident: str) -> PlannedTrial | None:
        """The next measurement of a measured config (None while one is in flight)."""
        if any(f.config.identity() == ident for f in self._flight.values()):
            return None
        base = self.by_identity[ident]
        n = 1 + max(r.config.repeat for r in self.told if r.config.identity() == ident)
        cfg = base.config.model_copy(update={"repeat": n})
        return PlannedTrial(cfg, base.entry_index)

    # -- what settles a regime -------------------------------------------------------------
    def _needs(self, regime: str) -> tuple[PlannedTrial | None, str]:
        """The trial that would settle ``regime`` next and why ('' and None: settled)."""
        ranked = self.ranking(regime)
        for _, k in ranked:  # a. a setting value no measured config has
            if self._novel(self.by_key[k]):
                return self.by_key[k], "untried setting"
        found = self.best(regime)
        if found is None:
            return (self.by_key[ranked[0][1]], "nothing measured") if ranked else (None, "")
        ident, value, n = found
        if ranked and ranked[0][0] >= value:  # b. the model says something may beat it
            return self.by_key[ranked[0][1]], "predicted better"
        if n < 2:  # c. the lead is not one lucky measurement
            return self._repeat(ident), "repeat the best"
        noise = self.noise() or 0.0
        vals = self.pooled(regime)
        # a runner-up within the noise of the best (half its width over the root of the
        # fewer measurements: how far a median may be from the truth) is a tie: the two are
        # measured again, up to TIE_REPEATS each, then the medians decide
        runner = max((i for i in vals if i != ident), default=None,
                     key=lambda i: (statistics.median(vals[i]), i))
        if noise > 0 and runner is not None:
            fewer = min(n, len(vals[runner]))
            if statistics.median(vals[runner]) >= value * (1 - noise / 2 / math.sqrt(fewer)):
                for i in sorted((ident, runner), key=lambda i: (len(vals[i]), i)):
                    if len(vals[i]) < self.TIE_REPEATS:
                        return self._repeat(i), "a tie within noise"
        return None, ""

    def _propose(self) -> Proposal | None:
        regimes = list(self.regimes)
        waiting = False
        for _ in regimes:
            regime = regimes[self._turn % len(regimes)]
            self._turn += 1
            planned, why = self._needs(regime)
            if planned is not None:
                self._flight[planned.config.key()] = planned
                self.why[planned.config.key()] = f"{regime}: {why}"
                return planned, None
            waiting = waiting or bool(why)  # a repeat waits on the same config in flight
        if waiting:
            self.waiting = True
            return None
        noise = self.noise()
        self.stop_reason = self.stop_reason or (
            "converged: in every regime the best measured config beats every unmeasured "
            "config's calibrated prediction by more than the band (" + ", ".join(
                f"{r} {self.band(r):.1%}" for r in self.regimes) + f": the model's misses "
            f"on the last {self.WINDOW} configs measured there, at least its error "
            f"{self.error:.1%} ({self.error_source}) before there are {self.WINDOW}; more for "
            "untried settings), every setting value "
            "is measured, and its lead is beyond the measured noise "
            f"({0.0 if noise is None else noise:.1%}: repeats decide ties)")
        return None

    def ask(self, fits: Fits | None = None) -> PlannedTrial | None:
        self.waiting = False
        return super().ask(fits)

    # -- tell: recalibrate, re-rank ------------------------------------------------------------
    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:
        super().tell(planned, result)
        self._flight.pop(planned.config.key(), None)
        self._learn(result)

    def _learn(self, result: TrialResult) -> None:
        """Record a measured result's held-out error, recalibrate its profile, re-rank."""
        if not result.status.has_measurements():
            return
        base = self.by_identity.get(result.config.identity())
        before = (self.pred.get(base.config.key())
                  if base is not None and result.config.repeat == 0 else None)
        self.told.append(result)
        self._vals, self._pools, self._cache = {}, {}, {}
        if before is not None:
            for r, s in trial_scores(result, self.spec).items():
                if s.feasible and s.value and (pb := before[r].value):
                    self.heldout[r].append(abs(pb / s.value - 1))
        fam = family_of(result.config)
        if fam is not None and self._recalibrate(fam):
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
        return lines + self.reliance_lines()

    def reliance_lines(self) -> list[str]:
        """Per regime, the prediction the stop relied on most: the unmeasured config whose
        bound (prediction x (1 + sigma)) came closest to the best measured value."""
        out = []
        for regime in self.regimes:
            found, ranked = self.best(regime), self.ranking(regime)
            if found is None:
                continue
            ident, value, n = found
            label = self.by_identity[ident].config.label()
            line = f"  {regime}: best {label} {value:.1f} (median of {n})"
            if ranked:
                bound, key = ranked[0]
                p = self.by_key[key]
                line += (f"; relied on the model for {len(ranked)} unmeasured configs, the "
                         f"closest {p.config.label()} predicted "
                         f"{self.pred[key][regime].value or 0:.1f}, bound {bound:.1f} "
                         f"(band {self.sigma(p, regime):.1%})")
            out.append(line)
        return out

    def trial_params(self, key: str) -> dict[str, str]:
        """Why guided asked for the trial (its MLflow run says which rule and regime)."""
        out = super().trial_params(key)
        if key in self.why:
            out["guided.why"] = self.why[key]
        return out
