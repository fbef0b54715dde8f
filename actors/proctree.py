"""Processes by identity: /proc stat, start times, descendants, a child subreaper.

A pid alone names a process only while it lives: once it exits the kernel may hand the
number to another. ``(pid, start_time)`` names one process for the life of the machine
(``start_time``: field 22 of ``/proc/<pid>/stat``, clock ticks after boot), so whatever
servesweep records to kill later is recorded with its start time and checked against it
right before a signal is sent (``signal_if_same``).

An engine host makes itself a *child subreaper* (``set_child_subreaper``: Linux's
``prctl(PR_SET_CHILD_SUBREAPER)``): a process that leaves the engine's tree (a double
fork, ``setsid``, a cleared environment: no marker, no process group of ours) is
re-parented to the host instead of to init, so it stays among the host's descendants
(``descendants``) while the host lives. ``DescendantWatch`` keeps that set: what it has
seen, with start times, is written to a file beside the server log, which a node's reaper
reads after the host itself is gone (``actors.reaper``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import NamedTuple

__all__ = ["ProcStat", "read_stat", "start_time", "all_stats", "descendants",
           "set_child_subreaper", "signal_if_same", "alive_same", "reap_zombie_children",
           "DescendantWatch", "PROCS_FILE", "read_procs_file", "kill_all"]

#: beside the server log: the processes an engine host has seen in its engine's tree
PROCS_FILE = "engine-procs.json"
_PR_SET_CHILD_SUBREAPER = 36


class ProcStat(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str  # R, S, D, Z (zombie), ...
    start_time: int  # clock ticks after boot (field 22)


def _parse_stat(pid: int, text: str) -> ProcStat | None:
    try:
        f = text.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
        return ProcStat(pid, int(f[1]), int(f[2]), int(f[3]), f[0], int(f[19]))
    except (IndexError, ValueError):
        return None


def read_stat(pid: int) -> ProcStat | None:
    """``pid``'s stat, or None when no such process (or it cannot be read)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return _parse_stat(pid, text)


def start_time(pid: int) -> int | None:
    st = read_stat(pid)
    return None if st is None else st.start_time


def all_stats() -> dict[int, ProcStat]:
    """Every process this machine's /proc shows, by pid."""
    out: dict[int, ProcStat] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = read_stat(int(entry.name))
            if st is not None:
                out[st.pid] = st
    return out


def descendants(root: int, stats: dict[int, ProcStat] | None = None) -> list[ProcStat]:
    """Live (not zombie) descendants of ``root``, children before grandchildren."""
    stats = all_stats() if stats is None else stats
    children: dict[int, list[ProcStat]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st)
    out: list[ProcStat] = []
    seen = {root}
    todo = [root]
    while todo:
        for st in children.get(todo.pop(0), []):
            if st.pid not in seen:
                seen.add(st.pid)
                todo.append(st.pid)
                if st.state != "Z":
                    out.append(st)
    return out


def set_child_subreaper() -> bool:
    """Make this process a child subreaper (Linux 3.4+); False where it cannot be."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def alive_same(pid: int, start: int) -> bool:
    """Whether ``pid`` is alive (not a zombie) and still the process that started at
    ``start``."""
    st = read_stat(pid)
    return st is not None and st.state != "Z" and st.start_time == start


def signal_if_same(pid: int, start: int, sig: int) -> bool:
    """Send ``sig`` to ``pid`` only while it is the process that started at ``start``
    (a pid the kernel gave to another process is left alone); True when sent."""
    if not alive_same(pid, start):
        return False
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def reap_zombie_children(skip: set[int]) -> list[int]:
    """Wait for this process's zombie children except ``skip`` (those a ``Popen`` waits
    for): orphans re-parented to a subreaper are its to reap."""
    me, reaped = os.getpid(), []
    for st in all_stats().values():
        if st.ppid == me and st.state == "Z" and st.pid not in skip:
            with contextlib.suppress(ChildProcessError, OSError):
                if os.waitpid(st.pid, os.WNOHANG)[0] == st.pid:
                    reaped.append(st.pid)
    return reaped


def read_procs_file(path: Path) -> dict[int, int]:
    """pid -> start time from a ``PROCS_FILE`` (empty when absent or unreadable)."""
    try:
        data = json.loads(path.read_text())
        return {int(p["pid"]): int(p["start_time"]) for p in data.get("procs", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


class DescendantWatch:
    """The processes of an engine's tree as seen from its host.

    ``update()`` adds the live descendants of the engine leaders (``engine_started``)
    and, where the host is a child subreaper (``whole_host``: its process runs nothing
    else, as a Ray actor's worker), every descendant of the host that started no earlier
    than the first engine (``since``): orphans of the engine's tree are re-parented to
    the host. It rewrites ``path`` when the set grew and reaps zombie orphans; ``pids()``
    is what is alive of the set now (checked by start time). ``start()`` runs ``update``
    every ``interval_s`` on a daemon thread until ``close()``.
    """

    def __init__(self, path: Path, whole_host: bool = False, interval_s: float = 1.0):
        self.path, self.interval_s, self.whole_host = path, interval_s, whole_host
        self.root = os.getpid()
        self.since: int | None = None
        self.seen: dict[int, int] = {}  # pid -> start time
        self.skip: set[int] = set()  # direct children a Popen waits for
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def engine_started(self, pid: int) -> None:
        """An engine leader this host spawned (and waits for itself)."""
        st = read_stat(pid)
        with self._lock:
            self.skip.add(pid)
            if st is not None:
                self.since = st.start_time if self.since is None else min(self.since,
                                                                           st.start_time)
        self.update()

    def update(self) -> None:
        with self._lock:
            if self.since is None:
                return
            grew = False
            stats = all_stats()
            roots = [self.root] if self.whole_host else sorted(self.skip)
            for st in (d for root in roots for d in descendants(root, stats)):
                if st.start_time >= self.since and self.seen.get(st.pid) != st.start_time:
                    self.seen[st.pid] = st.start_time
                    grew = True
            skip = set(self.skip)
        if self.whole_host:
            reap_zombie_children(skip)
        if grew:
            self._write()

    def _write(self) -> None:
        with self._lock:
            procs = [{"pid": p, "start_time": s} for p, s in sorted(self.seen.items())]
            since = self.since
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps({"host_pid": self.root, "since": since,
                                      "procs": procs}))
            os.replace(tmp, self.path)
        except OSError as err:  # the trial folder moved or went: tracking goes on in memory
            if err.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise

    def pids(self) -> dict[int, int]:
        """pid -> start time of what is alive of the tree now (refreshed first)."""
        self.update()
        with self._lock:
            return {p: s for p, s in self.seen.items() if alive_same(p, s)}

    def start(self) -> DescendantWatch:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="descendant-watch",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(OSError):
                self.update()

    def close(self) -> None:
        self._stop.set()


def kill_all(procs: dict[int, int], sig: int = signal.SIGKILL) -> list[int]:
    """``signal_if_same`` for each pid -> start time; the pids signalled."""
    return [p for p, s in procs.items() if signal_if_same(p, s, sig)]
