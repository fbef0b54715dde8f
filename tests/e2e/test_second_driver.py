"""One driver per sweep: a `resume` of a sweep whose driver is alive is refused at once,
naming that driver, and touches nothing; the first driver finishes every trial ok."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT, minimal_spec


def _sweep_started(home) -> str | None:
    latest = home / "sweeps" / "LATEST"
    if not latest.exists():
        return None
    sweep_id = latest.read_text().strip()
    ledger = home / "sweeps" / sweep_id / "ledger.jsonl"
    if not ledger.exists():
        return None
    kinds = [json.loads(line).get("type") for line in ledger.read_text().splitlines()]
    return sweep_id if "started" in kinds else None


def test_a_second_driver_is_refused_and_the_first_finishes(tmp_path, monkeypatch, capsys):
    home = tmp_path / "state"
    spec = minimal_spec(name="one-driver")
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 64, "concurrency": [1, 2],
                        "rounds": 2, "warmup_requests": 0}
    spec["sim"] = {"time_scale": 0.5}  # slow enough that the second driver comes mid-trial
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, SERVESWEEP_HOME=str(home))
    first = subprocess.Popen([sys.executable, "-m", "orchestrator.commands.cli", "run",
                              str(path), "--quiet", "--no-mlflow"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        sweep_id = None
        while sweep_id is None and time.monotonic() < deadline:
            assert first.poll() is None, first.stdout.read().decode()[-3000:]
            sweep_id = _sweep_started(home)
            time.sleep(0.3)
        assert sweep_id, "the first driver started no engine within 120 s"
        monkeypatch.setenv("SERVESWEEP_HOME", str(home))
        t0 = time.monotonic()
        code = main(["resume", sweep_id, "--quiet", "--no-mlflow"])
        refused_in = time.monotonic() - t0
        err = capsys.readouterr().err
        assert code == 2 and refused_in < 10, err
        assert f"is being run by `servesweep run` (pid {first.pid} on" in err
        out, _ = first.communicate(timeout=300)
        assert first.returncode == 0, out.decode()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    results = Ledger.open(sweep_id, home).results()
    assert sorted(r.status.value for r in results.values()) == ["ok", "ok"]
    kinds = [e.type for e in Ledger.open(sweep_id, home).events()]
    assert kinds.count("trial") == 2 and kinds.count("driver") == 1  # nothing twice
