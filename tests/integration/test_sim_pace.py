"""The sim knows when it is late: a real sim server starved by SIGSTOP pulses reports its
late tokens in /metrics, the level carries them, the driver flags it ``sim_behind``, and
a flagged level wins nowhere; a short level still sees what ran (its running maximum is
the model's, not the zero a single scrape at its start saw)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from actors.contracts.config import SimOptions, TrialConfig
from actors.contracts.results import LevelResult, TrialResult
from actors.contracts.states import LevelFlag, TrialStatus
from orchestrator.execution.verdicts import flag_sim_pace
from orchestrator.results.analysis import winners
from orchestrator.spec import SLO
from tests.integration.test_loadgen_sim import sim_load
from tests.simserver import sim_config, sim_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BOUND = 0.05  # SimOptions.late_share_max's default


def _workload(**kw) -> dict:
    w = dict(prompt_tokens=64, output_tokens=64, concurrency=[8], rounds=2,
             requests_per_round=16, warmup_requests=2, stall_timeout_s=10, level_timeout_s=60)
    w.update(kw)
    return w


def _level(url: str, w: dict, c: int, scale: float) -> LevelResult:
    core = sim_load(url, w, scale)
    return asyncio.run(core.run_level(c, 0))


class _Pulses:
    """SIGSTOP the process for ``stop_s`` every ``period_s`` until stopped (a host whose
    other work takes the sim's CPU in slices, as the kernel's scheduler does)."""

    def __init__(self, pid: int, stop_s: float = 0.04, period_s: float = 0.08):
        self.pid, self.stop_s, self.period_s = pid, stop_s, period_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(self.stop_s)
            os.kill(self.pid, signal.SIGCONT)
            self._done.wait(self.period_s - self.stop_s)

    def __enter__(self) -> _Pulses:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        os.kill(self.pid, signal.SIGCONT)


def test_a_starved_sim_flags_its_level_and_the_level_wins_nowhere(tmp_path: Path):
    scale = 0.5  # steps of a few ms of wall time: a 40 ms stop makes a run of them late
    with sim_server(sim_config(time_scale=scale), tmp_path) as (url, proc, _):
        with _Pulses(proc.pid):
            starved = _level(url, _workload(), 8, scale)
    s = starved.server
    assert s.sim_paced_tokens and s.sim_paced_tokens >= 16 * 2 * 64  # the measured rounds
    assert s.sim_late_share is not None and s.sim_late_share > BOUND, s
    assert s.sim_lag_mean_ms is not None and s.sim_lag_mean_ms > 2.0
    flagged = flag_sim_pace(starved, BOUND)
    assert LevelFlag.SIM_BEHIND in flagged.flags and "tokens late" in flagged.reason
    assert starved.host_load is not None and starved.host_load.cpus >= 1

    # ranked beside a slower level measured on time, the flagged one does not win; alone,
    # nothing does and the note says why
    cfg_a, cfg_b = TrialConfig(engine="sim", cuda_graphs=True), TrialConfig(engine="sim")
    fast = TrialResult(key=cfg_a.key(), config=cfg_a, status=TrialStatus.OK, levels=[
        flagged.model_copy(update={"metrics": flagged.metrics.model_copy(
            update={"output_tok_s": 1e9})})])
    slow = TrialResult(key=cfg_b.key(), config=cfg_b, status=TrialStatus.OK, levels=[
        flagged.model_copy(update={"flags": [], "reason": ""})])
    assert winners([fast, slow], SLO())[0].key == slow.key
    alone = winners([fast], SLO())[0]
    assert alone.key is None and "sim_behind" in alone.note


def test_a_short_level_sees_every_request_running(tmp_path: Path):
    """At a sped-up scale a level is over in a quarter of a second (0.25 s idle here):
    its scrapes must still see the model run all 16 requests at once (the pool holds
    hundreds), not zero (one scrape at its start once saw nothing run).

    That holds only for a level the sim served on time and whose requests overlapped: a sim
    behind its schedule admits the wave while the first requests already run out, and then
    sees fewer at once; so does a client that spreads the wave over more than a request's
    length. At scale 0.05 with 32 output tokens a request lasted about 25 ms, and under two
    busy loops the wave's sends spread past that (12 and 11 seen in levels left unflagged)
    while at 128 tokens the sim's 0.7 ms steps were late in 20 levels in a row; at scale
    0.2 with 64 tokens it passed 10 of 10 runs under the same load. The test measures its
    margin itself: a level flagged ``sim_behind`` or ``client_bound`` is not judged, and
    some level of the attempts must be on time and see all 16."""
    scale = 0.2
    bound = SimOptions().late_share_max
    w = _workload(prompt_tokens=256, output_tokens=64, rounds=1, requests_per_round=16,
                  warmup_requests=1)
    on_time: list[LevelResult] = []
    late: list[LevelResult] = []
    with sim_server(sim_config(time_scale=scale), tmp_path) as (url, _, _):
        for _ in range(20):  # under two busy loops 8 in a row were once late
            level = _level(url, w, 16, scale)
            assert level.status == "valid", level.reason
            assert level.server.samples >= 3
            assert level.server.running_max is not None and level.server.running_max >= 1
            flagged = flag_sim_pace(level, bound)
            punctual = (LevelFlag.SIM_BEHIND not in flagged.flags
                        and LevelFlag.CLIENT_BOUND not in level.flags)
            (on_time if punctual else late).append(level)
            if on_time:
                break
    assert on_time, [lv.server for lv in late]  # 20 late levels in a row: a host far too busy
    assert on_time[0].server.running_max == 16, on_time[0].server
