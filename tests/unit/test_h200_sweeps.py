"""servesweep's own sweeps of real vLLM 0.26 on an H200 (tests/fixtures/h200-sweeps)."""

from __future__ import annotations

import shutil

import pytest

from actors.sim.shapes import load_shape
from orchestrator.calibrate import calibrate, collect_points
from orchestrator.cli import main
from orchestrator.ledger import Ledger
from orchestrator.spec import load_spec
from tests.conftest import FIXTURES, ROOT

SWEEPS = FIXTURES / "h200-sweeps"


@pytest.fixture
def h200_home(state_home):
    for d in SWEEPS.iterdir():
        if d.is_dir():
            shutil.copytree(d, state_home / "sweeps" / d.name)
    return state_home


def test_real_gpu_trials_verified_their_applied_config(h200_home):
    results = Ledger.open("h200-vllm-b").results()
    fp8 = next(r for r in results.values() if r.config.weights == "fp8")
    assert fp8.status.value == "ok"
    assert fp8.applied["weights"] == "fp8" and fp8.applied["kv_dtype"] == "fp8"
    assert fp8.applied["cuda_graphs"] is True
    eager = next(r for r in results.values() if not r.config.cuda_graphs)
    assert eager.applied["cuda_graphs"] is False
    for r in results.values():
        assert r.capacity.block_size == 16  # from vllm:cache_config_info
        assert all(lv.status == "valid" and lv.count_mismatches == 0 for lv in r.levels)
    # FP8 weights + FP8 KV decode faster than BF16 eager at every level
    for a, b in zip(fp8.levels, eager.levels):
        assert a.metrics.output_tok_s > b.metrics.output_tok_s


def test_report_of_a_real_sweep(h200_home, capsys):
    assert main(["report", "h200-vllm-2026"]) == 0
    out = capsys.readouterr().out
    assert "2 trials (2 ok)" in out and "Winner per concurrency" in out


def test_the_default_profile_predicts_real_h200_throughput_and_calibration_improves_it(
        h200_home):
    groups: dict = {}
    spec = None
    for ref in ("h200-vllm-2026", "h200-vllm-b"):
        ledger = Ledger.open(ref)
        spec = load_spec(ledger.dir / "spec.yaml")
        for name, pts in collect_points(list(ledger.results().values()), spec).items():
            groups.setdefault(name, []).extend(pts)
    shape = load_shape(path=str(ROOT / "deploy" / "h200" / "model-8b"))
    fit = calibrate(groups["vllm"], spec, shape, "vllm", max_evals=25)
    assert len(groups["vllm"]) == 16
    assert fit.error_before < 0.12  # the uncalibrated model is already close to the GPU
    assert fit.error_after < fit.error_before
