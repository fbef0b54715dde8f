"""One contract suite for every searcher (as Optuna's ``StorageTestCase`` is for storages).

``orchestrator.planning.search.base.Searcher`` states the contract; every strategy passes the
same tests here: the grid, each Optuna sampler (grid, random, TPE, NSGA-II), the guided
search, and ``ReferenceFirst`` around a grid and around TPE. The tests drive a searcher as
the controller does (ask until None, tell each result once), over a real Optuna sqlite
storage, with results that are a fixed function of the config.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.planning.plan import PlannedTrial, plan_sweep
from orchestrator.planning.search import make_searcher
from orchestrator.planning.search.base import Searcher
from orchestrator.planning.search.reference_first import ReferenceFirst
from orchestrator.spec import SweepSpec, parse_spec
from tests.conftest import minimal_spec

pytestmark = pytest.mark.unit

BUDGET = 5


def _spec(kind: str, sampler: str | None, budget: int | None) -> SweepSpec:
    data = minimal_spec()
    data["workload"]["concurrency"] = [1, 16]
    data["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4],
                      "kv_dtype": ["auto", "fp8"], "cuda_graphs": [True, False]}]
    search: dict = {"kind": kind, "seed": 3}
    if sampler:
        search["sampler"] = sampler
    if sampler == "nsga2":
        search["also_minimize"] = ["ttft_p99_ms"]
    if budget:
        search["budget"] = budget
    data["search"] = search
    return parse_spec(data)


def _result(p: PlannedTrial) -> TrialResult:
    """A fixed function of the config: what a deterministic engine would measure."""
    c = p.config
    base = 100.0 * c.tp * (1.3 if c.profile == "trtllm" else 1.0) \
        * (1.1 if c.kv_dtype == "fp8" else 1.0) * (1.05 if c.cuda_graphs else 1.0)
    levels = [LevelResult(concurrency=n, status="valid", metrics=LevelMetrics(
        output_tok_s=base * n ** 0.5, total_tok_s=2 * base * n ** 0.5, requests_s=1.0,
        ttft_p99_ms=10.0 * n / c.tp)) for n in (1, 16)]
    return TrialResult(key=c.key(), config=c, status=TrialStatus.OK, levels=levels)


Factory = Callable[[SweepSpec, list[PlannedTrial], dict[str, TrialResult], Path], Searcher]


def _plain(spec: SweepSpec, planned: list[PlannedTrial], done: dict[str, TrialResult],
           folder: Path) -> Searcher:
    folder.mkdir(parents=True, exist_ok=True)  # the study's sqlite file lives there
    return make_searcher(spec, planned, done, folder, "contract")


def _reference_first(spec: SweepSpec, planned: list[PlannedTrial],
                     done: dict[str, TrialResult], folder: Path) -> Searcher:
    folder.mkdir(parents=True, exist_ok=True)
    ref = next(p for p in planned if p.feasible and p.config.tp == 1
               and p.config.profile == "vllm" and p.config.kv_dtype == "auto"
               and p.config.cuda_graphs)
    return ReferenceFirst(make_searcher(spec, planned, done, folder, "contract"), ref, done)


CASES: list[tuple[str, str, str | None, int | None, Factory]] = [
    ("grid", "grid", None, None, _plain),
    ("optuna-grid", "optuna", "grid", BUDGET, _plain),
    ("random", "optuna", "random", BUDGET, _plain),
    ("tpe", "optuna", "tpe", BUDGET, _plain),
    ("nsga2", "optuna", "nsga2", BUDGET, _plain),
    ("guided", "optuna", "guided", BUDGET, _plain),
    ("reference-first-grid", "grid", None, None, _reference_first),
    ("reference-first-tpe", "optuna", "tpe", BUDGET, _reference_first),
]


def _drive(s: Searcher, limit: int | None = None) -> list[PlannedTrial]:
    """Ask and tell as the controller does (a waiting searcher is told, then asked again)."""
    asked: list[PlannedTrial] = []
    while limit is None or len(asked) < limit:
        p = s.ask()
        if p is None:
            assert not s.waiting, "waiting with nothing in flight: the search would hang"
            break
        asked.append(p)
        s.tell(p, _result(p))
    return asked


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def case(request, tmp_path):
    name, kind, sampler, budget, factory = request.param
    spec = _spec(kind, sampler, budget)
    return spec, plan_sweep(spec), factory, tmp_path


def test_never_the_same_trial_twice_and_only_feasible_ones(case):
    spec, planned, factory, folder = case
    asked = _drive(factory(spec, planned, {}, folder))
    keys = [p.config.key() for p in asked]
    assert keys and len(keys) == len(set(keys))
    assert all(p.feasible for p in asked)


def test_budgets_are_respected(case):
    spec, planned, factory, folder = case
    asked = _drive(factory(spec, planned, {}, folder))
    feasible = sum(p.feasible for p in planned)
    budget = spec.search.budget.trials if spec.search.budget else None
    if budget is None:
        assert len(asked) == feasible  # a grid measures every feasible trial
    else:  # the quality reference counts toward it like any trial
        assert len(asked) <= min(budget, feasible)


def test_pruned_trials_are_handed_back_with_their_reason(case):
    spec, planned, factory, folder = case
    s = factory(spec, planned, {}, folder)
    _drive(s)
    assert all(not p.feasible and p.reason for p in s.pruned)
    keys = [p.config.key() for p in s.pruned]
    assert len(keys) == len(set(keys))  # each handed back once
    if spec.search.kind != "optuna":  # a grid meets every trial, so it hands back all
        assert set(keys) == {p.config.key() for p in planned if not p.feasible}


def test_a_trial_told_is_never_asked_again_and_the_ledger_skips_it(case):
    spec, planned, factory, folder = case
    first = _drive(factory(spec, planned, {}, folder), limit=2)
    done = {p.config.key(): _result(p) for p in first}
    later = _drive(factory(spec, planned, done, folder / "again"))
    assert not ({p.config.key() for p in later} & set(done))


def test_resume_is_equivalent_to_no_interruption(case, tmp_path):
    spec, planned, factory, folder = case
    whole = _drive(factory(spec, planned, {}, tmp_path / "whole"))
    part = _drive(factory(spec, planned, {}, folder), limit=2)
    done = {p.config.key(): _result(p) for p in part}
    rest = _drive(factory(spec, planned, done, folder))  # same storage: the study resumes
    resumed = [p.config.key() for p in part + rest]
    assert len(resumed) == len(set(resumed))
    assert len(resumed) == len(whole)  # the same number of trials in all
    deterministic = spec.search.kind != "optuna" or spec.search.sampler.value in ("grid",
                                                                                   "guided")
    if deterministic and factory is _plain:
        assert set(resumed) == {p.config.key() for p in whole}
