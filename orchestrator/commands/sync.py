"""``servesweep sync SWEEP``: make a sweep's MLflow runs match its ledger.

The ledger is the source of truth and MLflow a view of it, rebuilt here: one parent run for
the sweep and exactly one run per ledger trial. A run MLflow lacks is created, one left
RUNNING or missing params or artifacts (MLflow was down, or the driver was killed mid-write)
is completed in place, one already complete is left as it is; a second sync changes
nothing. The parent run ends FINISHED (KILLED if the ledger's last driver was interrupted:
``resume`` finishes the sweep). A sweep run with ``--no-mlflow`` (or on a machine without
MLflow, e.g. a GPU node: ``servesweep import`` brings its folder over and syncs it) is logged
the same way, and ends up as if it had been tracked live. ``track`` is the command's old name.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.commands.output import json_result
from orchestrator.errors import EXIT_OK, ServesweepError
from orchestrator.results.lock import DriverLock

if TYPE_CHECKING:
    from orchestrator.results.ledger import Ledger

__all__ = ["add_parser", "cmd_sync", "cmd_track", "sync_sweep", "mlflow_errors"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("sync", help="bring a sweep's MLflow runs up to date with its "
                                           "ledger (idempotent)")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--json", action="store_true",
                   help="print the outcome as one JSON document (the runs created, "
                        "repaired, unchanged)")
    p.set_defaults(func=cmd_sync)
    old = subparsers.add_parser("track", help="the old name of `sync`")
    old.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    old.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    old.set_defaults(func=cmd_track)
    return p


def cmd_track(args: argparse.Namespace) -> int:
    print("servesweep: `track` is now `sync` (it repairs and never duplicates a run, so "
          "--force is gone); running `servesweep sync`", file=sys.stderr, flush=True)
    return cmd_sync(args)


def mlflow_errors() -> tuple[type[BaseException], ...]:
    """What a tracking store that is down, locked or refusing raises."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    return MlflowException, SQLAlchemyError, OSError  # OSError: requests' errors too


def cmd_sync(args: argparse.Namespace) -> int:
    from orchestrator.results.ledger import Ledger

    ledger = Ledger.open(args.sweep)
    with json_result(getattr(args, "json", False), "sync") as doc:
        print(sync_sweep(ledger, doc), flush=True)
    return EXIT_OK


def sync_sweep(ledger: Ledger, doc: dict[str, Any] | None = None) -> str:
    """Bring ``ledger``'s MLflow runs up to date; returns the one-line summary (``doc``,
    when given, receives the same as fields for ``--json``). Raises
    ``ServesweepError`` (saying to sync again) when MLflow fails, ``SweepBusy`` while a
    driver runs the sweep."""
    from orchestrator.results.ledger import state_root
    from orchestrator.results.tracking import Tracker, describe_error
    from orchestrator.spec import load_spec

    ledger.check_spec()
    spec = load_spec(ledger.dir / "spec.yaml")
    tracker = Tracker(state_root())
    try:
        with DriverLock(ledger.dir).acquire("sync"):  # not while a driver runs the sweep
            counts, status = tracker.sync(spec, ledger)
    except mlflow_errors() as err:
        raise ServesweepError(f"MLflow at {tracker.uri} failed ({describe_error(err)}); the "
                              f"ledger is unchanged: run `servesweep sync {ledger.sweep_id}` "
                              "again once MLflow answers") from None
    if doc is not None:
        doc.update(sweep_id=ledger.sweep_id, tracking_uri=tracker.uri,
                   parent_run_id=tracker.parent_id, parent_status=status,
                   runs=dict(created=counts.created, repaired=counts.repaired,
                             unchanged=counts.unchanged, removed=counts.removed))
    removed = f", {counts.removed} duplicate run(s) deleted" if counts.removed else ""
    return (f"synced sweep {ledger.sweep_id} to {tracker.uri}: parent run {tracker.parent_id} "
            f"{status}; {counts.total()} trial run(s): {counts.created} created, "
            f"{counts.repaired} repaired, {counts.unchanged} unchanged{removed}")
