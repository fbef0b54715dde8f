"""``DiskFull``: a full disk stops a sweep (or its report) in one line, losing nothing.

A write of the sweep's state that fails with ``ENOSPC``, ``EDQUOT`` or ``EROFS``
(``actors.contracts.diskspace``) is the machine's failure: the trial it concerns gets no
final result (``resume`` runs it once there is room), the ledger is left as it was (a
failed append is cut back off: ``Ledger.append``), and the command ends with exit 1 and
one line, e.g.::

    servesweep: disk full: /state/sweeps/q-... (0 KiB free): the sweep stopped; free
    space, then `servesweep resume q-...`

(one line on the terminal). When every trial is final and only the report could not be
written, the line says so and names ``servesweep report``, which writes it again.
"""

from __future__ import annotations

import os
from pathlib import Path

from actors.contracts import diskspace
from orchestrator.errors import EXIT_RUNTIME, ServesweepError

__all__ = ["DiskFull", "sweep_stopped", "report_not_written", "command_failed"]


class DiskFull(ServesweepError):
    """A volume servesweep writes to is full, over quota or read-only. ``str()`` is the
    one line: what, where and the room left there, what stopped, what to run next."""

    exit_code = EXIT_RUNTIME

    def __init__(self, err: OSError | int | None, path: str | os.PathLike[str],
                 stopped: str, then: str):
        self.path = Path(path)
        self.errno = err.errno if isinstance(err, OSError) else err
        super().__init__(f"{diskspace.what_failed(err)}: {diskspace.describe(path)}: "
                         f"{stopped}; {diskspace.remedy(err)}, then {then}")


def _path(err: OSError, fallback: Path) -> Path:
    """The file the error names, else ``fallback`` (a failed ``write`` names none)."""
    name = err.filename
    return Path(os.fsdecode(name)) if isinstance(name, str | bytes) and name else fallback


def sweep_stopped(err: BaseException, sweep_dir: Path, sweep_id: str) -> None:
    """Raise ``DiskFull`` (run ``resume``) when ``err``, raised out of a running sweep, is a
    full disk; return otherwise (the caller raises ``err`` on)."""
    full = diskspace.disk_error(err)
    if full is not None:
        raise DiskFull(full, _path(full, sweep_dir), "the sweep stopped",
                       f"`servesweep resume {sweep_id}`") from None


def report_not_written(err: BaseException, report_dir: Path, sweep_id: str) -> None:
    """``sweep_stopped``'s twin for the report: the ledger has every result, the report
    folder is what is missing, and ``servesweep report`` writes it again."""
    full = diskspace.disk_error(err)
    if full is not None:
        raise DiskFull(full, _path(full, report_dir),
                       "the ledger is intact, the report was not written",
                       f"`servesweep report {sweep_id}`") from None


def command_failed(err: BaseException) -> DiskFull | None:
    """For any command (the CLI's last resort): a ``DiskFull`` when ``err`` is a full disk
    (at the file it names, else at the state root), else None."""
    full = diskspace.disk_error(err)
    if full is None:
        return None
    from orchestrator.results.ledger import state_root

    try:
        root = state_root()
    except Exception:  # noqa: BLE001 - a bad SERVESWEEP_HOME: say where we are instead
        root = Path.cwd()
    return DiskFull(full, _path(full, root), "the command stopped", "run it again")
