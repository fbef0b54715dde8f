"""``StudySearcher``: one Optuna study per load regime, sharing every measurement.

The sampler (``search.sampler``) proposes: ``tpe`` and ``random`` ask the studies in turn,
one regime after the other; ``nsga2`` the same with several objectives (the objective, then
``also_minimize``); ``grid`` walks the plan in order. Whoever proposed a trial, every
regime's study is told its value there (the proposing study through ``tell``, the others
through ``add_trial``), so no config is measured twice because two regimes wanted it. SLOs
are Optuna constraints (``Trial.set_constraint("slo", violation)``, Optuna 5's successor of
``constraints_func``; TPE and NSGA-II read them; ``violation`` <= 0 meets every SLO). A failed or
invalid trial is told FAIL, a point outside the space or an infeasible one PRUNED with the
reason in its user attrs: never a made-up number. Each trial carries the user attr ``key``
(its trial key), so a resumed sweep finds its finished trials in the study, fails the ones a
killed driver left RUNNING, and adds what the ledger has that the study lacks.
"""

from __future__ import annotations

import random
from typing import Any

from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import TrialStatus
from orchestrator.planning.budget import BudgetTracker
from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.regimes import RegimeScore, best_per_regime, trial_scores
from orchestrator.planning.search.base import Fits, Searcher
from orchestrator.planning.space import Space
from orchestrator.spec import SweepSpec
from orchestrator.spec.search import Sampler

__all__ = ["StudySearcher", "Proposal"]

Proposal = tuple[PlannedTrial, tuple[str, Any] | None]  # the trial, (regime, Optuna trial)
_CONSTRAINTS = "constraints"  # our user attr: [violation] (also Optuna's constraint "slo")
_SLO = "slo"


class StudySearcher(Searcher):
    def __init__(self, planned: list[PlannedTrial], done: dict[str, TrialResult],
                 spec: SweepSpec, storage: str | None, study_name: str,
                 shape: ModelShape | None = None):
        super().__init__()
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec, self.shape, self.planned = spec, shape, planned
        self.search = spec.search
        self.space = Space(planned, spec)
        self.storage = storage
        self.regimes = self.search.regime_levels(spec.workload.levels())
        self.done = dict(done)  # never mutate the caller's view
        self.budget = BudgetTracker(self.search.budget, spec, shape, list(done.values()))
        self.rng = random.Random(self.search.seed)
        self.study_names = {r: f"{study_name}.{r}" for r in self.regimes}
        directions: list[Any] = ["maximize"] + ["minimize"] * len(self.search.also_minimize)
        self.studies = {r: optuna.create_study(
            study_name=self.study_names[r], storage=storage, load_if_exists=True,
            sampler=self._sampler(i), directions=directions)
            for i, r in enumerate(self.regimes)}
        self.n_feasible = sum(1 for p in planned if p.feasible)
        self._seen: set[str] = set(done)  # measured, in flight or pruned
        self._asked: dict[str, tuple[str, Any]] = {}
        self._origin: dict[str, dict[str, str]] = {}
        self._turn = 0
        self._stale = 0
        self._held: Proposal | None = None
        self._order = [p for p in planned]  # the grid's walk, and the fallback's
        if self.search.sampler != Sampler.GRID:
            self.rng.shuffle(self._order)
        fresh = all(not st.get_trials(deepcopy=False) for st in self.studies.values())
        self._sync()
        self.seeded: list[str] = []  # trial keys the model put first (seed_from_model)
        if self.search.seed_from_model and fresh:
            self._seed_from_model(self.search.seed_from_model)

    # -- studies ----------------------------------------------------------------------------
    def _sampler(self, i: int) -> Any:
        import optuna

        seed = self.search.seed + i
        s = self.search.sampler
        if s == Sampler.TPE:
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                              n_startup_trials=min(10, max(3, self._cap() // 8)))
        if s == Sampler.NSGA2:
            pop = max(4, min(50, self._cap() // 4))
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=pop)
        return optuna.samplers.RandomSampler(seed=seed)  # random; grid and guided propose

    def _seed_from_model(self, n: int) -> None:
        """Enqueue the performance model's ``n`` best configs: each regime's study gets its
        own top picks (regimes in turn, a config picked once), so the sampler's first asks
        measure them and its later ones learn from them."""
        from orchestrator.planning.model_view import predicted_levels
        from orchestrator.planning.regimes import score_levels

        if self.shape is None:
            raise ValueError("search.seed_from_model needs the model's shape (model.preset, "
                             "or model.path with a local config.json)")
        ranked: dict[str, list[tuple[float, str]]] = {r: [] for r in self.regimes}
        by_key = {}
        for p in self.planned:
            if not p.feasible:
                continue
            by_key[p.config.key()] = p
            scores = score_levels(predicted_levels(p.config, self.spec, self.shape),
                                  p.config, self.spec)
            for r, sc in scores.items():
                if sc.feasible and sc.value is not None:
                    ranked[r].append((-sc.value, p.config.key()))
        queues = {r: sorted(v) for r, v in ranked.items()}
        while len(self.seeded) < n and any(queues.values()):
            for r, q in queues.items():
                while q and q[0][1] in self.seeded:
                    q.pop(0)
                if q and len(self.seeded) < n:
                    key = q.pop(0)[1]
                    self.seeded.append(key)
                    self.studies[r].enqueue_trial(self.space.assignment(by_key[key]),
                                                  user_attrs={"origin": "model"})

    def _cap(self) -> int:
        b = self.search.budget
        n = sum(1 for p in self.planned if p.feasible)
        return min(n, b.trials) if b is not None and b.trials else n

    def _values(self, s: RegimeScore) -> list[float] | None:
        if s.value is None:
            return None
        lat = [s.latencies.get(m.value) for m in self.search.also_minimize]
        if any(v is None for v in lat):
            return None
        return [s.value, *(v for v in lat if v is not None)]

    def _sync(self) -> None:
        """Fail what a killed driver left RUNNING; add finished trials a study lacks."""
        from optuna.trial import TrialState

        for r, study in self.studies.items():
            have = set()
            for t in study.get_trials(deepcopy=False):
                if t.state is TrialState.RUNNING:
                    study.tell(t.number, state=TrialState.FAIL)
                elif "key" in t.user_attrs and t.state is not TrialState.PRUNED:
                    have.add(t.user_attrs["key"])
            for key, result in self.done.items():
                if key not in have and result.status is not TrialStatus.INFEASIBLE:
                    self._add(r, result)

    def _add(self, regime: str, result: TrialResult, origin: str = "ledger") -> None:
        import optuna
        from optuna.trial import TrialState

        planned = PlannedTrial(result.config, 0)
        params = self.space.assignment(planned)
        score = trial_scores(result, self.spec)[regime]
        values = self._values(score)
        attrs = {"key": result.key, _CONSTRAINTS: [score.violation], "origin": origin,
                 "status": result.status.value}
        trial = optuna.trial.create_trial(
            state=TrialState.COMPLETE if values is not None else TrialState.FAIL,
            values=values, params=params, distributions=self.space.distributions(params),
            user_attrs=attrs, constraints={_SLO: score.violation} if values is not None else None)
        self.studies[regime].add_trial(trial)

    # -- ask / tell ---------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return self._cap()

    def ask(self, fits: Fits | None = None) -> PlannedTrial | None:
        self.blocked = False
        if self._held is not None:  # proposed earlier, did not fit then
            planned, origin = self._held
            if fits is not None and not fits(planned):
                self.blocked = True
                return None
            self._held = None
            return self._begin(planned, origin)
        if self.stop_reason is not None:
            return None
        while True:
            stop = self.budget.spent()
            if stop is not None:
                self.stop_reason = stop
                return None
            if sum(1 for k in self._seen if k in self._feasible_keys()) >= self.n_feasible:
                self.stop_reason = self.stop_reason or "every feasible config measured"
                return None
            proposal = self._propose()
            if proposal is None:
                return None
            planned, origin = proposal
            key = planned.config.key()
            if not planned.feasible:  # recorded by the controller, never scored
                self._seen.add(key)
                self.pruned.append(planned)
                continue
            stop = self.budget.spent(planned.config)
            if stop is not None:
                self.stop_reason = stop
                if origin is not None:  # not run: the study must not wait for it
                    from optuna.trial import TrialState

                    self.studies[origin[0]].tell(origin[1], state=TrialState.FAIL)
                return None
            self._seen.add(key)
            if fits is not None and not fits(planned):
                self._held = (planned, origin)
                self.blocked = True
                return None
            return self._begin(planned, origin)

    def _begin(self, planned: PlannedTrial, origin: tuple[str, Any] | None) -> PlannedTrial:
        key = planned.config.key()
        if origin is not None:
            self._asked[key] = origin
            self._origin[key] = {"optuna.study": self.study_names[origin[0]],
                                 "optuna.number": str(origin[1].number)}
        self.budget.started(planned.config)
        return planned

    def _feasible_keys(self) -> set[str]:
        if not hasattr(self, "_fk"):
            self._fk = {p.config.key() for p in self.planned if p.feasible}
        return self._fk

    def _propose(self) -> Proposal | None:
        if self.search.sampler == Sampler.GRID or self._stale > 4 * len(self.planned) + 20:
            return self._next_in_order()
        from optuna.trial import TrialState

        while self._stale <= 4 * len(self.planned) + 20:
            regime = list(self.regimes)[self._turn % len(self.regimes)]
            self._turn += 1
            study = self.studies[regime]
            trial = study.ask()
            values = self.space.suggest(trial)
            planned = self.space.lookup(values)
            if planned is None:
                trial.set_user_attr("reason", "not a point of the space")
                study.tell(trial, state=TrialState.PRUNED)
                self._stale += 1
                continue
            key = planned.config.key()
            trial.set_user_attr("key", key)
            if not planned.feasible and key not in self._seen:
                trial.set_user_attr("reason", planned.reason)
                study.tell(trial, state=TrialState.PRUNED)
                return planned, None
            if key in self._seen:  # measured, in flight or pruned: tell what is known
                self._stale += 1
                prev = self.done.get(key)
                trial.set_user_attr("repeat", True)
                score = trial_scores(prev, self.spec)[regime] if prev else None
                vals = self._values(score) if score is not None else None
                if vals is None:
                    study.tell(trial, state=TrialState.PRUNED if prev is None or not
                               planned.feasible else TrialState.FAIL)
                else:
                    assert score is not None
                    trial.set_user_attr(_CONSTRAINTS, [score.violation])
                    trial.set_constraint(_SLO, score.violation)
                    study.tell(trial, vals)
                continue
            return planned, (regime, trial)
        return self._next_in_order()  # the sampler keeps repeating itself: fill in order

    def _next_in_order(self) -> Proposal | None:
        for p in self._order:
            if p.config.key() not in self._seen:
                return p, None
        self.stop_reason = self.stop_reason or "every feasible config measured"
        return None

    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:
        from optuna.trial import TrialState

        key = planned.config.key()
        self.done[key] = result
        self._seen.add(key)  # a trial told without an ask (the quality reference) too
        self.budget.finished(result)
        scores = trial_scores(result, self.spec)
        asked = self._asked.pop(key, None)
        for regime in self.regimes:
            if asked is not None and asked[0] == regime:
                trial, score = asked[1], scores[regime]
                vals = self._values(score)
                trial.set_user_attr(_CONSTRAINTS, [score.violation])
                trial.set_user_attr("status", result.status.value)
                if vals is not None:
                    trial.set_constraint(_SLO, score.violation)
                if vals is None:
                    self.studies[regime].tell(trial, state=TrialState.FAIL)
                else:
                    self.studies[regime].tell(trial, vals)
            else:
                self._add(regime, result, origin="shared")

    # -- reporting ----------------------------------------------------------------------------
    def progress_line(self) -> str:
        return self.budget.line()

    def trial_params(self, key: str) -> dict[str, str]:
        seeded = {"optuna.seeded_by": "model"} if key in self.seeded else {}
        return {"optuna.sampler": str(self.search.sampler), **self._origin.get(key, {}),
                **seeded}

    def next_candidates(self, n: int = 3) -> list[PlannedTrial]:
        """What the search would measure next (grid and Optuna samplers: in plan order)."""
        out = [p for p in self._order if p.feasible and p.config.key() not in self._seen]
        return out[:n]

    def summary_lines(self) -> list[str]:
        lines = [f"search ({str(self.search.sampler)}, objective {str(self.search.objective)}"
                 f"): {self.budget.line()}; stopped: {self.stop_reason or 'done'}"]
        best = best_per_regime(list(self.done.values()), self.spec)
        for regime, levels in self.regimes.items():
            found = best[regime]
            if found is None:
                lines.append(f"  {regime} {levels}: no measured config meets the SLOs")
            else:
                r, s = found
                lines.append(f"  {regime} {levels}: best {r.config.label()} ({r.key}) "
                             f"{s.value:.1f}")
            lines += [f"    pareto: {t}" for t in self._pareto(regime)]
        nxt = self.next_candidates()
        if nxt:
            lines.append("  would measure next: " + "; ".join(
                f"{p.config.label()} ({p.config.key()})" for p in nxt))
        return lines

    def _pareto(self, regime: str) -> list[str]:
        if not self.search.also_minimize:
            return []
        names = [str(self.search.objective), *(m.value for m in self.search.also_minimize)]
        out = []
        for t in self.studies[regime].best_trials:
            if max(t.user_attrs.get(_CONSTRAINTS, [0.0])) > 0:
                continue
            key = t.user_attrs.get("key", "?")
            r = self.done.get(key)
            label = r.config.label() if r else key
            out.append(f"{label}: " + ", ".join(f"{n} {v:.1f}" for n, v in zip(names, t.values)))
        return out
