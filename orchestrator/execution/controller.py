"""The sweep controller: an explicit step loop over trials on Ray.

``step()`` is one tick: record pruned trials, start trials while the cluster
has room (``max_concurrent_trials``), wait up to ``tick_s`` for any trial's
in-flight ref, advance it, and fail trials whose phase deadline passed.
Every final result goes to the ledger first, then MLflow, then the searcher.
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

from actors.procs import reap
from actors.sim.shapes import ModelShape
from orchestrator.ledger import Ledger
from orchestrator.plan import PlannedTrial, plan_sweep, spec_shape
from orchestrator.progress import Progress
from orchestrator.results import TrialResult, TrialStatus
from orchestrator.search import Searcher, make_searcher
from orchestrator.spec import SweepSpec
from orchestrator.tracking import Tracker
from orchestrator.trial_exec import TrialExecution

__all__ = ["SweepController", "connect_ray", "cluster_gpus_per_node"]


def connect_ray(spec: SweepSpec) -> None:
    """Join ``cluster.address`` or start a local Ray with the spec's logical GPUs."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = dict(namespace=spec.cluster.namespace, include_dashboard=False,
                                  log_to_driver=False, logging_level="WARNING")
    if spec.cluster.address:
        ray.init(address=spec.cluster.address, **kwargs)
    else:  # "local": never join some other cluster that happens to run on this machine
        ray.init(address="local", num_gpus=spec.cluster.gpus, num_cpus=spec.cluster.cpus,
                 **kwargs)


def cluster_gpus_per_node() -> tuple[int, int]:
    """(largest GPU count of any alive node, total GPUs)."""
    per_node = [int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n.get("Alive")]
    return (max(per_node) if per_node else 0), sum(per_node)


class SweepController:
    def __init__(self, spec: SweepSpec, ledger: Ledger, tracker: Tracker | None,
                 progress: Progress | None = None, tick_s: float = 0.5):
        self.spec, self.ledger, self.tracker = spec, ledger, tracker
        self.tick_s = tick_s
        self.shape: ModelShape | None = spec_shape(spec)
        gpn, total = cluster_gpus_per_node()
        self.use_gpus = total > 0
        self.max_concurrent = spec.cluster.max_concurrent_trials or max(1, total or 1)
        self.planned: list[PlannedTrial] = plan_sweep(spec, gpn if self.use_gpus else None)
        self.results: dict[str, TrialResult] = ledger.results()
        done = {k: r for k, r in self.results.items() if r.status.is_finished()}
        self.searcher: Searcher = make_searcher(spec.search, self.planned, done, ledger.dir,
                                                ledger.sweep_id)
        self.progress = progress or Progress(self.searcher.total)
        self.running: dict[ray.ObjectRef, TrialExecution] = {}
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
        ready, _ = ray.wait(list(self.running), num_returns=1, timeout=self.tick_s)
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
        placing = [t for t in self.running.values() if t.phase == "place"]
        holding = len(placing) < len(self.running)
        for trial in placing:
            if holding:
                trial.deadline = None
            elif trial.deadline is None:
                trial.deadline = now + self.spec.failure.place_timeout_s

    def _continue(self, trial: TrialExecution, nxt: ray.ObjectRef | None) -> None:
        if nxt is not None:
            self.running[nxt] = trial
        elif trial.result is not None:
            self._record(trial.result, trial.dir)

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
                                   on_event=self._on_event)
            self.ledger.append({"type": "scheduled", "key": key,
                                "config": planned.config.model_dump(mode="json")})
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
            self.ledger.append({"type": "started", **data})
        self.progress.event(kind, data)

    def _record(self, result: TrialResult, trial_dir: Path | None) -> None:
        self.results[result.key] = result
        self.ledger.record_result(result)  # the source of truth first
        if self.tracker is not None:
            artifacts = []
            if trial_dir is not None:
                (trial_dir / "trial_config.json").write_text(
                    result.config.model_dump_json(indent=1))
                (trial_dir / "command.json").write_text(
                    _json({"argv": result.host.get("argv"), "host": result.host.get("host")}))
                artifacts = sorted(p for p in trial_dir.iterdir() if p.is_file())
            self.tracker.log_trial(result, self.ledger.sweep_id, artifacts)
        if result.status != TrialStatus.INFEASIBLE:
            planned = next(p for p in self.planned if p.config.key() == result.key)
            self.searcher.tell(planned, result)
            self.progress.trial_finished(result)
        if result.status == TrialStatus.FAILED:
            self.failures += 1
            fp = self.spec.failure
            if fp.fail_fast or (fp.max_failures is not None and self.failures > fp.max_failures):
                self.progress.say(f"stopping: {self.failures} failed trial(s) "
                                  f"(failure policy: {fp.model_dump()})")
                self.stopping = True
                self.exhausted = True
        self.ledger.write_state(self.state())

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
        self.ledger.append({"type": "interrupted", "reason": reason, "reaped": left})


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=1, default=str)
