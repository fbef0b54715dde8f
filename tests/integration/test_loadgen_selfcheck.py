"""The client self-check: ``client_bound`` when the client's own loop is starved, not otherwise."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from actors.loadgen.actor import LoadGeneratorCore
from tests.integration.test_loadgen_sim import sim_server, workload

pytestmark = pytest.mark.timeout(60)


async def _hog(busy_s: float) -> None:
    """Another task on the client's loop that holds it for ``busy_s`` every few ms."""
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < busy_s:
            pass
        await asyncio.sleep(0.002)


def _level(url: str, hog_s: float | None) -> dict:
    core = LoadGeneratorCore("sim", url, "sim-model", workload(rounds=2), 32000, None, 0.1, None)

    async def run() -> dict:
        hog = asyncio.create_task(_hog(hog_s)) if hog_s else None
        try:
            return await core.run_level(4, 0)
        finally:
            if hog:
                hog.cancel()
    return asyncio.run(run())


def test_starved_loop_is_client_bound_and_a_light_level_is_not(tmp_path: Path):
    with sim_server(tmp_path) as url:
        starved = _level(url, hog_s=0.02)
        # a light level: 4 streams against a sim at 0.1 x real time; one retry in case the
        # shared machine itself stalled this process for a moment
        light = _level(url, hog_s=None)
        if "client_bound" in light["flags"]:
            light = _level(url, hog_s=None)
    assert starved["status"] == "valid"
    assert "client_bound" in starved["flags"]
    assert starved["client"]["loop_lag_p99_ms"] > 5 or starved["client"]["cpu_frac"] > 0.9
    assert light["status"] == "valid"
    assert "client_bound" not in light["flags"], light["client"]
    assert light["client"]["loop_lag_p99_ms"] < 5 and light["client"]["cpu_frac"] < 0.9
