"""What makes a process or a cgroup servesweep's own, checked before the reaper signals it.

A ledger, a trial folder and the process files in it are plain files: a torn write, an
edit or a stray line can name any pid, group or cgroup. The reaper (``actors.reaper``)
therefore signals only what the running kernel itself shows to be the sweep's:

- a **leader** (a ``started`` event's pid): its start time is the recorded one *and* its
  environment carries the trial's marker (``SERVESWEEP_MARKER=<sweep>/<key>``, set by
  ``procs.spawn_group``); its process group and session count only when the leader
  leads them (a session made by ``start_new_session`` holds nothing but its tree);
- a **listed** process (``proctree.PROCS_FILE``, what left the tree and dropped the
  marker): its start time is the recorded one and lies within the host's watch, after
  the engine started (``since``) and before the file was last written;
- a **cgroup**: a direct child of this worker's own cgroup, under the cgroup v2 mount,
  named ``servesweep-<sweep>-<key>-<hex>`` for the trial (``EngineCgroup.create``).

Each check answers None (ours) or the reason it is left alone, which the reaper reports.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from actors.cgroups import PREFIX, cgroup2_mount, own_cgroup
from actors.contracts.settings import MARKER_ENV
from actors.proctree import ProcStat

__all__ = ["marker_of", "leader_refusal", "cgroup_refusal", "listed_window",
           "listed_refusal", "key_is_safe", "sweep_cgroups", "engine_cgroups"]

_KEY = re.compile(r"^[A-Za-z0-9._=-]{1,200}$")


def key_is_safe(key: str) -> bool:
    """A trial key that names a folder below ``trials/`` and nothing else."""
    return bool(_KEY.match(key)) and key not in (".", "..")


def marker_of(pid: int) -> str | None:
    """The ``SERVESWEEP_MARKER`` a process was started with; None without one (or when
    its environment cannot be read)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    needle = f"{MARKER_ENV}=".encode()
    for var in env.split(b"\0"):
        if var.startswith(needle):
            return var[len(needle):].decode(errors="replace")
    return None


def leader_refusal(st: ProcStat, marker: str) -> str | None:
    """Why the live process ``st`` is not the leader servesweep started with ``marker``."""
    found = marker_of(st.pid)
    if found != marker:
        return (f"pid {st.pid}: carries no marker {marker!r}" if found is None
                else f"pid {st.pid}: its marker is {found!r}, not {marker!r}")
    return None


def _btime() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def listed_window(path: Path) -> tuple[int, int] | None:
    """The start times (clock ticks after boot) a host's process file may name: from the
    first engine's start (``since``) to the file's last write; None when it has none."""
    try:
        since = int(json.loads(path.read_text())["since"])
        mtime = path.stat().st_mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None
    btime = _btime()
    if btime is None:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return since, int((mtime - btime + 2) * hz)  # 2 s: btime and mtime are rounded


def listed_refusal(st: ProcStat, window: tuple[int, int] | None) -> str | None:
    """Why the process ``st``, named in a host's process file, is not the host's."""
    if window is None:
        return f"pid {st.pid}: its host's file records no watch window"
    low, high = window
    if not low <= st.start_time <= high:
        return f"pid {st.pid}: started outside its host's watch"
    return None


def cgroup_refusal(path: Path, marker: str) -> str | None:
    """Why ``path`` is not a cgroup servesweep made for the trial of ``marker``."""
    mount, own = cgroup2_mount(), own_cgroup()
    if mount is None or own is None:
        return f"cgroup {path}: no cgroup v2 here"
    parent = (mount / own.lstrip("/")).resolve()
    name = f"{PREFIX}{marker.replace('/', '-')}-"
    try:
        real = path.resolve(strict=True)
    except OSError:
        return f"cgroup {path}: gone"
    if real != path or real.parent != parent:
        return f"cgroup {path}: not a child of this worker's cgroup {parent}"
    if not real.name.startswith(name) or not re.fullmatch(r"[0-9a-f]{6}",
                                                            real.name[len(name):]):
        return f"cgroup {path}: not named {name}<hex>"
    return None


def engine_cgroups() -> list[Path]:
    """The engine cgroups (``servesweep-...-<hex>``) below this worker's cgroup."""
    mount, own = cgroup2_mount(), own_cgroup()
    if mount is None or own is None:
        return []
    try:
        found = sorted((mount / own.lstrip("/")).glob(f"{PREFIX}*"))
    except OSError:
        return []
    return [p for p in found if p.is_dir() and not p.is_symlink()
            and re.fullmatch(r".+-[0-9a-f]{6}", p.name[len(PREFIX):])]


def sweep_cgroups(sweep_id: str, found: list[Path] | None = None) -> list[Path]:
    """Of ``engine_cgroups()``, those servesweep made for ``sweep_id``'s trials, found by
    name: what a ``started`` line lost to a torn write still names."""
    if not key_is_safe(sweep_id):
        return []
    name = f"{PREFIX}{sweep_id}-"
    return [p for p in (engine_cgroups() if found is None else found)
            if p.name.startswith(name)]
