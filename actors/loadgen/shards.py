"""A level spread over several client processes on the server's node (``shards``).

One event loop streams only so many tokens per second (one core). ``run_sharded`` spawns
one process per shard for a level; each builds its own ``LevelRunner`` from the parent's
init arguments and runs its share (``share``) of the streams and requests. Shards start
every round together (``Sync``: a barrier) and stop together when any saw an error (a
shared flag). Each sends back a ``ShardOutcome``; a shard that dies sends none and is
reported as an error, never waited on forever (the level's deadline still holds).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from actors.loadgen.records import RequestRecord

__all__ = ["ShardOutcome", "Sync", "run_sharded", "share"]


@dataclass
class ShardOutcome:
    """What one shard measured; ``rounds`` are (round, start, end) in perf_counter seconds
    (CLOCK_MONOTONIC: comparable across processes of one host)."""

    records: list[RequestRecord] = field(default_factory=list)
    rounds: list[tuple[int, float, float]] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    busy_s: float = 0.0
    error: str = ""
    reader: Literal["native", "python", "aiohttp"] = "python"  # ClientHealth.reader
    reads_kept: int = 0  # ClientHealth.reads_kept: over the measured rounds


class Sync:
    """Keeps shards in step: a barrier at every round boundary and a shared stop flag."""

    def __init__(self, barrier: Any, flag: Any, timeout: float):
        self.barrier, self.flag, self.timeout = barrier, flag, timeout

    async def agree(self, stop: bool) -> bool:
        """Wait for every shard; True if any of them wants to stop (or one is gone)."""
        if stop:
            self.flag.value = 1
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.barrier.wait,
                                                             self.timeout)
        except threading.BrokenBarrierError:
            return True
        return bool(self.flag.value)


def share(total: int, k: int, shards: int) -> int:
    """Shard ``k``'s part of ``total`` (streams or requests): the parts differ by at most 1."""
    return total // shards + (1 if k < total % shards else 0)


async def run_sharded(target: Callable[..., None], init: dict[str, Any], concurrency: Any,
                      level: int, shards: int, timeout: float,
                      outs: list[ShardOutcome]) -> None:
    """Run one level over ``shards`` spawned processes; their outcomes are appended to
    ``outs`` as they come (so a caller that times out keeps what arrived). ``target`` is
    each process's entry point (a module-level function, ``level.shard_main``), called
    with ``init`` (the ``LevelRunner`` arguments, picklable), the level, the shard's
    index and count, the barrier, the stop flag, the pipe's writing end and the
    timeout; it must send one ``ShardOutcome``. Every process is gone when this returns."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(shards)
    flag = ctx.Value("i", 0)
    procs, readers = [], []
    for k in range(shards):
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, daemon=True, name=f"loadgen-shard-{k}",
                        args=(init, concurrency, level, k, shards, barrier, flag, writer,
                              timeout))
        p.start()
        writer.close()
        procs.append(p)
        readers.append(reader)
    loop = asyncio.get_running_loop()
    try:
        got = await asyncio.gather(*(loop.run_in_executor(None, _recv, r) for r in readers))
        outs.extend(got)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
        for r in readers:
            r.close()


def _recv(reader: Any) -> ShardOutcome:
    try:
        return reader.recv()
    except EOFError:
        return ShardOutcome(error="shard process exited without a result")
