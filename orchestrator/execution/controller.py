"""The sweep controller: an explicit step loop over trials on Ray.

``step()`` is one tick: record pruned trials, start trials while the cluster
has room (``max_concurrent_trials``; on GPU nodes, where ``packing`` finds a node
for the trial's ``tp`` GPUs, largest ``tp`` first), wait up to ``tick_s`` for any
trial's in-flight ref, advance it, and fail trials whose phase deadline passed. A
failed attempt that is retried waits in ``retry_queue`` for room on another node.
Every final result goes to the ledger first, then the searcher; MLflow's copy is handed
to the ``TrackingOutbox``, which writes it off this loop and never raises into it.
Tests drive ``step()`` directly; ``run()`` loops it and cleans up on any exit,
Ctrl-C included (every started engine process is stopped).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from actors.contracts.diskspace import failure_of_disk
from actors.contracts.quality import QualityResult
from actors.contracts.reaping import ReapTarget
from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import FailureClass, TrialStatus
from actors.procs import reap
from orchestrator.errors import UsageError
from orchestrator.execution import interrupts
from orchestrator.execution.cluster import NODE_ID_LABEL, Cluster, RayCluster
from orchestrator.execution.interrupts import InterruptGuard
from orchestrator.execution.packing import Packer, ordered
from orchestrator.execution.progress import Progress
from orchestrator.execution.reaping import REAP_TIMEOUT_S, reap_sweep
from orchestrator.execution.trial import TrialExecution, TrialPhase
from orchestrator.planning.plan import PlannedTrial, plan_sweep, spec_shape
from orchestrator.planning.quality import reference_trial
from orchestrator.planning.quality import verdict as quality_verdict
from orchestrator.planning.search import Searcher, make_searcher
from orchestrator.results.events import AttemptFailed, Interrupted, Scheduled, Started
from orchestrator.results.ledger import Ledger, atomic_write
from orchestrator.results.outbox import TrackingOutbox
from orchestrator.results.records import SEARCH_PARAMS_FILE, write_trial_files
from orchestrator.results.refit import refit_profile
from orchestrator.results.report_folder import SEARCH_SUMMARY
from orchestrator.spec import SweepSpec
from orchestrator.spec.traffic_plan import workload_fingerprint

__all__ = ["SweepController", "connect_ray"]


def connect_ray(spec: SweepSpec) -> None:
    """Join ``cluster.address`` or start a local Ray with the spec's logical GPUs.

    Ray's token authentication stays as Ray sets it: on by default (Ray 2.60 writes a
    token under the home directory for a local Ray; a cluster's driver needs that
    cluster's token: README "Security"). servesweep never turns it off; only the test
    suite does, for the throwaway clusters it starts (tests/conftest.py). Ray 2.60 maps
    127.0.0.1 to the node's address and its servers listen on every interface, so the
    token, not the bind address, is what keeps others from running code here."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = dict(namespace=spec.cluster.namespace, include_dashboard=False,
                                  log_to_driver=False, logging_level="WARNING")
    if not spec.cluster.address:  # "local": never join another cluster running here
        kwargs.update(address="local", num_gpus=spec.cluster.gpus, num_cpus=spec.cluster.cpus,
                      _system_config={"worker_niceness": WORKER_NICENESS})
    else:
        kwargs.update(address=spec.cluster.address)
    logging.getLogger(_RAY_AUTH_LOGGER).addFilter(_said_in_readme)
    with interrupts.deferred(), _ray_keeps_our_sigterm():
        ray.init(**kwargs)


#: Ray starts its workers at nice 15 (``worker_niceness``), and every process they start
#: inherits it: the engine server, the load generator and its shards. Beside one busy
#: loop at nice 0 a nice-15 process gets about 3% of a core (weights 36 against 1,024), so
#: on a busy host the measured engine and client starve (a spawn from an actor beside two
#: ``yes`` loops: 14.5 s at 15, 0.42 s at 0; benchmarks/ray_worker_niceness.py).
#: A local Ray started here runs them at the host's default priority; a cluster's nodes
#: need ``RAY_worker_niceness=0`` at ``ray start`` (docs/troubleshooting.md); each trial records
#: the niceness its engine ran at (``host["nice"]``).
WORKER_NICENESS = 0

#: Ray's logger of token authentication, and the one line of it docs/security.md says instead
_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_ENABLED = "Token authentication is enabled for this Ray cluster"


def _said_in_readme(record: logging.LogRecord) -> bool:
    """A logging filter: drop Ray's "token authentication is enabled" line (docs/security.md
    "Security" says it once; on every run it was noise); keep everything else it says."""
    return _AUTH_ENABLED not in record.getMessage()


@contextmanager
def _ray_keeps_our_sigterm() -> Iterator[None]:
    """``ray.init`` sets a SIGTERM handler of its own (``sys.exit(15)``, raised wherever
    the init is, which a ``try`` inside Ray may swallow): keep the driver's (``interrupts``)
    by holding Ray's ``set_sigterm_handler`` back for the call. A Ray without that hook is
    left as it is."""
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    original = getattr(utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None  # type: ignore[union-attr]
    try:
        yield
    finally:
        utils.set_sigterm_handler = original  # type: ignore[union-attr]


@dataclass
class _Retry:
    """A trial's next attempt, waiting for room (not on the node its last attempt lost)."""

    planned: PlannedTrial
    trial_dir: Path
    attempt: int
    avoid: str | None


#: how often the alive nodes are read again while nothing ended (seconds)
NODES_REFRESH_S = 5.0


class SweepController:
    def __init__(self, spec: SweepSpec, ledger: Ledger, outbox: TrackingOutbox | None,
                 progress: Progress | None = None, tick_s: float = 0.5,
                 cluster: Cluster | None = None):
        self.spec, self.ledger, self.outbox = spec, ledger, outbox
        self.tick_s = tick_s
        self.cluster: Cluster = cluster if cluster is not None else RayCluster()
        self.shape: ModelShape | None = spec_shape(spec)
        # the request list every trial is measured on: the spec's own (built once; a spec
        # read from the sweep folder reads the sweep's copy of the file)
        self.plan = spec.request_plan()
        self.fingerprint = workload_fingerprint(spec.workload, self.plan)
        nodes = self.cluster.nodes()
        self.use_gpus = any(n.gpus for n in nodes)
        c = spec.cluster
        # trials are placed by servesweep (pinned to a node) on GPU nodes, or wherever the
        # spec constrains nodes; else (CPU only) wherever Ray finds room
        self.packing = self.use_gpus or bool(c.trials_per_node or c.gpu_type or c.node_labels)
        self.packer = Packer(c, self.use_gpus)
        self.packer.refresh(nodes)
        if (c.gpu_type or c.node_labels) and not self.packer.nodes:
            kinds = sorted({n.gpu_type or "no accelerator type" for n in nodes})
            raise UsageError(f"no alive node matches cluster.gpu_type={c.gpu_type!r} and "
                             f"cluster.node_labels={c.node_labels}; the cluster's nodes "
                             f"have: {', '.join(kinds) or 'none'}")
        self._nodes_read = time.monotonic()
        gpn, total = self.packer.capacity()
        self.max_concurrent = c.max_concurrent_trials or max(1, total or 1)
        self.planned: list[PlannedTrial] = plan_sweep(spec, gpn if self.use_gpus else None)
        self.results: dict[str, TrialResult] = ledger.results()
        done = dict(self.results)
        # a grid runs in packing order (largest tp first); a study in the order it proposes
        self.grid = spec.search.kind != "optuna"
        order = ordered(self.planned, c.order, lambda p: p.config.tp) if self.grid \
            else self.planned
        self.searcher: Searcher = make_searcher(spec, order, done, ledger.dir,
                                                ledger.sweep_id, refit=refit_profile)
        # the quality reference (``quality:``): first to run; every verdict pairs with it
        self.reference_key = reference_trial(spec.quality, self.planned).config.key() \
            if spec.quality is not None else None
        self.progress = progress or Progress(self.searcher.total)
        self.progress.note = self.searcher.progress_line  # a search shows its budget
        if spec.search.kind == "optuna":  # its budget, not the grid's size
            self.progress.total = self.searcher.total
        self.running: dict[Any, TrialExecution] = {}  # in-flight ref -> its trial
        self.pending: list[PlannedTrial] = []  # asked of the searcher, waiting for room
        self.reaps: list[Any] = []  # refs of reaper tasks sent after failed attempts
        self.retry_queue: list[_Retry] = []
        # attempts that failed and were retried before a resume: retries stay bounded
        self.failed_attempts: dict[str, int] = {}
        for ev in ledger.events():
            if isinstance(ev, AttemptFailed):
                self.failed_attempts[ev.key] = max(self.failed_attempts.get(ev.key, 0),
                                                   ev.attempt)
        self.failures = 0
        self.exhausted = False
        self.stopping = False

    # -- the loop ---------------------------------------------------------------------------
    def done(self) -> bool:
        if self.stopping:  # a failure policy stopped the sweep: what runs ends, no more
            return not self.running
        return (self.exhausted and not self.running and not self.retry_queue
                and not self.pending)

    def step(self) -> None:
        self._start_trials()
        self._record_pruned()
        if not self.running:
            return
        ready = self.cluster.wait(list(self.running), self.tick_s)
        for ref in ready:
            trial = self.running.pop(ref)
            nxt = trial.advance(ref)
            self._continue(trial, nxt)
        now = time.monotonic()
        self._watch_placement(now)
        for ref, trial in list(self.running.items()):
            if trial.deadline is not None and now > trial.deadline:
                del self.running[ref]
                trial.on_timeout()
                self._continue(trial, None)

    def _watch_placement(self, now: float) -> None:
        """A trial waiting for a node has no deadline while another trial of this sweep
        holds one (it waits its turn); when none does, the cluster should have room, so it
        gets ``failure.place_timeout_s``, after which it fails instead of waiting forever."""
        placing = [t for t in self.running.values() if t.phase is TrialPhase.PLACE]
        holding = len(placing) < len(self.running)
        for trial in placing:
            if holding:
                trial.deadline = None
            elif trial.deadline is None:
                trial.deadline = now + self.spec.failure.place_timeout_s

    def _continue(self, trial: TrialExecution, nxt: Any) -> None:
        if nxt is not None:
            self.running[nxt] = trial
            return
        if self.packer.give_back(trial) is not None:
            self._nodes_read = 0.0  # read the nodes again before the next start
        if trial.result is not None:
            if trial.result.status is TrialStatus.FAILED:
                self._reap_attempt(trial)
                full = failure_of_disk(trial.result.message, trial.result.log_tail, trial.dir)
                if full is not None:  # the disk's failure, not the trial's: no result for it
                    raise full  # the sweep stops (``results.diskfull``); ``resume`` reruns it
            if self._retryable(trial.result):
                self._retry(trial)
            else:
                self._record(trial.result, trial.dir, trial.planned)

    def _reap_attempt(self, trial: TrialExecution) -> None:
        """A failed attempt's engine may have outlived its host (a timeout kills the actor):
        a reaper task on its node stops what is left of it, by identity (pid and start
        time, cgroup, the host's list), never by marker (a retry carries the same one).
        Not waited for; the sweep's end reaps every node again and records it."""
        info = trial.launch_info
        if info.pid is None or info.node_id is None:
            return
        target = ReapTarget(key=trial.key, pid=info.pid, pgid=info.pgid,
                            start_time=info.start_time, cgroup=info.cgroup,
                            marker=f"{self.ledger.sweep_id}/{trial.key}",
                            trial_dir=str(trial.dir))
        self.reaps.append(self.cluster.reap_on(info.node_id, [target], [], REAP_TIMEOUT_S))

    def _retryable(self, result: TrialResult) -> bool:
        """A transient failure (``failure.retry_on``) with attempts left runs again."""
        fp = self.spec.failure
        return (not self.stopping and result.status is TrialStatus.FAILED
                and result.reason in set(fp.retry_on) and result.attempt <= fp.retries)

    def _retry(self, failed: TrialExecution) -> None:
        """Record the failed attempt (not a result) and queue the next one: it starts as
        soon as a node other than the one it failed on has room (``_start_trials``)."""
        result = failed.result
        assert result is not None
        self.ledger.append(AttemptFailed(
            key=result.key, attempt=result.attempt, reason=FailureClass(result.reason),
            message=result.message, host={k: result.host.get(k) for k in ("host", "node_id")}))
        nxt = result.attempt + 1
        self.progress.say(f"retrying {result.config.label()} (attempt {nxt} of "
                          f"{self.spec.failure.retries + 1}) after {result.reason}: "
                          f"{result.message[:120]}")
        self.retry_queue.append(_Retry(failed.planned, failed.dir, nxt,
                                       result.host.get("node_id")))

    def _start(self, planned: PlannedTrial, trial_dir: Path, attempt: int,
               node: str | None, selector: dict[str, str] | None = None) -> None:
        """Start one attempt of a trial, pinned to ``node`` (or ``selector``)."""
        if node is not None:
            selector = {NODE_ID_LABEL: node}
        trial = TrialExecution(planned, self.spec, self.ledger.sweep_id, trial_dir,
                               self.shape, self.use_gpus, self.cluster,
                               on_event=self._on_event, attempt=attempt, pin=selector,
                               plan=self.plan, fingerprint=self.fingerprint,
                               reference=self._reference_quality(planned))
        if node is not None:
            self.packer.take(trial, node, planned.config.tp)
        self.running[trial.begin()] = trial

    def _reference_quality(self, planned: PlannedTrial) -> QualityResult | None:
        """The reference's quality run, for a trial other than the reference."""
        if self.reference_key is None or planned.config.key() == self.reference_key:
            return None
        ref = self.results.get(self.reference_key)
        return ref.quality if ref is not None else None

    def _refresh_nodes(self) -> None:
        if time.monotonic() - self._nodes_read >= NODES_REFRESH_S:
            self.packer.refresh(self.cluster.nodes())
            self._nodes_read = time.monotonic()

    def _pull(self) -> bool:
        """One more trial from the searcher into ``pending``; False when it has no more."""
        if self.exhausted:
            return False
        planned = self.searcher.ask()
        if planned is None:
            self.exhausted = not self.searcher.waiting  # waiting: ask again after a tell
            return False
        self.pending.append(planned)
        return True

    def _next(self) -> tuple[PlannedTrial, str | None] | None:
        """The next trial to start and the node it goes to (None: anywhere). Without
        packing: the searcher's next. With packing: of a grid (all of it pending, in
        packing order) the first that has room; of a study its next, once it has room.
        When nothing has room and nothing of the sweep runs, the first pending trial
        (it waits ``failure.place_timeout_s`` on the allowed nodes and fails with why)."""
        if not self.packing:
            if not self.pending:
                self._pull()
            return (self.pending.pop(0), None) if self.pending else None
        while (self.grid or not self.pending) and self._pull():
            pass
        for i, planned in enumerate(self.pending):
            node = self.packer.place(planned.config.tp)
            if node is not None:
                return self.pending.pop(i), node
        if self.pending and not self.running:
            return self.pending.pop(0), None
        return None

    def _start_trials(self) -> None:
        """Start what has room: queued retries first, then the searcher's trials
        (``_next``; with packing, the first trial that fits nowhere keeps a node from
        smaller ones in this pass)."""
        if self.stopping:
            return
        if self.packing:
            self._refresh_nodes()
            self.packer.begin_pass()
        for retry in list(self.retry_queue):
            if len(self.running) >= self.max_concurrent:
                return
            tp = retry.planned.config.tp
            node = self.packer.place(tp, [retry.avoid] if retry.avoid else []) \
                if self.packing else None
            if self.packing and node is None and self.running:
                continue
            self.retry_queue.remove(retry)
            self._start(retry.planned, retry.trial_dir, retry.attempt, node,
                        None if node or not self.packing else self.packer.fallback())
        while len(self.running) < self.max_concurrent:
            nxt = self._next()
            if nxt is None:
                return
            planned, node = nxt
            key = planned.config.key()
            self.progress.trial_started(key, planned.config.label())
            self.ledger.append(Scheduled(key=key,
                                         config=planned.config.model_dump(mode="json")))
            self._start(planned, self.ledger.trial_dir(key),
                        self.failed_attempts.get(key, 0) + 1, node,
                        None if node or not self.packing else self.packer.fallback())

    def _record_pruned(self) -> None:
        while self.searcher.pruned:
            p = self.searcher.pruned.pop(0)
            key = p.config.key()
            if key in self.results:
                continue
            result = TrialResult(key=key, config=p.config, status=TrialStatus.INFEASIBLE,
                                 reason=p.reason or "", message=p.reason or "",
                                 hardware=self.spec.hardware)
            self.progress.pruned(p.config.label(), p.reason or "")
            self._record(result, None)

    def _on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "started":
            self.ledger.append(Started(**data))
        self.progress.event(kind, data)

    def _record(self, result: TrialResult, trial_dir: Path | None,
                planned: PlannedTrial | None = None) -> None:
        """Keep a final result: ledger first, then its files, the searcher's ``tell`` (with
        the trial it asked for: a guided repeat is not in the plan) and MLflow."""
        q = self.spec.quality
        if q is not None and self.reference_key is not None \
                and result.status is not TrialStatus.INFEASIBLE:
            ref = result if result.key == self.reference_key \
                else self.results.get(self.reference_key)
            result = result.model_copy(update={"quality_verdict": quality_verdict(
                q, result, ref, self.reference_key)})
        self.results[result.key] = result
        event = self.ledger.record_result(result)  # the source of truth first
        if trial_dir is not None:  # its config and command beside its logs (MLflow's too)
            write_trial_files(result, trial_dir)
            self._search_params(result.key)  # after the host set earlier attempts aside
        if result.status != TrialStatus.INFEASIBLE:
            planned = planned or next(p for p in self.planned if p.config.key() == result.key)
            self.searcher.tell(planned, result)
            self.progress.trial_finished(result)
        if self.outbox is not None:  # returns at once; MLflow is written off this loop
            self.outbox.trial(result, event.ts)
        if result.status == TrialStatus.FAILED:
            self.failures += 1
            fp = self.spec.failure
            if fp.fail_fast or (fp.max_failures is not None and self.failures > fp.max_failures):
                self.progress.say(f"stopping: {self.failures} failed trial(s) "
                                  f"(failure policy: {fp.model_dump()})")
                self.stopping = True
                self.exhausted = True
        self.ledger.write_state(self.state())

    def trial_sets(self) -> dict[str, set[str]]:
        """Trial keys by where they are: ``pending`` (feasible, not started), ``running``
        (a call in flight) and ``finished`` (a final result in the ledger)."""
        running = {t.key for t in self.running.values()}
        finished = {k for k, r in self.results.items() if r.status is not TrialStatus.INFEASIBLE}
        feasible = {p.config.key() for p in self.planned if p.feasible}
        return {"pending": feasible - running - finished, "running": running,
                "finished": finished}

    def state(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.results.values():
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        return {"sweep_id": self.ledger.sweep_id, "counts": counts,
                "running": sorted(t.key for t in self.running.values()),
                "updated": time.time()}

    # -- whole run --------------------------------------------------------------------------
    def run(self) -> dict[str, TrialResult]:
        """Step until done. SIGINT and SIGTERM stop every running trial (``abort``), are
        recorded as ``interrupted`` and raised on as ``KeyboardInterrupt``; one that Python
        could not raise where it landed is raised at the next tick (``interrupts``)."""
        with InterruptGuard():
            try:
                while not self.done():
                    interrupts.check()
                    self.step()
                lines = self.searcher.summary_lines()  # what it found, what is next
                for line in lines:
                    self.progress.say(line)
                if lines:  # the report's "Search" section: what the stop relied on
                    atomic_write(self.ledger.dir / SEARCH_SUMMARY, "\n".join(lines) + "\n")
            except KeyboardInterrupt:
                interrupts.handled()
                self.progress.say("interrupted: stopping every engine this sweep started ...")
                self.abort("interrupted by the user")
                raise
            finally:
                self._reap_at_end()
        return self.results

    def _reap_at_end(self) -> None:
        """However the run ended: stop what the sweep started, here and on every node."""
        reap(f"{self.ledger.sweep_id}/")  # this node, at once
        # every node: what the sweep started there, by identity, and by its marker
        try:
            reap_sweep(self.cluster, self.ledger, "sweep ended",
                       self.ledger.started_groups())
        except Exception as err:  # noqa: BLE001 - never hide how the sweep itself ended
            self.progress.say(f"could not reap the sweep's nodes ({type(err).__name__}: "
                              f"{err}); the next `servesweep run` or `resume` will")

    def _search_params(self, key: str) -> None:
        """The search's params of a trial (Optuna study, number, sampler) beside its logs,
        where its MLflow run reads them (``tracking.trial_record``)."""
        params = self.searcher.trial_params(key)
        if params:
            path = self.ledger.trial_dir(key) / SEARCH_PARAMS_FILE
            path.write_text(json.dumps(params, indent=1))

    def abort(self, reason: str) -> None:
        """Stop all running trials now; they stay unfinished in the ledger (resume reruns)."""
        self.stopping = True
        self.retry_queue.clear()
        self.pending.clear()
        for trial in list(self.running.values()):
            trial.abort(reason)
        self.running.clear()
        left = reap(f"{self.ledger.sweep_id}/")
        self.ledger.append(Interrupted(reason=reason, reaped=left))
