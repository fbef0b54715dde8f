"""``servesweep compare SWEEP_A SWEEP_B [--json] [--html PATH]``: B against A, config by
config, each change judged against its noise band (``results.compare``).

Prints the text comparison (``--json``: the JSON one) and writes an HTML page (by default
``<B>/report/compare-<A>.html``; it opens offline). Refused (exit 2) when the two sweeps'
requests differ (``--force`` compares them anyway, every figure marked "workloads
differ") or when they measured no config in common.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrator.commands.output import document
from orchestrator.errors import EXIT_OK, UsageError

__all__ = ["add_parser", "cmd_compare"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="two sweeps of the same space: faster, slower "
                                              "or within noise, per config and regime")
    p.add_argument("sweep_a", help="the baseline: sweep id (or a unique prefix) or 'latest'")
    p.add_argument("sweep_b", help="the sweep compared with it")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--html", type=Path, default=None,
                   help="where to write the HTML page (default: "
                        "<B>/report/compare-<A>.html)")
    p.add_argument("--force", action="store_true",
                   help="compare sweeps whose workloads differ (every figure is marked)")
    p.set_defaults(func=cmd_compare)
    return p


def cmd_compare(args: argparse.Namespace) -> int:
    from orchestrator.results.compare import (
        compare_sweeps,
        comparison_sections,
        render_comparison_text,
        workload_differences,
    )
    from orchestrator.results.ledger import Ledger, atomic_write
    from orchestrator.results.page import render_html
    from orchestrator.spec import load_spec

    la, lb = Ledger.open(args.sweep_a), Ledger.open(args.sweep_b)
    spec_a, spec_b = load_spec(la.dir / "spec.yaml"), load_spec(lb.dir / "spec.yaml")
    differ = workload_differences(spec_a, spec_b)
    if differ and not args.force:
        raise UsageError(f"{la.sweep_id} and {lb.sweep_id} measured different work, so "
                         f"their figures do not compare: {'; '.join(differ)}. `--force` "
                         "compares them anyway, every figure marked \"workloads differ\"")
    cmp = compare_sweeps(spec_a, list(la.results().values()), la.sweep_id, spec_b,
                         list(lb.results().values()), lb.sweep_id)
    if not cmp.levels:
        raise UsageError(f"no config in common: {la.sweep_id} and {lb.sweep_id} measured no "
                         "config (engine settings) at a common level, so there is nothing "
                         "to compare")
    page = args.html or lb.dir / "report" / f"compare-{la.sweep_id}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(page, render_html(f"servesweep compare: {lb.sweep_id} against {la.sweep_id}",
                                   comparison_sections(cmp)))
    if args.json:
        print(document("compare", cmp.to_json()), flush=True)
    else:
        print(render_comparison_text(cmp), flush=True)
        print(f"\npage: {page}", flush=True)
    return EXIT_OK
