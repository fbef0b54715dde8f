"""Winners, margins, noise and crossovers on hand-built results."""

from __future__ import annotations

from actors.contracts.config import TrialConfig
from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.results.analysis import crossovers, pareto_front, winners
from orchestrator.spec import SLO


def _trial(profile: str, tputs: dict[int, float], ttft99: float = 100.0,
           invalid: tuple[int, ...] = ()) -> TrialResult:
    cfg = TrialConfig(engine="sim", profile=profile)
    levels = [LevelResult(concurrency=c, status="invalid" if c in invalid else "valid",
                          metrics=LevelMetrics(output_tok_s=t, total_tok_s=t, requests_s=1,
                                               ttft_p99_ms=ttft99))
              for c, t in tputs.items()]
    return TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, levels=levels)


def test_winner_margin_noise_and_crossover():
    a = _trial("trtllm", {1: 110.0, 16: 1000.0, 64: 3000.0})
    b = _trial("vllm", {1: 100.0, 16: 990.0, 64: 3600.0})
    ws = winners([a, b], SLO(), band=0.05)
    assert [w.label.split()[0] for w in ws] == ["sim:trtllm", "sim:trtllm", "sim:vllm"]
    assert abs(ws[0].margin - 0.10) < 1e-9 and not ws[0].within_noise
    assert ws[1].within_noise  # +1% < 5% band
    xs = crossovers(ws)
    assert [x.between for x in xs] == [("c=16", "c=64")]
    assert xs[0].within_noise  # the c=16 winner is within noise


def test_invalid_levels_and_slo_exclude_candidates():
    a = _trial("trtllm", {1: 500.0}, invalid=(1,))
    b = _trial("vllm", {1: 100.0}, ttft99=5000.0)
    c = _trial("vllm", {1: 90.0}, ttft99=50.0).model_copy(
        update={"key": "c", "config": TrialConfig(engine="sim", profile="vllm", tp=2)})
    ws = winners([a, b, c], SLO(ttft_p99_ms=1000), band=0.05)
    assert ws[0].key == "c" and ws[0].candidates == 1
    assert winners([a], SLO(), 0.05)[0].note == ("no level may win: 1 invalid "
                                                 "(see the level's reason)")
    note = winners([b], SLO(ttft_p99_ms=1000), 0.05)[0].note
    assert note == "no level may win: 1 slo (misses a limit of the spec's slo)"


def test_pareto_front_drops_dominated():
    fast = _trial("trtllm", {8: 1000.0}, ttft99=200.0)
    slow_but_snappy = _trial("vllm", {8: 800.0}, ttft99=100.0)
    dominated = _trial("vllm", {8: 700.0}, ttft99=300.0).model_copy(
        update={"key": "d", "config": TrialConfig(engine="sim", profile="vllm", tp=2)})
    front = pareto_front([fast, slow_but_snappy, dominated], 8)
    assert set(front["key"]) == {fast.key, slow_but_snappy.key}
