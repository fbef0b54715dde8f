"""The calibration fit recovers factors the measurements were made with."""

from __future__ import annotations

from actors.contracts.config import TrialConfig
from actors.contracts.hardware import get_hardware
from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.shapes import get_preset
from actors.contracts.states import TrialStatus
from actors.sim.perf import SimConfig
from actors.sim.predict import build_engine, simulate_closed_loop
from orchestrator.results.calibrate import calibrate, collect_points
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec

TRUTH = {"gemm_eff": 0.45, "mem_eff": 0.6}


def _measured(graphs: bool, spec) -> TrialResult:
    shape, hw = get_preset("llama-3.1-8b"), get_hardware(spec.hardware)
    cfg = TrialConfig(engine="vllm", cuda_graphs=graphs)
    levels = []
    for c in spec.workload.concurrency:
        engine, _ = build_engine(shape, hw, "vllm", SimConfig(cuda_graphs=graphs), jitter=0.0,
                                 overrides=TRUTH)
        p = simulate_closed_loop(engine, c, 2 * c + 2, spec.workload.prompt_tokens,
                                 spec.workload.output_tokens)
        m = LevelMetrics(output_tok_s=p.output_tok_s, total_tok_s=p.total_tok_s, requests_s=1.0,
                         ttft_p50_ms=p.ttft_p50_ms, itl_p50_ms=p.itl_p50_ms)
        levels.append(LevelResult(concurrency=c, status="valid", metrics=m))
    return TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, levels=levels)


def test_fit_reduces_error_and_moves_towards_the_truth():
    data = minimal_spec()
    data["workload"] = {"prompt_tokens": 256, "output_tokens": 64, "concurrency": [1, 8, 64]}
    spec = parse_spec(data)
    results = [_measured(True, spec), _measured(False, spec)]
    groups = collect_points(results)
    assert list(groups) == ["vllm"] and len(groups["vllm"]) == 6
    fit = calibrate(groups["vllm"], spec, get_preset("llama-3.1-8b"), "vllm", max_evals=60)
    assert fit.error_before > 0.15
    assert fit.error_after < fit.error_before / 2
    for k, truth in TRUTH.items():
        assert abs(fit.fitted[k] - truth) < abs(fit.start[k] - truth)
