"""Bad quality input exits 2 before anything starts: no Ray, no sweep folder, no MLflow.

The cases of the quality issue: a task lm-eval does not know (one of the user's folder, and
a built-in name, which lm-eval itself is asked about), a missing dataset file, a reference
config not in the space, and a gate on a space of the sim only (which has no accuracy).
"""

from __future__ import annotations

import pytest
import yaml

from orchestrator.commands.cli import main
from tests.conftest import ROOT, minimal_spec

pytestmark = [pytest.mark.e2e]

VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
LM_EVAL = ROOT / ".venv-vllm" / "bin" / "lm_eval"


def _vllm_spec(tmp_path, quality: dict) -> dict:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return minimal_spec(model={"path": str(model)}, hardware="cpu", quality=quality,
                        space=[{"engine": "vllm", "cuda_graphs": False,
                                "launch": {"python": str(VLLM_PY)}}])


def _task_folder(tmp_path, data: str = "test.jsonl") -> str:
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    (folder / "mine.yaml").write_text(yaml.safe_dump({
        "task": "mine", "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": data}}, "output_type": "generate_until"}))
    return str(folder)


def _run(tmp_path, monkeypatch, capsys, spec: dict) -> str:
    home = tmp_path / "home"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    capsys.readouterr()
    assert main(["run", str(path), "--no-mlflow"]) == 2
    assert not (home / "sweeps").exists()  # nothing was created
    return capsys.readouterr().err


def test_a_task_not_in_the_users_folder(tmp_path, monkeypatch, capsys):
    folder = _task_folder(tmp_path)
    (tmp_path / "tasks" / "test.jsonl").write_text("{}\n")
    err = _run(tmp_path, monkeypatch, capsys, _vllm_spec(
        tmp_path, {"task": {"name": "yours", "include_path": folder}}))
    assert "quality.task.name: no task 'yours'" in err


def test_a_missing_dataset_file(tmp_path, monkeypatch, capsys):
    folder = _task_folder(tmp_path, data="nowhere.jsonl")
    err = _run(tmp_path, monkeypatch, capsys, _vllm_spec(
        tmp_path, {"task": {"name": "mine", "include_path": folder}}))
    assert "nowhere.jsonl" in err and "does not exist" in err


def test_a_reference_not_in_the_space(tmp_path, monkeypatch, capsys):
    folder = _task_folder(tmp_path)
    (tmp_path / "tasks" / "test.jsonl").write_text("{}\n")
    spec = _vllm_spec(tmp_path, {"task": {"name": "mine", "include_path": folder},
                                 "reference": {"weights": "fp8"}})
    spec["quality"]["lm_eval"] = "/bin/true"  # any executable: the reference is the point
    err = _run(tmp_path, monkeypatch, capsys, spec)
    assert "quality: quality.reference {'weights': 'fp8'} matches no config" in err


def test_a_gate_on_the_sim_alone(tmp_path, monkeypatch, capsys):
    err = _run(tmp_path, monkeypatch, capsys, minimal_spec(
        quality={"agreement": {"prompts": 100}, "max_drop": 0.2}))
    assert "the sim, which has no accuracy" in err


@pytest.mark.skipif(not LM_EVAL.exists(), reason="lm-eval is not installed in .venv-vllm "
                    "(`make quality-model`)")
def test_a_built_in_task_lm_eval_does_not_know(tmp_path, monkeypatch, capsys):
    err = _run(tmp_path, monkeypatch, capsys, _vllm_spec(
        tmp_path, {"task": {"name": "gsm9k_no_such_task"}}))
    assert "lm-eval knows no task 'gsm9k_no_such_task'" in err
