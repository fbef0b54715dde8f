"""``servesweep``: run, plan, report (exit 0 done, 1 servesweep error, 2 bad input)."""

from __future__ import annotations

import argparse
import json
import sys
import time
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


def _tracking_hint(uri: str) -> str:
    if uri.startswith("sqlite:"):
        return (f"Open the results in MLflow:\n  .venv/bin/mlflow ui --backend-store-uri {uri} "
                "--port 5000   (then http://127.0.0.1:5000)\n  or: make ui")
    return f"Results are in MLflow at {uri}"


def cmd_run(args: argparse.Namespace) -> int:
    from orchestrator.ledger import Ledger, state_root
    from orchestrator.spec import load_spec

    spec = load_spec(args.spec)  # bad input fails here, before anything is created
    import ray

    from orchestrator.plan import plan_sweep
    from orchestrator.progress import Progress
    from orchestrator.report import render_text, report_json, write_plots
    from orchestrator.sweep import SweepController, connect_ray
    from orchestrator.tracking import Tracker

    planned = plan_sweep(spec)
    root = state_root()
    ledger = Ledger.create(Path(args.spec).read_text(), spec.name, root)
    n_ok = sum(p.feasible for p in planned)
    _print(f"sweep {ledger.sweep_id}: {len(planned)} trials ({n_ok} to run, "
           f"{len(planned) - n_ok} infeasible) on {spec.hardware}; state in {ledger.dir}")
    tracker = None if args.no_mlflow else Tracker(root)
    t0 = time.monotonic()
    _print("starting Ray ..." if not spec.cluster.address else
           f"joining Ray at {spec.cluster.address} ...")
    connect_ray(spec)
    if tracker is not None:
        tracker.start_sweep(spec.name, ledger.sweep_id,
                            {"spec": spec.name, "hardware": spec.hardware,
                             "model": spec.model.display_name, "search": spec.search.kind,
                             "prompt_tokens": str(spec.workload.prompt_tokens),
                             "output_tokens": str(spec.workload.output_tokens),
                             "concurrency": str(spec.workload.concurrency),
                             "time_scale": str(spec.sim.time_scale)},
                            ledger.dir / "spec.yaml")
    controller = SweepController(spec, ledger, tracker,
                                 Progress(sum(p.feasible for p in planned), quiet=args.quiet))
    try:
        results = controller.run()
    except KeyboardInterrupt:
        if tracker is not None:
            tracker.end_sweep({}, [], "KILLED")
        _print(f"interrupted; engines stopped. Finished trials are kept in {ledger.dir}")
        return 130
    finally:
        ray.shutdown()
    ordered = list(results.values())
    report_dir = ledger.dir / "report"
    plots = write_plots(ordered, report_dir)
    data = report_json(spec, ordered, ledger.sweep_id)
    (report_dir).mkdir(exist_ok=True)
    (report_dir / "report.json").write_text(json.dumps(data, indent=1, default=str))
    from orchestrator.report import winners_export

    (report_dir / "winners.json").write_text(
        json.dumps(winners_export(spec, ordered), indent=1, default=str))
    hint = _tracking_hint(tracker.uri) if tracker else ""
    text = render_text(spec, ordered, ledger.sweep_id, hint)
    (report_dir / "report.txt").write_text(text + "\n")
    if tracker is not None:
        summary = {"trials": len(ordered), "wall_s": time.monotonic() - t0}
        summary.update({f"trials_{k}": v for k, v in
                        data.get("counts", {}).items()} if "counts" in data else {})
        tracker.end_sweep(summary, [*plots, report_dir / "report.json",
                                    report_dir / "report.txt"], "FINISHED")
    _print("")
    _print(text)
    _print(f"\nplots: {', '.join(str(p) for p in plots) or 'none (no valid level)'}")
    return EXIT_OK


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
