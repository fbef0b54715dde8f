"""One trial's life as an explicit state machine the controller advances.

    place -> launch -> ready -> level x N (-> check after a level with errors)
          -> observe -> stop -> done

Each phase has exactly one Ray object ref in flight; the controller waits on
all trials' refs together and calls ``advance`` with the one that finished.
Failures anywhere become a classified ``TrialResult``, never an exception out
of the controller. ``abort`` stops the server synchronously (Ctrl-C, timeout).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.engine_host import EngineHost
from actors.engines import LaunchContext, get_adapter
from actors.loadgen.actor import LoadGenerator
from actors.loadgen.results import LevelResult
from actors.procs import reap
from actors.sim.shapes import ModelShape
from orchestrator.capacity import (
    LevelPrediction,
    check_observation,
    length_rejection,
    predict_level,
)
from orchestrator.failures import classify_ray_error
from orchestrator.plan import PlannedTrial
from orchestrator.results import Capacity, TrialResult, TrialStatus
from orchestrator.spec import SweepSpec

__all__ = ["TrialExecution"]

_SERVER_GONE = {"connect", "disconnect", "truncated"}
_HUNG = {"stall", "level_timeout"}


class TrialExecution:
    def __init__(self, planned: PlannedTrial, spec: SweepSpec, sweep_id: str, trial_dir: Path,
                 shape: ModelShape | None, use_gpus: bool, on_event: Any = None):
        self.planned, self.spec, self.cfg = planned, spec, planned.config
        self.key = self.cfg.key()
        self.sweep_id, self.dir, self.shape = sweep_id, trial_dir, shape
        self.use_gpus = use_gpus
        self.on_event = on_event or (lambda kind, data: None)
        self.adapter = get_adapter(self.cfg.engine)
        self.phase = "place"
        self.deadline: float | None = None
        self.pg = self.host = self.lg = None
        self.levels: list[LevelResult] = []
        self.level_i = 0
        self.launch_info: dict[str, Any] = {}
        self.ready: dict[str, Any] = {}
        self.capacity: Capacity | None = None
        self.failure: tuple[str, str] | None = None
        self.log_tail = ""
        self.note = ""
        self.result: TrialResult | None = None
        self.t0 = time.monotonic()
        self.time_scale = spec.sim.time_scale if self.cfg.engine == "sim" else 1.0

    # -- helpers ----------------------------------------------------------------------------
    def _ctx(self) -> LaunchContext:
        entry = self.spec.space[self.planned.entry_index]
        return LaunchContext(sweep_id=self.sweep_id, trial_key=self.key,
                             trial_dir=str(self.dir), model=self.spec.model,
                             hardware=self.spec.hardware, workload=self.spec.workload,
                             sim=self.spec.sim, launch=entry.launch)

    def _strategy(self) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=0)

    def _set_deadline(self, seconds: float | None) -> None:
        self.deadline = None if seconds is None else time.monotonic() + seconds

    # -- phases -----------------------------------------------------------------------------
    def _bundle(self) -> dict[str, float]:
        return {"GPU": float(self.cfg.tp)} if self.use_gpus else {"CPU": 0.01}

    def begin(self) -> ray.ObjectRef:
        self.pg = placement_group([self._bundle()], strategy="STRICT_PACK",
                                  name=f"servesweep-{self.key}")
        self.phase = "place"
        self._set_deadline(None)  # the controller sets one when no trial of ours holds a node
        return self.pg.ready()

    def advance(self, ref: ray.ObjectRef) -> ray.ObjectRef | None:
        """Consume the finished ``ref``; return the next one, or None when the trial is done.

        What Ray raises is classified by its cause (``orchestrator.failures``): an exception
        of our code in an actor is ``client_error`` (load generator) or ``startup_crash`` /
        ``crash_mid_run`` (engine host) with its type and text; ``node_lost`` only when Ray
        reports the node or the actor's process gone."""
        try:
            value = ray.get(ref)
            return getattr(self, f"_after_{self.phase}")(value)
        except RayError as err:  # the phase's own call, or a blocking call of its handler
            return self._fail(*classify_ray_error(err, self.phase))

    def _after_place(self, _: Any) -> ray.ObjectRef:
        opts = dict(num_cpus=0, scheduling_strategy=self._strategy())
        gpus = self.cfg.tp if self.use_gpus else 0
        self.host = EngineHost.options(num_gpus=gpus, **opts).remote(
            self.cfg.model_dump(mode="json"), self._ctx().model_dump(mode="json"))
        self.phase = "launch"
        self._set_deadline(120)
        return self.host.launch.remote()

    def _after_launch(self, info: dict[str, Any]) -> ray.ObjectRef:
        self.launch_info = info
        if "failure" in info:
            return self._fail(info["failure"], info.get("message", ""))
        self.on_event("started", {"key": self.key, **{k: info.get(k) for k in
                                                      ("pid", "pgid", "marker", "host",
                                                                 "node_id")}})
        self.phase = "ready"
        timeout = self.spec.failure.startup_timeout_s
        self._set_deadline(timeout + 60)
        return self.host.wait_ready.remote(timeout)

    def _after_ready(self, ready: dict[str, Any]) -> ray.ObjectRef:
        self.ready = ready
        if "failure" in ready:
            self.log_tail = ready.get("log_tail", "")
            return self._fail(ready["failure"], ready.get("message", ""))
        self.capacity = self._capacity(ready.get("applied", {}), ready.get("events", []))
        self.on_event("ready", {"key": self.key, "startup_s": ready.get("startup_s"),
                                "capacity": self.capacity})
        w = self.spec.workload
        vocab = self.shape.vocab if self.shape else 32000
        api_key = ray.get(self.host.api_key_for_client.remote())
        self.lg = LoadGenerator.options(num_cpus=0, scheduling_strategy=self._strategy()).remote(
            self.cfg.engine, ready["base_url"], self.spec.model.served_name or
            self._served_name(), w.model_dump(mode="json"), vocab,
            self.spec.model.tokenizer or self.spec.model.path, self.time_scale, api_key)
        return self._next_level()

    def _served_name(self) -> str:
        if self.cfg.engine == "sim":
            return self.spec.model.display_name
        return self.spec.model.path or self.spec.model.display_name

    def _next_level(self) -> ray.ObjectRef:
        w = self.spec.workload
        if self.level_i >= len(w.concurrency):
            self.phase = "observe"
            self._set_deadline(60)
            return self.host.observe.remote()
        c = w.concurrency[self.level_i]
        self.phase = "level"
        self._set_deadline(w.level_timeout_s + 60)
        return self.lg.run_level.remote(c, self.level_i)

    def _after_level(self, raw: dict[str, Any]) -> ray.ObjectRef:
        level = LevelResult.model_validate(raw)
        level = self._flag_queueing(level)
        self.levels.append(level)
        self.level_i += 1
        self.on_event("level", {"key": self.key, "level": level})
        if set(level.errors) & (_SERVER_GONE | _HUNG):
            self.phase = "check"
            self._set_deadline(60)
            return self.host.observe.remote()
        return self._next_level()

    def _after_check(self, obs: dict[str, Any]) -> ray.ObjectRef:
        last = self.levels[-1]
        self.log_tail = obs.get("log_tail", "")
        if not obs.get("alive", True):
            return self._fail("crash_mid_run", f"server exited with code {obs.get('returncode')} "
                              f"at concurrency {last.concurrency}: {last.reason}")
        if set(last.errors) & _HUNG:
            return self._fail("hang", f"server alive but stopped streaming at concurrency "
                              f"{last.concurrency}: {last.reason}")
        return self._next_level()

    def _after_observe(self, obs: dict[str, Any]) -> ray.ObjectRef:
        self.log_tail = obs.get("log_tail", "")
        behind = [e for e in obs.get("events", []) if e.get("kind") == "sim_behind"]
        if behind:  # the host could not keep the sim's pace: say so on every level
            self.levels = [lv.model_copy(update={"flags": [*lv.flags, "sim_behind"]})
                           for lv in self.levels]
            self.note = (f"sim fell {behind[-1]['seconds']:.1f} s behind its time scale; "
                         "raise sim.time_scale")
        if not obs.get("alive", True):
            return self._fail("crash_mid_run", f"server exited with code {obs.get('returncode')}"
                              " after the last level")
        return self._stop()

    def _stop(self) -> ray.ObjectRef | None:
        self.phase = "stop"
        if self.host is None:
            return self._finish()
        self._set_deadline(self.spec.failure.stop_timeout_s + 30)
        return self.host.stop.remote(self.spec.failure.stop_timeout_s)

    def _after_stop(self, stopped: dict[str, Any]) -> None:
        if stopped.get("leftovers"):
            self.log_tail += f"\n[servesweep] processes left after stop: {stopped['leftovers']}"
        return self._finish()

    # -- failure, abort, finish -------------------------------------------------------------
    def _fail(self, failure: str, message: str) -> ray.ObjectRef | None:
        if self.failure is None:
            self.failure = (failure, message)
        if self.phase == "stop":
            return self._finish()
        return self._stop()

    def on_timeout(self) -> None:
        """The phase's deadline passed: classify, kill the actors, reap the processes."""
        cls = {"launch": "startup_timeout", "ready": "startup_timeout", "level": "hang",
               "check": "hang", "observe": "hang", "stop": "hang"}.get(self.phase, "hang")
        if self.failure is None and self.phase == "place":
            self.failure = ("startup_timeout", (
                f"no node had room for the trial ({self._bundle()}) within "
                f"{self.spec.failure.place_timeout_s:g} s while no other trial of this sweep "
                "held one: the resources are held by something else, or a node is gone "
                "(see `ray status`; failure.place_timeout_s sets the wait)"))
        if self.failure is None:
            self.failure = (cls, f"no answer from the {self.phase} phase before its deadline")
        self.abort()

    def abort(self, reason: str | None = None) -> None:
        """Stop everything now (synchronously), then finish the result."""
        if reason and self.failure is None:
            self.failure = ("startup_crash" if self.phase in ("place", "launch", "ready")
                            else "crash_mid_run", reason)
        if self.host is not None:
            try:
                ray.get(self.host.stop.remote(5.0), timeout=20)
            except (GetTimeoutError, RayError):
                pass
        reap(f"{self.sweep_id}/{self.key}")  # processes on this node, whatever the actor did
        self._finish()

    def _finish(self) -> None:
        if self.result is not None:
            return None
        self._collect_artifacts()
        lg_node = None
        if self.lg is not None:
            try:
                lg_node = ray.get(self.lg.__ray_call__.remote(_node_id), timeout=10)
            except (GetTimeoutError, RayError):
                pass
        for actor in (self.lg, self.host):
            if actor is not None:
                try:
                    ray.kill(actor)
                except RayError:
                    pass
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except RayError:
                pass
        # whatever happened to the actors (node lost, killed), nothing of the trial may
        # outlive it on this machine; other nodes' leftovers are reaped from the ledger
        reap(f"{self.sweep_id}/{self.key}")
        if self.failure is not None:
            status, reason, message = TrialStatus.FAILED, *self.failure
        elif any(lv.status == "invalid" for lv in self.levels):
            status, reason = TrialStatus.INVALID, "invalid_level"
            message = "; ".join(f"c={lv.concurrency}: {lv.reason}" for lv in self.levels
                                if lv.status == "invalid")
            if self.capacity is not None and self.capacity.rejects_requests:
                message = f"{self.capacity.note}; {message}"  # the cause before its symptoms
        else:
            status, reason, message = TrialStatus.OK, "", self.note
        applied = self.ready.get("applied", {}) if isinstance(self.ready, dict) else {}
        versions = {"engine": str(applied.get("version", "unknown")), "servesweep": _version()}
        self.result = TrialResult(
            key=self.key, config=self.cfg, status=status, reason=reason, message=message,
            levels=self.levels, capacity=self.capacity, startup_s=self.ready.get("startup_s"),
            wall_s=time.monotonic() - self.t0, applied=applied, versions=versions,
            host={**{k: self.launch_info.get(k) for k in ("host", "node_ip", "node_id",
                                                          "gpu_ids", "argv", "pid")},
                  "loadgen_node_id": lg_node},
            hardware=self.spec.hardware, time_scale=self.time_scale,
            log_tail=self.log_tail[-8000:])
        self.phase = "done"
        return None

    def _collect_artifacts(self) -> None:
        """Copy the server log and per-request records to the driver's trial folder."""
        calls = []
        if self.host is not None:
            calls.append(("server.log", self.host.log_text.remote()))
        if self.lg is not None:
            calls.append(("requests.csv", self.lg.records_csv.remote()))
        for name, ref in calls:
            try:
                text = ray.get(ref, timeout=30)
            except (GetTimeoutError, RayError):
                continue
            (self.dir / name).write_text(text)
            if name == "server.log" and not self.log_tail:
                self.log_tail = "\n".join(text.splitlines()[-60:])

    # -- capacity ---------------------------------------------------------------------------
    def _capacity(self, applied: dict[str, Any], events: list[dict[str, Any]]) -> Capacity:
        """The KV pool the server reported, what it implies for one request, and whether
        the server's max model length (its log, else the trial's ``max_model_len``) admits
        a request at all: when prompt + output exceed it, ``rejects_requests`` and ``note``
        say that the server refuses every request."""
        policy = self.adapter.admission_for(self.cfg)
        tokens = applied.get("kv_pool_tokens")
        blocks = applied.get("kv_pool_blocks")
        bs = applied.get("block_size")
        sources = []
        for ev in events:
            if ev["kind"] == "kv_blocks":
                blocks, bs = ev.get("blocks", blocks), ev.get("block_size", bs)
                sources.append("log: KV blocks")
            elif ev["kind"] == "kv_pool":
                sources.append("log: KV pool tokens")
        if tokens and bs and not blocks:
            blocks = int(tokens) // int(bs)
        max_len, source = self._max_model_len(applied)
        if source:
            sources.append(source)
        w = self.spec.workload
        rejection = length_rejection(w.prompt_tokens, w.output_tokens, max_len)
        per_req = None
        cap = None
        if blocks and bs:
            pred = predict_level(policy, int(blocks), int(bs), w.prompt_tokens,
                                 w.output_tokens, 1)
            per_req, cap = pred.blocks_per_request, pred.full_length_capacity
        return Capacity(policy=policy, pool_tokens=tokens, block_size=bs, pool_blocks=blocks,
                        blocks_per_request=per_req, full_length_capacity=cap,
                        max_model_len=max_len, rejects_requests=rejection is not None,
                        note=rejection or "", sources=sources)

    def _max_model_len(self, applied: dict[str, Any]) -> tuple[int | None, str | None]:
        """The server's max model length and where it came from: the applied config read
        from its log, else what the trial asked for; (None, None) when neither says."""
        if applied.get("max_model_len"):
            return int(applied["max_model_len"]), "log: max model length"
        if self.cfg.max_model_len:
            return self.cfg.max_model_len, "trial config: max_model_len"
        return None, None

    def _prediction(self, level: LevelResult) -> LevelPrediction | None:
        cap = self.capacity
        blocks = (cap.pool_blocks if cap else None) or level.server.num_blocks
        bs = (cap.block_size if cap else None) or level.server.block_size
        if not blocks or not bs or cap is None:
            return None
        return predict_level(cap.policy, int(blocks), int(bs), self.spec.workload.prompt_tokens,
                             self.spec.workload.output_tokens, level.concurrency,
                             self.cfg.max_num_seqs, cap.max_model_len)

    def _flag_queueing(self, level: LevelResult) -> LevelResult:
        pred = self._prediction(level)
        if pred is None or level.status != "valid":
            return level
        s = level.server
        problem = check_observation(pred, s.running_max, s.waiting_p50, s.waiting_max,
                                    s.preemptions)
        if problem is None:
            return level
        return level.model_copy(update={"flags": [*level.flags, "queueing_mismatch"],
                                        "reason": f"capacity check: {problem}"})


def _node_id(_actor: object) -> str:
    return ray.get_runtime_context().get_node_id()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("servesweep")
    except PackageNotFoundError:
        return "dev"
