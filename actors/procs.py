"""Process groups servesweep starts: launch, stop without leftovers, reap by marker.

Every server runs in its own session (so its process group is its own) with
``SERVESWEEP_MARKER=<sweep-id>/<trial-key>`` in its environment. Children
inherit the variable, so a scan of /proc finds every process of a trial even
after the leader died or the driver that started it is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from actors.contracts.settings import MARKER_ENV  # the marker variable; not a setting

__all__ = ["MARKER_ENV", "spawn_group", "stop_group", "marked_processes", "reap"]


def spawn_group(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path,
                marker: str) -> subprocess.Popen:
    """Start ``argv`` (a list, never a shell string) in a new session, output to ``log_path``."""
    full_env = dict(os.environ)
    full_env.update(env)
    full_env[MARKER_ENV] = marker
    log = open(log_path, "ab", buffering=0)  # noqa: SIM115  closed when the process is reaped
    try:
        return subprocess.Popen(argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()  # the child holds its own copy of the descriptor


def marked_processes(prefix: str) -> list[tuple[int, int, str]]:
    """(pid, pgid, marker) of live processes whose marker starts with ``prefix``."""
    found = []
    needle = f"{MARKER_ENV}={prefix}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(needle):
                try:
                    stat = (entry / "stat").read_text()
                    state = stat.rsplit(")", 1)[1].split()[0]
                    if state == "Z":  # zombie: already dead, waiting for its parent
                        break
                    pid = int(entry.name)
                    found.append((pid, os.getpgid(pid), var.decode().split("=", 1)[1]))
                except (OSError, ProcessLookupError, IndexError):
                    pass
                break
    return found


def _signal_groups(pgids: set[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_group(proc: subprocess.Popen | None, marker: str, timeout_s: float = 30.0) -> dict:
    """SIGTERM the trial's groups, wait up to ``timeout_s``, SIGKILL what is left, verify.

    Returns ``{"returncode", "killed": bool, "leftovers": [pids]}``; leftovers is
    empty when nothing carrying ``marker`` survives.
    """
    pgids = {pg for _, pg, _ in marked_processes(marker)}
    if proc is not None and proc.poll() is None:
        pgids.add(proc.pid)  # the leader's pgid is its pid (new session)
    _signal_groups(pgids, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    killed = False
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not marked_processes(marker) and (proc is None or proc.returncode is not None):
            break
        time.sleep(0.1)
    else:
        killed = True
        pgids |= {pg for _, pg, _ in marked_processes(marker)}
        _signal_groups(pgids, signal.SIGKILL)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    for _ in range(50):  # SIGKILL is asynchronous: give the kernel a moment
        if not marked_processes(marker):
            break
        time.sleep(0.1)
    return {"returncode": None if proc is None else proc.poll(), "killed": killed,
            "leftovers": [pid for pid, _, _ in marked_processes(marker)]}


def reap(prefix: str, timeout_s: float = 10.0) -> list[int]:
    """Stop every process whose marker starts with ``prefix``; returns the pids found."""
    found = [pid for pid, _, _ in marked_processes(prefix)]
    if found:
        stop_group(None, prefix, timeout_s)
    return found
