"""The sweep controller: an explicit step loop over trials on Ray.

``step()`` is one tick: record pruned trials, start trials while the cluster
has room (``max_concurrent_trials``), wait up to ``tick_s`` for any trial's
in-flight ref, advance it, and fail trials whose phase deadline passed.
Every final result goes to the ledger first, then the searcher; MLflow's copy is handed
to the ``TrackingOutbox``, which writes it off this loop and never raises into it.
Tests drive ``step()`` directly; ``run()`` loops it and cleans up on any exit,
Ctrl-C included (every started engine process is stopped).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import ray

from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import FailureClass, TrialStatus
from actors.procs import reap
from orchestrator.execution.cluster import Cluster, RayCluster
from orchestrator.execution.progress import Progress
from orchestrator.execution.trial import TrialExecution, TrialPhase
from orchestrator.planning.plan import PlannedTrial, plan_sweep, spec_shape
from orchestrator.planning.search import Searcher, make_searcher
from orchestrator.results.events import AttemptFailed, Interrupted, Scheduled, Started
from orchestrator.results.ledger import Ledger
from orchestrator.results.outbox import TrackingOutbox
from orchestrator.results.tracking import write_trial_files
from orchestrator.spec import SweepSpec

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
    if spec.cluster.address:
        ray.init(address=spec.cluster.address, **kwargs)
    else:  # "local": never join some other cluster that happens to run on this machine
        ray.init(address="local", num_gpus=spec.cluster.gpus, num_cpus=spec.cluster.cpus,
                 **kwargs)


class SweepController:
    def __init__(self, spec: SweepSpec, ledger: Ledger, outbox: TrackingOutbox | None,
                 progress: Progress | None = None, tick_s: float = 0.5,
                 cluster: Cluster | None = None):
        self.spec, self.ledger, self.outbox = spec, ledger, outbox
        self.tick_s = tick_s
        self.cluster: Cluster = cluster if cluster is not None else RayCluster()
        self.shape: ModelShape | None = spec_shape(spec)
        gpn, total = self.cluster.gpus_per_node()
        self.use_gpus = total > 0
        self.max_concurrent = spec.cluster.max_concurrent_trials or max(1, total or 1)
        self.planned: list[PlannedTrial] = plan_sweep(spec, gpn if self.use_gpus else None)
        self.results: dict[str, TrialResult] = ledger.results()
        done = dict(self.results)
        self.searcher: Searcher = make_searcher(spec.search, self.planned, done, ledger.dir,
                                                ledger.sweep_id)
        self.progress = progress or Progress(self.searcher.total)
        self.running: dict[Any, TrialExecution] = {}  # in-flight ref -> its trial
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
        return self.exhausted and not self.running

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
        elif trial.result is not None:
            if self._retryable(trial.result):
                self._retry(trial)
            else:
                self._record(trial.result, trial.dir)

    def _retryable(self, result: TrialResult) -> bool:
        """A transient failure (``failure.retry_on``) with attempts left runs again."""
        fp = self.spec.failure
        return (not self.stopping and result.status is TrialStatus.FAILED
                and result.reason in set(fp.retry_on) and result.attempt <= fp.retries)

    def _retry(self, failed: TrialExecution) -> None:
        """Record the failed attempt (not a result) and start the next one at once; Ray
        places it where there is room (a lost node has none)."""
        result = failed.result
        assert result is not None
        self.ledger.append(AttemptFailed(
            key=result.key, attempt=result.attempt, reason=FailureClass(result.reason),
            message=result.message, host={k: result.host.get(k) for k in ("host", "node_id")}))
        nxt = result.attempt + 1
        self.progress.say(f"retrying {result.config.label()} (attempt {nxt} of "
                          f"{self.spec.failure.retries + 1}) after {result.reason}: "
                          f"{result.message[:120]}")
        trial = TrialExecution(failed.planned, self.spec, self.ledger.sweep_id, failed.dir,
                               self.shape, self.use_gpus, self.cluster,
                               on_event=self._on_event, attempt=nxt)
        self.running[trial.begin()] = trial

    def _start_trials(self) -> None:
        while not self.stopping and not self.exhausted and len(self.running) < self.max_concurrent:
            planned = self.searcher.ask()
            if planned is None:
                self.exhausted = True
                return
            key = planned.config.key()
            self.progress.trial_started(key, planned.config.label())
            trial = TrialExecution(planned, self.spec, self.ledger.sweep_id,
                                   self.ledger.trial_dir(key), self.shape, self.use_gpus,
                                   self.cluster, on_event=self._on_event,
                                   attempt=self.failed_attempts.get(key, 0) + 1)
            self.ledger.append(Scheduled(key=key,
                                         config=planned.config.model_dump(mode="json")))
            self.running[trial.begin()] = trial

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

    def _record(self, result: TrialResult, trial_dir: Path | None) -> None:
        self.results[result.key] = result
        event = self.ledger.record_result(result)  # the source of truth first
        if trial_dir is not None:  # its config and command beside its logs (MLflow's too)
            write_trial_files(result, trial_dir)
        if result.status != TrialStatus.INFEASIBLE:
            planned = next(p for p in self.planned if p.config.key() == result.key)
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
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            while not self.done():
                self.step()
        except KeyboardInterrupt:
            self.progress.say("interrupted: stopping every engine this sweep started ...")
            self.abort("interrupted by the user")
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            reap(f"{self.ledger.sweep_id}/")
        return self.results

    def abort(self, reason: str) -> None:
        """Stop all running trials now; they stay unfinished in the ledger (resume reruns)."""
        self.stopping = True
        for trial in list(self.running.values()):
            trial.abort(reason)
        self.running.clear()
        left = reap(f"{self.ledger.sweep_id}/")
        self.ledger.append(Interrupted(reason=reason, reaped=left))


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

