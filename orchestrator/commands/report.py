"""``servesweep report SWEEP [--json] [--no-mlflow]``: the sweep's report folder.

Writes ``<sweep>/report/`` (``index.html``, a page that opens offline; ``report.md``, its
Markdown twin with its SVG charts; ``report.txt``; ``report.json``; ``winners.json``), logs
the files to the sweep's parent MLflow run (unless ``--no-mlflow``; MLflow being down only
warns), and prints the text report (``--json``: the JSON one).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from orchestrator.commands.output import document
from orchestrator.errors import EXIT_OK

__all__ = ["add_parser", "cmd_report"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="winners, crossovers and trials of a sweep; "
                                             "writes its HTML page and Markdown twin")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--json", action="store_true",
                   help="print every trial's status, config and per-level metrics plus the "
                        "winners, as JSON")
    p.add_argument("--no-mlflow", action="store_true",
                   help="do not log the report files to the sweep's parent MLflow run")
    p.set_defaults(func=cmd_report)
    return p


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.results.ledger import Ledger, state_root
    from orchestrator.results.report_folder import write_report
    from orchestrator.spec import load_spec

    ledger = Ledger.open(args.sweep)
    ledger.check_spec()  # an edited spec.yaml is refused, naming what changed
    spec = load_spec(ledger.dir / "spec.yaml")
    report = write_report(spec, ledger)
    if args.json:
        print(document("report", json.loads((report.dir / "report.json").read_text())),
              flush=True)
    else:
        print(report.text, flush=True)
        print(f"\nreport: {report.html} (opens offline), {report.markdown}", flush=True)
    if not args.no_mlflow:
        from orchestrator.commands.sync import mlflow_errors
        from orchestrator.results.tracking import Tracker, describe_error

        tracker = Tracker(state_root())
        try:
            tracker.log_report(spec, ledger, report.files())
        except mlflow_errors() as err:
            print(f"servesweep: the report was written, but MLflow at {tracker.uri} failed "
                  f"({describe_error(err)}); `servesweep report {ledger.sweep_id}` logs it "
                  "again", file=sys.stderr, flush=True)
    return EXIT_OK
