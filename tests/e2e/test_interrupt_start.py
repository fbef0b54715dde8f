"""SIGINT or SIGTERM at any moment of a sweep's start, Ray's included, ends the driver with
130 and an ``interrupted`` event in the ledger, leaves no engine and no Ray of its own
behind, and ``sync`` then ends the sweep's parent run KILLED (issue 28: once in 13 tries a
Ctrl-C during Ray's start was swallowed and the sweep ran to its end).

A signal during Ray's own start is held until Ray is up (``interrupts.deferred``): Ray
stopped midway leaves servers behind, which the test checks for (the driver's process
group is empty after it exits). The moments are spread over the start as this machine
runs it: a first, uninterrupted run measures the time from "starting Ray ..." to the first
trial's line, and the 10 runs after it are signalled at 0/9 .. 9/9 of that span (SIGINT
to the process group, as a terminal's Ctrl-C, and SIGTERM to the driver alone, as
``kill``, in turn; 20 moments cost the suite 80 s more for steps of 5% of the span, not
10%)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from actors.procs import marked_processes
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT, minimal_spec, terminal_sigint

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

MOMENTS = 10


class _Driver:
    """``servesweep run`` in its own session; its output lines with their arrival times."""

    def __init__(self, spec: Path, home: Path, *extra: str):
        env = dict(os.environ, SERVESWEEP_HOME=str(home))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.commands.cli", "run", str(spec), *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=terminal_sigint)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), raw.decode(errors="replace")))

    def when(self, pattern: str, timeout_s: float = 180.0) -> float:
        """The arrival time of the first line matching ``pattern`` (waits for it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if re.search(pattern, line):
                    return t
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.01)
        raise AssertionError(f"no line like {pattern!r}: {self.text()[-3000:]}")

    def text(self) -> str:
        return "".join(line for _, line in self.lines)

    def sweep_id(self) -> str:
        m = re.search(r"^sweep (\S+): ", self.text(), re.M)
        assert m, self.text()[-3000:]
        return m.group(1)

    def wait(self, timeout_s: float = 180.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._reader.join(timeout=10)
        return rc


def _group(pgid: int) -> set[int]:
    """Pids of the live processes of process group ``pgid`` (the driver's: Ray's servers
    that the driver started are in it)."""
    found = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                found.add(int(d.name))
    return found


def _group_gone(pgid: int, timeout_s: float = 30.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while (left := _group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_a_signal_at_any_moment_of_the_start_is_recorded_and_exits_130(tmp_path, monkeypatch):
    home = tmp_path / "state"
    spec = minimal_spec(name="start-interrupt")
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [1],
                        "rounds": 1, "warmup_requests": 0}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))

    first = _Driver(path, home, "--no-mlflow")
    span = first.when(r"trial 1/") - first.when(r"^starting Ray")
    assert first.wait() == 0, first.text()[-3000:]
    assert span > 0

    stopped: list[str] = []
    for k in range(MOMENTS):
        drv = _Driver(path, home, "--no-mlflow")
        t0 = drv.when(r"^starting Ray")
        time.sleep(max(0.0, t0 + span * k / (MOMENTS - 1) - time.monotonic()))
        if k % 2 == 0:
            os.killpg(drv.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        else:
            drv.proc.send_signal(signal.SIGTERM)  # `kill`: the driver alone
        rc = drv.wait()
        text = drv.text()
        sweep_id = drv.sweep_id()
        where = f"moment {k}/{MOMENTS - 1} ({span * k / (MOMENTS - 1):.2f} s): {text[-2000:]}"
        assert rc == 130, where
        assert "Traceback" not in text, where
        kinds = [e.type for e in Ledger.open(sweep_id, home).events()]
        assert "interrupted" in kinds, (kinds, where)
        assert kinds.count("trial") <= 1, where
        assert marked_processes(sweep_id + "/") == [], where  # no engine of it left
        assert _group_gone(drv.proc.pid) == set(), where  # nor a Ray server of its own
        stopped.append(sweep_id)

    # the parent run of a sweep stopped during Ray's start ends KILLED once synced
    from mlflow.tracking import MlflowClient

    from orchestrator.commands.cli import main

    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    assert main(["sync", stopped[MOMENTS // 2]]) == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("start-interrupt").experiment_id])
    parents = [r for r in runs if r.data.tags.get("servesweep.kind") == "sweep"]
    assert [r.info.status for r in parents] == ["KILLED"]
