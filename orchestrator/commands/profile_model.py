"""``servesweep profile-model SPEC``: a short profile of the user's model, fitted and stored.

Measures what ``orchestrator.planning.model_profiling`` chooses from the spec (a base
config and one per precision or graphs setting the space sweeps, at c=1 and c=32) as an
ordinary sweep (its own ledger and MLflow run, resumable), fits the sim profile's software
factors to those levels from the shipped profile (``calibrate``'s fit: physical constants
stay), and writes one ``ModelProfile`` (``actors.contracts.model_profile``) to
``<state>/model-profiles/<shape>/<engine>-<version>-<gpu>.json`` and into the sweep folder.
A spec uses it with ``sim: {model_profile: PATH}``.

How it relates to ``calibrate``: ``calibrate SWEEP`` fits to any sweep's levels and prints
a ``sim.profiles`` snippet; ``profile-model`` decides what to measure, runs it, and stores
the fit keyed by what it is valid for (shape, engine version, GPU) with its error, which
``plan --predict`` and ``guided`` turn into their band.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "cmd_profile_model"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "profile-model",
        help="measure a few levels of the spec's model and fit the performance model to it")
    p.add_argument("spec", help="the sweep spec whose model, engines and GPU to profile")
    p.add_argument("--max-evals", type=int, default=80,
                   help="model evaluations for the fit (each predicts every level)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the profiling spec and its configs; run nothing")
    p.add_argument("--quiet", action="store_true", help="no per-level progress lines")
    p.add_argument("--no-mlflow", action="store_true", help="ledger only, no MLflow tracking")
    p.set_defaults(func=cmd_profile_model)
    return p


def cmd_profile_model(args: argparse.Namespace) -> int:
    from orchestrator.commands.profiling import make_profile
    from orchestrator.commands.run import _run
    from orchestrator.spec import load_spec

    code, _ = make_profile(Path(args.spec), load_spec(args.spec), args.quiet, args.no_mlflow,
                           args.max_evals, _run, args.dry_run)
    return code
