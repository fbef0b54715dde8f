"""Can this host keep the sim's time scale? A short calibration of its own speed, for ``plan``.

The sim sleeps each iteration's simulated duration times ``sim.time_scale``, then writes
one SSE frame per running stream; it keeps pace only while that work, and the event
loop's own wake-up, fit inside the scaled step (``actors.sim.pace`` counts the tokens that
did not). ``calibrate`` measures, in about a third of a second and starting nothing:

- ``timer_late_ms``: how late a 1 ms asyncio sleep wakes here (p90 of 60): a loaded host
  wakes late, whatever the sim does;
- ``write_us``: one SSE-sized frame written to a local socket;
- ``step_us_per_seq``: the sim's model core, per running sequence and iteration;
- ``cpus`` and the load average: the sim and its client each want a core.

``check`` compares each predicted level's scaled step with that cost (the work may use
half of the step, the timer's lateness must stay under the whole step, as the sim's late
rule) and, where it does not fit, says which level and the ``time_scale`` that would.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from dataclasses import dataclass

from actors.contracts.hardware import get_hardware
from actors.contracts.shapes import ModelShape
from actors.sim.perf import DEFAULT_PROFILE, SimConfig
from actors.sim.predict import build_engine

__all__ = ["HostSpeed", "calibrate", "check", "PaceProblem"]

#: share of a scaled step the sim's work may take (the rest absorbs the client and jitter)
WORK_SHARE = 0.5
_FRAME = b"data: " + b"x" * 190 + b"\n\n"


@dataclass(frozen=True)
class HostSpeed:
    cpus: int
    load_1m: float
    timer_late_ms: float
    write_us: float
    step_us_per_seq: float

    @property
    def free_share(self) -> float:
        """Share of a core each of the sim and the client can count on (0.1 to 1)."""
        return min(1.0, max(0.1, (self.cpus - self.load_1m) / 2))

    def step_cost_ms(self, running: int) -> float:
        """CPU ms the sim spends on one iteration with ``running`` streams, given the load."""
        return running * (self.step_us_per_seq + self.write_us) / 1e3 / self.free_share


@dataclass(frozen=True)
class PaceProblem:
    label: str
    concurrency: int
    step_ms: float  # the predicted decode step at the spec's scale, wall ms
    cost_ms: float  # what the host needs per step (work / WORK_SHARE, or its timer lateness)
    needed_scale: float  # the smallest time_scale that fits (capped at 1)


async def _timer_lateness(n: int = 60) -> float:
    late = []
    for _ in range(n):
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        late.append(time.perf_counter() - t - 0.001)
    late.sort()
    return 1e3 * late[int(0.9 * (len(late) - 1))]


def _write_us(n: int = 2000) -> float:
    a, b = socket.socketpair()
    try:
        b.setblocking(False)
        t = time.process_time()
        for i in range(n):
            a.send(_FRAME)
            if i % 64 == 63:  # keep the buffer from filling
                while True:
                    try:
                        b.recv(65536)
                    except BlockingIOError:
                        break
        return 1e6 * (time.process_time() - t) / n
    finally:
        a.close()
        b.close()


def _step_us_per_seq(shape: ModelShape, hardware: str, running: int = 64,
                     steps: int = 150) -> float:
    engine, _ = build_engine(shape, get_hardware(hardware), DEFAULT_PROFILE, SimConfig(),
                             jitter=0.0)
    for i in range(running):
        engine.add(f"r{i}", 128, 10**6)
    for _ in range(20):  # prefills out of the way
        engine.step()
    t = time.process_time()
    for _ in range(steps):
        engine.step()
    return 1e6 * (time.process_time() - t) / (steps * running)


def calibrate(shape: ModelShape, hardware: str) -> HostSpeed:
    """This host's speed now (about 0.3 s; starts no process, opens only a socketpair)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return HostSpeed(cpus=cpus, load_1m=load, timer_late_ms=asyncio.run(_timer_lateness()),
                     write_us=_write_us(), step_us_per_seq=_step_us_per_seq(shape, hardware))


def check(host: HostSpeed, scale: float, levels: list[tuple[str, int, float]]
          ) -> list[PaceProblem]:
    """The levels whose scaled step the host cannot keep. ``levels``: (trial label,
    streams the model runs at once (a closed loop's concurrency, an open loop's predicted
    maximum), predicted ITL p50 in simulated ms) of each sim level."""
    out = []
    for label, c, itl_ms in levels:
        if scale <= 0 or itl_ms <= 0:
            continue
        step = itl_ms * scale
        cost = max(host.step_cost_ms(c) / WORK_SHARE, host.timer_late_ms)
        if cost <= step:
            continue
        needed = min(1.0, _round_up(scale * cost / step))
        out.append(PaceProblem(label, c, step, cost, needed))
    return out


def _round_up(x: float) -> float:
    """Up to two significant digits: 0.1234 -> 0.13."""
    if x <= 0:
        return x
    e = math.floor(math.log10(x)) - 1
    return math.ceil(x / 10**e) * 10**e
