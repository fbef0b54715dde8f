"""``GridSearcher``: every feasible trial once, in plan order."""

from __future__ import annotations

from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.search.base import Fits, Searcher

__all__ = ["GridSearcher"]


class GridSearcher(Searcher):
    def __init__(self, planned: list[PlannedTrial], done: set[str]):
        super().__init__()
        self._todo = [p for p in planned if p.config.key() not in done]
        self._total = sum(1 for p in planned if p.feasible)

    def ask(self, fits: Fits | None = None) -> PlannedTrial | None:
        self.blocked = False
        while self._todo:
            p = self._todo[0]
            if not p.feasible:
                self.pruned.append(self._todo.pop(0))
                continue
            if fits is not None and not fits(p):
                self.blocked = True
                return None
            return self._todo.pop(0)
        return None

    @property
    def total(self) -> int:
        return self._total
