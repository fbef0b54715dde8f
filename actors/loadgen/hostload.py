"""``HostMeter``: how busy the machine was while a level ran (Linux ``/proc``; elsewhere
only the CPU count), recorded with every level because the sim's numbers depend on it."""

from __future__ import annotations

import os

from actors.contracts.results import HostLoad

__all__ = ["HostMeter", "cpu_count"]


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs from ``/proc/stat``; None where unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    vals = [float(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = vals[3] + vals[4]
    return sum(vals) - idle, sum(vals)


class HostMeter:
    """``start()`` before the level, ``stop()`` after: the level's ``HostLoad``."""

    def __init__(self) -> None:
        self._t0: tuple[float, float] | None = None

    def start(self) -> None:
        self._t0 = _cpu_times()

    def stop(self) -> HostLoad:
        busy = None
        t1 = _cpu_times()
        if self._t0 is not None and t1 is not None and t1[1] > self._t0[1]:
            busy = round((t1[0] - self._t0[0]) / (t1[1] - self._t0[1]), 4)
        try:
            load = round(os.getloadavg()[0], 2)
        except OSError:
            load = None
        return HostLoad(cpus=cpu_count(), load_1m=load, busy=busy)
