"""One trial's life as an explicit state machine the controller advances.

    place -> launch -> ready -> level x N (-> check after a level with errors)
          [-> quality] -> observe -> stop -> done

``TrialPhase`` names the phases and ``TRANSITIONS`` the moves allowed between them
(any other is a bug and raises). Each phase has exactly one Ray object ref in
flight; the controller waits on all trials' refs together and calls ``advance``
with the one that finished. The actors answer typed messages
(``actors.contracts.messages``); what an answer means is decided by the pure
functions of ``verdicts``; the deadlines come from the spec's ``FailurePolicy``.
Failures anywhere become a classified ``TrialResult``, never an exception out of
the controller, except a full disk (``actors.contracts.diskspace``): not the trial's.
``abort`` stops the server synchronously (Ctrl-C, timeout).
"""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Any

from ray.exceptions import GetTimeoutError, RayError

from actors.contracts.applied import AppliedConfig
from actors.contracts.diskspace import disk_error
from actors.contracts.loadspec import LoadSpec
from actors.contracts.messages import LaunchInfo, Observation, Readiness, StopResult
from actors.contracts.quality import QualityRequest, QualityResult, QualityStatus
from actors.contracts.results import Capacity, LevelResult, SloCapacity, TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import FailureClass
from actors.contracts.traffic import LevelKind, RequestPlan
from actors.engines import LaunchContext, LogEvent, get_adapter
from actors.procs import reap
from orchestrator.execution import verdicts
from orchestrator.execution.cluster import NODE_ID_LABEL, Cluster
from orchestrator.execution.failures import classify_ray_error
from orchestrator.planning.capacity import LevelPrediction, length_rejection, predict_level
from orchestrator.planning.plan import PlannedTrial
from orchestrator.planning.slo_capacity import CapacitySearch
from orchestrator.spec import SweepSpec
from orchestrator.spec.quality_checks import lm_eval_path

__all__ = ["TrialExecution", "TrialPhase", "TRANSITIONS", "TIMEOUT_CLASS"]


class TrialPhase(enum.StrEnum):
    PLACE = "place"  # waiting for a node with room (a placement group)
    LAUNCH = "launch"  # EngineHost.launch
    READY = "ready"  # EngineHost.wait_ready: health, applied config
    LEVEL = "level"  # LoadGenerator.run_level
    CHECK = "check"  # EngineHost.observe after a level with connection or stall errors
    QUALITY = "quality"  # LoadGenerator.run_quality on the warm server (``quality:``)
    OBSERVE = "observe"  # EngineHost.observe after the last level
    STOP = "stop"  # EngineHost.stop
    DONE = "done"  # the result is final


P = TrialPhase
#: the phases each phase may move to (a failure anywhere goes to STOP, then DONE)
TRANSITIONS: dict[TrialPhase, frozenset[TrialPhase]] = {
    P.PLACE: frozenset({P.LAUNCH, P.STOP}),
    P.LAUNCH: frozenset({P.READY, P.STOP}),
    P.READY: frozenset({P.LEVEL, P.QUALITY, P.OBSERVE, P.STOP}),
    P.LEVEL: frozenset({P.LEVEL, P.CHECK, P.QUALITY, P.OBSERVE, P.STOP}),
    P.CHECK: frozenset({P.LEVEL, P.QUALITY, P.OBSERVE, P.STOP}),
    P.QUALITY: frozenset({P.OBSERVE, P.STOP}),
    P.OBSERVE: frozenset({P.STOP}),
    P.STOP: frozenset({P.DONE}),
    P.DONE: frozenset(),
}
#: the failure class of a phase whose deadline passed (PLACE has its own message)
TIMEOUT_CLASS: dict[TrialPhase, FailureClass] = {
    P.PLACE: FailureClass.STARTUP_TIMEOUT, P.LAUNCH: FailureClass.STARTUP_TIMEOUT,
    P.READY: FailureClass.STARTUP_TIMEOUT, P.LEVEL: FailureClass.HANG,
    P.CHECK: FailureClass.HANG, P.OBSERVE: FailureClass.HANG, P.STOP: FailureClass.HANG,
    P.QUALITY: FailureClass.HANG,
}


class TrialExecution:
    def __init__(self, planned: PlannedTrial, spec: SweepSpec, sweep_id: str, trial_dir: Path,
                 shape: ModelShape | None, use_gpus: bool, cluster: Cluster,
                 on_event: Any = None, attempt: int = 1, pin: dict[str, str] | None = None,
                 plan: RequestPlan | None = None, fingerprint: str = "",
                 reference: QualityResult | None = None):
        self.planned, self.spec, self.cfg = planned, spec, planned.config
        self.key = self.cfg.key()
        self.sweep_id, self.dir, self.shape = sweep_id, trial_dir, shape
        self.use_gpus, self.cluster = use_gpus, cluster
        self.attempt = attempt  # 1 for the first run; retries count up (failure.retries)
        self.pin = pin  # node labels the placement must match (the node packing chose)
        self.on_event = on_event or (lambda kind, data: None)
        self.plan, self.fingerprint = plan, fingerprint  # the request list; its schedule's id
        cap = spec.workload.capacity
        # capacity at SLO, probed rate by rate after the levels (planning.slo_capacity)
        self.search = CapacitySearch(cap) if cap is not None else None
        self.slo_capacity: SloCapacity | None = None
        # accuracy beside speed (``quality:``): run after the levels on the warm server,
        # paired with the reference's result (None: this trial is the reference)
        self.reference = reference
        self.quality: QualityResult | None = None
        self.adapter = get_adapter(self.cfg.engine)
        self.phase = TrialPhase.PLACE
        self.deadline: float | None = None
        self.pg: Any = None
        self.host: Any = None
        self.lg: Any = None
        self.levels: list[LevelResult] = []
        self.level_i = 0
        self.launch_info = LaunchInfo(host="")
        self.ready = Readiness()
        self.capacity: Capacity | None = None
        self.failure: verdicts.Failure | None = None
        self.log_tail = ""
        self.note = ""
        self.result: TrialResult | None = None
        self.t0 = time.monotonic()
        self.time_scale = spec.sim.time_scale if self.adapter.time_scaled else 1.0
        # sim hold mode: each level waits on the host, no load generator (actors/sim/hold.py)
        self.hold_s = spec.sim.hold_s if self.adapter.time_scaled else None

    # -- helpers ----------------------------------------------------------------------------
    def _ctx(self) -> LaunchContext:
        entry = self.spec.space[self.planned.entry_index]
        return LaunchContext(sweep_id=self.sweep_id, trial_key=self.key,
                             trial_dir=str(self.dir), model=self.spec.model_for(self.cfg),
                             hardware=self.spec.hardware, workload=self.spec.workload,
                             sim=self.spec.sim, launch=entry.launch,
                             context_tokens=self.spec.quality.context_tokens
                             if self.spec.quality is not None else 0)

    def _set_deadline(self, seconds: float | None) -> None:
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def _enter(self, phase: TrialPhase, deadline_s: float | None) -> None:
        """Move to ``phase`` (one of ``TRANSITIONS[self.phase]``) with its deadline."""
        if phase not in TRANSITIONS[self.phase]:
            raise RuntimeError(f"trial {self.key}: no transition {self.phase} -> {phase}")
        self.phase = phase
        self._set_deadline(deadline_s)

    # -- phases -----------------------------------------------------------------------------
    def _bundle(self) -> dict[str, float]:
        return {"GPU": float(self.cfg.tp)} if self.use_gpus else {"CPU": 0.01}

    def begin(self) -> Any:
        """Ask for a node; returns the ref that answers once one is held."""
        self.pg = self.cluster.reserve(self._bundle(), f"servesweep-{self.key}", self.pin)
        self.phase = TrialPhase.PLACE
        self._set_deadline(None)  # the controller sets one when no trial of ours holds a node
        return self.cluster.reserved(self.pg)

    def advance(self, ref: Any) -> Any:
        """Consume the finished ``ref``; return the next one, or None when the trial is done.

        What Ray raises is classified by its cause (``execution.failures``): an exception
        of our code in an actor is ``client_error`` (load generator) or ``startup_crash`` /
        ``crash_mid_run`` (engine host) with its type and text; ``node_lost`` only when Ray
        reports the node or the actor's process gone. A full disk behind it (the actor's
        ``OSError`` with ``ENOSPC``, ``EDQUOT``, ``EROFS``) is no failure of the trial: that
        ``OSError`` is raised, and the driver stops the sweep (``results.diskfull``)."""
        try:
            value = self.cluster.get(ref)
            return getattr(self, f"_after_{self.phase}")(value)
        except RayError as err:  # the phase's own call, or a blocking call of its handler
            full = disk_error(err)
            if full is not None:
                raise full from None
            return self._fail(*classify_ray_error(err, self.phase))

    def _after_place(self, _: Any) -> Any:
        gpus = self.cfg.tp if self.use_gpus else 0
        self.host = self.cluster.start_host(self.pg, gpus, self.cfg.model_dump(mode="json"),
                                            self._ctx().model_dump(mode="json"))
        self._enter(TrialPhase.LAUNCH, self.spec.failure.launch_timeout_s)
        return self.cluster.call(self.host, "launch")

    def _after_launch(self, info: LaunchInfo) -> Any:
        self.launch_info = info
        if info.failure is not None:
            return self._fail(info.failure, info.message)
        self.on_event("started", {"key": self.key, **info.model_dump(
            include={"pid", "pgid", "start_time", "marker", "host", "node_id", "cgroup"})})
        fp = self.spec.failure
        self._enter(TrialPhase.READY, fp.startup_timeout_s + fp.call_grace_s)
        return self.cluster.call(self.host, "wait_ready", fp.startup_timeout_s)

    def _after_ready(self, ready: Readiness) -> Any:
        self.ready = ready
        if ready.failure is not None:
            self.log_tail = ready.log_tail
            return self._fail(ready.failure, ready.message)
        self.capacity = self._capacity(ready.applied, ready.events)
        self.on_event("ready", {"key": self.key, "startup_s": ready.startup_s,
                                "capacity": self.capacity})
        if self.hold_s is not None:
            return self._next_level()
        w = self.spec.workload
        vocab = self.shape.vocab if self.shape else 32000
        api_key = self.cluster.get(self.cluster.call(self.host, "api_key_for_client"))
        self.lg = self.cluster.start_loadgen(self.pg, LoadSpec(
            base_url=ready.base_url or "", model=self.spec.model.served_name or self._served_name(),
            workload=w, plan=self.plan, client=self.adapter.client_profile(),
            vocab_size=vocab, tokenizer_dir=self._tokenizer_dir(),
            time_scale=self.time_scale, api_key=api_key, slo=self.spec.slo))
        return self._next_level()

    def _served_name(self) -> str:
        return self.adapter.served_model_name(self._ctx())

    def _tokenizer_dir(self) -> str | None:
        model = self.spec.model_for(self.cfg)
        return model.tokenizer or model.path

    def _quality_request(self) -> QualityRequest | None:
        """What the node measures after the levels; None: nothing (no ``quality:``, the
        sim's hold mode, or the sim, whose result says so without a run)."""
        q = self.spec.quality
        if q is None or self.hold_s is not None or self.lg is None or self.quality is not None:
            return None
        if self.adapter.time_scaled:
            self.quality = QualityResult(status=QualityStatus.NOT_MEASURED_SIM,
                                         message="not measured (sim): the sim has no accuracy")
            return None
        task_dir = self.spec.quality_task_dir()
        ref = self.reference
        entry = self.spec.space[self.planned.entry_index]
        out = self.dir / "quality"
        out.mkdir(parents=True, exist_ok=True)
        api_key = self.cluster.get(self.cluster.call(self.host, "api_key_for_client"))
        return QualityRequest(
            base_url=self.ready.base_url or "",
            model=self.spec.model.served_name or self._served_name(),
            tokenizer_dir=self._tokenizer_dir(), task=q.task,
            model_dir=self.spec.model_for(self.cfg).path,
            include_path=str(task_dir) if task_dir else None, agreement=q.agreement,
            vocab_size=self.shape.vocab if self.shape else 32000,
            reference_continuations=ref.agreement.continuations
            if ref is not None and ref.agreement is not None else None,
            reference_logprobs=ref.agreement.reference_logprobs
            if ref is not None and ref.agreement is not None else None,
            lm_eval=lm_eval_path(q, entry.launch.python), out_dir=str(out),
            timeout_s=q.timeout_s, api_key=api_key)

    def _next_level(self) -> Any:
        w, fp = self.spec.workload, self.spec.failure
        levels = w.levels()
        if self.level_i >= len(levels) and self.search is not None and self.hold_s is None \
                and self.slo_capacity is None:
            probe = self.search.level()
            if probe is not None:
                self._enter(TrialPhase.LEVEL, w.level_timeout_s + fp.call_grace_s)
                return self.cluster.call(self.lg, "run_level", probe.key, self.level_i)
            self.slo_capacity = self.search.result(self.cfg.tp)
            self.on_event("capacity", {"key": self.key, "capacity": self.slo_capacity})
        if self.level_i >= len(levels):
            req = self._quality_request()
            if req is not None:
                self.on_event("quality_started", {"key": self.key})
                self._enter(TrialPhase.QUALITY, 2 * req.timeout_s + fp.call_grace_s)
                return self.cluster.call(self.lg, "run_quality", req)
            self._enter(TrialPhase.OBSERVE, fp.observe_timeout_s)
            return self.cluster.call(self.host, "observe")
        lv = levels[self.level_i]
        if self.hold_s is not None:
            self._enter(TrialPhase.LEVEL, self.hold_s + fp.call_grace_s)
            return self.cluster.call(self.host, "hold_level", w.in_flight_cap(lv), self.hold_s)
        self._enter(TrialPhase.LEVEL, w.level_timeout_s + fp.call_grace_s)
        return self.cluster.call(self.lg, "run_level", lv.key, self.level_i)

    def _after_level(self, measured: LevelResult) -> Any:
        if self.search is not None and self.level_i >= len(self.spec.workload.levels()):
            # a capacity probe, kept with the capacity: a sim behind its time scale decides
            # nothing (its misses are the host's), so it is flagged before it is judged
            measured = verdicts.flag_sim_pace(measured, self.spec.sim.late_share_max,
                                              self.spec.sim.lost_share_max)
            probe = self.search.record(measured)
            self.on_event("probe", {"key": self.key, "probe": probe})
            return self._next_level()
        if measured.level is None:  # the sim's hold mode knows only the in-flight count
            measured = measured.model_copy(
                update={"level": self.spec.workload.levels()[self.level_i]})
        level = verdicts.flag_queueing(measured, self._prediction(measured))
        level = verdicts.flag_sim_pace(level, self.spec.sim.late_share_max,
                                       self.spec.sim.lost_share_max)
        self.levels.append(level)
        self.level_i += 1
        self.on_event("level", {"key": self.key, "level": level})
        if verdicts.needs_check(level):
            self._enter(TrialPhase.CHECK, self.spec.failure.observe_timeout_s)
            return self.cluster.call(self.host, "observe")
        return self._next_level()

    def _after_quality(self, result: QualityResult) -> Any:
        self.quality = result
        self.on_event("quality", {"key": self.key, "quality": result})
        return self._next_level()

    def _after_check(self, obs: Observation) -> Any:
        self.log_tail = obs.log_tail
        failure = verdicts.after_check(obs, self.levels[-1])
        return self._fail(*failure) if failure else self._next_level()

    def _after_observe(self, obs: Observation) -> Any:
        self.log_tail = obs.log_tail
        self.levels, self.note, failure = verdicts.after_observe(obs, self.levels)
        return self._fail(*failure) if failure else self._stop()

    def _stop(self) -> Any:
        fp = self.spec.failure
        self._enter(TrialPhase.STOP, fp.stop_timeout_s + fp.stop_grace_s)
        if self.host is None:
            self._finish()
            return None
        return self.cluster.call(self.host, "stop", fp.stop_timeout_s)

    def _after_stop(self, stopped: StopResult) -> None:
        if stopped.leftovers:
            self.log_tail += f"\n[servesweep] processes left after stop: {stopped.leftovers}"
        self._finish()
        return None

    # -- failure, abort, finish -------------------------------------------------------------
    def _fail(self, failure: FailureClass | str, message: str) -> Any:
        if self.failure is None:
            self.failure = (FailureClass(failure), message)
        if self.phase is TrialPhase.STOP:
            self._finish()
            return None
        return self._stop()

    def on_timeout(self) -> None:
        """The phase's deadline passed: classify, kill the actors, reap the processes."""
        if self.failure is None and self.phase is TrialPhase.PLACE:
            self.failure = (FailureClass.STARTUP_TIMEOUT, (
                f"no node had room for the trial ({self._bundle()}) within "
                f"{self.spec.failure.place_timeout_s:g} s while no other trial of this sweep "
                "held one: the resources are held by something else, or a node is gone "
                "(see `ray status`; failure.place_timeout_s sets the wait)"))
        if self.failure is None:
            self.failure = (TIMEOUT_CLASS.get(self.phase, FailureClass.HANG),
                            f"no answer from the {self.phase} phase before its deadline")
        self.abort()

    def abort(self, reason: str | None = None) -> None:
        """Stop everything now (synchronously), then finish the result."""
        if reason and self.failure is None:
            starting = self.phase in (TrialPhase.PLACE, TrialPhase.LAUNCH, TrialPhase.READY)
            self.failure = (FailureClass.STARTUP_CRASH if starting
                            else FailureClass.CRASH_MID_RUN, reason)
        if self.host is not None:
            try:
                self.cluster.get(self.cluster.call(self.host, "stop", 5.0), timeout=20)
            except (GetTimeoutError, RayError):
                pass
        reap(f"{self.sweep_id}/{self.key}")  # processes on this node, whatever the actor did
        self._finish()

    def _finish(self) -> None:
        if self.result is not None:
            return None
        self._collect_artifacts()
        lg_node = self.cluster.node_of(self.lg) if self.lg is not None else None
        for actor in (self.lg, self.host):
            if actor is not None:
                self.cluster.kill(actor)
        if self.pg is not None:
            self.cluster.release(self.pg)
        # whatever happened to the actors (node lost, killed), nothing of the trial may
        # outlive it on this machine; other nodes' leftovers are reaped from the ledger
        reap(f"{self.sweep_id}/{self.key}")
        status, reason, message = verdicts.final_status(self.failure, self.levels,
                                                        self.capacity, self.note)
        applied = self.ready.applied
        versions = {"engine": applied.version or "unknown", "servesweep": _version()}
        host: dict[str, Any] = self.launch_info.model_dump(
            include={"host", "node_ip", "node_id", "boot_id", "nice", "gpu_ids", "gpu_model",
                     "argv", "pid"})
        if host.get("node_id") is None and self.pin and NODE_ID_LABEL in self.pin:
            # never launched (e.g. its node died before the actor ran): where it was placed,
            # so a lost node is named and a retry keeps away from it
            host["node_id"] = self.pin[NODE_ID_LABEL]
        self.result = TrialResult(
            key=self.key, config=self.cfg, status=status, reason=reason, message=message,
            levels=self.levels, capacity=self.capacity, startup_s=self.ready.startup_s,
            wall_s=time.monotonic() - self.t0, applied=applied, versions=versions,
            host={**host, "loadgen_node_id": lg_node},
            hardware=self.spec.hardware, time_scale=self.time_scale,
            log_tail=self.log_tail[-8000:], attempt=self.attempt,
            workload_fingerprint=self.fingerprint, slo_capacity=self.slo_capacity,
            quality=self.quality)
        self.phase = TrialPhase.DONE
        return None

    def _collect_artifacts(self) -> None:
        """Copy the server log and per-request records to the driver's trial folder."""
        calls = []
        if self.host is not None:
            calls.append(("server.log", self.cluster.call(self.host, "log_text")))
        if self.lg is not None:
            calls.append(("requests.csv", self.cluster.call(self.lg, "records_csv")))
        for name, ref in calls:
            try:
                text = self.cluster.get(ref, timeout=30)
            except (GetTimeoutError, RayError):
                continue
            (self.dir / name).write_text(text)
            if name == "server.log" and not self.log_tail:
                self.log_tail = "\n".join(text.splitlines()[-60:])

    # -- capacity ---------------------------------------------------------------------------
    def _capacity(self, applied: AppliedConfig, events: list[dict[str, Any]]) -> Capacity:
        """The KV pool the server reported, what it implies for one request, and whether
        the server's max model length (its log, else the trial's ``max_model_len``) admits
        a request at all: when prompt + output exceed it, ``rejects_requests`` and ``note``
        say that the server refuses every request. The pool is the adapter's ``kv_pool``
        (the one ``servesweep capacity`` reads), its usable blocks what requests fit in."""
        policy = self.adapter.admission_for(self.cfg)
        pool = self.adapter.kv_pool([LogEvent.from_summary(e) for e in events], trial=self.cfg)
        sources = list(pool.sources) if pool else []
        if pool and pool.max_model_len:
            max_len: int | None = pool.max_model_len
        else:
            max_len, source = self._max_model_len(applied)
            if source:
                sources.append(source)
        w = self.spec.workload
        rejection = length_rejection(w.prompt_tokens, w.output_tokens, max_len)
        per_req = None
        cap = None
        if pool:
            pred = predict_level(policy, pool.usable_blocks, pool.block_size, w.prompt_tokens,
                                 w.output_tokens, 1)
            per_req, cap = pred.blocks_per_request, pred.full_length_capacity
        return Capacity(policy=policy, pool_tokens=pool.tokens if pool else None,
                        block_size=pool.block_size if pool else None,
                        pool_blocks=pool.blocks if pool else None,
                        usable_blocks=pool.usable_blocks if pool else None,
                        blocks_per_request=per_req, full_length_capacity=cap,
                        max_model_len=max_len, rejects_requests=rejection is not None,
                        note=rejection or "", sources=sources)

    def _max_model_len(self, applied: AppliedConfig) -> tuple[int | None, str | None]:
        """The server's max model length and where it came from: the applied config read
        from its log, else what the trial asked for; (None, None) when neither says."""
        if applied.max_model_len:
            return applied.max_model_len, "log: max model length"
        if self.cfg.max_model_len:
            return self.cfg.max_model_len, "trial config: max_model_len"
        return None, None

    def _prediction(self, level: LevelResult) -> LevelPrediction | None:
        cap = self.capacity
        blocks = (cap.usable_blocks if cap else None) or level.server.num_blocks
        bs = (cap.block_size if cap else None) or level.server.block_size
        if not blocks or not bs or cap is None or self.plan is not None or \
                level.identity.kind is not LevelKind.CONCURRENCY:
            return None  # the prediction is the fixed shape's, in a closed loop
        return predict_level(cap.policy, int(blocks), int(bs), self.spec.workload.prompt_tokens,
                             self.spec.workload.output_tokens, level.concurrency,
                             self.cfg.max_num_seqs, cap.max_model_len)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("servesweep")
    except PackageNotFoundError:
        return "dev"
