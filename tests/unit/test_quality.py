"""Quality beside speed: the statistics, the gate, the reference, the spec's rules.

The engines' side (lm-eval against real vLLM on CPU) is tests/e2e/test_quality_vllm_cpu.py.
"""

from __future__ import annotations

import math
import random

import pytest

from actors.contracts.config import TrialConfig
from actors.contracts.quality import (
    Agreement,
    Gate,
    GateOn,
    QualityResult,
    QualitySpec,
    QualityStatus,
    TaskScore,
)
from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.errors import SpecError
from orchestrator.planning.eligibility import Ineligible, why_not
from orchestrator.planning.plan import PlannedTrial, plan_sweep
from orchestrator.planning.quality import mcnemar_p, paired_drop, reference_trial, verdict
from orchestrator.planning.search.grid import GridSearcher
from orchestrator.planning.search.reference_first import ReferenceFirst
from orchestrator.spec import parse_spec
from orchestrator.spec.quality_checks import check_task_files, min_questions
from tests.conftest import minimal_spec

pytestmark = pytest.mark.unit


def _task(per_q: list[float], name: str = "arith") -> QualityResult:
    n = len(per_q)
    score = sum(per_q) / n
    return QualityResult(status=QualityStatus.MEASURED, task=TaskScore(
        task=name, metric="exact_match", filter="strict-match", n=n, score=score,
        stderr=math.sqrt(score * (1 - score) / n), doc_ids=list(range(n)),
        per_question=per_q, wall_s=1.0))


def _result(cfg: TrialConfig, quality: QualityResult | None) -> TrialResult:
    return TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, quality=quality)


def test_mcnemar_exact_p_matches_the_binomial_by_hand():
    # b=0, c=5: p = 2 * (1/2)^5 = 0.0625; b=c: 1; none discordant: 1
    assert mcnemar_p(0, 5) == pytest.approx(0.0625)
    assert mcnemar_p(3, 3) == 1.0
    assert mcnemar_p(0, 0) == 1.0
    # b=1, c=9 (n=10): 2 * (C(10,0) + C(10,1)) / 1024
    assert mcnemar_p(1, 9) == pytest.approx(2 * 11 / 1024)


def test_paired_drop_is_paired_over_shared_questions_and_its_interval_covers_it():
    rng = random.Random(1)
    ref = {i: float(rng.random() < 0.9) for i in range(400)}
    worse = {i: (0.0 if i % 5 == 0 else v) for i, v in ref.items()}  # loses ~1 in 5 rights
    d = paired_drop(ref, worse)
    assert d is not None and d.n == 400
    assert d.drop == pytest.approx(sum(ref[i] - worse[i] for i in ref) / 400)
    assert d.lo <= d.drop <= d.hi and d.lo > 0  # a real drop: the interval excludes zero
    assert d.p_value is not None and d.p_value < 1e-6
    same = paired_drop(ref, dict(ref))
    assert same is not None and (same.lo, same.hi, same.drop) == (0.0, 0.0, 0.0)
    assert paired_drop(ref, {10_000: 1.0}) is None  # nothing in common: nothing to pair
    again = paired_drop(ref, worse)  # seeded: the same inputs give the same interval
    assert again is not None and (again.lo, again.hi) == (d.lo, d.hi)


def _spec_q(**q):
    return QualitySpec(task={"name": "arith", "limit": 400}, **q)


def test_the_gate_rejects_passes_and_leaves_unproven_by_the_interval():
    ref_cfg = TrialConfig(engine="vllm")
    ref = _result(ref_cfg, _task([1.0] * 360 + [0.0] * 40))
    q = _spec_q(max_drop=10)
    v_ref = verdict(q, ref, ref, ref.key)
    assert v_ref.gate is Gate.REFERENCE and v_ref.score == pytest.approx(90.0)

    clean = _result(TrialConfig(engine="vllm", max_num_seqs=8), _task([1.0] * 360 + [0.0] * 40))
    v = verdict(q, clean, ref, ref.key)
    assert v.gate is Gate.PASSED and v.drop == 0 and not v.significant and not v.blocks

    broken = _result(TrialConfig(engine="vllm", weights="fp8"), _task([0.0] * 400))
    v = verdict(q, broken, ref, ref.key)
    assert v.gate is Gate.REJECTED and v.drop == pytest.approx(90.0) and v.blocks
    assert v.drop_lo is not None and v.drop_lo > 10 and v.significant

    # drops ~8 points: the interval straddles 10
    near = [0.0 if (i < 360 and i % 12 == 0) else s for i, s in
            enumerate([1.0] * 360 + [0.0] * 40)]
    v = verdict(q, _result(TrialConfig(engine="vllm", kv_dtype="fp8"), _task(near)), ref, ref.key)
    assert v.gate is Gate.UNPROVEN and v.drop_lo < 10 < v.drop_hi and v.blocks
    v = verdict(_spec_q(max_drop=10, allow_unproven=True),
                _result(TrialConfig(engine="vllm", kv_dtype="fp8"), _task(near)), ref, ref.key)
    assert v.gate is Gate.UNPROVEN and not v.blocks

    ungated = verdict(_spec_q(), broken, ref, ref.key)
    assert ungated.gate is Gate.UNGATED and not ungated.blocks


def test_the_sim_is_not_measured_and_cannot_win_under_a_gate():
    q = _spec_q(max_drop=10)
    sim = _result(TrialConfig(engine="sim", profile="vllm"),
                  QualityResult(status=QualityStatus.NOT_MEASURED_SIM, message="sim"))
    v = verdict(q, sim, None, "x")
    assert v.gate is Gate.NOT_MEASURED and v.note == "not measured (sim)" and v.blocks
    level = LevelResult(concurrency=1, status="valid", metrics=LevelMetrics(
        output_tok_s=1.0, total_tok_s=2.0, requests_s=1.0))
    assert why_not(level, quality=v) == [Ineligible.QUALITY_UNPROVEN]
    rejected = v.model_copy(update={"gate": Gate.REJECTED})
    assert why_not(level, quality=rejected) == [Ineligible.QUALITY_DROP]
    assert why_not(level, quality=verdict(_spec_q(), sim, None, "x")) == []


def test_agreement_gate_pairs_identical_continuations():
    q = QualitySpec(agreement={"prompts": 100}, max_drop=0.3)
    ref = _result(TrialConfig(engine="vllm"), QualityResult(
        status=QualityStatus.MEASURED, agreement=Agreement(n=100, continuations=[[1]] * 100)))
    same = [True] * 95 + [False] * 5
    other = _result(TrialConfig(engine="vllm", kv_dtype="fp8"), QualityResult(
        status=QualityStatus.MEASURED, agreement=Agreement(
            n=100, continuations=[[1]] * 100, identical=same, identical_share=0.95)))
    v = verdict(q, other, ref, ref.key)
    assert v.measure is GateOn.AGREEMENT and v.unit == "share"
    assert v.drop == pytest.approx(0.05) and v.gate is Gate.PASSED


def test_min_questions_follow_the_interval_width():
    assert min_questions(20, GateOn.TASK) == 25  # (0.98 / 0.2)^2 = 24.01
    assert min_questions(5, GateOn.TASK) == 385
    assert min_questions(0.1, GateOn.AGREEMENT) == 97


def _vllm_spec(tmp_path, **quality):
    model = tmp_path / "m"
    return minimal_spec(model={"path": str(model)}, quality=quality, space=[
        {"engine": "vllm", "weights": ["bf16", "fp8"], "kv_dtype": ["auto", "fp8"]}])


def test_spec_refuses_too_few_questions_a_sim_only_gate_and_unknown_reference_fields(tmp_path):
    with pytest.raises(SpecError, match=r"quality.task.limit: 10 questions .* at least 25"):
        parse_spec(_vllm_spec(tmp_path, task={"name": "a", "limit": 10}, max_drop=20))
    sim_only = minimal_spec(quality={"agreement": {"prompts": 200}, "max_drop": 0.2})
    with pytest.raises(SpecError, match=r"every trial of this space is the sim"):
        parse_spec(sim_only)
    with pytest.raises(SpecError, match=r"quality.reference: wieghts not a config field"):
        parse_spec(_vllm_spec(tmp_path, task={"name": "a"}, reference={"wieghts": "bf16"}))
    with pytest.raises(SpecError, match=r"quality needs a task"):
        parse_spec(_vllm_spec(tmp_path))
    with pytest.raises(SpecError, match=r"gate_on: task, but there is no quality.task"):
        parse_spec(_vllm_spec(tmp_path, agreement={}, gate_on="task"))


def test_task_files_name_the_missing_task_and_data(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "arith.yaml").write_text(
        "task: arith\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        "    test: data/test.jsonl\ndoc_to_text: !function utils.doc_to_text\n")
    q = QualitySpec(task={"name": "arith", "include_path": "tasks"})
    (problem,) = check_task_files(q, tmp_path)
    assert "data/test.jsonl" in problem and "does not exist" in problem
    (folder / "data").mkdir()
    (folder / "data" / "test.jsonl").write_text("{}\n")
    assert check_task_files(q, tmp_path) == []
    (problem,) = check_task_files(QualitySpec(task={"name": "gsm9k", "include_path": "tasks"}),
                                  tmp_path)
    assert "no task 'gsm9k'" in problem


def test_reference_is_sixteen_bit_auto_kv_and_refused_when_absent(tmp_path):
    spec = parse_spec(_vllm_spec(tmp_path, task={"name": "a"}))
    planned = plan_sweep(spec)
    ref = reference_trial(spec.quality, planned)
    assert (ref.config.weights, ref.config.kv_dtype) == ("bf16", "auto")
    named = parse_spec(_vllm_spec(tmp_path, task={"name": "a"},
                                  reference={"weights": "fp8", "kv_dtype": "fp8"}))
    ref = reference_trial(named.quality, plan_sweep(named))
    assert (ref.config.weights, ref.config.kv_dtype) == ("fp8", "fp8")
    absent = parse_spec(_vllm_spec(tmp_path, task={"name": "a"}, reference={"tp": 4}))
    with pytest.raises(SpecError, match=r"matches no config of the space"):
        reference_trial(absent.quality, plan_sweep(absent))
    infeasible = [PlannedTrial(p.config, p.entry_index, "too big") for p in planned]
    with pytest.raises(SpecError, match=r"infeasible \(too big\)"):
        reference_trial(spec.quality, infeasible)


def test_an_entry_model_is_part_of_the_trial_key():
    base = TrialConfig(engine="vllm")
    other = TrialConfig(engine="vllm", model="/models/degraded")
    assert base.key() != other.key() and base.identity() != other.identity()
    assert "model=degraded" in other.label()
    # a config without its own model keeps the key it had before the field existed
    assert base.key() == TrialConfig.model_validate(
        {k: v for k, v in base.model_dump().items() if k != "model"}).key()


def test_reference_first_runs_the_reference_then_waits_then_never_repeats_it(tmp_path):
    spec = parse_spec(_vllm_spec(tmp_path, task={"name": "a"},
                                 reference={"weights": "fp8", "kv_dtype": "fp8"}))
    planned = plan_sweep(spec)
    ref = reference_trial(spec.quality, planned)
    s = ReferenceFirst(GridSearcher(planned, set()), ref, {})
    first = s.ask()
    assert first is ref
    assert s.ask() is None and s.waiting  # nothing else until the reference is told
    s.tell(ref, _result(ref.config, None))
    rest = []
    while (p := s.ask()) is not None:
        rest.append(p.config.key())
    assert not s.waiting
    assert sorted(rest) == sorted(p.config.key() for p in planned if p is not ref)
    # resumed with the reference done: it is not run again and nothing waits
    done = {ref.config.key(): _result(ref.config, None)}
    s = ReferenceFirst(GridSearcher(planned, set(done)), ref, done)
    keys = [p.config.key() for p in iter(s.ask, None)]
    assert ref.config.key() not in keys and len(keys) == len(planned) - 1


def test_mcnemar_is_given_on_the_points_scale_too():
    ref = {i: 100.0 for i in range(20)}
    cfg = {i: (0.0 if i < 10 else 100.0) for i in range(20)}
    d = paired_drop(ref, cfg)
    assert d is not None and d.p_value == pytest.approx(mcnemar_p(10, 0))
    graded = paired_drop({0: 0.5, 1: 1.0}, {0: 0.25, 1: 1.0})  # partial credit: no McNemar
    assert graded is not None and graded.p_value is None


def test_a_gated_config_is_infeasible_to_the_search_like_a_missed_slo(tmp_path):
    from actors.contracts.quality import QualityVerdict
    from orchestrator.planning.regimes import trial_scores

    spec = parse_spec(_vllm_spec(tmp_path, task={"name": "a", "limit": 400}, max_drop=10))
    level = LevelResult(concurrency=1, status="valid", metrics=LevelMetrics(
        output_tok_s=100.0, total_tok_s=200.0, requests_s=1.0))
    cfg = TrialConfig(engine="vllm", weights="fp8")
    base = TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, levels=[level])
    free = trial_scores(base, spec)["c=1"]
    assert free.feasible and free.value == pytest.approx(100.0)
    rejected = QualityVerdict(gate=Gate.REJECTED, measure=GateOn.TASK, unit="points",
                              drop=30.0, drop_lo=25.0, drop_hi=35.0, max_drop=10.0)
    gated = trial_scores(base.model_copy(update={"quality_verdict": rejected}), spec)["c=1"]
    # the value stays what was measured (the search learns the speed); it is infeasible
    assert gated.value == free.value and not gated.feasible and gated.violation > 15


def test_compare_pairs_a_configs_quality_across_two_sweeps():
    from orchestrator.results.compare import quality_changes

    q = _spec_q(max_drop=10)
    cfg = TrialConfig(engine="vllm", kv_dtype="fp8")
    a = _result(cfg, _task([1.0] * 380 + [0.0] * 20))
    b = _result(cfg, _task([1.0] * 300 + [0.0] * 100))
    ref = _result(TrialConfig(engine="vllm"), _task([1.0] * 400))
    a = a.model_copy(update={"quality_verdict": verdict(q, a, ref, ref.key)})
    b = b.model_copy(update={"quality_verdict": verdict(q, b, ref, ref.key)})
    (change,) = quality_changes([a], [b])
    assert change.paired and change.change == pytest.approx(75.0 - 95.0)
    assert change.hi < 0 and change.significant  # B lost 20 points, beyond its interval
    (same,) = quality_changes([a], [a])
    assert same.change == 0 and not same.significant


def test_weights_rewritten_under_the_same_path_void_the_pairing(tmp_path):
    """A model made again between two trials (a lost node, a retrain) keeps its path and its
    trial keys: the fingerprint tells, and the delta is not paired; a copy of the same
    weights pairs, and a per-entry model override (another model by design) pairs too."""
    from actors.quality.fingerprint import model_fingerprint

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 9000)  # > 2 MiB: both ends
    first = model_fingerprint(str(model))
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in model.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    assert first is not None and model_fingerprint(str(copy)) == first
    data = bytearray((model / "model.safetensors").read_bytes())
    data[-5] ^= 1  # a change in the last MiB only
    (model / "model.safetensors").write_bytes(bytes(data))
    second = model_fingerprint(str(model))
    assert second != first
    assert model_fingerprint(str(tmp_path / "absent")) is None
    assert model_fingerprint("meta-llama/Llama-3.1-8B") is None

    q = _spec_q(max_drop=5)
    per = [1.0] * 100
    ref = _result(TrialConfig(engine="vllm"),
                  _task(per).model_copy(update={"model_fingerprint": first}))
    same = _result(TrialConfig(engine="vllm", kv_dtype="fp8"),
                   _task(per).model_copy(update={"model_fingerprint": first}))
    redone = _result(TrialConfig(engine="vllm", weights="fp8"),
                     _task(per).model_copy(update={"model_fingerprint": second}))
    other = _result(TrialConfig(engine="vllm", model=str(copy)),
                    _task(per).model_copy(update={"model_fingerprint": second}))
    assert verdict(q, same, ref, ref.key).gate is Gate.PASSED
    v = verdict(q, redone, ref, ref.key)
    assert v.gate is Gate.NOT_MEASURED and v.drop is None
    assert "weights changed" in v.note and first in v.note and second in v.note
    assert verdict(q, other, ref, ref.key).gate is Gate.PASSED
