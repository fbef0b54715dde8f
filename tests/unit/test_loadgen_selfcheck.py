"""The loop-lag probe: a bare timer callback every ``period``, late by the loop's lag."""

from __future__ import annotations

import asyncio
import time

from actors.loadgen.selfcheck import LagMonitor


def _run(body) -> LagMonitor:
    async def main() -> LagMonitor:
        with LagMonitor(period=0.02) as lag:
            tasks = len(asyncio.all_tasks())
            await body(lag)
            assert len(asyncio.all_tasks()) == tasks  # a timer callback, no task of its own
        return lag
    return asyncio.run(main())


def test_an_idle_loop_is_probed_once_a_period():
    lag = _run(lambda _: asyncio.sleep(0.3))
    assert 5 <= len(lag.lags) <= 16, len(lag.lags)  # 15 at most at 20 ms over 0.3 s
    assert LagMonitor().period == LagMonitor.PERIOD_S == 0.05


def test_a_blocked_loop_shows_as_lag_unless_the_block_is_paused():
    async def blocked(lag: LagMonitor) -> None:
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # the loop held: the probe due meanwhile runs ~60+ ms late
        await asyncio.sleep(0.05)

    async def paused(lag: LagMonitor) -> None:
        await asyncio.sleep(0.05)
        with lag.paused():  # work done on purpose (a round's requests built): not lag
            time.sleep(0.08)
        await asyncio.sleep(0.05)

    assert max(_run(blocked).lags) >= 0.04
    lags = _run(paused).lags
    assert lags and max(lags) < 0.04, lags
