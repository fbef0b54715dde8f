"""``servesweep export SWEEP [--regime NAME] [--out DIR]``: per load regime, the winning
config as deployed (``orchestrator.results.export``).

Writes ``<out>/<regime>/`` (default ``<sweep>/export/``): the engine's serve script with
its environment (benchmark-only settings left out, each listed with why in the README),
the files it reads, a Ray Serve LLM config and a KubeRay RayService where Ray Serve LLM
runs the engine, a Triton ensemble repository for TensorRT-LLM winners, and a README
saying what was measured and which forms were "not measured in this form".
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrator.commands.output import json_result
from orchestrator.errors import EXIT_OK

__all__ = ["add_parser", "cmd_export"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export", help="the winning config of each load regime, as "
                                             "deployed (serve script, Ray Serve, KubeRay, "
                                             "Triton)")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--regime", metavar="NAME",
                   help="export only this regime (default: every regime; without "
                        "search.regimes in the spec, one per concurrency level: c=N)")
    p.add_argument("--out", metavar="DIR", type=Path,
                   help="where to write (default: the sweep's folder /export)")
    p.add_argument("--json", action="store_true",
                   help="print what was exported as one JSON document (per regime: the "
                        "winner, the folder and its files)")
    p.set_defaults(func=cmd_export)
    return p


def cmd_export(args: argparse.Namespace) -> int:
    from orchestrator.results.export import export_sweep
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import load_spec

    ledger = Ledger.open(args.sweep)
    spec = load_spec(ledger.dir / "spec.yaml")
    out = (args.out or ledger.dir / "export").resolve()
    with json_result(getattr(args, "json", False), "export") as doc:
        exports = export_sweep(spec, ledger, out, args.regime)
        _say_exports(exports, out)
        doc.update(sweep_id=ledger.sweep_id, export_json=str(out / "export.json"), regimes=[
            {"regime": e.winner.regime, "winner": e.winner.label, "key": e.winner.key,
             "note": e.winner.note, "dir": str(e.dir), "files": sorted(e.files)}
            for e in exports])
    return EXIT_OK


def _say_exports(exports: list[Any], out: Path) -> None:
    for e in exports:
        w = e.winner
        if w.key is None:
            print(f"{w.regime}: no winner ({w.note}); {e.dir / 'README.md'}", flush=True)
            continue
        dep = e.deployment
        form = ("nothing to deploy" if dep is not None and not dep.deployable else
                "as measured" if dep is not None and dep.measured_form else
                "not measured in this form")
        print(f"{w.regime}: {w.label} ({form}) -> {e.dir}/  "
              f"[{', '.join(sorted(e.files))}]", flush=True)
    print(f"\nexport: {out}/export.json", flush=True)
