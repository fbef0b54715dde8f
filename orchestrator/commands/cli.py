"""``servesweep``: the command line (exit 0 done, 1 servesweep error, 2 bad input, 130
interrupted). Each command is a module of this package with ``add_parser(subparsers)``
that sets ``func`` (``cmd_<name>(args) -> exit code``)."""

from __future__ import annotations

import argparse
import os
import sys

from actors.contracts.settings import SettingsError
from orchestrator.commands import (
    calibrate,
    capacity,
    compare,
    export,
    import_sweep,
    plan,
    profile_model,
    report,
    run,
    sync,
)
from orchestrator.errors import (
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_RUNTIME,
    ServesweepError,
    UsageError,
)

__all__ = ["main", "build_parser", "version", "COMMANDS"]

#: The command modules, in the order ``--help`` lists them.
COMMANDS = (run, plan, report, export, compare, capacity, calibrate, profile_model, sync,
            import_sweep)


def version() -> str:
    """The installed servesweep's version ("unknown" when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("servesweep")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="servesweep", description=(
        "Sweep LLM serving configurations on Ray; track every trial in MLflow."))
    ap.add_argument("--version", action="version", version=f"servesweep {version()}")
    sub = ap.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for bad arguments, 0 for --help
        return int(exc.code or 0)
    try:
        return args.func(args)
    except ServesweepError as err:
        print(f"servesweep: {err}", file=sys.stderr)
        return err.exit_code
    except UsageError as err:  # pragma: no cover - subclass of ServesweepError
        print(f"servesweep: {err}", file=sys.stderr)
        return EXIT_INPUT
    except SettingsError as err:  # a bad SERVESWEEP_* variable is bad input
        print(f"servesweep: {err}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`servesweep report x | head`): quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
        return 0
    except Exception as err:  # noqa: BLE001 - a bug or environment problem: exit 1, say what
        from orchestrator.results.diskfull import command_failed

        full = command_failed(err)  # a full disk is the machine's, not a bug: one line
        if full is not None:
            print(f"servesweep: {full}", file=sys.stderr)
            return full.exit_code
        import traceback

        traceback.print_exc()
        print(f"servesweep: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
