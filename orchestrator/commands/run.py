"""``servesweep run SPEC`` and ``servesweep resume SWEEP``: run a sweep, or finish one
whose driver stopped."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.commands.output import json_result, sweep_document
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_OK
from orchestrator.execution.interrupts import InterruptGuard
from orchestrator.results.lock import DriverLock

if TYPE_CHECKING:
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import SweepSpec

__all__ = ["add_parser", "cmd_run", "cmd_resume"]

_JSON_HELP = ("print the sweep's outcome as one JSON document (id, exit code, trials, report, "
              "winners); progress goes to stderr")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("run", help="run a sweep from a YAML spec")
    p.add_argument("spec", help="the sweep spec (YAML): search_spaces/ has examples")
    p.add_argument("--quiet", action="store_true", help="no per-level progress lines")
    p.add_argument("--no-mlflow", action="store_true", help="ledger only, no MLflow tracking")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(func=cmd_run)
    p = subparsers.add_parser("resume",
                              help="finish a sweep whose driver stopped (Ctrl-C, crash)")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--quiet", action="store_true", help="no per-level progress lines")
    p.add_argument("--no-mlflow", action="store_true",
                   help="ledger only, no MLflow tracking (`servesweep sync` later)")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(func=cmd_resume)
    return p


def _print(text: str = "") -> None:
    print(text, flush=True)


def _nothing_to_run(spec_name: str, planned: list) -> int:
    """Say why no trial of the spec can run; exit 0 (pruning is a result, not an error)."""
    _print(f"{spec_name}: nothing to run: all {len(planned)} trial(s) are infeasible, so no "
           "sweep was started (no Ray, no MLflow run, no sweep folder)")
    for p in planned:
        _print(f"  infeasible {p.config.label()}  [{p.config.key()}]: {p.reason}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """Run a sweep. Bad input exits 2 and a spec whose every trial is infeasible exits 0,
    both before anything is created (no Ray, no MLflow store, no sweep folder)."""
    with json_result(getattr(args, "json", False), "run") as doc:
        code, ledger = _run(args)
        doc.update(sweep_document(ledger, code) if ledger is not None
                   else {"sweep_id": None, "exit_code": code, "trials": {}})
    return code


def _run(args: argparse.Namespace) -> tuple[int, Ledger | None]:
    from orchestrator.results.ledger import Ledger, state_root
    from orchestrator.spec import load_spec
    from orchestrator.spec.model import preflight

    spec = load_spec(args.spec)  # bad input fails here, before anything is created
    preflight(spec)
    _cluster_accepts_us(spec)
    from orchestrator.planning.plan import plan_sweep

    planned = plan_sweep(spec)
    if spec.quality is not None:  # a reference that cannot run is the spec's error
        from orchestrator.planning.quality import reference_trial

        reference_trial(spec.quality, planned)
    if not any(p.feasible for p in planned):  # the cluster's node sizes only prune more
        return _nothing_to_run(spec.name, planned), None
    from orchestrator.commands.profiling import profile_first

    spec = profile_first(args, spec, _run)
    from orchestrator.execution.runner import execute, reap_orphans
    from orchestrator.results.tracking import Tracker

    root = state_root()
    for sweep_id in reap_orphans(root):
        _print(f"stopped engines left running by sweep {sweep_id} (its driver is gone)")
    with InterruptGuard():  # from the sweep's creation on, a signal is recorded
        ledger = Ledger.create(Path(args.spec).read_text(), spec.name, root,
                               _request_file(spec, Path(args.spec).parent))
        _keep_task_folder(spec, ledger.dir)
        _keep_model_profile(spec, Path(args.spec).parent, ledger.dir)
        if spec.profile_spent_s:
            from orchestrator.spec.model_profiles import SPENT_FILE

            (ledger.dir / SPENT_FILE).write_text(f"{spec.profile_spent_s:.1f}\n")
        try:
            n_ok = sum(p.feasible for p in planned)
            _print(f"sweep {ledger.sweep_id}: {_header(spec, len(planned), n_ok)} on "
                   f"{spec.hardware}; state in {ledger.dir}")
            tracker = None if args.no_mlflow else Tracker(root)
            with DriverLock(ledger.dir).acquire("run"):  # one driver per sweep, its life
                return execute(spec, ledger, tracker, args.quiet, _to_run(spec, n_ok)), ledger
        except KeyboardInterrupt:
            return _interrupted(ledger), ledger


def cmd_resume(args: argparse.Namespace) -> int:
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import load_spec

    ledger = Ledger.open(args.sweep)
    ledger.check_spec()  # an edited spec.yaml is refused, naming what changed
    ledger.check_requests()  # and so is a changed request file
    spec = load_spec(ledger.dir / "spec.yaml")
    _cluster_accepts_us(spec)
    # refused at once while the sweep's driver lives: its engines are never touched
    with json_result(getattr(args, "json", False), "resume") as doc, \
            DriverLock(ledger.dir).acquire("resume"), InterruptGuard():
        try:
            code = _resume(args, ledger, spec)
        except KeyboardInterrupt:
            code = _interrupted(ledger)
        doc.update(sweep_document(ledger, code))
    return code


def _keep_task_folder(spec: SweepSpec, sweep_dir: Path) -> None:
    """The quality task's folder is copied into the sweep (``quality-task/``): every trial,
    ``resume`` and ``report`` read the task the sweep started with."""
    import shutil

    from orchestrator.spec.quality_checks import SWEEP_TASK_DIR

    src = spec.quality_task_dir()
    if src is None:
        return
    shutil.copytree(src, sweep_dir / SWEEP_TASK_DIR, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.safetensors", "*.bin"))


def _keep_model_profile(spec: SweepSpec, spec_dir: Path, sweep_dir: Path) -> None:
    """The spec's model profile is copied into the sweep (``model-profile.json``): resume
    and report read the profile the sweep started with."""
    import shutil

    from orchestrator.spec.model_profiles import SWEEP_COPY, profile_path

    if spec.sim.model_profile is not None:
        shutil.copyfile(profile_path(spec.sim.model_profile, spec_dir), sweep_dir / SWEEP_COPY)


def _request_file(spec: SweepSpec, spec_dir: Path) -> Path | None:
    """The request file the spec names (the sweep keeps a copy), if any."""
    from actors.contracts.traffic import FileSource
    from orchestrator.spec.traffic_plan import request_file

    src = spec.workload.requests
    return request_file(src, spec_dir) if isinstance(src, FileSource) else None


def _to_run(spec: SweepSpec, feasible: int) -> int:
    """How many trials the sweep will run: every feasible one on a grid, at most the
    budget's trials under a search."""
    budget = spec.search.budget
    if spec.search.kind == "grid" or budget is None or budget.trials is None:
        return feasible
    return min(feasible, budget.trials)


def _header(spec: SweepSpec, planned: int, feasible: int) -> str:
    """The run's first line: trials on a grid; candidates and the budget under a search
    (an 8-trial search of 128 candidates said "128 trials (128 to run)")."""
    infeasible = planned - feasible
    if spec.search.kind == "grid":
        return f"{planned} trials ({feasible} to run, {infeasible} infeasible)"
    budget = spec.search.budget
    limit = f"at most {budget.describe()} (search.budget)" if budget else "until it stops"
    return (f"a {spec.search.sampler.value} search of {planned} candidate configs ({feasible} "
            f"feasible, {infeasible} infeasible) that runs {limit}")


def _cluster_accepts_us(spec: SweepSpec) -> None:
    """A cluster that refuses this driver's Ray token is bad input (exit 2, one line naming
    what to set), found before a sweep folder exists or a resume starts."""
    if spec.cluster.address:
        from orchestrator.execution.cluster_auth import check_cluster_auth

        check_cluster_auth(spec.cluster.address)


def _interrupted(ledger: Ledger) -> int:
    """A signal outside ``execute`` (which handles its own): recorded, then exit 130."""
    from orchestrator.execution.interrupts import handled, record_interrupt

    handled()
    record_interrupt(ledger, "interrupted by the user")
    _print(f"interrupted. `servesweep resume {ledger.sweep_id}` goes on")
    return EXIT_INTERRUPTED


def _resume(args: argparse.Namespace, ledger: Ledger, spec: SweepSpec) -> int:
    """Resume under the driver lock: reap the earlier driver's leftovers, set damaged
    ledger lines aside, run what is not final."""
    from actors.procs import reap
    from orchestrator.execution.runner import execute
    from orchestrator.planning.plan import plan_sweep
    from orchestrator.results.ledger import QUARANTINE, state_root
    from orchestrator.results.tracking import Tracker

    left = reap(f"{ledger.sweep_id}/")
    if left:
        _print(f"stopped {len(left)} engine process(es) left by the earlier driver")
    for d in ledger.quarantine():  # damaged lines move aside; their trials run again
        what = (f"trial {d.lost_trial}'s result was lost: it runs again"
                if d.lost_trial else "nothing final was lost")
        _print(f"ledger {d.describe()}; moved to {ledger.dir / QUARANTINE}; {what}")
    done = set(ledger.results())
    planned = plan_sweep(spec)
    todo = sum(1 for p in planned if p.feasible and p.config.key() not in done)
    _print(f"resuming {ledger.sweep_id}: {len(done)} trial(s) final, {todo} to run")
    tracker = None if args.no_mlflow else Tracker(state_root())
    return execute(spec, ledger, tracker, args.quiet, todo)
