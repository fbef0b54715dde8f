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
import re
import time
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import EXIT_OK, UsageError

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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "unknown"


def profile_file(root: Path, shape: str, engine: str, version: str | None, gpu: str) -> Path:
    """Where a profile is stored: keyed by shape, engine and its version, and GPU."""
    return (root / "model-profiles" / _slug(shape)
            / f"{_slug(engine)}-{_slug(version or 'unknown')}-{_slug(gpu)}.json")


def cmd_profile_model(args: argparse.Namespace) -> int:
    from actors.contracts.model_profile import shape_key
    from orchestrator.planning.model_profiling import profile_configs, profile_spec_data
    from orchestrator.planning.plan import plan_sweep, spec_shape
    from orchestrator.results.ledger import state_root
    from orchestrator.spec import load_spec
    from orchestrator.spec.yaml_load import load_yaml

    spec_path = Path(args.spec)
    spec = load_spec(spec_path)
    shape = spec_shape(spec)
    if shape is None:
        raise UsageError(f"{args.spec}: model: the model's shape is unknown here (a preset, or "
                         "model.path with a local config.json): a profile is keyed by it")
    configs = profile_configs(plan_sweep(spec))
    if not configs:
        raise UsageError(f"{args.spec}: space: no feasible config to profile")
    raw = load_yaml(spec_path.read_text(errors="replace"), str(spec_path))
    data = profile_spec_data(raw, spec, configs, spec_path.parent.resolve())
    root = state_root()
    out_dir = root / "model-profiles" / "specs"
    out_dir.mkdir(parents=True, exist_ok=True)
    derived = out_dir / f"{data['name']}.yaml"
    derived.write_text("# servesweep profile-model: the short profile of "
                       f"{spec_path.name}'s model (shape {shape_key(shape)})\n"
                       + yaml.safe_dump(data, sort_keys=False))
    print(f"profile of {shape_key(shape)} on {spec.hardware}: {len(configs)} config(s) at "
          f"c={', c='.join(str(c) for c in data['workload']['concurrency'])}, "
          f"{spec.workload.prompt_tokens} + {spec.workload.output_tokens} tokens "
          f"(spec: {derived})")
    for c in configs:
        print(f"  {c.label()}")
    if args.dry_run:
        return EXIT_OK
    from orchestrator.commands.run import _run

    code, ledger = _run(argparse.Namespace(spec=str(derived), quiet=args.quiet,
                                           no_mlflow=args.no_mlflow, json=False))
    if ledger is None:
        return code
    return _fit_and_store(ledger, derived, shape, root, args.max_evals, code)


def _fit_and_store(ledger: Any, derived: Path, shape: Any, root: Path, max_evals: int,
                   run_code: int) -> int:
    from actors.contracts.model_profile import ModelProfile, shape_key
    from actors.sim.perf import FITTABLE, get_profile
    from orchestrator.results.calibrate import NOT_THE_SERVER, calibrate, collect_points
    from orchestrator.spec import load_spec

    spec = load_spec(derived)
    results = list(ledger.results().values())
    groups = collect_points(results, spec)
    left = [f"{r.config.label()} c={lv.concurrency} ({', '.join(f.value for f in lv.flags)})"
            for r in results for lv in r.levels
            if lv.status == "valid" and NOT_THE_SERVER & set(lv.flags)]
    if left:
        print(f"\nleft out of the fit, not the server's numbers: {'; '.join(left)} (a quieter "
              "machine, or a load generator on its own node, measures them)")
    if not groups:
        raise UsageError(f"profile sweep {ledger.sweep_id}: no level measured the server, "
                         f"nothing to fit (exit {run_code}); see `servesweep report "
                         f"{ledger.sweep_id}`")
    written = []
    for family, points in sorted(groups.items()):
        shipped = get_profile(family)
        base = {k: float(getattr(shipped, k)) for k in FITTABLE}
        fit = calibrate(points, spec, shape, family, max_evals, base=base)
        trials = [p.trial for p in points]
        first = trials[0]
        profile = ModelProfile(
            shape=shape_key(shape), model=spec.model.path or spec.model.preset or "?",
            engine=first.config.engine, engine_version=first.versions.get("engine"),
            gpu=spec.hardware, gpu_model=first.host.get("gpu_model"), profile=family,
            factors=fit.fitted, varied=fit.varied, points=len(points),
            error_before=round(fit.error_before, 4), error_after=round(fit.error_after, 4),
            sweep_id=ledger.sweep_id, created=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime()),
            gpu_seconds=round(sum(r.wall_s or 0.0 for r in {t.key: t for t in trials}
                                  .values()), 1))
        path = profile_file(root, profile.shape, profile.engine, profile.engine_version,
                            profile.gpu)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = profile.model_dump_json(indent=1)
        path.write_text(text + "\n")
        (ledger.dir / f"model-profile-{family}.json").write_text(text + "\n")
        written.append(path)
        print(f"\nprofile {family}: {len(points)} levels; mean |error| of the shipped profile "
              f"{100 * fit.error_before:.1f}% -> fitted {100 * fit.error_after:.1f}%")
        for k in fit.varied:
            print(f"  {k:<22} {fit.start[k]:>10.4g} -> {fit.fitted[k]:.4g}")
    for path in written:
        print(f"\nwrote {path}\nplan with it: add `sim: {{model_profile: {path}}}` to the spec")
    return run_code
