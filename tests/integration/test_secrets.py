"""A secret given as a ``${NAME}`` reference reaches the engine's environment and nothing
else: a planted secret is searched for in the whole MLflow store and sweep folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from actors.contracts.config import LaunchOptions, ModelSpec, SimOptions, TrialConfig, Workload
from actors.engine_host import EngineHostCore
from actors.engines import LaunchContext
from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec

SECRET = "planted-secret-7f3a9c2e"


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_the_engine_gets_the_value_the_record_gets_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    trial = TrialConfig(engine="sim", profile="vllm")
    ctx = LaunchContext(sweep_id="secrets", trial_key="t", trial_dir=str(tmp_path / "t"),
                        model=ModelSpec(preset="llama-3.1-8b", served_name="m"),
                        hardware="h100-sxm", sim=SimOptions(time_scale=0.05),
                        workload=Workload(prompt_tokens=16, output_tokens=8, concurrency=[1]),
                        launch=LaunchOptions(env={"HF_TOKEN": "${HF_TOKEN}"}))
    host = EngineHostCore(trial.model_dump(mode="json"), ctx.model_dump(mode="json"))
    try:
        info = host.launch()
        assert info.failure is None and info.pid
        environ = Path(f"/proc/{info.pid}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={SECRET}".encode() in environ  # the engine has the value
        assert SECRET not in info.model_dump_json()  # what the ledger records does not
        assert info.env["HF_TOKEN"] in ("***", "${HF_TOKEN}")
    finally:
        host.stop(10)
    assert _files_containing(tmp_path, SECRET.encode()) == []


def test_a_reference_to_an_unset_variable_fails_the_start_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE_TOKEN", raising=False)
    trial = TrialConfig(engine="sim", profile="vllm")
    ctx = LaunchContext(sweep_id="secrets", trial_key="u", trial_dir=str(tmp_path / "u"),
                        model=ModelSpec(preset="llama-3.1-8b", served_name="m"),
                        hardware="h100-sxm", sim=SimOptions(time_scale=0.05),
                        workload=Workload(prompt_tokens=16, output_tokens=8, concurrency=[1]),
                        launch=LaunchOptions(env={"NOT_SET_ANYWHERE_TOKEN":
                                                  "${NOT_SET_ANYWHERE_TOKEN}"}))
    host = EngineHostCore(trial.model_dump(mode="json"), ctx.model_dump(mode="json"))
    info = host.launch()
    assert info.failure == "startup_crash"
    assert "$NOT_SET_ANYWHERE_TOKEN, which is not set" in info.message


def test_a_planted_secret_is_nowhere_in_the_mlflow_store_or_the_sweep_folder(tmp_path,
                                                                            monkeypatch):
    home = tmp_path / "state"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    spec = minimal_spec(name="secret")
    spec["workload"]["concurrency"] = [1]
    spec["space"] = [{"engine": "sim", "profile": ["vllm"],
                      "launch": {"env": {"HF_TOKEN": "${HF_TOKEN}"}}}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--quiet"]) == 0
    (r,) = Ledger.open("latest").results().values()
    assert r.status.value == "ok", r.message
    assert list(home.rglob("mlflow.db")), "the sweep was not tracked in MLflow"
    assert _files_containing(home, SECRET.encode()) == []
    assert _files_containing(home, b"${HF_TOKEN}")  # the reference is what was kept
