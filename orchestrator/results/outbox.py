"""``TrackingOutbox``: MLflow work off the sweep's path; it never stops or slows a sweep.

The controller records a trial in the ledger (the truth), tells the searcher, and hands the
MLflow write to the outbox, which returns at once. One background thread does the writes in
order (``Tracker``: find-or-create, so any write can be repeated). A write that fails (MLflow
unreachable, slow, locked, dying) stays at the head of the queue and is tried again later
(after 2, 5, 10, 20, then every 30 s); the first failure prints one line on stderr naming the
tracking URI and the command that catches MLflow up later (``servesweep sync SWEEP``).
Nothing from MLflow is ever raised into the controller.

MLflow's own loggers (and SQLAlchemy's and alembic's under it) are routed by
``route_store_logs`` when the thread starts: a record that carries an exception (a write
that failed: the outbox says it in its one line) prints nothing, any other warning one line,
once; never a traceback among the sweep's lines.

At the end of a sweep ``drain`` waits a bounded time: the writes go on while they succeed
and stop at the first failure or at the deadline. What is left stays pending: the ledger
has it, and ``sync`` writes it (``behind_lines`` says so). ``close`` stops the thread; a
write cut short there (a run left RUNNING) is completed by the next ``sync`` or ``resume``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from actors.contracts.results import TrialResult
from orchestrator.results.tracking import Tracker, describe_error, sweep_record, trial_record

if TYPE_CHECKING:
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import SweepSpec

__all__ = ["TrackingOutbox", "RETRY_S", "STORE_LOGGERS", "route_store_logs"]

#: seconds between attempts while MLflow fails (the last one repeats)
RETRY_S = (2.0, 5.0, 10.0, 20.0, 30.0)
#: the loggers of MLflow's client and of the stores under it
STORE_LOGGERS = ("mlflow", "sqlalchemy", "alembic")


class _OneLine(logging.Handler):
    """A store's log record as at most one line on stderr, never a traceback. A record with
    an exception is dropped: the exception reaches the outbox, which says it once (a full
    disk made MLflow log seven tracebacks for one failed write). Each text prints once."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.exc_text:
            return
        try:
            text = " ".join((record.getMessage().strip().splitlines() or [""])[0].split())
        except Exception:  # noqa: BLE001 - a record that does not format says nothing
            return
        if not text or text in self._said:
            return
        self._said.add(text)
        with contextlib.suppress(OSError, ValueError):
            print(f"servesweep: MLflow log ({record.name}): {text[:200]}", file=sys.stderr,
                  flush=True)


_HANDLER = _OneLine()


def route_store_logs() -> None:
    """Send ``STORE_LOGGERS`` to one ``_OneLine`` handler instead of their own (MLflow
    installs its handler when imported: imported first, then replaced)."""
    import mlflow  # noqa: F401 - its import configures its loggers

    for name in STORE_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(_HANDLER)
        logger.propagate = False


@dataclass(frozen=True)
class _Job:
    what: str
    run: Callable[[], Any]


class TrackingOutbox:
    """An ordered queue of MLflow writes for one sweep, done by one daemon thread."""

    def __init__(self, tracker: Tracker, spec: SweepSpec, ledger: Ledger,
                 retry_s: tuple[float, ...] = RETRY_S, err: TextIO | None = None):
        self.tracker, self.ledger = tracker, ledger
        self.sweep_id = ledger.sweep_id
        self.workload = spec.workload
        self._record = sweep_record(spec, ledger)
        self._retry_s = retry_s
        self._err = err
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._draining = False
        self._drain_gen = 0  # one per drain() call
        self._gave_up_gen = -1  # the drain whose attempt failed
        self.warned = False
        self.ended = False  # an end() was handed over
        self.failures = 0
        self.last_error: str = ""
        self._thread = threading.Thread(target=self._work, name="servesweep-mlflow",
                                        daemon=True)
        self._thread.start()

    # -- what the driver hands over (each returns at once) -----------------------------------
    def begin(self) -> None:
        """The sweep's parent run (found or created, RUNNING), then every trial the ledger
        already has (``resume``: a sweep begun with ``--no-mlflow``, or one whose MLflow
        writes were cut short, is complete in MLflow before new trials are added)."""
        earlier = list(self.ledger.recorded())

        def job() -> None:
            self.tracker.open_sweep(self._record, running=True)
            self.tracker.sync_trials(self.ledger, earlier, self.workload)

        self._put(_Job("begin", job))

    def trial(self, result: TrialResult, recorded_ts: float) -> None:
        """A trial the ledger just recorded (``recorded_ts``: its event's time)."""
        trial_dir = self.ledger.dir / "trials" / result.key

        def job() -> None:
            if self.tracker.parent_id is None:
                self.tracker.open_sweep(self._record, running=True)
            self.tracker.ensure_trial(trial_record(result, self.sweep_id, trial_dir,
                                                   recorded_ts, self.workload))

        self._put(_Job(f"trial {result.key}", job))

    def end(self, summary: dict[str, Any], artifacts: list[Path], status: str) -> None:
        """The parent run's summary and report files, then its end status."""
        self.ended = True

        def job() -> None:
            if self.tracker.parent_id is None:
                self.tracker.open_sweep(self._record, running=False)
            self.tracker.end_sweep(summary, artifacts, status)

        self._put(_Job(f"end {status}", job))

    # -- waiting and stopping ---------------------------------------------------------------
    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)

    def drain(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every write; True when MLflow has them all. Writes
        go on while they succeed; the first failure ends the wait (MLflow is down: no use
        waiting for it)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._draining = True
            self._drain_gen += 1
            gen = self._drain_gen
            self._cond.notify_all()  # a write waiting to be retried is tried now
            while self._jobs and self._gave_up_gen != gen:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return not self._jobs

    def close(self, join_s: float = 1.0) -> None:
        """Stop after the write in progress; what is still queued is left for ``sync``."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(join_s)

    def behind_lines(self) -> list[str]:
        """What to tell the user when MLflow did not get everything (empty when it did)."""
        with self._cond:
            jobs = list(self._jobs)
        if not jobs:
            return []
        trials = sum(j.what.startswith("trial") for j in jobs)
        why = f": {self.last_error}" if self.last_error else ""
        return [f"MLflow is behind the ledger: {trials} trial run(s) and the sweep's run not "
                f"written to {self.tracker.uri}{why}. The ledger has every trial.",
                f"Bring MLflow up to date with: servesweep sync {self.sweep_id}"]

    # -- the thread -------------------------------------------------------------------------
    def _put(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                return
            self._jobs.append(job)
            self._cond.notify_all()

    def _work(self) -> None:
        if isinstance(self.tracker, Tracker):  # MLflow's, not a test's stand-in
            with contextlib.suppress(Exception):  # MLflow missing: each write says so
                route_store_logs()
        streak = 0  # failures in a row
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job = self._jobs[0]
            try:
                job.run()
            except Exception as err:  # noqa: BLE001 - MLflow must never stop the sweep
                streak += 1
                self._failed(job, err)
                with self._cond:
                    gen = self._drain_gen
                    if self._draining:  # the sweep is ending: stop trying, say so
                        self._gave_up_gen = gen
                        self._cond.notify_all()
                        while self._drain_gen == gen and not self._closed:
                            self._cond.wait()
                    else:
                        wait = self._retry_s[min(streak, len(self._retry_s)) - 1]
                        deadline = time.monotonic() + wait
                        while self._drain_gen == gen and not self._closed:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            self._cond.wait(left)
                continue
            streak = 0
            with self._cond:
                if self._jobs and self._jobs[0] is job:
                    self._jobs.popleft()
                self._cond.notify_all()

    def _failed(self, job: _Job, err: BaseException) -> None:
        self.failures += 1
        self.last_error = describe_error(err)
        if self.warned:
            return
        self.warned = True
        out = self._err or sys.stderr
        print(f"servesweep: MLflow at {self.tracker.uri} failed ({job.what}: "
              f"{self.last_error}); the sweep goes on and the ledger keeps every trial; "
              f"when MLflow is back run: servesweep sync {self.sweep_id}", file=out, flush=True)
