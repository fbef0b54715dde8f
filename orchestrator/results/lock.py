"""One driver per sweep: an OS lock on the sweep folder, held for the driver's life.

``DriverLock(sweep_dir).acquire()`` takes ``flock(LOCK_EX | LOCK_NB)`` on
``sweeps/<id>/driver.lock`` and writes who holds it (pid, host, since). The kernel
drops the lock when the driver's process ends, however it ends (SIGKILL, OOM, a
crash): liveness comes from the lock, never from ledger events. A second
``run``/``resume``/``sync`` of the sweep fails at once with ``SweepBusy`` naming the
live driver; ``holder()`` tells whether a live driver holds a sweep (used to decide
that a sweep's leftover engines are orphans) without taking the lock for long.

The lock file's descriptor is not inherited by child processes (Python opens files
non-inheritable), so an engine or a Ray worker never keeps a dead driver's lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import EXIT_INPUT, ServesweepError

__all__ = ["DriverLock", "SweepBusy", "LOCK_FILE"]

LOCK_FILE = "driver.lock"


class SweepBusy(ServesweepError):
    """Another live driver holds the sweep."""

    exit_code = EXIT_INPUT


class DriverLock:
    def __init__(self, sweep_dir: Path):
        self.path = sweep_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, command: str = "run") -> DriverLock:
        """Take the lock or raise ``SweepBusy`` naming the driver that holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            who = self.describe(self.read())
            raise SweepBusy(f"sweep {self.path.parent.name} is being run by {who}; "
                            "wait for it to finish, or stop it (Ctrl-C) and then "
                            "`servesweep resume`") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.time(), "command": command}).encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DriverLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock now (pid, host, since, command), or None when nobody does.
        Probes with a non-blocking lock that is released at once."""
        if self._fd is not None:
            return self.read()
        if not self.path.is_file():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return self.read() or {"pid": None, "host": None}
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @staticmethod
    def describe(info: dict[str, Any]) -> str:
        if not info.get("pid"):
            return "another driver"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since") or 0))
        return (f"`servesweep {info.get('command', 'run')}` (pid {info['pid']} on "
                f"{info.get('host')}, since {since})")
