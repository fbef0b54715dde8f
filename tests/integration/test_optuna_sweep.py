"""An Optuna search end to end: real Ray, the sim, a real sqlite Optuna storage."""

from __future__ import annotations

import optuna
import yaml

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec


def test_optuna_search_runs_its_budget_and_records_the_study(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    spec = minimal_spec(name="opt")
    spec["workload"].update(concurrency=[4], rounds=1)
    spec["search"] = {"kind": "optuna", "sampler": "tpe", "budget": 3, "seed": 7,
                      "objective": "output_tok_s"}
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"],
                      "cuda_graphs": [True, False], "tp": [1, 4]}]  # tp=4 > 2 GPUs
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    ledger = Ledger.open("latest")
    ran = [r for r in ledger.results().values() if r.status.value == "ok"]
    assert len(ran) == 3
    study = optuna.load_study(study_name=ledger.sweep_id,
                              storage=f"sqlite:///{ledger.dir / 'optuna.db'}")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len({tuple(sorted(t.params.items())) for t in done}) == 3
    best = max(r.levels[0].metrics.output_tok_s for r in ran)
    assert abs(study.best_value - best) / best < 1e-6
