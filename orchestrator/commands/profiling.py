"""Profiling the user's model: the short sweep, its fit, the stored result, and whether a
search makes one first. ``profile-model`` (``orchestrator.commands.profile_model``) and
``run`` (``search.profile_first``) both use it, each handing in the sweep runner (``run``'s),
so this module imports no command.

A profile is stored as ``<state>/model-profiles/<shape>/<engine>-<version>-<gpu>.json``
(``profile_file``) and in its sweep folder (``model-profile-<profile>.json``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from orchestrator.errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    from orchestrator.spec import SweepSpec

__all__ = ["Runner", "make_profile", "profile_file", "profile_first", "stored_profile",
           "wants_profile"]

#: ``run``'s sweep runner: (its args) -> (exit code, the sweep's ledger or None)
Runner = Callable[[argparse.Namespace], tuple[int, Any]]


def say(text: str) -> None:
    print(text, flush=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_") or "unknown"


def profile_file(root: Path, shape: str, engine: str, version: str | None, gpu: str) -> Path:
    """Where a profile is stored: keyed by shape, engine and its version, and GPU."""
    return (root / "model-profiles" / _slug(shape)
            / f"{_slug(engine)}-{_slug(version or 'unknown')}-{_slug(gpu)}.json")


def stored_profile(root: Path, shape: str, engines: set[str], gpu: str) -> Path | None:
    """The newest stored profile of ``shape`` on one of ``engines``: on ``gpu`` if there is
    one, else on any GPU (a spec using it gets the wider band and says why)."""
    folder = root / "model-profiles" / _slug(shape)
    found = [p for e in sorted(engines) for p in folder.glob(f"{_slug(e)}-*.json")]
    found.sort(key=lambda p: (p.stem.endswith(f"-{_slug(gpu)}"), p.stat().st_mtime))
    return found[-1] if found else None


def make_profile(spec_path: Path, spec: SweepSpec, quiet: bool, no_mlflow: bool, max_evals: int,
                 runner: Runner, dry_run: bool = False) -> tuple[int, list[Path]]:
    """Run the short profile of ``spec``'s model and store its fit: (exit code, the stored
    files). ``UsageError`` when the model's shape is unknown or no level measured the
    server."""
    from actors.contracts.model_profile import shape_key
    from orchestrator.planning.model_profiling import profile_configs, profile_spec_data
    from orchestrator.planning.plan import plan_sweep, spec_shape
    from orchestrator.results.ledger import state_root
    from orchestrator.spec.yaml_load import load_yaml

    shape = spec_shape(spec)
    if shape is None:
        raise UsageError(f"{spec_path}: model: the model's shape is unknown here (a preset, or "
                         "model.path with a local config.json): a profile is keyed by it")
    configs = profile_configs(plan_sweep(spec))
    if not configs:
        raise UsageError(f"{spec_path}: space: no feasible config to profile")
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
    if dry_run:
        return EXIT_OK, []
    code, ledger = runner(argparse.Namespace(spec=str(derived), quiet=quiet,
                                           no_mlflow=no_mlflow, json=False))
    if ledger is None:
        return code, []
    written = _fit_and_store(ledger, derived, shape, root, max_evals, code)
    if not no_mlflow:
        _log_profiles(ledger)
    return code, written


def _log_profiles(ledger: Any) -> None:
    """The fitted profiles onto the profile sweep's parent run in MLflow (an artifact beside
    its report); a tracking server that fails is said, the files stay where they are."""
    from orchestrator.commands.sync import mlflow_errors
    from orchestrator.results.ledger import state_root
    from orchestrator.results.tracking import Tracker, describe_error
    from orchestrator.spec import load_spec

    tracker = Tracker(state_root())
    try:
        tracker.log_report(load_spec(ledger.dir / "spec.yaml"), ledger,
                           sorted(ledger.dir.glob("model-profile*.json")))
    except mlflow_errors() as err:
        print(f"servesweep: the profile was written, but MLflow at {tracker.uri} failed "
              f"({describe_error(err)}); `servesweep sync {ledger.sweep_id}` logs it again",
              file=sys.stderr, flush=True)


def _fit_and_store(ledger: Any, derived: Path, shape: Any, root: Path, max_evals: int,
                   run_code: int) -> list[Path]:
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
        # one factor for this machine's host over the fitted host costs, not each cost: on the
        # H200 data it took a 1B-like model's points profiled on their node from 27.4% to
        # 10.6% mean error (benchmarks/measured/crossval-20261204c)
        fit = calibrate(points, spec, shape, family, max_evals, base=base, host=True)
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
    return written


def wants_profile(spec: SweepSpec) -> bool:
    """Whether this sweep profiles its model before it searches (``search.profile_first``)."""
    from actors.engines import get_adapter
    from orchestrator.spec.search import Sampler

    search = spec.search
    if spec.model_profile is not None or not (search.sampler is Sampler.GUIDED
                                              or search.seed_from_model):
        return False
    if search.profile_first is not None:
        return search.profile_first
    return any(get_adapter(e.engine).launches_process and not get_adapter(e.engine).time_scaled
               for e in spec.space)


def profile_first(args: argparse.Namespace, spec: SweepSpec, runner: Runner) -> SweepSpec:
    """``spec`` with a short profile of its model (stored, else made now: its seconds go to
    the budget); ``spec`` itself when none is wanted or none could be made."""
    if not wants_profile(spec):
        return spec
    from actors.contracts.model_profile import read_model_profile, shape_key
    from orchestrator.planning.plan import spec_shape
    from orchestrator.results.ledger import state_root
    from orchestrator.spec import parse_spec
    from orchestrator.spec.yaml_load import load_yaml

    shape = spec_shape(spec)
    if shape is None:
        return spec
    engines = {e.engine for e in spec.space}
    path = stored_profile(state_root(), shape_key(shape), engines, spec.hardware)
    spent = 0.0
    if path is None:
        say(f"{spec.name}: no short profile of this model ({shape_key(shape)}) on "
            f"{spec.hardware} yet: profiling it first (search.profile_first)")
        try:
            _, written = make_profile(Path(args.spec), spec, args.quiet, args.no_mlflow, 80,
                                      runner)
        except UsageError as err:
            say(f"{spec.name}: the profile measured nothing to fit ({err}); searching with "
                "the model's unprofiled band")
            return spec
        if not written:
            return spec
        path = written[0]
        spent = read_model_profile(path).gpu_seconds
    say(f"{spec.name}: predicting with the short profile {path}"
        + (f" (made now: {spent:.0f} s, counted in the budget)" if spent else " (stored)"))
    spec_path = Path(args.spec)
    data = load_yaml(spec_path.read_text(errors="replace"), str(spec_path))
    data["sim"] = {**(data.get("sim") or {}), "model_profile": str(path)}
    profiled = parse_spec(data, str(spec_path), spec_path.parent)
    profiled._profile_spent_s = spent
    return profiled
