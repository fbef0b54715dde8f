"""Ctrl-C on `servesweep run` stops every engine process the sweep started, exits 130 with
no traceback, and leaves no MLflow run RUNNING (the parent ends KILLED)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import yaml

from actors.procs import marked_processes
from tests.conftest import ROOT, minimal_spec, terminal_sigint


def _started(home) -> dict | None:
    latest = home / "sweeps" / "LATEST"
    if not latest.exists():
        return None
    ledger = home / "sweeps" / latest.read_text().strip() / "ledger.jsonl"
    if not ledger.exists():
        return None
    for line in ledger.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("type") == "started" and ev.get("pid"):
            return ev
    return None


def test_ctrl_c_stops_every_engine_process(tmp_path):
    home = tmp_path / "state"
    spec = minimal_spec(name="interrupt")
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 4000, "concurrency": [2],
                        "rounds": 5, "warmup_requests": 0}
    spec["sim"] = {"time_scale": 1.0}  # slow on purpose: the trial is mid-run when we stop it
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, SERVESWEEP_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.commands.cli", "run", str(path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=terminal_sigint)
    try:
        deadline = time.monotonic() + 120
        started = None
        while started is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            started = _started(home)
            time.sleep(0.5)
        assert started is not None, "no engine started within 120 s"
        sweep_id = started["marker"].split("/")[0]
        time.sleep(3)  # the load is running now
        assert marked_processes(sweep_id + "/"), "the engine should be running"
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode(errors="replace")
    assert proc.returncode == 130, text[-3000:]
    assert "engines stopped" in text
    assert "Traceback" not in text, text[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("interrupt").experiment_id])
    assert [r.info.status for r in runs if r.data.tags["servesweep.kind"] == "sweep"] == \
        ["KILLED"]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert marked_processes(sweep_id + "/") == []
    assert not os.path.exists(f"/proc/{started['pid']}") or \
        open(f"/proc/{started['pid']}/stat").read().split(")")[1].split()[0] == "Z"
