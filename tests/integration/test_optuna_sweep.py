"""Optuna searches end to end: real Ray, the sim, a real sqlite Optuna storage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.planning.regimes import trial_scores
from orchestrator.results.ledger import Ledger
from orchestrator.spec import load_spec
from tests.conftest import minimal_spec


def _studies(ledger: Ledger, regimes: list[str]) -> dict[str, list]:
    storage = f"sqlite:///{ledger.dir / 'optuna.db'}"
    return {r: optuna.load_study(study_name=f"{ledger.sweep_id}.{r}", storage=storage).trials
            for r in regimes}


def _scored(ledger: Ledger, results: list, regime: str) -> set[str]:
    """The trials with a value at ``regime`` (``planning.eligibility``: a level the busy
    host flagged ``sim_behind`` gives none, and its trial is told FAIL there)."""
    spec = load_spec(ledger.dir / "spec.yaml")
    return {r.key for r in results if trial_scores(r, spec)[regime].value is not None}


def _spec(tmp_path: Path, search: dict, concurrent: int = 1) -> Path:
    spec = minimal_spec(name="opt")
    spec["cluster"]["max_concurrent_trials"] = concurrent
    spec["workload"].update(concurrency=[1, 4], rounds=1)
    spec["slo"] = {"ttft_p99_ms": 60000}
    spec["search"] = {"kind": "optuna", "seed": 7, "regimes": {"low": [1], "high": [4]},
                      **search}
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"],
                      "cuda_graphs": [True, False], "tp": [1, 4]}]  # tp=4 > 2 GPUs
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_tpe_per_regime_two_in_flight_stops_at_its_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    path = _spec(tmp_path, {"sampler": "tpe", "budget": 3}, concurrent=2)
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    ledger = Ledger.open("latest")
    ran = [r for r in ledger.results().values() if r.status.value == "ok"]
    assert len(ran) == 3 == len({r.key for r in ran})
    assert [e.type for e in ledger.events()].count("scheduled") == 3  # none measured twice
    for regime, trials in _studies(ledger, ["low", "high"]).items():
        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
                and not t.user_attrs.get("repeat")]
        assert {t.user_attrs["key"] for t in done} == _scored(ledger, ran, regime), regime
    for r in ran:  # the MLflow params of each trial's run: its sampler (and Optuna number)
        params = json.loads((ledger.dir / "trials" / r.key / "search.json").read_text())
        assert params["optuna.sampler"] == "tpe"


def test_guided_search_runs_on_the_sim_and_says_why_it_stopped(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    path = _spec(tmp_path, {"sampler": "guided", "budget": {"trials": 3}})
    assert main(["run", str(path), "--no-mlflow"]) == 0
    err = capsys.readouterr().err
    assert "search (guided" in err and "would measure next" in err
    assert "budget: " in err  # progress shows the budget
    ledger = Ledger.open("latest")
    assert sum(r.status.value == "ok" for r in ledger.results().values()) <= 3
    # the report says what the stop relied on: the best per regime and the closest
    # unmeasured config's prediction and bound; each trial's params say why it was asked
    page = (ledger.dir / "report" / "report.md").read_text()
    assert "## Search" in page and "relied on the model for" in page, page[-2000:]
    for r in ledger.results().values():
        params = json.loads((ledger.dir / "trials" / r.key / "search.json").read_text())
        assert params["guided.why"].split(": ")[1] in (
            "untried setting", "nothing measured", "predicted better", "repeat the best",
            "a tie within noise"), params


def test_guided_repeats_its_best_and_the_sweep_records_the_repeat(tmp_path, monkeypatch):
    """A repeat is a trial the searcher makes (the same config, the next ``repeat``), not
    one of the plan: the driver records and tells it like any other (it crashed doing so,
    in ``search-guided.yaml``, once the model's ranking led guided there within budget)."""
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    path = _spec(tmp_path, {"sampler": "guided", "budget": {"trials": 8}})
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    ledger = Ledger.open("latest")
    results = [r for r in ledger.results().values() if r.status.value == "ok"]
    repeats = [r for r in results if r.config.repeat > 0]
    assert repeats, [r.config.label() for r in results]
    for r in repeats:
        assert any(o.config.identity() == r.config.identity() and o.config.repeat == 0
                   for o in results)  # a repeat of a config measured before
        params = json.loads((ledger.dir / "trials" / r.key / "search.json").read_text())
        assert params["guided.why"].split(": ")[1] in ("repeat the best", "a tie within noise")


def test_a_study_half_done_when_its_driver_is_killed_resumes_without_repeats(tmp_path):
    path = _spec(tmp_path, {"sampler": "tpe", "budget": 4})
    env = dict(os.environ, SERVESWEEP_HOME=str(tmp_path))
    driver = subprocess.Popen([sys.executable, "-m", "orchestrator.commands.cli", "run",
                               str(path), "--quiet", "--no-mlflow"],
                              cwd=Path(__file__).parents[2], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    ledger = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert driver.poll() is None, "the driver ended before it was killed"
            latest = tmp_path / "sweeps" / "LATEST"
            if latest.exists():
                ledger = Ledger.open(latest.read_text().strip(), tmp_path)
                if sum(r.status.value == "ok" for r in ledger.results().values()) >= 2:
                    break
            time.sleep(0.1)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert ledger is not None
    before = {k for k, r in ledger.results().items() if r.status.value == "ok"}
    assert 2 <= len(before) < 4
    os.environ["SERVESWEEP_HOME"] = str(tmp_path)
    try:
        assert main(["resume", ledger.sweep_id, "--quiet", "--no-mlflow"]) == 0
    finally:
        del os.environ["SERVESWEEP_HOME"]
    ok = [r for r in ledger.results().values() if r.status.value == "ok"]
    assert len(ok) == 4 and before <= {r.key for r in ok}
    assert [e.type for e in ledger.events()].count("trial") == len(ledger.results())
    for regime, trials in _studies(ledger, ["low", "high"]).items():  # the same study
        assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
        done = [t.user_attrs["key"] for t in trials if t.state ==
                optuna.trial.TrialState.COMPLETE and not t.user_attrs.get("repeat")]
        assert sorted(done) == sorted(_scored(ledger, ok, regime))  # once per study


def test_the_study_records_exactly_the_values_that_ran(tmp_path, monkeypatch):
    """Optuna (and optuna-dashboard) show what the ledger ran: a log range is its planned
    values, a stepped range its steps; nothing snapped after the suggestion (issue 32:
    trial 0 said max_num_seqs=143, the ledger ran 102)."""
    from orchestrator.planning.params import field_value

    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    path = _spec(tmp_path, {"sampler": "random", "budget": 4, "params": {
        "max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True, "points": 4},
        "gpu_memory_fraction": {"type": "float", "low": 0.8, "high": 0.9, "step": 0.05}}})
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    ledger = Ledger.open("latest")
    results = ledger.results()
    checked = 0
    for trials in _studies(ledger, ["low", "high"]).values():
        for t in trials:
            key = t.user_attrs.get("key")
            if key is None or key not in results:
                continue
            for name, value in t.params.items():
                ran = field_value(results[key].config, name)
                if isinstance(value, float):  # a float step: 0.8 + 1 * 0.05 in binary
                    assert value == pytest.approx(ran, rel=1e-12), (name, t.number)
                else:
                    assert value == ran, (name, t.number)
                checked += 1
            assert {"max_num_seqs", "gpu_memory_fraction"} <= set(t.params)
    assert checked >= 8
