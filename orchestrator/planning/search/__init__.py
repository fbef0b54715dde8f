"""Search strategies: which trial to run next, told each result (ask/tell). One module per
strategy, one contract for all (``base.Searcher``; tests/unit/test_searcher_contract.py):

- ``base``: the ``Searcher`` contract (ask, tell, pruned, waiting, budgets).
- ``grid``: ``GridSearcher``, every feasible trial once, in plan order.
- ``study``: ``StudySearcher``, one Optuna study per load regime (grid, random, TPE,
  NSGA-II samplers), stopped by the spec's budget.
- ``guided``: ``GuidedSearcher``, the performance model ranks the space, recalibrated as
  trials finish.
- ``reference_first``: ``ReferenceFirst``, any of them with the quality reference first.

``make_searcher`` builds the spec's. Every searcher skips trials whose final result the
ledger already holds.
"""

from __future__ import annotations

import math
from pathlib import Path

from actors.contracts.results import TrialResult
from orchestrator.planning.plan import PlannedTrial, spec_shape
from orchestrator.planning.quality import reference_trial
from orchestrator.planning.regimes import level_objective
from orchestrator.planning.search.base import Fits, Searcher
from orchestrator.planning.search.grid import GridSearcher
from orchestrator.planning.search.guided import GuidedSearcher, Refit
from orchestrator.planning.search.reference_first import ReferenceFirst
from orchestrator.planning.search.study import StudySearcher
from orchestrator.spec import SLO, SearchSpec, SweepSpec
from orchestrator.spec.search import Sampler

__all__ = ["Searcher", "Fits", "GridSearcher", "StudySearcher", "GuidedSearcher",
           "objective_value", "make_searcher", "study_storage"]


def objective_value(result: TrialResult, search: SearchSpec) -> float | None:
    """The objective's geometric mean over the valid levels (or ``at_concurrency``'s), SLOs
    aside; None when the trial gave no valid measurement. Regimes: ``regimes.trial_scores``."""
    vals = []
    for lv in result.levels:
        if lv.status != "valid" or lv.metrics is None:
            continue
        if search.at_concurrency is not None and lv.concurrency != search.at_concurrency:
            continue
        v = level_objective(lv.metrics, search.objective, result.config.tp, SLO())
        if v > 0:
            vals.append(v)
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))  # geometric mean


def study_storage(spec: SweepSpec, sweep_dir: Path) -> str:
    """The Optuna storage URL: ``search.storage``, else sqlite in the sweep folder."""
    return spec.search.storage or f"sqlite:///{sweep_dir / 'optuna.db'}"


def make_searcher(spec: SweepSpec, planned: list[PlannedTrial], done: dict[str, TrialResult],
                  sweep_dir: Path, sweep_id: str, refit: Refit | None = None) -> Searcher:
    """The spec's searcher; ``refit`` (``orchestrator.results.refit.refit_profile``, handed
    down by the controller: planning does not import results) recalibrates for guided."""
    inner = _searcher(spec, planned, done, sweep_dir, sweep_id, refit)
    if spec.quality is None:
        return inner
    return ReferenceFirst(inner, reference_trial(spec.quality, planned), done)


def _searcher(spec: SweepSpec, planned: list[PlannedTrial], done: dict[str, TrialResult],
              sweep_dir: Path, sweep_id: str, refit: Refit | None) -> Searcher:
    if spec.search.kind != "optuna":
        return GridSearcher(planned, set(done))
    shape = spec_shape(spec)
    storage = study_storage(spec, sweep_dir)
    if spec.search.sampler == Sampler.GUIDED:
        return GuidedSearcher(planned, dict(done), spec, storage, sweep_id, shape, refit=refit)
    return StudySearcher(planned, dict(done), spec, storage, sweep_id, shape)

