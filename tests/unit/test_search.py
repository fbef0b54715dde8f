"""Grid and Optuna searchers over a real Optuna sqlite storage."""

from __future__ import annotations

import optuna

from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.planning.plan import plan_sweep
from orchestrator.planning.search import GridSearcher, objective_value
from orchestrator.planning.search.study import StudySearcher
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec


def _spec(kind="grid", budget=None):
    data = minimal_spec()
    data["workload"]["concurrency"] = [1]
    data["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4],
                      "kv_dtype": ["auto", "fp8"]}]
    data["search"] = {"kind": kind, "budget": budget, "seed": 1}
    return parse_spec(data)


def _result(planned, tput: float) -> TrialResult:
    m = LevelMetrics(output_tok_s=tput, total_tok_s=tput, requests_s=1)
    return TrialResult(key=planned.config.key(), config=planned.config, status=TrialStatus.OK,
                       levels=[LevelResult(concurrency=1, status="valid", metrics=m)])


def test_grid_runs_feasible_trials_once_and_hands_back_the_rest():
    spec = _spec()
    planned = plan_sweep(spec)  # 2 GPUs: tp=4 is infeasible
    done = {planned[0].config.key()}
    s = GridSearcher(planned, done)
    asked = []
    while (p := s.ask()) is not None:
        asked.append(p)
    assert all(p.feasible for p in asked)
    assert len(asked) == sum(p.feasible for p in planned) - 1
    assert {p.config.tp for p in s.pruned} == {4}


def test_optuna_respects_budget_prunes_infeasible_and_resumes(tmp_path):
    spec = _spec("optuna", budget=4)
    planned = plan_sweep(spec)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    s = StudySearcher(planned, {}, spec, storage, "study")
    asked = []
    while (p := s.ask()) is not None:
        asked.append(p)
        s.tell(p, _result(p, 100.0 * p.config.tp))
    assert len(asked) == 4 and "trial budget" in (s.stop_reason or "")
    assert len({p.config.key() for p in asked}) == 4
    assert all(p.feasible for p in asked)
    study = optuna.load_study(study_name="study.c=1", storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert {t.user_attrs["key"] for t in complete} == {p.config.key() for p in asked}
    assert abs(study.best_value - max(100.0 * p.config.tp for p in asked)) < 1e-6
    # the SLO as a constraint where Optuna's samplers and dashboards read it: Optuna 5's
    # ``constraints:slo`` system attr and the ``constraints`` list (<= 0: feasible)
    for t in complete:
        assert t.system_attrs["constraints:slo"] == t.user_attrs["constraints"][0] <= 0
    # a resumed search (same storage) does not repeat finished trials
    done = {p.config.key(): _result(p, 1.0) for p in asked}
    spec6 = spec.model_copy(update={"search": spec.search.model_copy(
        update={"budget": spec.search.budget.model_copy(update={"trials": 6})})})
    s2 = StudySearcher(planned, done, spec6, storage, "study")
    more = []
    while (p := s2.ask()) is not None:
        more.append(p)
        s2.tell(p, _result(p, 1.0))
    assert len(more) == 2 and not ({p.config.key() for p in more} & set(done))


def test_objective_is_geometric_mean_or_one_level():
    spec = _spec()
    p = plan_sweep(spec)[0]
    levels = [LevelResult(concurrency=c, status="valid",
                          metrics=LevelMetrics(output_tok_s=v, total_tok_s=v, requests_s=1))
              for c, v in ((1, 100.0), (4, 400.0))]
    r = TrialResult(key=p.config.key(), config=p.config, status=TrialStatus.OK, levels=levels)
    assert abs(objective_value(r, spec.search) - 200.0) < 1e-9
    at4 = objective_value(r, spec.search.model_copy(update={"at_concurrency": 4}))
    assert abs(at4 - 400.0) < 1e-9


def test_goodput_ranks_by_the_measured_per_request_goodput_and_never_crowns_an_slo_miss():
    from orchestrator.planning.regimes import best_per_regime, goodput_share, level_objective
    from orchestrator.spec.search import Objective

    data = minimal_spec()
    data["workload"]["concurrency"] = [1]
    data["space"] = [{"engine": "sim", "kv_dtype": ["auto", "fp8"]}]
    data["slo"] = {"ttft_p99_ms": 100}
    data["search"] = {"kind": "grid", "objective": "goodput"}
    spec = parse_spec(data)
    a, b = plan_sweep(spec)[:2]

    def result(planned, tput, good, ttft_p99):
        m = LevelMetrics(output_tok_s=tput, total_tok_s=tput, requests_s=1,
                         ttft_p50_ms=50, ttft_p99_ms=ttft_p99, goodput_tok_s=good)
        return TrialResult(key=planned.config.key(), config=planned.config,
                           status=TrialStatus.OK,
                           levels=[LevelResult(concurrency=1, status="valid", metrics=m)])

    fast_but_late = result(a, 1000.0, 700.0, ttft_p99=150)  # misses the SLO at its p99
    steady = result(b, 800.0, 790.0, ttft_p99=90)
    m = fast_but_late.levels[0].metrics
    assert level_objective(m, Objective.GOODPUT, 1, spec.slo) == 700.0  # measured
    # without a measured goodput (a prediction): the percentile lower bound (p50 meets: half)
    bare = m.model_copy(update={"goodput_tok_s": None})
    assert goodput_share(bare, spec.slo) == 0.5
    assert level_objective(bare, Objective.GOODPUT, 1, spec.slo) == 500.0
    (best,) = best_per_regime([fast_but_late, steady], spec).values()
    assert best is not None and best[0] is steady and abs(best[1].value - 790.0) < 1e-9
    assert best_per_regime([fast_but_late], spec) == {"c=1": None}
