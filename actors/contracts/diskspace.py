"""A full disk is the machine's failure, never a trial's: telling one, and saying where.

``ENOSPC`` (no space left), ``EDQUOT`` (over quota) and ``EROFS`` (read-only) while a
trial launches, logs or has its result written say nothing about the trial's config: the
trial is not given a final result, the driver stops the sweep with one line naming the
path and the room left there (``orchestrator.results.diskfull``), and ``resume`` runs the
trial once there is room again. What Ray hands the driver wraps the ``OSError``
(``RayTaskError.cause``, an ``ActorDiedError`` whose ``args`` hold the constructor's
``RayTaskError``, ``__cause__``); ``disk_error`` looks through all of them. A trial that
failed of a full disk without raising (an engine that died of it says so only in its
text, or nowhere when its log could not be written) is told by ``failure_of_disk``.

Imports nothing else of the project: the engine host and the driver both use it.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["DISK_ERRNOS", "LOW_SPACE_BYTES", "disk_error", "disk_errno_in", "failure_of_disk",
           "free_bytes", "low_on_space", "describe", "what_failed", "remedy"]

#: the errnos of a volume that takes no more writes, and how a line names each
DISK_ERRNOS: dict[int, str] = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
                               errno.EROFS: "read-only file system"}
_REMEDY = {errno.ENOSPC: "free space", errno.EDQUOT: "free space or raise the quota",
           errno.EROFS: "make it writable"}
#: a failed trial whose folder's volume has less room than this failed of the disk (a
#: server log, a result line and a trial's files need more; a full log is not visible)
LOW_SPACE_BYTES = 1 << 20
_TEXTS = re.compile("|".join(re.escape(os.strerror(n)) for n in DISK_ERRNOS)
                    + r"|\[Errno (" + "|".join(str(n) for n in DISK_ERRNOS) + r")\]")
_BY_TEXT = {os.strerror(n): n for n in DISK_ERRNOS}
_MAX_DEPTH = 8


def disk_error(exc: BaseException | None) -> OSError | None:
    """The ``OSError`` with a disk errno in ``exc`` or what it wraps (Ray's ``cause``, an
    exception among its ``args``, ``__cause__``, ``__context__``), else None."""
    seen: set[int] = set()
    todo: list[tuple[BaseException, int]] = [(exc, 0)] if exc is not None else []
    while todo:
        err, depth = todo.pop(0)
        if id(err) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
            return err
        inner = [getattr(err, "cause", None), err.__cause__, err.__context__,
                 *(a for a in getattr(err, "args", ()) if isinstance(a, BaseException))]
        todo += [(e, depth + 1) for e in inner if isinstance(e, BaseException)]
    return None


def disk_errno_in(text: str, errnos: Iterable[int] = DISK_ERRNOS) -> int | None:
    """The first of ``errnos`` a message or log names (``[Errno 28]``, ``No space left on
    device``, ...), else None."""
    wanted = set(errnos)
    for m in _TEXTS.finditer(text or ""):
        n = int(m.group(1)) if m.group(1) else _BY_TEXT[m.group(0)]
        if n in wanted:
            return n
    return None


def failure_of_disk(message: str, log_tail: str, path: str | os.PathLike[str]
                    ) -> OSError | None:
    """Did a failed trial fail of the disk? Its failure's ``message`` names a disk errno,
    its server's ``log_tail`` says the disk is full or over quota (a read-only path named
    there may be a warning the engine survives), or ``path``'s volume has less than
    ``LOW_SPACE_BYTES`` left (the log that would say so could not be written). The answer
    is an ``OSError`` naming ``path``, or None."""
    n = disk_errno_in(message) or disk_errno_in(log_tail, (errno.ENOSPC, errno.EDQUOT))
    if n is None and low_on_space(path):
        n = errno.ENOSPC
    return None if n is None else OSError(n, os.strerror(n), str(path))


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes an unprivileged write may still use on ``path``'s volume (its nearest existing
    folder's), None when that cannot be read."""
    p = Path(path)
    for candidate in (p, *p.parents):
        try:
            st = os.statvfs(candidate)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def low_on_space(path: str | os.PathLike[str], floor: int = LOW_SPACE_BYTES) -> bool:
    """True when ``path``'s volume has less than ``floor`` bytes left."""
    free = free_bytes(path)
    return free is not None and free < floor


def describe(path: str | os.PathLike[str]) -> str:
    """``<path> (<N> KiB free)``: where, and the room left there now."""
    free = free_bytes(path)
    return f"{path} ({'?' if free is None else free // 1024} KiB free)"


def what_failed(err: OSError | int | None) -> str:
    """``disk full``, ``disk quota exceeded`` or ``read-only file system``."""
    n = err.errno if isinstance(err, OSError) else err
    return DISK_ERRNOS.get(n or errno.ENOSPC, DISK_ERRNOS[errno.ENOSPC])


def remedy(err: OSError | int | None) -> str:
    """What the user does before running again: ``free space``, ..."""
    n = err.errno if isinstance(err, OSError) else err
    return _REMEDY.get(n or errno.ENOSPC, _REMEDY[errno.ENOSPC])
