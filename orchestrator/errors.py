"""Errors servesweep reports to users, each tied to a process exit code.

Exit codes (DESIGN.md): 0 the sweep completed (failed trials are results),
1 a run-time error of servesweep itself, 2 bad input (spec, arguments), 130 interrupted
(SIGINT or SIGTERM; the ledger records it).
"""

from __future__ import annotations

__all__ = ["ServesweepError", "SpecError", "UsageError", "EXIT_OK", "EXIT_RUNTIME", "EXIT_INPUT",
           "EXIT_INTERRUPTED"]

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130


class ServesweepError(Exception):
    """Base class; ``exit_code`` says how the CLI ends when it escapes."""

    exit_code = EXIT_RUNTIME


class SpecError(ServesweepError):
    """A sweep spec is invalid. The message names the field path and the fix."""

    exit_code = EXIT_INPUT


class UsageError(ServesweepError):
    """Bad command-line arguments (unknown sweep id, missing file, ...)."""

    exit_code = EXIT_INPUT
