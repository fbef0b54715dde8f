"""``servesweep profile-model`` end to end on the sim (issue 30, item 1): the short sweep it
derives runs through the whole stack (Ray, the sim's HTTP server, the load generator), the
fit is stored keyed by shape, engine and GPU, and a spec naming it plans with its band.

The truth is the sim with a perturbed profile (a host-bound model whose FP8 GEMMs are
slow): the fit starts from the shipped profile, not from the truth. What the fit may use is
the ledger's to say: a level whose client could not keep up, or whose sim fell behind (a
busy machine), is not the server's number and is left out; the test holds the command to
what its own sweep measured."""

from __future__ import annotations

import json

import pytest
import yaml

from actors.contracts.model_profile import read_model_profile, shape_key
from actors.contracts.shapes import load_shape
from orchestrator.commands.cli import main
from orchestrator.results.calibrate import NOT_THE_SERVER
from orchestrator.results.ledger import Ledger
from tests.conftest import FIXTURES, minimal_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SHAPE_DIR = FIXTURES / "h200-sweeps" / "h200-vllm-j-20261203-080832-9b6f" / "model-config"
TRUTH = {"step_us": 900.0, "fp8_gemm_eff": 0.3}


def test_profile_model_measures_fits_stores_and_a_spec_plans_with_it(state_home, tmp_path,
                                                                      capsys):
    data = minimal_spec(name="mine", model={"path": str(SHAPE_DIR), "served_name": "m1b"},
                        workload={"prompt_tokens": 128, "output_tokens": 16,
                                  "concurrency": [4, 64], "rounds": 2, "warmup_requests": 1})
    data["sim"] = {"time_scale": 1.0, "profiles": {"vllm": TRUTH}}
    data["space"] = [{"engine": "sim", "profile": "vllm", "weights": ["bf16", "fp8"]}]
    spec = tmp_path / "mine.yaml"
    spec.write_text(yaml.safe_dump(data))

    code = main(["profile-model", str(spec), "--no-mlflow", "--quiet", "--max-evals", "40"])
    out = capsys.readouterr().out
    assert "2 config(s) at c=1, c=32" in out
    sweep = Ledger.open("mine-profile")
    results = list(sweep.results().values())
    assert sorted(r.config.weights for r in results) == ["bf16", "fp8"]
    assert all(sorted(lv.concurrency for lv in r.levels) == [1, 32] for r in results)
    fittable = [lv for r in results for lv in r.levels
                if lv.status == "valid" and not NOT_THE_SERVER & set(lv.flags)]
    shape = shape_key(load_shape(None, str(SHAPE_DIR)))
    stored = list((state_home / "model-profiles").rglob("sim-*-h100-sxm.json"))
    if not fittable:  # a machine too busy for any level: said, and nothing stored
        assert code == 2 and not stored
        return
    assert code == 0, out
    assert len(stored) == 1 and shape.replace("/", "_") in str(stored[0])
    profile = read_model_profile(stored[0])
    assert (profile.shape, profile.engine, profile.gpu) == (shape, "sim", "h100-sxm")
    assert profile.points == len(fittable) and profile.sweep_id == sweep.sweep_id
    assert profile.error_after < profile.error_before  # it moved towards what it measured
    assert json.loads((sweep.dir / "model-profile-vllm.json").read_text()) == \
        json.loads(stored[0].read_text())
    # in MLflow, the profile is an artifact of the profile sweep's parent run (run on a node
    # with --no-mlflow, `sync` or `import` puts it there)
    from mlflow.tracking import MlflowClient

    from orchestrator.results.tracking import default_tracking_uri

    assert main(["sync", sweep.sweep_id]) == 0
    capsys.readouterr()
    client = MlflowClient(default_tracking_uri(state_home))
    parents = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                 filter_string="tags.`servesweep.kind` = 'sweep'")
    assert len(parents) == 1
    assert "model-profile-vllm.json" in {a.path for a in
                                         client.list_artifacts(parents[0].info.run_id)}

    # a spec naming it: its factors in sim.profiles, its band in plan --predict
    data["sim"] = {"time_scale": 1.0, "model_profile": str(stored[0])}
    named = tmp_path / "named.yaml"
    named.write_text(yaml.safe_dump(data))
    assert main(["plan", str(named), "--predict", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["model_error"]["profiled"] is True
    assert profile.sweep_id in plan["model_error"]["source"]
    # and a sweep of it keeps the profile it started with
    assert main(["run", str(named), "--no-mlflow", "--quiet"]) == 0
    capsys.readouterr()
    kept = Ledger.open("mine-2").dir / "model-profile.json"
    assert json.loads(kept.read_text()) == json.loads(stored[0].read_text())


def test_guided_profiles_the_model_first_counts_it_and_reuses_it(state_home, tmp_path, capsys):
    """``search.profile_first`` (on by default for a real engine; asked for here, on the sim):
    a guided search without ``sim.model_profile`` profiles its model first, predicts with the
    profile's band, counts its seconds in the budget, keeps a copy for ``resume``; the next
    search of that model uses the stored profile instead of making another."""
    from orchestrator.planning.budget import BudgetTracker
    from orchestrator.spec import load_spec

    data = minimal_spec(name="gd", model={"path": str(SHAPE_DIR), "served_name": "m1b"},
                        workload={"prompt_tokens": 128, "output_tokens": 16,
                                  "concurrency": [4], "rounds": 1, "warmup_requests": 1})
    data["sim"] = {"time_scale": 1.0, "profiles": {"vllm": TRUTH}}
    data["space"] = [{"engine": "sim", "profile": "vllm", "weights": ["bf16", "fp8"]}]
    data["search"] = {"kind": "optuna", "sampler": "guided", "profile_first": True,
                      "budget": {"trials": 2}}
    spec = tmp_path / "gd.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert main(["run", str(spec), "--no-mlflow", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "profiling it first" in out
    profiled = Ledger.open("gd-profile")
    stored = list((state_home / "model-profiles").rglob("sim-*.json"))
    search = Ledger.open("gd-2")
    if not stored:  # a machine too busy for any level: said, and the search went on
        assert "measured nothing to fit" in out and not (search.dir / "model-profile.json").exists()
        return
    profile = read_model_profile(stored[0])
    assert profile.sweep_id == profiled.sweep_id and "(made now:" in out
    # the sweep keeps the profile; read back from its folder (resume), it predicts with it
    # and its budget starts with the profile's seconds spent
    again = load_spec(search.dir / "spec.yaml")
    assert again.model_profile == profile and again.profile_spent_s == profile.gpu_seconds > 0
    tracker = BudgetTracker(again.search.budget, again, None, [])
    assert tracker.gpu_hours == pytest.approx(profile.gpu_seconds / 3600)
    # a second search of the model uses the stored profile: no second profile sweep
    spec.write_text(yaml.safe_dump({**data, "name": "gd2"}))
    assert main(["run", str(spec), "--no-mlflow", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "(stored)" in out and "profiling it first" not in out
    assert len(list((state_home / "sweeps").glob("gd*-profile-*"))) == 1
