"""CLI contracts that need no Ray: exit codes, plan output, bad input changes nothing."""

from __future__ import annotations

import json

import yaml

from orchestrator.commands.cli import main
from tests.conftest import ROOT, minimal_spec


def test_bad_spec_exits_2_names_the_field_and_creates_nothing(tmp_path, capsys, state_home):
    data = minimal_spec()
    data["space"][0]["cuda_graphs"] = ["sometimes"]
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data))
    assert main(["run", str(p)]) == 2
    err = capsys.readouterr().err
    assert "space[0].cuda_graphs[0]" in err and "valid boolean" in err
    assert list(state_home.iterdir()) == []


def test_missing_spec_and_unknown_sweep_exit_2(capsys, state_home):
    assert main(["run", "/no/such.yaml"]) == 2
    assert "spec file not found" in capsys.readouterr().err
    assert main(["report", "latest"]) == 2
    assert "no sweeps" in capsys.readouterr().err
    assert main(["report", "nope-123"]) == 2


def test_bad_arguments_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    assert main(["plan"]) == 2


def test_plan_lists_trials_infeasible_reasons_and_predictions(capsys):
    assert main(["plan", str(ROOT / "search_spaces" / "quickstart.yaml"), "--predict"]) == 0
    out = capsys.readouterr().out
    assert "8 trials, 8 to run" in out
    assert out.count("tok/s") == 8 * 4
    assert "Estimated sweep time" in out


def test_plan_names_the_sampler_the_budget_and_every_parameter(capsys):
    assert main(["plan", str(ROOT / "search_spaces" / "search-tpe-regimes.yaml")]) == 0
    out = capsys.readouterr().out
    assert "sampler tpe, objective output_tok_s, SLO ttft_p99_ms <= 500, budget 8 trials, " \
        "1 GPU-h; regimes: interactive ['c=1', 'c=4'], batch ['c=16']" in out
    assert "    max_num_seqs: int 16..256 log, as its 4 planned values: {16, 40, 102, 256}\n" \
        in out
    assert "    graph_max_batch = max_num_seqs when cuda_graphs=True\n" in out
    assert "    profile: {vllm, trtllm}\n" in out


def test_plan_json_marks_infeasible(tmp_path, capsys):
    data = minimal_spec()
    data["cluster"] = {"gpus": 4}
    data["space"] = [{"engine": "sim", "tp": [1, 3, 8], "weights": ["bf16", "nvfp4"]}]
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    assert main(["plan", str(p), "--json", "--predict"]) == 0
    trials = json.loads(capsys.readouterr().out)["trials"]
    reasons = {(t["config"]["tp"], t["config"]["weights"]): t["reason"] for t in trials}
    assert reasons[(1, "bf16")] is None
    assert "does not divide the 32 attention heads" in reasons[(3, "bf16")]
    assert "exceeds the 4 GPUs" in reasons[(8, "bf16")]
    assert "NVFP4 weights need compute capability 10.0+" in reasons[(1, "nvfp4")]
    ok = next(t for t in trials if t["reason"] is None)
    assert ok["prediction"][0]["output_tok_s"] > 0


def test_run_with_only_infeasible_trials_says_why_and_creates_nothing(tmp_path, capsys,
                                                                     state_home, monkeypatch):
    """Nothing runnable: the reasons, exit 0, and no Ray, no MLflow store, no sweep folder."""
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("ray.init called for a sweep with nothing to run")

    monkeypatch.setattr(ray, "init", no_ray)
    data = minimal_spec(name="pruned")
    data["cluster"] = {"gpus": 4}
    data["space"] = [{"engine": "sim", "tp": [3, 8]}]  # 3: heads; 8: more than the node has
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    assert main(["run", str(p)]) == 0
    out = capsys.readouterr().out
    assert "nothing to run: all 2 trial(s) are infeasible" in out
    assert "tp=3 does not divide the 32 attention heads" in out
    assert "tp=8 exceeds the 4 GPUs" in out
    assert list(state_home.iterdir()) == []  # no mlflow.db, no sweeps/, no artifacts/
    assert not ray.is_initialized()
