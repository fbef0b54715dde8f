"""Run (or resume) a sweep: Ray, MLflow parent run, the controller, then the report files."""

from __future__ import annotations

import json
import os
import socket
import time

from actors.procs import marked_processes, reap
from orchestrator.errors import EXIT_OK, UsageError
from orchestrator.results.events import DriverStarted, Reaped
from orchestrator.results.ledger import Ledger
from orchestrator.results.tracking import Tracker
from orchestrator.spec import SweepSpec

__all__ = ["execute", "reap_orphans", "INTERRUPTED"]

INTERRUPTED = 130


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(root) -> list[str]:
    """Stop engines whose sweep's driver on this host is gone; returns those sweep ids."""
    by_sweep: dict[str, int] = {}
    for _, _, marker in marked_processes(""):
        by_sweep.setdefault(marker.split("/")[0], 0)
    reaped = []
    host = socket.gethostname()
    for sweep_id in by_sweep:
        try:
            ledger = Ledger.open(sweep_id, root)
        except UsageError:
            continue  # another state root's sweep: not ours to judge
        drivers = [e for e in ledger.events() if isinstance(e, DriverStarted)
                   and e.host == host]
        if drivers and not _alive(drivers[-1].pid):
            reap(f"{sweep_id}/")
            ledger.append(Reaped(reason="driver gone", by=os.getpid()))
            reaped.append(sweep_id)
    return reaped


def _say(text: str = "") -> None:
    print(text, flush=True)


def execute(spec: SweepSpec, ledger: Ledger, tracker: Tracker | None, quiet: bool,
            total: int) -> int:
    import ray

    from orchestrator.execution.controller import SweepController, connect_ray
    from orchestrator.execution.progress import Progress
    from orchestrator.results.report import render_text, report_json, winners_export, write_plots

    ledger.append(DriverStarted(pid=os.getpid(), host=socket.gethostname()))
    t0 = time.monotonic()
    _say("starting Ray ..." if not spec.cluster.address else
         f"joining Ray at {spec.cluster.address} ...")
    connect_ray(spec)
    if tracker is not None and not tracker.resume_sweep(spec.name, ledger.sweep_id):
        tracker.start_sweep(spec.name, ledger.sweep_id,
                            {"spec": spec.name, "hardware": spec.hardware,
                             "model": spec.model.display_name, "search": spec.search.kind,
                             "prompt_tokens": str(spec.workload.prompt_tokens),
                             "output_tokens": str(spec.workload.output_tokens),
                             "concurrency": str(spec.workload.concurrency),
                             "time_scale": str(spec.sim.time_scale)},
                            ledger.dir / "spec.yaml")
    controller = SweepController(spec, ledger, tracker, Progress(total, quiet=quiet))
    try:
        results = controller.run()
    except KeyboardInterrupt:
        if tracker is not None:
            tracker.end_sweep({}, [], "KILLED")
        _say(f"interrupted; engines stopped. Finished trials are kept in {ledger.dir}; "
             f"`servesweep resume {ledger.sweep_id}` runs the rest")
        return INTERRUPTED
    finally:
        ray.shutdown()
    ordered = list(results.values())
    report_dir = ledger.dir / "report"
    plots = write_plots(ordered, report_dir)
    report_dir.mkdir(exist_ok=True)
    data = report_json(spec, ordered, ledger.sweep_id)
    (report_dir / "report.json").write_text(json.dumps(data, indent=1, default=str))
    (report_dir / "winners.json").write_text(
        json.dumps(winners_export(spec, ordered), indent=1, default=str))
    hint = ""
    if tracker is not None:
        hint = (f"Open the results in MLflow:\n  .venv/bin/mlflow ui --backend-store-uri "
                f"{tracker.uri} --port 5000   (then http://127.0.0.1:5000)\n  or: make ui"
                if tracker.uri.startswith("sqlite:") else f"Results are in MLflow at "
                                                          f"{tracker.uri}")
    text = render_text(spec, ordered, ledger.sweep_id, hint)
    (report_dir / "report.txt").write_text(text + "\n")
    if tracker is not None:
        counts: dict[str, int] = {}
        for r in ordered:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        summary = {"trials": len(ordered), "wall_s": time.monotonic() - t0,
                   **{f"trials_{k}": v for k, v in counts.items()}}
        tracker.end_sweep(summary, [*plots, report_dir / "report.json",
                                    report_dir / "report.txt", report_dir / "winners.json"],
                          "FINISHED")
    _say("")
    _say(text)
    _say(f"\nplots: {', '.join(str(p) for p in plots) or 'none (no valid level)'}")
    return EXIT_OK
