"""Sim hold mode (``sim.hold_s``): a level that only waits, for measuring the scheduler.

A hold-mode trial starts its sim server as usual (placement, actors, launch, health check,
stop are all real), but each level sends no request: it sleeps ``hold_s`` wall-clock
seconds, which costs no CPU, so a benchmark of the scheduler on a small machine measures
scheduling and not CPU contention between simulated engines and load generators. Nothing
is measured, so nothing is reported as measured: the level is ``invalid`` with the flag
``held`` and a reason saying so, which makes the trial ``invalid`` (never a winner, no
metrics), and the ledger, report and MLflow show it as such.
"""

from __future__ import annotations

import time

from actors.contracts.results import LevelResult
from actors.contracts.states import LevelFlag, LevelStatus

__all__ = ["HOLD_REASON", "held_level"]

HOLD_REASON = "hold mode (sim.hold_s): no request sent, nothing measured"


def held_level(concurrency: int, seconds: float) -> LevelResult:
    """Wait ``seconds`` (a sleep: no CPU), then the level that says it measured nothing."""
    t0 = time.monotonic()
    time.sleep(seconds)
    return LevelResult(concurrency=concurrency, status=LevelStatus.INVALID,
                       flags=[LevelFlag.HELD], reason=HOLD_REASON,
                       wall_s=time.monotonic() - t0)
