"""The ``Searcher`` contract every strategy keeps (tests/unit/test_searcher_contract.py)."""

from __future__ import annotations

import abc
from collections.abc import Callable

from actors.contracts.results import TrialResult
from orchestrator.planning.plan import PlannedTrial

__all__ = ["Searcher", "Fits"]


Fits = Callable[[PlannedTrial], bool]


class Searcher(abc.ABC):
    """Contract: ``ask`` returns the next trial to run, or None when the search is over.

    ``ask`` never returns a trial twice or one the ledger already finished, and may be
    called again before earlier trials are told (several in flight). Given ``fits`` (the
    controller's packing: can this trial be placed now?), it returns only a trial that fits;
    when its next trial does not, it returns None with ``blocked`` True and keeps that trial
    for a later ``ask`` (the first trial that fits nowhere keeps a node from smaller ones).
    Infeasible trials it
    meets are handed back through ``pruned`` so the sweep records them. ``tell`` is called
    once per asked trial with its final result. ``stop_reason`` says why ``ask`` returned
    None early (a budget, a converged search); ``summary_lines`` what was found and what it
    would measure next; ``trial_params`` the search's params of a trial (its MLflow run).
    """

    def __init__(self) -> None:
        self.pruned: list[PlannedTrial] = []
        self.stop_reason: str | None = None
        self.blocked = False
        #: ``ask`` returned None because it waits on a result in flight (the search is
        #: not over: ask again after the next ``tell``)
        self.waiting = False

    @abc.abstractmethod
    def ask(self, fits: Fits | None = None) -> PlannedTrial | None: ...

    def tell(self, planned: PlannedTrial, result: TrialResult) -> None:  # noqa: B027
        """Record a result (grid search needs nothing)."""

    @property
    @abc.abstractmethod
    def total(self) -> int:
        """Trials this search will run at most (for progress)."""

    def progress_line(self) -> str:
        """Where the search stands against its budget (empty: the count says it all)."""
        return ""

    def summary_lines(self) -> list[str]:
        return []

    def trial_params(self, key: str) -> dict[str, str]:
        return {}
