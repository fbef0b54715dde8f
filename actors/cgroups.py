"""A cgroup (v2) per engine, where the machine lets this process make one.

Every process of a cgroup stays in it whatever it does (``setsid``, a double fork, a
cleared environment); only a privileged process could move it out. So where an engine
host may create a cgroup below its own (root, or a delegated subtree), the engine starts
inside a fresh one (``EngineCgroup.create``; the server is started through a short
trampoline that joins the cgroup and then ``exec``s the engine: ``wrap``), and stopping
it kills the whole cgroup (``cgroup.kill``, Linux 5.14+, else each member), even after
the host is gone: its path is in the ledger's ``started`` event for the node's reaper.

Where there is no cgroup v2 mount, or the host may not write there (an unprivileged
container, most Kubernetes pods), ``create`` returns None and the host falls back to
its child subreaper and descendant tracking (``actors.proctree``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sys
from pathlib import Path

__all__ = ["EngineCgroup", "cgroup2_mount", "own_cgroup", "PREFIX"]

#: every engine cgroup's name starts with this
PREFIX = "servesweep-"

# joins the cgroup whose cgroup.procs is argv[1] (best effort: the engine runs either
# way, its processes are also tracked by the host), then becomes the engine (argv[2:])
_TRAMPOLINE = (
    "import os,sys\n"
    "try:\n"
    "    with open(sys.argv[1], 'w') as f: f.write('0')\n"
    "except OSError as e:\n"
    "    os.write(2, f'[servesweep] engine not in its cgroup: {e}\\n'.encode())\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def cgroup2_mount(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or, on a hybrid
    machine, ``/sys/fs/cgroup/unified``); None when it is not."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def own_cgroup(text: str | None = None) -> str | None:
    """This process's cgroup v2 path (the ``0::`` line of /proc/self/cgroup)."""
    if text is None:
        try:
            text = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


class EngineCgroup:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, name: str) -> EngineCgroup | None:
        """A new cgroup ``servesweep-<name>`` below this process's own; None where the
        machine does not allow it (then nothing was created)."""
        if not sys.platform.startswith("linux"):
            return None
        mount, own = cgroup2_mount(), own_cgroup()
        if mount is None or own is None:
            return None
        path = mount / own.lstrip("/") / f"{PREFIX}{name}"
        try:
            path.mkdir()
        except OSError:
            return None
        if not os.access(path / "cgroup.procs", os.W_OK):
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def wrap(self, argv: list[str], path_var: str | None) -> list[str]:
        """``argv`` started through the trampoline that joins this cgroup. The engine's
        program is looked up first, so a missing one still raises ``FileNotFoundError``
        at the spawn, as without a cgroup."""
        if shutil.which(argv[0], path=path_var) is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", argv[0])
        return [sys.executable, "-I", "-S", "-c", _TRAMPOLINE,
                str(self.path / "cgroup.procs"), *argv]

    def pids(self) -> list[int]:
        """The processes in the cgroup and its children (none once it is gone)."""
        out: list[int] = []
        if not self.path.is_dir():
            return out
        for procs in self.path.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                out += [int(x) for x in procs.read_text().split()]
        return out

    def signal(self, sig: int) -> None:
        """``sig`` to every member; SIGKILL through ``cgroup.kill`` where the kernel has it."""
        if sig == signal.SIGKILL:
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def remove(self) -> bool:
        """Remove the (empty) cgroup; True when it is gone."""
        for d in sorted((p for p in self.path.rglob("*") if p.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(FileNotFoundError):
            try:
                self.path.rmdir()
            except OSError:
                return False
        return True
