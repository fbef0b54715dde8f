"""``servesweep report SWEEP [--json]``: winners, margins, crossovers and every trial."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.errors import EXIT_OK

__all__ = ["add_parser", "cmd_report"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="winners, crossovers and trials of a sweep")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--json", action="store_true",
                   help="every trial's status, config and per-level metrics plus the winners")
    p.set_defaults(func=cmd_report)
    return p


def _print(text: str = "") -> None:
    print(text, flush=True)


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.results.ledger import Ledger
    from orchestrator.results.report import render_text, report_json
    from orchestrator.spec import load_spec

    ledger = Ledger.open(args.sweep)
    spec = load_spec(ledger.dir / "spec.yaml")
    results = list(ledger.results().values())
    if args.json:
        _print(json.dumps(report_json(spec, results, ledger.sweep_id), indent=1, default=str))
    else:
        _print(render_text(spec, results, ledger.sweep_id))
    return EXIT_OK
