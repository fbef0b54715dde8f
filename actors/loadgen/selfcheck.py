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
    """Measures event-loop lag: how late a 5 ms sleep wakes up. Work the client does on
    purpose between rounds (``paused``) is not lag: a sleep spanning it is not counted.
    Used as ``with LagMonitor() as lag:`` inside the loop; ``lag.lags`` in seconds."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task | None = None
        self._epoch = 0

    async def _run(self) -> None:
        while True:
            epoch, t = self._epoch, time.perf_counter()
            await asyncio.sleep(0.005)
            if epoch == self._epoch:
                self.lags.append(time.perf_counter() - t - 0.005)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._epoch += 1

    def __enter__(self) -> LagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
