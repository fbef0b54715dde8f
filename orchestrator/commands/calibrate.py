"""``servesweep calibrate SWEEP``: fit the sim's profile factors to a sweep's measurements."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import yaml

from orchestrator.commands.output import document
from orchestrator.errors import EXIT_OK, UsageError
from orchestrator.results.calibrate import calibrate, collect_points

__all__ = ["add_parser", "cmd_calibrate"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "calibrate", help="fit the sim's efficiency/overhead factors to a sweep's measurements")
    p.add_argument("sweeps", nargs="+", metavar="SWEEP",
                   help="sweep id(s) (or unique prefixes) or 'latest'; points are pooled")
    p.add_argument("--model-config", metavar="DIR",
                   help="a directory with the model's config.json, when the sweep's "
                        "model.path is not on this machine")
    p.add_argument("--max-evals", type=int, default=80,
                   help="model evaluations per profile (each predicts every point)")
    p.add_argument("--json", action="store_true", help="print the fit and its errors as JSON")
    p.set_defaults(func=cmd_calibrate)
    return p


def cmd_calibrate(args: argparse.Namespace) -> int:
    from actors.contracts.shapes import load_shape
    from orchestrator.planning.plan import spec_shape
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import load_spec

    ledgers = [Ledger.open(ref) for ref in args.sweeps]
    groups: dict = {}
    spec = None
    for ledger in ledgers:
        spec = load_spec(ledger.dir / "spec.yaml")
        for name, pts in collect_points(list(ledger.results().values()), spec).items():
            groups.setdefault(name, []).extend(pts)
    if spec is None:  # argparse's nargs="+" gives at least one sweep
        raise UsageError("name at least one sweep to calibrate against")
    ledger = ledgers[0]
    try:
        shape = load_shape(path=args.model_config) if args.model_config else spec_shape(spec)
    except FileNotFoundError as err:
        raise UsageError(str(err)) from None
    if shape is None:
        raise UsageError("the sweep's model shape is unknown here (model.path must be a local "
                         "directory with config.json): pass --model-config DIR")
    if not groups:
        raise UsageError(f"sweep(s) {', '.join(lg.sweep_id for lg in ledgers)} have no valid "
                         "measured level of a vllm or trtllm (or sim) trial to calibrate against")
    results = {name: calibrate(points, spec, shape, name, args.max_evals)
               for name, points in sorted(groups.items())}
    snippet = {"sim": {"profiles": {n: r.fitted for n, r in results.items()}}}
    out = ledger.dir / "calibration.yaml"
    out.write_text("# servesweep calibrate: paste into a spec to plan with these factors\n"
                   + yaml.safe_dump(snippet, sort_keys=False))
    if args.json:
        print(document("calibrate", {"profiles": {n: asdict(r) for n, r in results.items()}}))
        return EXIT_OK
    for name, r in results.items():
        print(f"profile {name}: {len(groups[name])} measured levels, {r.evaluations} "
              f"evaluations; mean |error| {100 * r.error_before:.1f}% -> "
              f"{100 * r.error_after:.1f}%")
        for k in r.fitted:
            note = "" if k in r.varied else "  (not constrained by these points: kept)"
            print(f"  {k:<22} {r.start[k]:>10.4g} -> {r.fitted[k]:<10.4g}{note}")
        print(f"  {'trial':<44} {'c':>4} {'metric':<12} {'measured':>10} {'before':>10} "
              f"{'after':>10} {'err before':>10} {'err after':>9}")
        for row in r.rows:
            print(f"  {row['trial'][:44]:<44} {row['concurrency']:>4} {row['metric']:<12} "
                  f"{row['measured']:>10.2f} {row['before']:>10.2f} {row['after']:>10.2f} "
                  f"{100 * row['err_before']:>+9.1f}% {100 * row['err_after']:>+8.1f}%")
    print(f"\nwrote {out} (add its `sim.profiles` to a spec to plan with the fitted factors)")
    return EXIT_OK
