"""servesweep's own sweeps of real vLLM 0.26 on an H200 (tests/fixtures/h200-sweeps)."""

from __future__ import annotations

import shutil

import pytest

from actors.contracts.shapes import load_shape
from orchestrator.commands.cli import main
from orchestrator.results.calibrate import calibrate, collect_points
from orchestrator.results.ledger import Ledger
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
    assert fp8.applied.weights == "fp8" and fp8.applied.kv_dtype == "fp8"
    assert fp8.applied.cuda_graphs is True
    eager = next(r for r in results.values() if not r.config.cuda_graphs)
    assert eager.applied.cuda_graphs is False
    for r in results.values():
        assert r.capacity.block_size == 16  # from vllm:cache_config_info
        assert all(lv.status == "valid" and lv.count_mismatches == 0 for lv in r.levels)
    # FP8 weights + FP8 KV decode faster than BF16 eager at every level
    for a, b in zip(fp8.levels, eager.levels):
        assert a.metrics.output_tok_s > b.metrics.output_tok_s


def test_report_of_a_real_sweep(h200_home, capsys):
    assert main(["report", "h200-vllm-2026"]) == 0
    out = capsys.readouterr().out
    assert "2 trials (2 ok)" in out and "Winner per level" in out


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
    # 15 factors: a trust-region step's Jacobian alone takes 16 evaluations
    fit = calibrate(groups["vllm"], spec, shape, "vllm", max_evals=40)
    assert len(groups["vllm"]) == 16
    assert fit.error_before < 0.12  # the uncalibrated model is already close to the GPU
    assert fit.error_after < fit.error_before


def test_real_tensor_parallel_sweep_on_two_h200s_and_the_sims_ranking(h200_home):
    """TP 1 vs 2 on the 2 x H200 machine: servesweep verified the TP each server ran with;
    TP 2 holds half the weights per GPU, twice the KV pool, and is faster at every level,
    and the sim's default profile (uncalibrated) ranks the two the same way."""
    from orchestrator.results.calibrate import predict_points

    ledger = Ledger.open("h200x2-vllm-tp")
    spec = load_spec(ledger.dir / "spec.yaml")
    by_tp = {r.config.tp: r for r in ledger.results().values()}
    assert set(by_tp) == {1, 2}
    for tp, r in by_tp.items():
        assert r.status.value == "ok" and r.applied.tp == tp
        assert all(lv.status == "valid" and lv.count_mismatches == 0 for lv in r.levels)
    assert by_tp[2].applied.get("weights_gib") < 0.55 * by_tp[1].applied.get("weights_gib")
    assert by_tp[2].applied.kv_pool_blocks > 2 * by_tp[1].applied.kv_pool_blocks
    points = collect_points(list(by_tp.values()), spec)["vllm"]
    shape = load_shape(path=str(ROOT / "deploy" / "h200" / "model-8b"))
    preds = predict_points(points, spec, shape, "vllm", {})
    measured = {(p.trial.config.tp, p.concurrency): p.measured["output_tok_s"] for p in points}
    predicted = {(p.trial.config.tp, p.concurrency): pr["output_tok_s"]
                 for p, pr in zip(points, preds)}
    for c in spec.workload.concurrency:
        assert measured[2, c] > 1.3 * measured[1, c]
        assert predicted[2, c] > predicted[1, c]
    errors = [abs(predicted[k] / measured[k] - 1) for k in measured]
    assert sum(errors) / len(errors) < 0.15


def test_every_real_level_reports_the_median_of_its_rounds_not_the_best(h200_home):
    from actors.loadgen.stats import median

    levels = [lv for d in SWEEPS.iterdir() if d.is_dir()
              for r in Ledger.open(d.name).results().values() for lv in r.levels]
    # the 2026-11-29 sweeps, the long-prompt one, the 128-token and 2048-token of 12-01
    # early (d, e), then those of 12-01 evening (f: 128 tokens, g: 2048 tokens), then the
    # 1B-like and 3B-like shapes of 12-03 (h, i: 1024 + 512 tokens) and the 1B follow-up (j)
    # and the user's traffic of 12-03 (k, l: three Poisson rates each, one round a level),
    # and of 12-04 the quality sweep (4 configs x c=8, c=64) and the 1B cliff's capture-size
    # A/B (m: 2 configs x c=128, c=256), then m again with the stacks sampled and the short
    # profiles (`profile-model`) of the 1B-like and 3B-like shapes (3 configs x c=1, c=32),
    # and of 12-05 the 1B-like profile and sweep h on one node (6 levels, then 15), and of
    # 12-06 on one H100 node the 1B-like shape at four request lengths (n twice, o, p, q),
    # and of 12-07 sweep h again on another H100 node (15), and the cliff's onset on a third
    # (r: 2 configs x 7 levels, c = 1-256), then on a fourth its levels again with three
    # rounds each (s: 2 x 8), the onset in steps of 8 (t: 7), vLLM's output chunk at 512
    # (u: 6) and the 8B with it (v: 2 levels, two rounds)
    assert len(levels) == 24 + 15 + 15 + 10 + 10 + 10 + 15 + 15 + 8 + 6 + 6 + 8 + 4 + 4 + 6 + 6 \
        + 6 + 15 + (2 + 2 + 3 + 2 + 3) + 15 + 14 + 16 + 7 + 6 + 2
    closed = [lv for lv in levels if lv.open_loop is None]
    assert len(closed) == 150 + 6 + 15 + 12 + 15 + 14 + 16 + 7 + 6 + 2
    assert sum(len(lv.rounds) == 3 for lv in closed) == 16 + 7 + 6
    for lv in closed:
        tputs = [rr.output_tok_s for rr in lv.rounds]
        assert len(tputs) in (2, 3) and lv.metrics.output_tok_s == pytest.approx(median(tputs))
        assert lv.metrics.output_tok_s < max(tputs)
    for lv in levels:  # open loop: held its schedule, measured over its steady window
        if lv.open_loop is not None:
            ol = lv.open_loop
            assert lv.key.startswith("rate=") and ol.late_sends == 0
            assert ol.achieved_rps == pytest.approx(ol.scheduled_rps, rel=0.01)
            assert ol.window_kept > 0 and len(lv.rounds) == 1


def test_mlflow_gets_each_trials_ready_and_compile_seconds(h200_home):
    """Startup per config is a figure in MLflow, as on the page: ready (launch to healthy)
    and torch.compile's seconds from vLLM's own log."""
    from orchestrator.results.records import trial_record

    sweep = next(d.name for d in SWEEPS.iterdir() if d.name.startswith("h200-vllm-h-"))
    for r in Ledger.open(sweep).results().values():
        metrics = {name: value for name, value, _ in
                   trial_record(r, sweep, None, 0.0).metrics}
        assert metrics["startup_s"] == pytest.approx(r.startup_s)
        assert metrics["compile_s"] == r.applied.facts["compile_s"] > 0


def test_the_h200_quality_sweep_graded_every_precision_against_its_reference(h200_home, capsys):
    """Issue 31 on the H200: BF16, FP8 KV, FP8 weights and both, each graded by lm-eval on
    the same 500 questions on its own warm server, the reference first, every drop paired."""
    from actors.contracts.quality import Gate, QualityStatus

    ledger = Ledger.open("h200-quality")
    results = ledger.results()
    settings = {(r.config.weights, r.config.kv_dtype) for r in results.values()}
    assert settings == {("bf16", "auto"), ("bf16", "fp8"), ("fp8", "auto"), ("fp8", "fp8")}
    first = next(iter(results.values()))
    assert (first.config.weights, first.config.kv_dtype) == ("bf16", "auto")
    for r in results.values():
        q, v = r.quality, r.quality_verdict
        assert q is not None and q.status is QualityStatus.MEASURED and q.task is not None
        assert q.task.n == 500 and len(q.task.per_question) == 500
        assert r.applied is not None and r.applied.weights == r.config.weights
        assert v is not None and v.n == 500
        if r.key == first.key:
            assert v.gate is Gate.REFERENCE
        else:
            assert v.gate is Gate.PASSED and v.drop_lo is not None and v.drop_hi is not None
            assert v.drop_hi <= 5 and v.p_value is not None
    # one node session, one trained model: every config measured the reference's weights,
    # so every delta pairs like with like (the 12-03 run's FP8 rows did not: a lost node)
    assert len({r.quality.model_fingerprint for r in results.values()}) == 1
    for r in results.values():
        agreement = r.quality.agreement
        if r.key != first.key:  # same weights: quantisation moves logprobs a little, not 8.7
            assert agreement is not None and agreement.identical_share > 0.1
            assert agreement.logprob_mad is not None and agreement.logprob_mad < 1.0
    assert main(["report", ledger.sweep_id]) == 0
    out = capsys.readouterr().out
    assert "accuracy (drop [95% CI])" in out and "not significant" in out


def test_a_larger_cuda_graph_capture_does_not_remove_the_1b_cliff_at_256(h200_home):
    """Issue 30's cliff (1B-like, 1024 + 512 tokens): steps mixing a prompt with 256 decodes
    exceed vLLM's default capture size (512 tokens), so they might run without a graph. The
    A/B read from the servers' own logs: capture up to 512 vs 2048; the fall from c=128 to
    c=256 stays in both, so that is not its cause."""
    sweep = next(d.name for d in SWEEPS.iterdir() if d.name.startswith("h200-vllm-m-"))
    results = list(Ledger.open(sweep).results().values())
    assert sorted(r.applied.graph_max_batch for r in results) == [512, 2048]
    for r in results:
        by_c = {lv.concurrency: lv for lv in r.levels}
        assert all(lv.status == "valid" and lv.count_mismatches == 0 for lv in by_c.values())
        assert by_c[256].metrics.output_tok_s < 0.7 * by_c[128].metrics.output_tok_s
        assert by_c[256].metrics.itl_p50_ms > 3 * by_c[128].metrics.itl_p50_ms
