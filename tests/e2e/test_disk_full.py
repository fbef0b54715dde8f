"""A full disk loses nothing (issue 28 item 5), on a real small filesystem (a tmpfs).

The volume is filled from the driver at a chosen point of the sweep (a ballast file, by a
hook on the ledger or the report: deterministic, no timing): trial 2's launch, or a
trial's result line, or the report after every trial is final. Each time the command ends
with exit 1 and one line naming the path and the room left, no traceback; the trial gets
no final result, and once the ballast is gone ``resume`` (or ``report``) finishes the
sweep with every trial ok exactly once. MLflow failing on a full volume prints no
traceback either.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.results import report_folder
from orchestrator.results.events import Scheduled, SweepCreated
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

VOLUME = "16m"


@pytest.fixture
def volume(tmp_path: Path):
    """A 16 MiB tmpfs mounted for the test, unmounted after it (skips where it cannot be)."""
    mnt = tmp_path / "vol"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME}", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {got.stderr.strip() or got.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


class Ballast:
    """A file that takes all the room of a volume but ``leave`` bytes."""

    def __init__(self, volume: Path):
        self.path = volume / "ballast"

    def fill(self, leave: int = 0) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 20, 4096, 1):
                chunk = b"\0" * size
                while True:
                    try:
                        os.write(fd, chunk)
                    except OSError as err:
                        assert err.errno == errno.ENOSPC
                        break
            if leave:
                os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
        finally:
            os.close(fd)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _spec(tmp_path: Path, profiles: list[str]) -> Path:
    spec = minimal_spec(name="full")
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [2],
                        "rounds": 1, "warmup_requests": 0}
    spec["space"] = [{"engine": "sim", "profile": profiles}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _one_line(out: str, sweep_dir: Path, then: str) -> str:
    """The one line about the disk: names a path on the volume, the room, what to run."""
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if "disk full" in ln or "KiB free" in ln]
    assert len(lines) == 1, out
    line = lines[0]
    assert line.startswith(f"servesweep: disk full: {sweep_dir}"), line
    assert " KiB free): " in line and line.endswith(f"free space, then `{then}`"), line
    return line


def _sweep(home: Path) -> Ledger:
    return Ledger.open((home / "sweeps" / "LATEST").read_text().strip(), home)


def _trial_events(ledger: Ledger) -> Counter[str]:
    return Counter(e.key for e in ledger.events() if e.type == "trial")


def _resumed_all_ok(ledger: Ledger, n: int, capsys) -> None:
    assert main(["resume", ledger.sweep_id, "--quiet", "--no-mlflow"]) == 0
    capsys.readouterr()
    results = ledger.results()
    assert len(results) == n and {r.status.value for r in results.values()} == {"ok"}
    assert set(_trial_events(ledger).values()) == {1}  # each trial final exactly once
    assert ledger.damage == [] and not (ledger.dir / "ledger.quarantine.jsonl").exists()


@pytest.mark.parametrize("leave", [0, 8192], ids=["host-cannot-write", "engine-cannot-log"])
def test_a_launch_on_a_full_disk_stops_the_sweep_and_resume_runs_the_trial(
        tmp_path, volume, monkeypatch, capsys, leave):
    """Trial 2 is launched on a full volume. With no room at all its host cannot write the
    engine's files (an ``OSError`` in the actor); with 8 KiB they fit and the engine dies
    unable to write its log (a failed attempt on a volume with no room left)."""
    home = volume / "state"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ballast = Ballast(volume)
    append = Ledger.append
    scheduled: list[str] = []

    def append_then_fill(self: Ledger, event) -> None:
        append(self, event)
        if isinstance(event, Scheduled):
            scheduled.append(event.key)
            if len(scheduled) == 2:
                ballast.fill(leave)

    monkeypatch.setattr(Ledger, "append", append_then_fill)
    assert main(["run", str(_spec(tmp_path, ["vllm", "trtllm"])), "--no-mlflow"]) == 1
    monkeypatch.setattr(Ledger, "append", append)
    got = capsys.readouterr()
    ledger = _sweep(home)
    line = _one_line(got.out + got.err, ledger.dir, f"servesweep resume {ledger.sweep_id}")
    if not leave:  # the launch itself raised: nothing was started
        assert "(0 KiB free)" in line
        assert scheduled[1] not in {e.key for e in ledger.events() if e.type == "started"}
    results = ledger.results()
    assert list(results) == [scheduled[0]] and results[scheduled[0]].status.value == "ok"
    assert scheduled[1] not in _trial_events(ledger)  # no final result for trial 2
    ballast.remove()
    _resumed_all_ok(ledger, 2, capsys)


def test_a_result_that_cannot_be_written_is_not_final_and_the_ledger_is_intact(
        tmp_path, volume, monkeypatch, capsys):
    """The volume fills just before the trial's result line is appended."""
    home = volume / "state"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ballast = Ballast(volume)
    record = Ledger.record_result

    def fill_then_record(self: Ledger, result):
        ballast.fill()
        return record(self, result)

    monkeypatch.setattr(Ledger, "record_result", fill_then_record)
    assert main(["run", str(_spec(tmp_path, ["vllm"])), "--no-mlflow"]) == 1
    monkeypatch.setattr(Ledger, "record_result", record)
    got = capsys.readouterr()
    ledger = _sweep(home)
    _one_line(got.out + got.err, ledger.dir, f"servesweep resume {ledger.sweep_id}")
    assert ledger.results() == {}
    assert ledger.path.read_bytes().endswith(b"\n")  # no torn line left behind
    assert ledger.damage == []
    ballast.remove()
    _resumed_all_ok(ledger, 1, capsys)


def test_a_line_cut_short_by_a_full_disk_is_taken_back(volume):
    """4 KiB of room, a 32 KiB line: the part written is cut back off, the ledger is as it
    was, and the next append (with room again) reads whole."""
    ledger = Ledger.create("name: x\n", "cut", volume / "state")
    before = ledger.path.read_bytes()
    ballast = Ballast(volume)
    ballast.fill(leave=4096)
    big = SweepCreated(spec_sha256="0" * 64, spec={"note": "x" * (32 << 10)})
    with pytest.raises(OSError) as got:
        ledger.append(big)
    assert got.value.errno == errno.ENOSPC
    assert ledger.path.read_bytes() == before
    ballast.remove()
    ledger.append(big)
    assert [e.type for e in ledger.events()] == ["sweep", "sweep"] and ledger.damage == []
    assert not (ledger.dir / "ledger.quarantine.jsonl").exists()


def test_a_report_that_cannot_be_written_leaves_the_ledger_and_report_rewrites_it(
        tmp_path, volume, monkeypatch, capsys):
    """Every trial is final when the volume fills; only the report is missing."""
    home = volume / "state"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ballast = Ballast(volume)
    write = report_folder.write_report

    def fill_then_write(*args, **kwargs):
        ballast.fill()
        return write(*args, **kwargs)

    monkeypatch.setattr(report_folder, "write_report", fill_then_write)
    assert main(["run", str(_spec(tmp_path, ["vllm"])), "--no-mlflow"]) == 1
    monkeypatch.setattr(report_folder, "write_report", write)
    got = capsys.readouterr()
    ledger = _sweep(home)
    line = _one_line(got.out + got.err, ledger.dir / "report",
                     f"servesweep report {ledger.sweep_id}")
    assert "the ledger is intact, the report was not written" in line
    results = ledger.results()
    assert [r.status.value for r in results.values()] == ["ok"]
    ballast.remove()
    assert main(["report", ledger.sweep_id, "--no-mlflow"]) == 0
    capsys.readouterr()
    assert (ledger.dir / "report" / "index.html").is_file()
    assert _trial_events(ledger) == Counter({next(iter(results)): 1})


def test_mlflow_on_a_full_volume_prints_no_traceback(tmp_path, volume, monkeypatch, capsys):
    """MLflow's store is on the full volume (the ledger is not): the sweep completes and
    MLflow's failure is one line, never SQLAlchemy's tracebacks."""
    from orchestrator.results.tracking import Tracker

    home = tmp_path / "state"
    home.mkdir()
    uri = f"sqlite:///{volume / 'mlflow.db'}"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    Tracker(home, uri).client.search_experiments()  # the store exists, then the disk fills
    Ballast(volume).fill()
    assert main(["run", str(_spec(tmp_path, ["vllm"]))]) == 0
    got = capsys.readouterr()
    out = got.out + got.err
    assert "Traceback" not in out, out
    said = [ln for ln in out.splitlines() if "MLflow" in ln or "sqlite" in ln.lower()
            or "sqlalche" in ln or " ERROR " in ln]
    assert len([ln for ln in said if ln.startswith("servesweep: MLflow at ")]) == 1, out
    assert all(ln.startswith(("servesweep: MLflow at ", "MLflow is behind the ledger",
                              "Bring MLflow up to date", "Open the results in MLflow",
                              "  .venv/bin/mlflow ui"))
               for ln in said), out
    assert "MLflow is behind the ledger" in out
    ledger = _sweep(home)
    assert [r.status.value for r in ledger.results().values()] == ["ok"]
