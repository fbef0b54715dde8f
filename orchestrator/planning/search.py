"""Search strategies: which trial to run next, told each result (ask/tell).

``GridSearcher`` runs every feasible trial once. ``OptunaSearcher`` asks an
Optuna study (sqlite storage in the sweep folder, so ``resume`` continues the
same study) for categorical choices over the space's axes, up to a budget.
Both skip trials whose final result the ledger already holds.
"""

from __future__ import annotations

import abc
import math
from pathlib import Path

from actors.contracts.config import AXES, TrialConfig
from actors.contracts.results import TrialResult
from orchestrator.planning.plan import PlannedTrial
from orchestrator.spec import SearchSpec

__all__ = ["Searcher", "GridSearcher", "OptunaSearcher", "objective_value", "make_searcher"]


def objective_value(result: TrialResult, search: SearchSpec) -> float | None:
    """The number a search optimises; None when the trial gave no valid measurement."""
    vals = []
    for lv in result.levels:
        if lv.status != "valid" or lv.metrics is None:
            continue
        if search.at_concurrency is not None and lv.concurrency != search.at_concurrency:
            continue
        v = getattr(lv.metrics, search.objective)
        if v is not None and v > 0:
            vals.append(v)
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))  # geometric mean


def _distinct(values) -> list:
    out: list = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _minimize(search: SearchSpec) -> bool:
    return search.objective.endswith("_ms")


class Searcher(abc.ABC):
    """Contract: ``ask`` returns the next trial to run, or None when the search is over.

    ``ask`` never returns a trial twice or one the ledger already finished;
    infeasible trials it meets are handed back through ``pruned`` so the sweep
    records them. ``tell`` is called once per asked trial with its final result.
    """

    def __init__(self) -> None:
        self.pruned: list[PlannedTrial] = []

    @abc.abstractmethod
    def ask(self) -> PlannedTrial | None: ...

    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:  # noqa: B027
        """Record a result (grid search needs nothing)."""

    @property
    @abc.abstractmethod
    def total(self) -> int:
        """Trials this search will run at most (for progress)."""


class GridSearcher(Searcher):
    def __init__(self, planned: list[PlannedTrial], done: set[str]):
        super().__init__()
        self._todo = [p for p in planned if p.config.key() not in done]
        self._total = sum(1 for p in planned if p.feasible)

    def ask(self) -> PlannedTrial | None:
        while self._todo:
            p = self._todo.pop(0)
            if p.feasible:
                return p
            self.pruned.append(p)
        return None

    @property
    def total(self) -> int:
        return self._total


class OptunaSearcher(Searcher):
    """One categorical parameter per axis that varies (engine, profile, tp, ...).

    A combination the space does not contain (several space entries with
    different axes) is told PRUNED and never run.
    """

    def __init__(self, planned: list[PlannedTrial], done: dict[str, TrialResult],
                 search: SearchSpec, storage_dir: Path, study_name: str):
        super().__init__()
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.search = search
        self.by_key = {p.config.key(): p for p in planned}
        self.done = dict(done)  # never mutate the caller's view
        names = ("engine", *AXES)
        values = {n: _distinct(getattr(p.config, n) for p in planned) for n in names}
        extra_names = sorted({k for p in planned for k in p.config.extras})
        for k in extra_names:
            values[f"extra.{k}"] = _distinct(p.config.extras.get(k) for p in planned)
        self._axes = [n for n, v in values.items() if len(v) > 1] or ["engine"]
        self._space = {n: values[n] for n in self._axes}
        self._index = {self._combo(p.config): p for p in planned}
        self._n = len(planned)
        self._budget = search.budget or sum(1 for p in planned if p.feasible)
        sampler = {"tpe": optuna.samplers.TPESampler(seed=search.seed),
                   "random": optuna.samplers.RandomSampler(seed=search.seed),
                   "grid": optuna.samplers.GridSampler(self._space, seed=search.seed),
                   }[search.sampler]
        self.study = optuna.create_study(
            study_name=study_name, storage=f"sqlite:///{storage_dir / 'optuna.db'}",
            sampler=sampler, load_if_exists=True,
            direction="minimize" if _minimize(search) else "maximize")
        self._asked: dict[str, optuna.trial.Trial] = {}
        self._seen: set[str] = set(done)
        self._stale = 0
        self._n_pruned = 0

    @property
    def total(self) -> int:
        return self._budget

    def _combo(self, cfg: TrialConfig) -> tuple:
        return tuple(cfg.extras.get(n[6:]) if n.startswith("extra.") else getattr(cfg, n)
                     for n in self._axes)

    def ask(self) -> PlannedTrial | None:
        import optuna

        while len(self._seen) < min(self._budget + self._n_pruned, self._n):
            if self._stale > 4 * self._n:
                return None  # the sampler keeps proposing trials already run
            trial = self.study.ask()
            combo = tuple(trial.suggest_categorical(n, self._space[n]) for n in self._axes)
            planned = self._index.get(combo)
            if planned is None:  # not a point of the space
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                self._stale += 1
                continue
            key = planned.config.key()
            if key in self._seen:
                prev = self.done.get(key)
                value = objective_value(prev, self.search) if prev else None
                self.study.tell(trial, value, state=None if value is not None else
                                optuna.trial.TrialState.FAIL)
                self._stale += 1
                continue
            self._seen.add(key)
            if not planned.feasible:
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                self.pruned.append(planned)  # the controller records and pops these
                self._n_pruned += 1
                continue
            self._asked[key] = trial
            return planned
        return None

    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:
        import optuna

        self.done[planned.config.key()] = result
        trial = self._asked.pop(planned.config.key(), None)
        if trial is None:
            return
        value = objective_value(result, self.search)
        if value is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)


def make_searcher(search: SearchSpec, planned: list[PlannedTrial],
                  done: dict[str, TrialResult], sweep_dir: Path, sweep_id: str) -> Searcher:
    if search.kind == "optuna":
        return OptunaSearcher(planned, dict(done), search, sweep_dir, sweep_id)
    return GridSearcher(planned, set(done))
