"""Run (or resume) a sweep: Ray, the controller, the report files; MLflow through the outbox."""

from __future__ import annotations

import os
import socket
import time

from actors.procs import marked_processes, reap, stop_group
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError
from orchestrator.execution import interrupts
from orchestrator.execution.cluster import Cluster
from orchestrator.execution.interrupts import InterruptGuard, record_interrupt
from orchestrator.planning.overheads import process_age_s
from orchestrator.planning.overheads import record as record_overheads
from orchestrator.results.diskfull import sweep_stopped
from orchestrator.results.events import DriverStarted, Reaped
from orchestrator.results.ledger import Ledger
from orchestrator.results.lock import DriverLock
from orchestrator.results.outbox import TrackingOutbox
from orchestrator.results.tracking import Tracker, sweep_summary
from orchestrator.spec import SweepSpec

__all__ = ["execute", "reap_orphans", "INTERRUPTED", "END_WAIT_S", "INTERRUPT_WAIT_S"]

INTERRUPTED = EXIT_INTERRUPTED


def reap_orphans(root) -> list[str]:
    """Stop, on this machine, engines whose sweep's driver is gone; returns those sweep
    ids. A driver is alive while it holds its sweep's lock (``results.lock``), never
    judged by ledger events or by a pid that may have been reused. The ``reaped`` event
    says what was stopped here; it is ``complete`` when every open group of the sweep ran
    on this host and nothing survived."""
    by_sweep: dict[str, int] = {}
    for _, _, marker in marked_processes(""):
        by_sweep.setdefault(marker.split("/")[0], 0)
    reaped = []
    here = socket.gethostname()
    for sweep_id in by_sweep:
        try:
            ledger = Ledger.open(sweep_id, root)
        except UsageError:
            continue  # another state root's sweep: not ours to judge
        if DriverLock(ledger.dir).holder() is None:
            groups = ledger.open_groups()
            found = [pid for pid, _, _ in marked_processes(f"{sweep_id}/")]
            stopped = stop_group(None, f"{sweep_id}/", 10.0) if found else {"leftovers": []}
            left = stopped["leftovers"]
            ledger.append(Reaped(
                reason="driver gone", by=os.getpid(), killed={here: sorted(found)} if found
                else {}, leftovers={here: left} if left else {},
                complete=not left and all((g.host or here) == here for g in groups)))
            reaped.append(sweep_id)
    return reaped


def _reap_nodes(cluster: Cluster, ledger: Ledger) -> None:
    """On every node, before the sweep starts: stop what dead drivers' sweeps left there,
    and what an earlier driver of this sweep left (``resume``). A Ray error here is said
    and the sweep goes on (its own end reaps every node again)."""
    from ray.exceptions import RayError

    from orchestrator.execution.reaping import reap_dead_drivers, reap_sweep

    try:
        dead = reap_dead_drivers(cluster, ledger.dir.parent.parent, skip=ledger.sweep_id)
        for sweep_id, event in dead.items():
            if event.killed:
                _say(f"stopped {sum(map(len, event.killed.values()))} process(es) left "
                     f"running by sweep {sweep_id} on {len(event.killed)} node(s) (its "
                     "driver is gone)")
            _say_refused(sweep_id, event.refused)
        groups = ledger.open_groups()
        if groups:
            event = reap_sweep(cluster, ledger, "earlier driver gone", groups)
            if event.killed:
                _say(f"stopped {sum(map(len, event.killed.values()))} process(es) the "
                     f"earlier driver left on {len(event.killed)} node(s)")
            _say_refused(ledger.sweep_id, event.refused)
    except RayError as err:
        _say(f"could not reap the nodes before the sweep: {err}")


def _say_refused(sweep_id: str, refused: dict[str, list[str]]) -> None:
    """Say what a ledger named that the nodes would not signal (not the sweep's)."""
    lines = [line for node in refused.values() for line in node]
    if lines:
        _say(f"left alone {len(lines)} process(es) or cgroup(s) the ledger of sweep "
             f"{sweep_id} names but that are not its own (the ``reaped`` event lists "
             f"them): {'; '.join(lines[:3])}{' ...' if len(lines) > 3 else ''}")


def _say(text: str = "") -> None:
    print(text, flush=True)


#: how long a sweep waits for MLflow at its end, and after Ctrl-C (then ``sync`` catches up)
END_WAIT_S = 30.0
INTERRUPT_WAIT_S = 5.0


def execute(spec: SweepSpec, ledger: Ledger, tracker: Tracker | None, quiet: bool,
            total: int) -> int:
    """Run the sweep. MLflow (``tracker``) is written through a ``TrackingOutbox``: it never
    stops the sweep, and what it missed is left for ``servesweep sync``. Ctrl-C returns 130
    after ending the parent run KILLED (the sweep stopped before its plan was done;
    ``resume`` reopens the run and ends it FINISHED). SIGINT and SIGTERM at any moment, Ray's
    start included, end in 130 with an ``interrupted`` event (``interrupts``)."""
    with InterruptGuard():
        return _guarded(spec, ledger, tracker, quiet, total)


def _guarded(spec: SweepSpec, ledger: Ledger, tracker: Tracker | None, quiet: bool,
             total: int) -> int:
    ledger.append(DriverStarted(pid=os.getpid(), host=socket.gethostname()))
    outbox = TrackingOutbox(tracker, spec, ledger) if tracker is not None else None
    try:
        if outbox is not None:
            outbox.begin()  # the parent run, and the trials an earlier driver recorded
        return _execute(spec, ledger, outbox, quiet, total)
    except KeyboardInterrupt:  # at any moment, Ray's start included (``interrupts``)
        interrupts.handled()
        record_interrupt(ledger, "interrupted by the user", reap(f"{ledger.sweep_id}/"))
        caught_up = True
        if outbox is not None:
            if not outbox.ended:  # a completed sweep interrupted while MLflow catches up
                outbox.end({}, [], "KILLED")  # stays FINISHED
            try:
                caught_up = outbox.drain(INTERRUPT_WAIT_S)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting for MLflow
                caught_up = False
        _say(f"interrupted; engines stopped. Finished trials are kept in {ledger.dir}; "
             f"`servesweep resume {ledger.sweep_id}` runs the rest")
        if outbox is not None and not caught_up:
            for line in outbox.behind_lines():
                _say(line)
        return INTERRUPTED
    except OSError as err:  # a full disk: one line, no result for the trial (``diskfull``)
        sweep_stopped(err, ledger.dir, ledger.sweep_id)
        raise
    finally:
        if outbox is not None:
            outbox.close()


def _execute(spec: SweepSpec, ledger: Ledger, outbox: TrackingOutbox | None, quiet: bool,
             total: int) -> int:
    import ray

    from orchestrator.execution.cluster import RayCluster
    from orchestrator.execution.controller import SweepController, connect_ray
    from orchestrator.execution.progress import Progress
    from orchestrator.results.report_folder import write_report

    t0 = time.monotonic()
    driver_start_s = process_age_s()  # this process so far: imports, spec, store, lock
    _say("starting Ray ..." if not spec.cluster.address else
         f"joining Ray at {spec.cluster.address} ...")
    try:
        connect_ray(spec)  # a signal during it is raised when Ray is up (``interrupts``)
        ray_start_s = time.monotonic() - t0
        cluster = RayCluster()
        _reap_nodes(cluster, ledger)
        interrupts.check()
        controller = SweepController(spec, ledger, outbox, Progress(total, quiet=quiet),
                                     cluster=cluster)
        results = controller.run()
    finally:
        with interrupts.deferred(), interrupts.kept():  # Ray stopped whole, then the
            ray.shutdown()  # signal (its core resets SIGTERM to the default meanwhile)
    ordered = list(results.values())
    hint = ""
    if outbox is not None:
        uri = outbox.tracker.uri
        hint = (f"Open the results in MLflow:\n  .venv/bin/mlflow ui --backend-store-uri "
                f"{uri} --port 5000   (then http://127.0.0.1:5000)\n  or: make ui"
                if uri.startswith("sqlite:") else f"Results are in MLflow at {uri}")
    t_report = time.monotonic()
    report = write_report(spec, ledger)
    record_overheads(ledger.dir, driver_start_s, ray_start_s, ordered,
                     time.monotonic() - t_report)  # the next estimate learns from them
    text = report.text
    behind: list[str] = []
    if outbox is not None:
        summary = {**sweep_summary(ordered, spec), "wall_s": time.monotonic() - t0}
        outbox.end(summary, report.files(), "FINISHED")
        if not outbox.drain(END_WAIT_S):
            behind = outbox.behind_lines()
    _say("")
    _say(text)
    _say(f"\nreport: {report.html} (opens offline), {report.markdown}")
    for line in behind:  # the sweep is complete (exit 0); MLflow catches up with `sync`
        _say(line)
    if hint and not behind:  # where the results are, only once MLflow holds them
        _say(hint)
    return EXIT_OK
