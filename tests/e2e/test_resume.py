"""Nothing is lost when a sweep stops: `resume` finishes it; `run` reaps a dead driver's engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import yaml

from actors.procs import MARKER_ENV, marked_processes
from orchestrator.commands.cli import main
from orchestrator.execution.runner import reap_orphans
from orchestrator.results.events import DriverStarted
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT, minimal_spec, terminal_sigint


def test_interrupted_sweep_is_resumed_without_rerunning_finished_trials(tmp_path, monkeypatch):
    home = tmp_path / "state"
    spec = minimal_spec(name="resume")
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 200, "concurrency": [2],
                        "rounds": 2, "warmup_requests": 0}
    spec["sim"] = {"time_scale": 0.5}
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, SERVESWEEP_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.commands.cli", "run", str(path),
                             "--no-mlflow"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=terminal_sigint)
    try:  # stop it once the second trial's server has said where it listens
        deadline = time.monotonic() + 180
        sweep_id = second = None
        while time.monotonic() < deadline:
            latest = home / "sweeps" / "LATEST"
            if latest.exists():
                sweep_id = latest.read_text().strip()
                ledger = Ledger.open(sweep_id, home)
                started = [e.key for e in ledger.events() if e.type == "started"]
                if len(started) == 2:
                    second = started[1]
                    log = ledger.trial_dir(second) / "server.log"
                    if log.exists() and "http://127.0.0.1:" in log.read_text():
                        break
            time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    first = Ledger.open(sweep_id).results()
    assert [r.status.value for r in first.values()] == ["ok"]
    assert main(["resume", sweep_id, "--quiet", "--no-mlflow"]) == 0
    final = Ledger.open(sweep_id).results()
    assert sorted(r.status.value for r in final.values()) == ["ok", "ok"]
    trial_events = [e for e in Ledger.open(sweep_id).events() if e.type == "trial"]
    assert len(trial_events) == 2  # the finished trial was not run again
    # the interrupted attempt's files are kept apart, not read as the rerun's
    kept = Ledger.open(sweep_id).trial_dir(second) / "attempt-1" / "server.log"
    assert "http://127.0.0.1:" in kept.read_text()


def test_run_reaps_engines_whose_driver_is_gone(tmp_path):
    ledger = Ledger.create("name: x\n", "orphan", tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ledger.append(DriverStarted(pid=dead.pid, host=os.uname().nodename))
    env = dict(os.environ, **{MARKER_ENV: f"{ledger.sweep_id}/abc"})
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env,
                              start_new_session=True)
    try:
        time.sleep(0.5)
        assert marked_processes(ledger.sweep_id + "/")
        assert reap_orphans(tmp_path) == [ledger.sweep_id]
        assert engine.wait(timeout=15) is not None
        assert marked_processes(ledger.sweep_id + "/") == []
        reaped = json.loads(ledger.path.read_text().splitlines()[-1])
        assert reaped["type"] == "reaped"  # and it says what it stopped (issue 28)
        assert reaped["killed"] == {os.uname().nodename: [engine.pid]} and reaped["complete"]
    finally:
        if engine.poll() is None:
            engine.kill()
