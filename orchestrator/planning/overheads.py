"""What a sweep costs beyond its trials' servers and levels, measured and learned.

``plan --predict`` estimates a sweep as driver start + Ray start + every trial (its server
start, its levels, and the per-trial overhead: placement, actors, stopping) spread over
the concurrent trials + the report. Each sweep measures its own overheads and writes them
to ``<sweep>/overheads.json`` (``record``); the next estimate takes the median of the
last ``LEARN_FROM`` sweeps under the same state root (``learned``), and the measured
defaults below until there is one.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from pathlib import Path

from pydantic import Field

from actors.contracts.config import Frozen
from actors.contracts.diskspace import disk_error
from actors.contracts.results import TrialResult

__all__ = ["Overheads", "DEFAULTS", "OVERHEADS_FILE", "LEARN_FROM", "learned", "record",
           "process_age_s", "trial_overhead_s"]

OVERHEADS_FILE = "overheads.json"
LEARN_FROM = 10  # the most recent sweeps the estimate learns from


class Overheads(Frozen):
    """Seconds, each measured by a sweep (see the module doc)."""

    driver_start_s: float = Field(default=3.0, ge=0)  # process start -> Ray asked to start
    ray_start_s: float = Field(default=2.5, ge=0)  # ray.init / connect
    per_trial_s: float = Field(default=1.5, ge=0)  # a trial's wall beyond server + levels
    report_s: float = Field(default=3.0, ge=0)  # the report folder
    sweeps: int = 0  # how many sweeps these come from (0: the defaults)


#: measured on the 2-core dev VM (issue 20: Ray 2-3 s, per trial 1.4-1.6 s, driver start
#: and report about 6 s together); replaced by what the sweeps themselves measure
DEFAULTS = Overheads()


def process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None elsewhere."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def trial_overhead_s(result: TrialResult) -> float | None:
    """A finished trial's wall time beyond its server start and its levels (None when the
    trial did not run them all)."""
    if result.wall_s is None or result.startup_s is None or not result.levels:
        return None
    levels = sum(lv.wall_s or 0.0 for lv in result.levels)
    return max(0.0, result.wall_s - result.startup_s - levels)


def record(sweep_dir: Path, driver_start_s: float | None, ray_start_s: float,
           results: list[TrialResult], report_s: float) -> Overheads:
    """Write what this sweep measured to ``<sweep>/overheads.json``; returns it. On a full
    disk it is not written (the next estimate learns from other sweeps)."""
    per_trial = [x for x in map(trial_overhead_s, results) if x is not None]
    got = Overheads(
        driver_start_s=driver_start_s if driver_start_s is not None
        else DEFAULTS.driver_start_s,
        ray_start_s=ray_start_s,
        per_trial_s=statistics.median(per_trial) if per_trial else DEFAULTS.per_trial_s,
        report_s=report_s, sweeps=1)
    tmp = sweep_dir / f".{OVERHEADS_FILE}.{os.getpid()}"
    try:
        tmp.write_text(json.dumps({**got.model_dump(), "ts": time.time()}))
        tmp.replace(sweep_dir / OVERHEADS_FILE)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if disk_error(err) is None:
            raise
    return got


def learned(root: Path, limit: int = LEARN_FROM) -> Overheads:
    """The median of the last ``limit`` sweeps' records under ``root`` (``DEFAULTS`` when
    none); a record that does not read is skipped."""
    found: list[tuple[float, Overheads]] = []
    for path in (root / "sweeps").glob(f"*/{OVERHEADS_FILE}"):
        try:
            data = json.loads(path.read_text())
            ts = float(data.pop("ts", 0.0))
            found.append((ts, Overheads.model_validate(data)))
        except (OSError, ValueError):
            continue
    recent = [o for _, o in sorted(found, key=lambda x: x[0])[-limit:]]
    if not recent:
        return DEFAULTS

    def med(name: str) -> float:
        return float(statistics.median(getattr(o, name) for o in recent))

    return Overheads(driver_start_s=med("driver_start_s"), ray_start_s=med("ray_start_s"),
                     per_trial_s=med("per_trial_s"), report_s=med("report_s"),
                     sweeps=len(recent))
