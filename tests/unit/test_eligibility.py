"""One rule decides who may win: every ranking path (winners per level and per regime,
the search's scores, the export) asks ``planning.eligibility`` and agrees with it."""

from __future__ import annotations

import pytest

from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.states import LevelFlag, TrialStatus
from orchestrator.planning.eligibility import Ineligible, why_not
from orchestrator.planning.plan import plan_sweep
from orchestrator.planning.regimes import best_per_regime, trial_scores
from orchestrator.results.analysis import winners
from orchestrator.results.export import regime_winners
from orchestrator.spec import SLO, parse_spec
from tests.conftest import minimal_spec

pytestmark = pytest.mark.unit


def _level(c: int, tput: float, flags: list[LevelFlag] | None = None,
           status: str = "valid", ttft_p99: float = 50.0) -> LevelResult:
    m = LevelMetrics(output_tok_s=tput, total_tok_s=tput, requests_s=1,
                     ttft_p50_ms=ttft_p99, ttft_p99_ms=ttft_p99)
    return LevelResult(concurrency=c, status=status, metrics=m, flags=flags or [])


def test_why_not_lists_every_reason_in_order():
    assert why_not(_level(1, 10)) == []
    bad = _level(1, 10, [LevelFlag.UNVERIFIED, LevelFlag.SIM_BEHIND], status="invalid",
                 ttft_p99=900)
    assert why_not(bad, slo=SLO(ttft_p99_ms=100)) == [
        Ineligible.INVALID, Ineligible.UNVERIFIED, Ineligible.SIM_BEHIND, Ineligible.SLO]
    assert why_not(bad, trust_usage=True) == [Ineligible.INVALID, Ineligible.SIM_BEHIND]
    no_p99 = LevelResult(concurrency=1, status="valid", metrics=LevelMetrics(
        output_tok_s=1, total_tok_s=1, requests_s=1))
    assert why_not(no_p99, slo=SLO(ttft_p99_ms=100)) == [Ineligible.SLO]  # unknown misses
    assert why_not(LevelResult(concurrency=1, status="valid")) == [Ineligible.NO_METRICS]


@pytest.fixture
def two_trials():
    """A config far faster at every level but late (``sim_behind``) at c=4, and a modest
    one measured on time."""
    data = minimal_spec()
    data["space"] = [{"engine": "sim", "profile": ["vllm"], "cuda_graphs": [True, False]}]
    spec = parse_spec(data)
    fast_cfg, modest_cfg = (p.config for p in plan_sweep(spec))
    fast = TrialResult(key=fast_cfg.key(), config=fast_cfg, status=TrialStatus.OK, levels=[
        _level(1, 900), _level(4, 3000, [LevelFlag.SIM_BEHIND])])
    modest = TrialResult(key=modest_cfg.key(), config=modest_cfg, status=TrialStatus.OK,
                         levels=[_level(1, 100), _level(4, 300)])
    return spec, fast, modest


def test_a_sim_behind_level_wins_nowhere(two_trials):
    spec, fast, modest = two_trials
    ws = {w.concurrency: w for w in winners([fast, modest], spec.slo)}
    assert ws[1].key == fast.key and ws[4].key == modest.key and ws[4].candidates == 1
    only_late = {w.concurrency: w for w in winners([fast], spec.slo)}
    assert only_late[4].key is None
    assert only_late[4].note == ("no level may win: 1 sim_behind (raise sim.time_scale, "
                                 "or run on an idle host)")
    exported = {r.regime: r for r in regime_winners(spec, [fast, modest])}
    assert exported["c=4"].key == modest.key and exported["c=1"].key == fast.key


def test_the_search_scores_a_sim_behind_level_as_unmeasured(two_trials):
    spec, fast, modest = two_trials
    scores = trial_scores(fast, spec)
    assert scores["c=1"].value == pytest.approx(900)
    assert scores["c=4"].value is None  # every sampler and guided read this: no value
    best = best_per_regime([fast, modest], spec)
    assert best["c=4"][0].key == modest.key
