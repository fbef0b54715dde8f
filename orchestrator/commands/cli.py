"""``servesweep``: run, plan, report (exit 0 done, 1 servesweep error, 2 bad input)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orchestrator.errors import EXIT_INPUT, EXIT_OK, EXIT_RUNTIME, ServesweepError, UsageError

__all__ = ["main", "build_parser"]


def _print(text: str = "") -> None:
    print(text, flush=True)


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.plan import plan_sweep, spec_shape
    from orchestrator.spec import load_spec

    spec = load_spec(args.spec)
    planned = plan_sweep(spec)
    feasible = [p for p in planned if p.feasible]
    preds: dict[str, object] = {}
    total_s = None
    if args.predict:
        from orchestrator.predict import predict_sweep

        plist, total_s = predict_sweep(planned, spec, spec_shape(spec))
        preds = {p.key: p for p in plist}
    if args.json:
        out = {"spec": spec.name, "trials": [
            {"key": p.config.key(), "label": p.config.label(), "feasible": p.feasible,
             "reason": p.reason, "config": p.config.model_dump(mode="json"),
             "prediction": (preds[p.config.key()].levels if p.config.key() in preds else None)}
            for p in planned], "estimated_sweep_s": total_s}
        _print(json.dumps(out, indent=1))
        return EXIT_OK
    _print(f"{spec.name}: {len(planned)} trials, {len(feasible)} to run, "
           f"{len(planned) - len(feasible)} infeasible; concurrency {spec.workload.concurrency}; "
           f"search {spec.search.kind}")
    for i, p in enumerate(planned, 1):
        mark = "run " if p.feasible else "skip"
        line = f"  {i:3d}. {mark} {p.config.label()}  [{p.config.key()}]"
        if not p.feasible:
            line += f"\n          infeasible: {p.reason}"
        _print(line)
        pred = preds.get(p.config.key())
        if pred is not None:
            for lv in pred.levels:  # type: ignore[attr-defined]
                wait = f" wait<={lv['max_waiting']}" if lv["max_waiting"] else ""
                pre = f" preempt={lv['preemptions']}" if lv["preemptions"] else ""
                _print(f"          c={lv['concurrency']:<4} {lv['output_tok_s']:9.1f} tok/s  "
                       f"TTFT p50 {lv['ttft_p50_ms']:7.1f} ms  ITL p50 {lv['itl_p50_ms']:6.2f} ms"
                       f"  run<={lv['max_running']}{wait}{pre}")
    if args.predict and not preds:
        _print("\nno prediction: the model's shape is unknown here (model.path needs a local "
               "config.json, or use model.preset)")
    elif total_s is not None:
        m, s = divmod(int(total_s), 60)
        scale = spec.sim.time_scale
        note = f", sim time scale {scale}" if scale != 1 else ""
        _print(f"\nEstimated sweep time: {m} min {s:02d} s (server starts + levels{note})")
    elif not args.predict:
        _print("\n(add --predict for the performance model's numbers and the sweep's duration)")
    return EXIT_OK


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
    from orchestrator.ledger import Ledger, state_root
    from orchestrator.spec import load_spec

    spec = load_spec(args.spec)  # bad input fails here, before anything is created
    from orchestrator.plan import plan_sweep

    planned = plan_sweep(spec)
    if not any(p.feasible for p in planned):  # the cluster's node sizes only prune more
        return _nothing_to_run(spec.name, planned)
    from orchestrator.runner import execute, reap_orphans
    from orchestrator.tracking import Tracker

    root = state_root()
    for sweep_id in reap_orphans(root):
        _print(f"stopped engines left running by sweep {sweep_id} (its driver is gone)")
    ledger = Ledger.create(Path(args.spec).read_text(), spec.name, root)
    n_ok = sum(p.feasible for p in planned)
    _print(f"sweep {ledger.sweep_id}: {len(planned)} trials ({n_ok} to run, "
           f"{len(planned) - n_ok} infeasible) on {spec.hardware}; state in {ledger.dir}")
    tracker = None if args.no_mlflow else Tracker(root)
    return execute(spec, ledger, tracker, args.quiet, n_ok)


def cmd_resume(args: argparse.Namespace) -> int:
    from actors.procs import reap
    from orchestrator.ledger import Ledger, state_root
    from orchestrator.plan import plan_sweep
    from orchestrator.runner import execute
    from orchestrator.spec import load_spec
    from orchestrator.tracking import Tracker

    ledger = Ledger.open(args.sweep)
    spec = load_spec(ledger.dir / "spec.yaml")
    left = reap(f"{ledger.sweep_id}/")
    if left:
        _print(f"stopped {len(left)} engine process(es) left by the earlier driver")
    done = {k for k, r in ledger.results().items() if r.status.is_finished()}
    planned = plan_sweep(spec)
    todo = sum(1 for p in planned if p.feasible and p.config.key() not in done)
    _print(f"resuming {ledger.sweep_id}: {len(done)} trial(s) final, {todo} to run")
    tracker = None if args.no_mlflow else Tracker(state_root())
    return execute(spec, ledger, tracker, args.quiet, todo)


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.ledger import Ledger
    from orchestrator.report import render_text, report_json
    from orchestrator.spec import load_spec

    ledger = Ledger.open(args.sweep)
    spec = load_spec(ledger.dir / "spec.yaml")
    results = list(ledger.results().values())
    if args.json:
        _print(json.dumps(report_json(spec, results, ledger.sweep_id), indent=1, default=str))
    else:
        _print(render_text(spec, results, ledger.sweep_id))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="servesweep", description=(
        "Sweep LLM serving configurations on Ray; track every trial in MLflow."))
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run a sweep from a YAML spec")
    p.add_argument("spec")
    p.add_argument("--quiet", action="store_true", help="no per-level progress lines")
    p.add_argument("--no-mlflow", action="store_true", help="ledger only, no MLflow tracking")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("resume", help="finish a sweep whose driver stopped (Ctrl-C, crash)")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--no-mlflow", action="store_true")
    p.set_defaults(func=cmd_resume)
    p = sub.add_parser("plan", help="list trials and infeasible ones (starts nothing)")
    p.add_argument("spec")
    p.add_argument("--predict", action="store_true",
                   help="add the performance model's predictions and the sweep's duration")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("report", help="winners, crossovers and trials of a sweep")
    p.add_argument("sweep", help="sweep id (or a unique prefix) or 'latest'")
    p.add_argument("--json", action="store_true",
                   help="every trial's status, config and per-level metrics plus the winners")
    p.set_defaults(func=cmd_report)
    from orchestrator import calibrate_cmd, capacity_cmd, track_cmd

    for module in (capacity_cmd, calibrate_cmd, track_cmd):
        module.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for bad arguments, 0 for --help
        return int(exc.code or 0)
    try:
        return args.func(args)
    except ServesweepError as err:
        print(f"servesweep: {err}", file=sys.stderr)
        return err.exit_code
    except UsageError as err:  # pragma: no cover - subclass of ServesweepError
        print(f"servesweep: {err}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - a bug or environment problem: exit 1, say what
        import traceback

        traceback.print_exc()
        print(f"servesweep: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
