"""MLflow never stops or slows a sweep, and never drifts from the ledger (issue 14).

A sweep writes MLflow through the ``TrackingOutbox``: unreachable or dying tracking servers
cost it nothing, and ``servesweep sync`` brings MLflow up to the ledger afterwards, exactly
once per trial, repairing what a killed driver or server left half written. Real sweeps on
local Ray with the sim engine; real ``mlflow server`` processes on 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from orchestrator.results.records import RECORDED_TAG, sweep_summary, trial_record
from orchestrator.spec.model import load_spec
from tests.conftest import minimal_spec

NAME = "outbox"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on a loopback port with its own sqlite store and artifact folder."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.folder / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri",
             f"sqlite:///{self.folder / 'mlflow.db'}", "--artifacts-destination",
             str(self.folder / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, \
                (self.folder / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"mlflow server not healthy in {timeout_s} s")

    def kill(self) -> None:
        """What a crash does: the whole server, at once."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def servers():
    made: list[MlflowServer] = []
    yield lambda folder: made.append(MlflowServer(folder)) or made[-1]
    for s in made:
        s.kill()


def _spec(tmp: Path, profiles: list[str], graphs: list[bool] | None = None) -> Path:
    spec = minimal_spec(name=NAME)
    spec["space"] = [{"engine": "sim", "profile": profiles, "cuda_graphs": graphs or [True]}]
    path = tmp / f"{NAME}-{len(profiles)}x{len(graphs or [1])}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _sweep(path: Path, *args: str) -> tuple[int, Ledger, float]:
    t0 = time.monotonic()
    code = main(["run", str(path), "--quiet", *args])
    return code, Ledger.open("latest"), time.monotonic() - t0


def _reference_s(tmp_path: Path, *space: Any) -> float:
    """The same sweep's wall time without MLflow, measured now on this machine: what a
    sweep whose MLflow is down may take (the machine's speed, not a fixed figure)."""
    ref = tmp_path / "reference"
    ref.mkdir(exist_ok=True)
    code, _, took = _sweep(_spec(ref, *space), "--no-mlflow")
    assert code == 0
    return took


def _runs(uri: str, sweep_id: str) -> list[Any]:
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(NAME)
    assert exp is not None
    return client.search_runs([exp.experiment_id],
                              filter_string=f"tags.`servesweep.sweep_id` = '{sweep_id}'")


def _trials(runs: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in runs:
        if r.data.tags.get("servesweep.kind") == "trial":
            out.setdefault(r.data.tags["servesweep.trial_key"], []).append(r)
    return out


def _snapshot(uri: str, sweep_id: str) -> dict[str, Any]:
    """Everything a sync could change: runs, status, end time, params, tags, every metric's
    whole history, artifacts and their sizes."""
    client = MlflowClient(tracking_uri=uri)
    snap = {}
    for r in _runs(uri, sweep_id):
        rid = r.info.run_id
        snap[rid] = (r.info.status, r.info.end_time, r.data.params, r.data.tags,
                     {k: sorted((m.step, m.value, m.timestamp)
                                for m in client.get_metric_history(rid, k))
                      for k in r.data.metrics},
                     sorted((f.path, f.file_size) for f in client.list_artifacts(rid)))
    return snap


def _assert_one_complete_run_per_trial(uri: str, ledger: Ledger) -> None:
    runs = _runs(uri, ledger.sweep_id)
    trials = _trials(runs)
    assert sorted(trials) == sorted(ledger.results()), "one run per ledger trial"
    assert all(len(v) == 1 for v in trials.values()), {k: len(v) for k, v in trials.items()}
    parents = [r for r in runs if r.data.tags.get("servesweep.kind") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    client = MlflowClient(tracking_uri=uri)
    for key, (run,) in trials.items():
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.params["trial_key"] == key and "output_tok_s_c4" in run.data.metrics
        files = {f.path for f in client.list_artifacts(run.info.run_id)}
        assert {"server.log", "requests.csv", "trial_config.json", "command.json"} <= files


def test_unreachable_mlflow_costs_the_sweep_nothing_and_sync_catches_up(
        state_home, tmp_path, monkeypatch, capfd, servers):
    server = servers(tmp_path / "server")  # not started yet: its port is closed
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    code, ledger, took = _sweep(_spec(tmp_path, ["vllm", "trtllm"]))
    out, err = capfd.readouterr()
    assert code == 0, out[-2000:] + err[-2000:]
    ref = _reference_s(tmp_path, ["vllm", "trtllm"])
    capfd.readouterr()
    assert took < 1.5 * ref + 20, \
        f"the sweep took {took:.0f} s with MLflow unreachable, {ref:.0f} s without MLflow"
    assert sorted(r.status.value for r in ledger.results().values()) == ["ok", "ok"]
    said = [line for line in err.splitlines() if server.uri in line]
    assert len(said) == 1, err[-3000:]  # warned once, one line, naming what to run later
    assert f"servesweep sync {ledger.sweep_id}" in said[0]
    assert "Traceback" not in err
    assert f"servesweep sync {ledger.sweep_id}" in out.strip().splitlines()[-1]
    assert "Results are in MLflow" not in out  # not said of an MLflow that holds nothing

    server.start()
    server.wait_healthy()
    assert main(["sync", ledger.sweep_id]) == 0
    _assert_one_complete_run_per_trial(server.uri, ledger)
    before = _snapshot(server.uri, ledger.sweep_id)
    assert main(["sync", ledger.sweep_id]) == 0  # a second sync changes nothing
    assert _snapshot(server.uri, ledger.sweep_id) == before


def test_mlflow_killed_mid_sweep_and_restarted_then_sync_has_one_run_per_trial(
        state_home, tmp_path, monkeypatch, servers):
    server = servers(tmp_path / "server")
    server.start()
    server.wait_healthy()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    seen: dict[str, Any] = {}

    def recorded() -> int:
        latest = (state_home / "sweeps" / "LATEST").read_text().strip()
        return len(Ledger.open(latest, state_home).results())

    def kill_after_first_trial() -> None:
        """Kill the server once a trial is in MLflow; start it again once the sweep has
        recorded two more trials without it, or all four (or after two minutes)."""
        client = MlflowClient(tracking_uri=server.uri)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            exp = client.get_experiment_by_name(NAME)
            runs = client.search_runs([exp.experiment_id], "tags.`servesweep.kind` = 'trial' "
                                      "and attributes.status = 'FINISHED'") if exp else []
            if runs:
                server.kill()
                seen["recorded_at_kill"] = recorded()
                break
            time.sleep(0.2)
        while time.monotonic() < deadline and \
                recorded() < min(seen.get("recorded_at_kill", 0) + 2, 4):
            time.sleep(0.2)
        seen["recorded_at_restart"] = recorded()
        server.start()

    watcher = threading.Thread(target=kill_after_first_trial, daemon=True)
    watcher.start()
    code, ledger, took = _sweep(_spec(tmp_path, ["vllm", "trtllm"], [True, False]))
    watcher.join(timeout=130)
    assert code == 0
    assert sorted(r.status.value for r in ledger.results().values()) == ["ok"] * 4
    assert 1 <= seen["recorded_at_kill"] < 4, "the server was killed mid-sweep"
    assert seen["recorded_at_restart"] > seen["recorded_at_kill"], \
        "the sweep went on while MLflow was down"
    ref = _reference_s(tmp_path, ["vllm", "trtllm"], [True, False])
    assert took < 1.5 * ref + 30, f"the sweep took {took:.0f} s, {ref:.0f} s without MLflow"

    server.wait_healthy()
    assert main(["sync", ledger.sweep_id]) == 0
    _assert_one_complete_run_per_trial(server.uri, ledger)


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A sweep run with --no-mlflow (nothing in any MLflow store yet)."""
    home = tmp_path_factory.mktemp("offline")
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVESWEEP_HOME", str(home))
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    try:
        code, ledger, _ = _sweep(_spec(home, ["vllm", "trtllm"]), "--no-mlflow")
    finally:
        mp.undo()
    assert code == 0
    assert not (home / "mlflow.db").exists()
    return {"home": home, "ledger": ledger}


def _view(client: MlflowClient, run: Any) -> dict[str, Any]:
    """What must match between a live-tracked trial and a synced one (values measured in
    different sweeps differ; which metrics, params, tags and files do not)."""
    return {"status": run.info.status, "params": run.data.params,
            "name": run.info.run_name.rsplit(" [", 1)[0],  # its label; then its sweep
            "metrics": sorted(run.data.metrics),
            "tags": {k: v for k, v in run.data.tags.items()
                     if not k.startswith(("mlflow.", "flag."))
                     and k not in ("servesweep.sweep_id", RECORDED_TAG)},
            "artifacts": sorted(f.path for f in client.list_artifacts(run.info.run_id))}


def test_no_mlflow_sweep_synced_equals_a_live_tracked_one(offline, tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("SERVESWEEP_HOME", str(offline["home"]))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    code, live, _ = _sweep(_spec(offline["home"], ["vllm", "trtllm"]))
    assert code == 0 and live.sweep_id != offline["ledger"].sweep_id
    synced = offline["ledger"]
    assert main(["sync", synced.sweep_id]) == 0
    client = MlflowClient(tracking_uri=uri)
    live_runs, synced_runs = _runs(uri, live.sweep_id), _runs(uri, synced.sweep_id)
    live_trials, synced_trials = _trials(live_runs), _trials(synced_runs)
    assert sorted(live_trials) == sorted(synced_trials) == sorted(synced.results())
    for key in live_trials:
        (a,), (b,) = live_trials[key], synced_trials[key]
        va, vb = _view(client, a), _view(client, b)
        # which metrics and tags a run holds follows its own measurement (a metric that
        # measured nothing, a flag a busy machine raised): each run holds what its ledger
        # entry says, and the rest of the views match exactly
        for view, ledger_ in ((va, live), (vb, synced)):
            want = trial_record(ledger_.results()[key], ledger_.sweep_id, None, 0.0)
            assert view.pop("metrics") == sorted({m[0] for m in want.metrics}), key
            assert view["tags"] == {k: v for k, v in want.tags.items()
                                    if not k.startswith(("mlflow.", "flag."))
                                    and k not in ("servesweep.sweep_id", RECORDED_TAG)}, key
            view.pop("tags")
        assert va == vb, key
    (lp,) = [r for r in live_runs if r.data.tags["servesweep.kind"] == "sweep"]
    (sp,) = [r for r in synced_runs if r.data.tags["servesweep.kind"] == "sweep"]
    assert lp.data.params == sp.data.params
    assert lp.info.status == sp.info.status == "FINISHED"
    assert sorted(f.path for f in client.list_artifacts(lp.info.run_id)) == \
        sorted(f.path for f in client.list_artifacts(sp.info.run_id))
    # the parent's metrics follow each sweep's own winners (a level a busy host flagged has
    # no runner-up, so no margin): each parent holds what its ledger says
    for run, ledger_ in ((lp, live), (sp, synced)):
        want = sweep_summary(ledger_.results().values(), load_spec(ledger_.dir / "spec.yaml"))
        assert set(run.data.metrics) - {"wall_s"} == {
            k for k, v in want.items() if isinstance(v, float)}
    assert "wall_s" in lp.data.metrics and "wall_s" not in sp.data.metrics


def test_a_run_left_running_without_artifacts_is_repaired_not_duplicated(
        offline, tmp_path, monkeypatch):
    """What a driver killed mid-write leaves: the parent and one trial's run RUNNING, the
    trial's run with a param or two and no artifacts."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("SERVESWEEP_HOME", str(offline["home"]))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    ledger = offline["ledger"]
    key = next(iter(ledger.results()))
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(NAME, artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp, run_name=ledger.sweep_id, tags={
        "servesweep.sweep_id": ledger.sweep_id, "servesweep.kind": "sweep"}).info.run_id
    orphan = client.create_run(exp, run_name="half written", tags={
        "mlflow.parentRunId": parent, "servesweep.sweep_id": ledger.sweep_id,
        "servesweep.kind": "trial", "servesweep.trial_key": key}).info.run_id
    client.log_param(orphan, "trial_key", key)
    client.log_param(orphan, "engine", "sim")

    assert main(["sync", ledger.sweep_id]) == 0
    _assert_one_complete_run_per_trial(uri, ledger)
    trials = _trials(_runs(uri, ledger.sweep_id))
    assert trials[key][0].info.run_id == orphan  # completed in place, not replaced
    assert len(_runs(uri, ledger.sweep_id)) == 1 + len(ledger.results())
    before = _snapshot(uri, ledger.sweep_id)
    assert main(["sync", ledger.sweep_id]) == 0
    assert _snapshot(uri, ledger.sweep_id) == before


def test_driver_killed_between_the_ledger_and_mlflow_then_resume_has_each_trial_once(
        state_home, tmp_path, servers):
    """The window is held open on purpose: the tracking server is paused (SIGSTOP) once
    the first engine started, so the first trial reaches the ledger while its MLflow
    write cannot land; the driver is SIGKILLed right then, the server continued, and
    `resume` must leave one finished run per trial and no engine behind."""
    from actors.procs import marked_processes

    server = servers(tmp_path / "server")
    server.start()
    server.wait_healthy()
    spec = minimal_spec(name=NAME)
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"]}]
    path = tmp_path / "window.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, SERVESWEEP_HOME=str(state_home), MLFLOW_TRACKING_URI=server.uri)
    driver = subprocess.Popen([sys.executable, "-m", "orchestrator.commands.cli", "run",
                               str(path), "--quiet"], cwd=Path(__file__).parents[2], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    assert server.proc is not None
    paused = False
    try:
        deadline = time.monotonic() + 180
        ledger = None
        while time.monotonic() < deadline:
            assert driver.poll() is None, "the driver ended before the window"
            latest = state_home / "sweeps" / "LATEST"
            if latest.exists():
                ledger = Ledger.open(latest.read_text().strip(), state_home)
                kinds = [e.type for e in ledger.events()]
                if "started" in kinds and not paused:
                    os.killpg(server.proc.pid, signal.SIGSTOP)  # MLflow writes hang now
                    paused = True
                if "trial" in kinds:
                    break
            time.sleep(0.05)
        assert ledger is not None and paused, "no trial reached the ledger in time"
        os.killpg(driver.pid, signal.SIGKILL)  # inside the ledger -> MLflow window
        driver.wait(30)
    finally:
        if paused:
            os.killpg(server.proc.pid, signal.SIGCONT)
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert ledger is not None
    assert len(ledger.results()) == 1  # the killed driver had recorded one trial
    os.environ["MLFLOW_TRACKING_URI"] = server.uri
    try:
        assert main(["resume", ledger.sweep_id, "--quiet"]) == 0
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    assert sorted(r.status.value for r in ledger.results().values()) == ["ok", "ok"]
    kinds = [e.type for e in ledger.events()]
    assert kinds.count("trial") == 2  # nothing recorded twice
    _assert_one_complete_run_per_trial(server.uri, ledger)
    assert marked_processes(ledger.sweep_id + "/") == []  # no engine left
