"""Process groups servesweep starts: launch, stop without leftovers, reap by marker.

Every server runs in its own session (so its process group is its own) with
``SERVESWEEP_MARKER=<sweep-id>/<trial-key>`` in its environment. Children
inherit the variable, so a scan of /proc finds every process of a trial even
after the leader died or the driver that started it is gone. A process that calls
``setsid`` and clears its environment has neither: the host tracks those as its own
descendants (``actors.proctree``, a child subreaper) or by their cgroup
(``actors.cgroups``), and ``stop_group`` stops them with the rest.

Ports: ``choose_port`` draws an engine's port from outside the kernel's ephemeral range
(``engine_port_range``, from /proc/sys/net/ipv4/ip_local_port_range), where no outgoing
connection of the node (the load generator's, Ray's) can hold it, and checks with a bind
that it is free. ``port_listeners`` tells whose listening sockets are on a port: the
host's proof that what answers there is the server it started.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from actors.cgroups import EngineCgroup
from actors.contracts.settings import MARKER_ENV  # the marker variable; not a setting
from actors.proctree import kill_all

__all__ = ["MARKER_ENV", "spawn_group", "stop_group", "marked_processes", "reap",
           "EPHEMERAL_RANGE_FILE", "PORT_SPAN", "RAY_WORKER_PORTS", "read_port_range",
           "engine_port_range", "port_is_free", "choose_port", "listening_inodes",
           "port_listeners", "socket_holders"]


def spawn_group(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path,
                marker: str, cgroup: EngineCgroup | None = None) -> subprocess.Popen:
    """Start ``argv`` (a list, never a shell string) in a new session, output to ``log_path``;
    inside ``cgroup`` when one is given (``EngineCgroup.wrap``)."""
    full_env = dict(os.environ)
    full_env.update(env)
    full_env[MARKER_ENV] = marker
    if cgroup is not None:
        argv = cgroup.wrap(argv, full_env.get("PATH"))
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


#: pid -> start time of processes to stop besides the marked ones (``proctree``)
Tracked = Callable[[], dict[int, int]]


def _left(proc: subprocess.Popen | None, marker: str, tracked: Tracked | None,
          cgroup: EngineCgroup | None) -> set[int]:
    """What is alive of the trial: marked processes, tracked ones, the cgroup's members."""
    left = {pid for pid, _, _ in marked_processes(marker)}
    if tracked is not None:
        left |= set(tracked())
    if cgroup is not None:
        left |= set(cgroup.pids())
    if proc is not None and proc.poll() is None:
        left.add(proc.pid)
    return left


def _signal_all(pgids: set[int], tracked: Tracked | None, cgroup: EngineCgroup | None,
                sig: int) -> None:
    _signal_groups(pgids, sig)
    if tracked is not None:
        kill_all(tracked(), sig)  # each checked by its start time before the signal
    if cgroup is not None:
        cgroup.signal(sig)


def stop_group(proc: subprocess.Popen | None, marker: str, timeout_s: float = 30.0,
               tracked: Tracked | None = None, cgroup: EngineCgroup | None = None) -> dict:
    """SIGTERM the trial's groups, wait up to ``timeout_s``, SIGKILL what is left, verify.

    The trial's processes: those carrying ``marker`` and their process groups, the
    leader ``proc``, what ``tracked`` names (the host's descendants, which may have left
    the group and dropped the marker) and the members of ``cgroup`` (the caller removes it).
    Returns ``{"returncode", "killed": bool, "leftovers": [pids]}``; leftovers is
    empty when nothing of the trial survives.
    """
    pgids = {pg for _, pg, _ in marked_processes(marker)}
    if proc is not None and proc.poll() is None:
        pgids.add(proc.pid)  # the leader's pgid is its pid (new session)
    _signal_all(pgids, tracked, cgroup, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    killed = False
    while time.monotonic() < deadline:
        if not _left(proc, marker, tracked, cgroup):
            break
        time.sleep(0.1)
    else:
        killed = True
        pgids |= {pg for _, pg, _ in marked_processes(marker)}
        _signal_all(pgids, tracked, cgroup, signal.SIGKILL)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    for _ in range(50):  # SIGKILL is asynchronous: give the kernel a moment
        if not _left(proc, marker, tracked, cgroup):
            break
        time.sleep(0.1)
    left = _left(proc, marker, tracked, cgroup)
    return {"returncode": None if proc is None else proc.poll(), "killed": killed,
            "leftovers": sorted(left)}


def reap(prefix: str, timeout_s: float = 10.0) -> list[int]:
    """Stop every process whose marker starts with ``prefix``; returns the pids found."""
    found = [pid for pid, _, _ in marked_processes(prefix)]
    if found:
        stop_group(None, prefix, timeout_s)
    return found


# -- ports --------------------------------------------------------------------------------
#: the kernel's ephemeral range: the local ports of outgoing connections come from it
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: where engine ports may come from
PORT_SPAN = (10000, 65535)
#: Ray's default worker ports (``--min-worker-port`` / ``--max-worker-port``): its workers
#: bind them on every node, so engines keep out of them while there is room elsewhere
RAY_WORKER_PORTS = (10002, 19999)
#: a stretch narrower than this is not worth keeping out of Ray's worker ports for
_MIN_PORTS = 256


def read_port_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The ephemeral range ``(low, high)`` from ``path``; None when it cannot be read."""
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return (low, high) if low <= high else None


def _gaps(span: tuple[int, int], holes: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of ``span`` (inclusive) that none of ``holes`` covers."""
    gaps = [span]
    for h_lo, h_hi in holes:
        gaps = [piece for lo, hi in gaps
                for piece in ((lo, min(hi, h_lo - 1)), (max(lo, h_hi + 1), hi))
                if piece[0] <= piece[1]] if h_lo <= h_hi else gaps
    return gaps


def engine_port_range(ephemeral: tuple[int, int] | None,
                      reserved: Iterable[tuple[int, int]] = (RAY_WORKER_PORTS,),
                      span: tuple[int, int] = PORT_SPAN) -> tuple[int, int]:
    """The ports (inclusive) engines are drawn from: the largest stretch of ``span`` outside
    the ``ephemeral`` range and the ``reserved`` ranges (of equal ones, the lower).

    With Linux's default 32768-60999 that is 20000-32767, the gap below the ephemeral
    range. When keeping out of ``reserved`` leaves fewer than 256 ports, only the
    ephemeral range is kept out of. When the ephemeral range covers all of ``span``
    there is no port outside it: the result is then ``span`` less ``reserved`` (the bind
    test and the host's listener check still guard the port). Pure: the ranges are inputs.
    """
    eph = [ephemeral] if ephemeral is not None else []
    reserved = list(reserved)

    def largest(gaps: list[tuple[int, int]]) -> tuple[int, int] | None:
        return max(gaps, key=lambda g: (g[1] - g[0], -g[0])) if gaps else None

    best = largest(_gaps(span, eph + reserved))
    if best is not None and best[1] - best[0] + 1 >= _MIN_PORTS:
        return best
    best = largest(_gaps(span, eph))  # outside the ephemeral range, however narrow
    if best is not None:
        return best
    return largest(_gaps(span, reserved)) or span  # no port outside the ephemeral range


def port_is_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` now (a bind test, no listen). An address
    this machine cannot bind (a typo, another host) cannot be tested: True, the engine's
    own bind says."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return True
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        try:
            s.bind(addr)
        except OSError as err:
            return err.errno not in (errno.EADDRINUSE, errno.EACCES)
    return True


def choose_port(host: str, *, exclude: Iterable[int] = (), rng: random.Random | None = None,
                range_file: Path = EPHEMERAL_RANGE_FILE,
                is_free: Callable[[str, int], bool] = port_is_free, tries: int = 64) -> int:
    """A port for an engine on ``host``: drawn from ``engine_port_range`` of the ephemeral
    range in ``range_file``, not in ``exclude``, free on ``host`` by a bind test. After
    ``tries`` taken draws, the last draw (the engine's bind and the host's check tell)."""
    lo, hi = engine_port_range(read_port_range(range_file))
    rng = rng or random.Random()
    skip = set(exclude)
    port = lo
    for _ in range(tries):
        port = rng.randint(lo, hi)
        if port not in skip and is_free(host, port):
            return port
    return port


# -- who listens on a port ----------------------------------------------------------------
_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN = "0A"


def listening_inodes(port: int, tables: Iterable[str]) -> set[int]:
    """Inodes of the sockets in LISTEN state on ``port`` (any address), from the text of
    /proc/net/tcp and /proc/net/tcp6 (``tables``). Pure; unparsable lines are skipped."""
    found: set[int] = set()
    for text in tables:
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) < 10 or f[3] != _LISTEN:
                continue
            try:
                if int(f[1].rsplit(":", 1)[1], 16) == port and int(f[9]):
                    found.add(int(f[9]))
            except (ValueError, IndexError):
                continue
    return found


def _socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets ``pid`` holds open (none when its fds cannot be read)."""
    out: set[int] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def _session_pids(sid: int) -> list[int]:
    """Live processes whose process group or session is ``sid`` (a leader we started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # state ppid pgrp session ...
        if len(fields) > 3 and fields[0] != "Z" and sid in (int(fields[2]), int(fields[3])):
            pids.append(int(entry.name))
    return pids


def port_listeners(port: int, pgid: int | None, marker: str,
                   known: set[int] | frozenset[int] = frozenset(),
                   ) -> tuple[set[int], set[int]] | None:
    """(every LISTEN socket inode on ``port``, those held by none of the trial's processes:
    the process group or session ``pgid`` and every process carrying ``marker``).

    None when /proc/net/tcp cannot be read (no way to tell here). A socket is held by a
    process when its inode is among the process's /proc/<pid>/fd links. ``known``: inodes
    already found the trial's (no process scan when every listener is one of them).
    """
    texts = []
    for table in _TCP_TABLES:
        try:
            texts.append(table.read_text())
        except OSError:
            continue
    if not texts:
        return None
    listeners = listening_inodes(port, texts)
    if not listeners or listeners <= known:
        return listeners, set()
    ours: set[int] = set()
    seen: set[int] = set()
    for pid in _session_pids(pgid) if pgid else []:
        seen.add(pid)
        ours |= _socket_inodes(pid)
    if listeners - ours:  # children that left the session still carry the marker
        for pid, _, _ in marked_processes(marker):
            if pid not in seen:
                ours |= _socket_inodes(pid)
    return listeners, listeners - ours


def socket_holders(inodes: set[int]) -> dict[int, list[str]]:
    """inode -> ``"PID (NAME)"`` of the processes holding it, among those whose fds this
    user may read (for messages; scans every process, so only on a failure path)."""
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        held = _socket_inodes(int(entry.name)) & inodes
        if not held:
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            name = "?"
        for inode in held:
            out.setdefault(inode, []).append(f"{entry.name} ({name})")
    return out
