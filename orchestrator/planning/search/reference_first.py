"""``ReferenceFirst``: any searcher, with the quality reference measured first.

Every quality delta is paired against the reference config's answers, and agreement
compares each config's continuations with the reference's, so the reference runs before
any other trial, whatever the sampler (grid, Optuna's, guided). Until its result is told,
``ask`` returns None with ``waiting`` set (the controller keeps polling rather than ending
the search). Its result is then told to the wrapped searcher as any trial's is (an Optuna
study learns from it; it counts toward the budget, so a resumed search, which finds it in
the ledger, runs the same number of trials). When the wrapped searcher later proposes the
reference itself, it is told the known result at once and asked again, so no config runs
twice.
"""

from __future__ import annotations

from actors.contracts.results import TrialResult
from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.search.base import Fits, Searcher

__all__ = ["ReferenceFirst"]


class ReferenceFirst(Searcher):
    def __init__(self, inner: Searcher, reference: PlannedTrial,
                 done: dict[str, TrialResult]):
        super().__init__()
        self.inner, self.reference = inner, reference
        self.key = reference.config.key()
        self.result: TrialResult | None = done.get(self.key)
        self._asked = self.result is not None

    @property
    def pruned(self) -> list[PlannedTrial]:
        return self.inner.pruned

    @pruned.setter
    def pruned(self, value: list[PlannedTrial]) -> None:
        pass  # the wrapped searcher's list is the one the controller drains

    def ask(self, fits: Fits | None = None) -> PlannedTrial | None:
        self.waiting = False
        if not self._asked:
            self._asked = True
            return self.reference
        if self.result is None:
            self.waiting = True
            return None
        while True:
            planned = self.inner.ask(fits)
            self.blocked, self.stop_reason = self.inner.blocked, self.inner.stop_reason
            self.waiting = self.inner.waiting
            if planned is None or planned.config.key() != self.key:
                return planned
            self.inner.tell(planned, self.result)

    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:
        if planned.config.key() == self.key:
            self.result = result
        self.inner.tell(planned, result)

    @property
    def total(self) -> int:
        return self.inner.total

    def progress_line(self) -> str:
        return self.inner.progress_line()

    def summary_lines(self) -> list[str]:
        return self.inner.summary_lines()

    def trial_params(self, key: str) -> dict[str, str]:
        return self.inner.trial_params(key)
