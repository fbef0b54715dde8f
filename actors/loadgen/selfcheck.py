"""The client's self-check instruments: event-loop lag and the loop thread's CPU time.

A level is ``client_bound`` (``aggregate``) when its loop lag p99 or its CPU share says the
client, not the server, set the pace; these measure both, per shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

__all__ = ["LagMonitor", "cpu_seconds"]


def cpu_seconds() -> float:
    """CPU time of the thread running the event loop: the one resource a client saturates
    (a Ray worker's other threads are not the client's bottleneck)."""
    return time.thread_time()


class LagMonitor:
    """Measures event-loop lag: how late a timer callback runs. Work the client does on
    purpose between rounds (``paused``) is not lag: a probe spanning it is not counted.
    Used as ``with LagMonitor() as lag:`` inside the loop; ``lag.lags`` in seconds.

    One probe every ``period`` seconds (``PERIOD_S``), as a bare timer callback (no task,
    no future). Each probe can wake an idle loop, and on a VM a wake-up costs 120-300 us of
    the process's CPU (``benchmarks/loadgen_wakeups.py``), so a 5 ms probe alone cost
    2.4-4% of a core: at a 20 ms token step, more than the reading it watched."""

    PERIOD_S = 0.05

    def __init__(self, period: float | None = None) -> None:
        self.lags: list[float] = []
        self.period = self.PERIOD_S if period is None else period
        self._handle: asyncio.TimerHandle | None = None
        self._epoch = 0

    def _probe(self, due: float, epoch: int) -> None:
        now = self._loop.time()
        if epoch == self._epoch:
            self.lags.append(max(now - due, 0.0))
        self._handle = self._loop.call_at(now + self.period, self._probe, now + self.period,
                                          self._epoch)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._epoch += 1

    def __enter__(self) -> LagMonitor:
        self._loop = asyncio.get_running_loop()
        due = self._loop.time() + self.period
        self._handle = self._loop.call_at(due, self._probe, due, self._epoch)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle:
            self._handle.cancel()
