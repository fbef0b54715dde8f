"""``servesweep track SWEEP``: (re)build a sweep's MLflow runs from its ledger.

The ledger is the source of truth and MLflow a view of it, so a sweep run with
``--no-mlflow`` (or on a machine without MLflow, e.g. a GPU node) can be logged
afterwards: copy ``mlruns/sweeps/<id>/`` over and run this.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrator.errors import EXIT_OK

__all__ = ["add_parser", "cmd_track", "track_sweep"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("track", help="log a sweep's ledger into MLflow")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--force", action="store_true",
                   help="log again even when MLflow already has this sweep")
    p.set_defaults(func=cmd_track)
    return p


def track_sweep(ledger, spec, tracker, results, plots: list[Path]) -> str:
    """One parent run and a nested run per trial; returns the parent run id."""
    tracker.start_sweep(spec.name, ledger.sweep_id,
                        {"spec": spec.name, "hardware": spec.hardware,
                         "model": spec.model.display_name, "search": spec.search.kind},
                        ledger.dir / "spec.yaml")
    for r in results:
        tdir = ledger.dir / "trials" / r.key
        files = sorted(p for p in tdir.iterdir() if p.is_file()) if tdir.is_dir() else []
        tracker.log_trial(r, ledger.sweep_id, files)
    report = ledger.dir / "report"
    extra = [report / "report.json", report / "report.txt"]
    tracker.end_sweep({"trials": len(results)}, [*plots, *extra], "FINISHED")
    return tracker.parent_id or ""


def cmd_track(args: argparse.Namespace) -> int:
    from orchestrator.results.ledger import Ledger, state_root
    from orchestrator.results.report import write_plots
    from orchestrator.results.tracking import Tracker
    from orchestrator.spec import load_spec

    ledger = Ledger.open(args.sweep)
    spec = load_spec(ledger.dir / "spec.yaml")
    tracker = Tracker(state_root())
    exp = tracker.client.get_experiment_by_name(spec.name)
    if exp is not None and not args.force:
        runs = tracker.client.search_runs(
            [exp.experiment_id],
            filter_string=f"tags.`servesweep.sweep_id` = '{ledger.sweep_id}' and "
                          "tags.`servesweep.kind` = 'sweep'")
        if runs:
            print(f"already in MLflow: run {runs[0].info.run_id} (--force logs it again)")
            return EXIT_OK
    results = list(ledger.results().values())
    plots = write_plots(results, ledger.dir / "report")
    parent = track_sweep(ledger, spec, tracker, results, plots)
    print(f"logged sweep {ledger.sweep_id}: parent run {parent}, {len(results)} trial runs "
          f"in experiment {spec.name!r} at {tracker.uri}")
    return EXIT_OK
