"""The tracking outbox with a stand-in tracker: it never raises or blocks, it warns once,
keeps failed writes in order and retries them, and its drain is bounded."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

from actors.contracts.config import TrialConfig
from actors.contracts.results import TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.results.ledger import Ledger
from orchestrator.results.outbox import TrackingOutbox
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec


class FakeTracker:
    """Fails while ``down`` is set; ``hang`` blocks a write until it is cleared."""

    uri = "http://127.0.0.1:9"

    def __init__(self) -> None:
        self.down = True
        self.hang = threading.Event()
        self.parent_id: str | None = None
        self.calls: list[str] = []

    def _call(self, what: str) -> None:
        while self.hang.is_set():
            time.sleep(0.01)
        if self.down:
            raise ConnectionError(f"Connection refused ({what})")
        self.calls.append(what)

    def open_sweep(self, record: Any, running: bool) -> str:
        self._call("open")
        self.parent_id = "p"
        return "p"

    def sync_trials(self, ledger: Ledger, keys: Any = None, workload: Any = None) -> None:
        self._call(f"sync {sorted(keys or [])}")

    def ensure_trial(self, record: Any, found: Any = None) -> tuple[str, int]:
        self._call(f"trial {record.key}")
        return "created", 0

    def end_sweep(self, summary: dict, artifacts: list[Path], status: str) -> None:
        self._call(f"end {status}")


def _outbox(tmp_path: Path, tracker: FakeTracker, err: io.StringIO,
            retry_s: float = 0.05) -> TrackingOutbox:
    spec = parse_spec(minimal_spec(name="outbox"))
    ledger = Ledger.create("name: outbox\n", "outbox", tmp_path)
    return TrackingOutbox(tracker, spec, ledger, retry_s=(retry_s,), err=err)  # type: ignore


def _result(key: str) -> TrialResult:
    return TrialResult(key=key, config=TrialConfig(engine="sim", profile="vllm"),
                       status=TrialStatus.INFEASIBLE, reason="too big")


def test_failed_writes_warn_once_stay_in_order_and_go_through_when_mlflow_is_back(tmp_path):
    tracker, err = FakeTracker(), io.StringIO()
    box = _outbox(tmp_path, tracker, err)
    try:
        t0 = time.monotonic()
        box.begin()
        for k in ("a", "b", "c"):
            box.trial(_result(k), 1.0)
        assert time.monotonic() - t0 < 0.5  # handing over never waits for MLflow
        time.sleep(0.3)  # several failed attempts
        assert box.pending == 4 and box.failures >= 2
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and tracker.uri in lines[0]
        assert f"servesweep sync {box.sweep_id}" in lines[0]
        tracker.down = False
        box.end({}, [], "FINISHED")
        assert box.drain(5)
        assert tracker.calls == ["open", "sync []", "trial a", "trial b", "trial c",
                                 "end FINISHED"]
        assert box.behind_lines() == [] and len(err.getvalue().splitlines()) == 1
    finally:
        box.close()


def test_drain_gives_up_at_the_first_failure_and_says_what_to_run(tmp_path):
    tracker, err = FakeTracker(), io.StringIO()
    box = _outbox(tmp_path, tracker, err, retry_s=60.0)  # a minute between attempts
    try:
        box.begin()
        box.trial(_result("a"), 1.0)
        box.end({}, [], "FINISHED")
        t0 = time.monotonic()
        assert not box.drain(10)
        assert time.monotonic() - t0 < 2
        lines = box.behind_lines()
        assert "1 trial run(s)" in lines[0] and tracker.uri in lines[0]
        assert lines[-1] == f"Bring MLflow up to date with: servesweep sync {box.sweep_id}"
    finally:
        box.close()


def test_drain_is_bounded_when_a_write_hangs(tmp_path):
    tracker, err = FakeTracker(), io.StringIO()
    tracker.down = False
    tracker.hang.set()  # a server that accepts and never answers
    box = _outbox(tmp_path, tracker, err)
    try:
        box.begin()
        t0 = time.monotonic()
        assert not box.drain(0.3)
        assert time.monotonic() - t0 < 1.5
        assert box.pending == 1
    finally:
        tracker.hang.clear()
        box.close()
