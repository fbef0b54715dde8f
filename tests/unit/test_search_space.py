"""Search spaces, regimes, SLO constraints, budgets and the samplers, on the model directly."""

from __future__ import annotations

import pytest

from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.states import FailureClass, TrialStatus
from orchestrator.errors import SpecError
from orchestrator.planning.model_view import predicted_result
from orchestrator.planning.plan import plan_sweep, spec_shape
from orchestrator.planning.regimes import best_per_regime, trial_scores
from orchestrator.planning.search.guided import GuidedSearcher
from orchestrator.planning.search.study import StudySearcher
from orchestrator.planning.space import ParamKind, Space
from orchestrator.results.refit import refit_profile
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec


def _spec(search: dict, space: list | None = None, **over):
    data = minimal_spec(**over)
    data["workload"].update(concurrency=[1, 4, 16])
    data["search"] = {"kind": "optuna", **search}
    data["space"] = space or [{"engine": "sim", "profile": ["vllm", "trtllm"],
                               "cuda_graphs": [True, False], "kv_dtype": ["auto", "fp8"]}]
    return parse_spec(data)


TIED = {"max_num_seqs": {"type": "int", "low": 4, "high": 64, "log": True, "points": 5,
                         "at_least": "highest_concurrency"},
        "graph_max_batch": {"same_as": "max_num_seqs", "when": {"cuda_graphs": True}}}


def test_conditional_and_tied_params_expand_and_map_to_optuna():
    spec = _spec({"params": TIED})
    planned = plan_sweep(spec)
    for p in planned:
        c = p.config
        assert c.max_num_seqs is not None and c.max_num_seqs >= 16  # at least the top level
        assert c.graph_max_batch == (c.max_num_seqs if c.cuda_graphs else None)
    assert {p.config.max_num_seqs for p in planned} == {16, 23, 32, 45, 64}  # 5 log points
    space = Space(planned, spec)
    kinds = {p.name: p.kind for p in space.params}
    assert kinds["max_num_seqs"] is ParamKind.INT and "graph_max_batch" not in kinds
    for p in planned:  # every planned trial is one point of the Optuna space
        assert space.lookup(space.assignment(p)) is p


def test_param_only_for_one_engine_and_only_when_graphs_on():
    spec = _spec({"params": {"graph_max_batch": {"type": "int", "low": 8, "high": 32,
                                                 "step": 8, "when": {"cuda_graphs": True}}}},
                 space=[{"engine": "sim", "cuda_graphs": [True, False]}])
    planned = plan_sweep(spec)
    assert sorted((p.config.cuda_graphs, p.config.graph_max_batch) for p in planned) == [
        (False, None), (True, 8), (True, 16), (True, 24), (True, 32)]
    space = Space(planned, spec)
    gmb = next(p for p in space.params if p.name == "graph_max_batch")
    assert gmb.when == (("cuda_graphs", True),)
    eager = next(p for p in planned if not p.config.cuda_graphs)
    assert "graph_max_batch" not in space.assignment(eager)


@pytest.mark.parametrize("search, needle", [
    ({"objective": "total_tok_s"}, "search.objective"),
    ({"params": {"weights": {"type": "int", "low": 1, "high": 2}}}, "not a searchable field"),
    ({"params": {"gpu_memory_fraction": {"type": "float", "low": 0.8, "high": 0.9}}},
     "needs a step"),
    ({"regimes": {"x": [1, 8]}}, "search.regimes.x: levels ['c=8']"),
    ({"sampler": "nsga2"}, "needs also_minimize"),
    ({"budget": {"gpu_hours": -1}}, "search.budget.gpu_hours"),
    # extra.<option> ranges are checked against the engine's typed extras when the spec loads
    ({"params": {"extra.jitter": {"type": "float", "low": 0.1, "high": 0.7, "step": 0.2}}},
     "search.params.extra.jitter.high: 0.7 is refused by engine 'sim'"),
    ({"params": {"extra.chunk_budget": {"type": "int", "low": 1, "high": 4}}},
     "'chunk_budget' is not an option of engine 'sim' "
     "(its options: fault, jitter, output_proc_chunk)"),
])
def test_bad_search_specs_name_the_field_and_the_fix(search, needle):
    with pytest.raises(SpecError) as err:
        _spec(search)
    assert needle in str(err.value)


def test_a_param_given_in_the_space_too_is_refused():
    with pytest.raises(SpecError, match="give it in one place"):
        _spec({"params": TIED}, space=[{"engine": "sim", "max_num_seqs": [8]}])


def _level(c: int, tput: float, ttft_p99: float) -> LevelResult:
    m = LevelMetrics(output_tok_s=tput, total_tok_s=tput, requests_s=1, ttft_p50_ms=ttft_p99,
                     ttft_p99_ms=ttft_p99)
    return LevelResult(concurrency=c, status="valid", metrics=m)


def test_an_slo_violating_config_never_wins_and_failures_score_nothing():
    spec = _spec({"regimes": {"low": [1, 4], "high": [16]}}, slo={"ttft_p99_ms": 100})
    a, b, f = (p.config for p in plan_sweep(spec)[:3])
    fast_but_slow_ttft = TrialResult(key=a.key(), config=a, status=TrialStatus.OK, levels=[
        _level(1, 900, 50), _level(4, 900, 50), _level(16, 9000, 500)])
    modest = TrialResult(key=b.key(), config=b, status=TrialStatus.OK, levels=[
        _level(1, 100, 50), _level(4, 100, 50), _level(16, 1000, 90)])
    failed = TrialResult(key=f.key(), config=f, status=TrialStatus.FAILED,
                         reason=FailureClass.STARTUP_OOM)
    best = best_per_regime([fast_but_slow_ttft, modest, failed], spec)
    assert best["low"][0].key == a.key()
    assert best["high"][0].key == b.key()  # a is 9x faster there, but misses the SLO
    s = trial_scores(fast_but_slow_ttft, spec)["high"]
    assert s.value == pytest.approx(9000) and s.violation == pytest.approx(4.0)
    assert all(v.value is None for v in trial_scores(failed, spec).values())


def _truth(spec):
    shape = spec_shape(spec)
    truth = {"vllm": {"gemm_eff": 0.5, "mem_eff": 0.6}, "trtllm": {"mem_eff": 0.95}}
    return shape, lambda cfg: predicted_result(cfg, spec, shape, truth)


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid", "nsga2"])
def test_samplers_with_several_in_flight_never_repeat_a_config(sampler):
    extra = {"also_minimize": ["ttft_p99_ms"]} if sampler == "nsga2" else {}
    spec = _spec({"sampler": sampler, "budget": 12, "params": TIED, **extra})
    shape, measure = _truth(spec)
    s = StudySearcher(plan_sweep(spec), {}, spec, None, "t", shape)
    asked, flight = [], []
    while True:
        while len(flight) < 3 and (p := s.ask()) is not None:
            flight.append(p)
        if not flight:
            break
        p = flight.pop(0)
        asked.append(p.config.key())
        s.tell(p, measure(p.config))
    assert len(asked) == 12 == len(set(asked))
    study = s.studies["c=1"]
    told = [t for t in study.trials if t.state.name == "COMPLETE" and not t.user_attrs.get(
        "repeat")]
    assert {t.user_attrs["key"] for t in told} == set(asked)  # every regime sees every trial
    if sampler == "nsga2":
        assert any("pareto" in line for line in s.summary_lines())


def test_gpu_hour_and_wall_budgets_stop_the_search():
    spec = _spec({"sampler": "random", "budget": {"gpu_hours": 0.01}})
    shape, measure = _truth(spec)
    s = StudySearcher(plan_sweep(spec), {}, spec, None, "t", shape)
    n = 0
    while (p := s.ask()) is not None:
        s.tell(p, measure(p.config))
        n += 1
    assert 0 < n < 8 and "GPU-hour budget" in (s.stop_reason or "")
    assert s.budget.gpu_hours <= 0.01
    now = [0.0]
    spec = _spec({"sampler": "random", "budget": {"wall_s": 25}})
    s = StudySearcher(plan_sweep(spec), {}, spec, None, "t", shape)
    s.budget.clock = lambda: now[0]
    s.budget.t0 = 0.0
    n = 0
    while (p := s.ask()) is not None:
        s.tell(p, measure(p.config))
        n += 1
        now[0] += 10  # each trial takes 10 s
    assert n == 3 and "wall-time budget" in (s.stop_reason or "")


def test_guided_converges_on_the_known_optimum_with_few_trials():
    # truth: the model with other vLLM efficiencies; the optimum is known from the grid
    spec = _spec({"sampler": "guided", "regimes": {"all": [1, 4, 16]}},
                 space=[{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2],
                         "cuda_graphs": [True, False], "kv_dtype": ["auto", "fp8"]}])
    shape, measure = _truth(spec)
    planned = plan_sweep(spec)
    truth = {p.config.key(): trial_scores(measure(p.config), spec)["all"].value
             for p in planned}
    optimum = max(truth, key=lambda k: truth[k] or 0)
    s = GuidedSearcher(planned, {}, spec, None, "g", shape, refit=refit_profile)
    asked = []
    while (p := s.ask()) is not None:
        asked.append(p.config.key())
        s.tell(p, measure(p.config))
    assert optimum in asked
    assert len(asked) < len(planned) / 2
    assert "converged" in (s.stop_reason or "")


def test_tpe_seeded_by_the_model_measures_its_top_picks_first_then_samples(tmp_path):
    from orchestrator.planning.model_view import predicted_levels
    from orchestrator.planning.regimes import score_levels

    spec = _spec({"sampler": "tpe", "seed_from_model": 2, "budget": 6, "params": TIED})
    shape, measure = _truth(spec)
    planned = plan_sweep(spec)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    s = StudySearcher(planned, {}, spec, storage, "t", shape)
    # the model's best at the first regime, as the planner predicts it
    preds = {p.config.key(): score_levels(predicted_levels(p.config, spec, shape), p.config,
                                          spec)["c=1"].value for p in planned}
    assert len(s.seeded) == 2 and preds[s.seeded[0]] == max(v or 0 for v in preds.values())
    asked = []
    while (p := s.ask()) is not None:
        asked.append(p.config.key())
        s.tell(p, measure(p.config))
    assert asked[:2] == s.seeded and len(asked) == 6 == len(set(asked))
    assert s.trial_params(asked[0])["optuna.seeded_by"] == "model"
    assert "optuna.seeded_by" not in s.trial_params(asked[3])
    # resumed on the same storage: nothing enqueued twice, the measured trials are known
    done = {k: measure(next(p for p in planned if p.config.key() == k).config) for k in asked}
    again = StudySearcher(planned, done, spec, storage, "t", shape)
    assert again.seeded == [] and again.ask() is None  # the budget of 6 is spent


def test_seed_from_model_is_refused_where_the_sampler_keeps_its_own_order():
    with pytest.raises(SpecError, match="seed_from_model seeds a sampling study"):
        _spec({"sampler": "guided", "seed_from_model": 3})
