"""The sweep controller driven tick by tick, with stand-in actors instead of Ray.

``TickCluster`` is a ``Cluster`` whose every call answers after a set number of ticks
(one ``wait`` is one tick) and whose nodes have fixed numbers of GPUs (one node unless
``nodes`` are given); the stand-in ``EngineHost`` and ``LoadGenerator`` answer the real
typed messages. The controller, the trials' phases, the verdicts and the ledger are the
real ones.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import ActorDiedError, RayTaskError

from actors.contracts.messages import LaunchInfo, Observation, Readiness, StopResult
from actors.contracts.reaping import NodeReap, ReapTarget
from actors.contracts.results import LevelMetrics, LevelResult
from actors.contracts.states import FailureClass, TrialStatus
from actors.contracts.traffic import Level
from orchestrator.execution.cluster import NODE_ID_LABEL, NodeInfo
from orchestrator.execution.controller import SweepController
from orchestrator.execution.progress import Progress
from orchestrator.execution.trial import TrialPhase
from orchestrator.results.ledger import Ledger
from orchestrator.spec import parse_spec
from tests.conftest import minimal_spec

NEVER = 10**9


@dataclass
class _Ref:
    ready_at: int
    value: Any = None
    error: BaseException | None = None
    ident: int = field(default_factory=itertools.count().__next__)

    def __hash__(self) -> int:
        return self.ident


class StandInHost:
    """Answers like ``EngineHost``; ``fail`` maps a method to the failure it answers."""

    def __init__(self, fail: dict[str, FailureClass] | None = None):
        self.fail = fail or {}
        self.stopped = False
        self.node_id = "node-1"  # where the cluster started it, and on which GPUs
        self.gpu_ids: list[str] = []

    def launch(self) -> LaunchInfo:
        return LaunchInfo(host=self.node_id, node_id=self.node_id, marker="m", pid=4242,
                          pgid=4242, start_time=777, gpu_ids=self.gpu_ids,
                          failure=self.fail.get("launch"))

    def wait_ready(self, timeout_s: float) -> Readiness:
        if "wait_ready" in self.fail:
            return Readiness(failure=self.fail["wait_ready"], message="CUDA out of memory")
        return Readiness(base_url="http://127.0.0.1:1", startup_s=1.0,
                         applied={"version": "stand-in"})

    def api_key_for_client(self) -> None:
        return None

    def observe(self) -> Observation:
        return Observation(alive="observe" not in self.fail, returncode=None)

    def stop(self, timeout_s: float) -> StopResult:
        self.stopped = True
        return StopResult(returncode=0)

    def log_text(self) -> str:
        return "stand-in server log\n"


class StandInLoadGen:
    def __init__(self, raises: BaseException | None = None, dead: bool = False):
        self.raises = raises
        self.dead = dead  # its node is gone: every call answers ActorDiedError

    def run_level(self, key: str, i: int) -> LevelResult:
        if self.raises is not None:
            raise self.raises
        lv = Level.parse(key)  # the driver names levels by key (c=8)
        c = int(lv.value)
        return LevelResult(concurrency=c, level=lv, status="valid", requests=2 * c,
                           metrics=LevelMetrics(output_tok_s=100.0 * c, total_tok_s=150.0 * c,
                                                requests_s=c / 2))

    def records_csv(self) -> str:
        return "level,round\n"


@dataclass
class _Reservation:
    bundle: dict[str, float]
    selector: dict[str, str] | None
    ref: _Ref
    made: int = 0  # the tick it was asked for
    node: str | None = None
    gpus: list[int] = field(default_factory=list)


class TickCluster:
    """A ``Cluster`` of one node with ``gpus`` GPUs (or of ``nodes``) where every call
    takes ``delay`` ticks; ``hosts``/``loadgens`` make the stand-ins for a trial (by the
    order trials start); ``taken``: GPUs per node held by something else. A reservation
    is held on the first node with room that matches its selector, on GPUs no other
    holds (``holds``: every reservation held so far, with its node, GPUs and ticks)."""

    def __init__(self, gpus: int = 2, delay: int = 1, hosts: list[StandInHost] | None = None,
                 loadgens: list[StandInLoadGen] | None = None,
                 slow: dict[str, int] | None = None, lost: set[str] | None = None,
                 nodes: list[NodeInfo] | None = None, taken: dict[str, int] | None = None):
        self.node_list = nodes or [NodeInfo(node_id="node-1", host="host-1", gpus=gpus)]
        self.gpus = sum(n.gpus for n in self.node_list)
        self.free = {n.node_id: list(range((taken or {}).get(n.node_id, 0), n.gpus))
                     for n in self.node_list}
        self.delay, self.tick = delay, 0
        self.hosts, self.loadgens = list(hosts or []), list(loadgens or [])
        self.slow = slow or {}  # method -> ticks (NEVER: no answer)
        self.lost = lost or set()  # methods whose actor's node is gone
        self.waiting: list[_Reservation] = []
        self.holds: list[tuple[str, list[int], int, int | None]] = []  # node, gpus, from, to
        self.started_hosts: list[StandInHost] = []
        self.reaped: list[tuple[str, list[ReapTarget], list[str]]] = []
        self.max_wait = 0  # the most ticks a reservation waited to be held

    def nodes(self) -> list[NodeInfo]:
        return list(self.node_list)

    def reserve(self, bundle: dict[str, float], name: str,
                selector: dict[str, str] | None = None) -> Any:
        res = _Reservation(bundle, selector, _Ref(ready_at=NEVER), made=self.tick)
        self.waiting.append(res)
        self._place()
        return res

    def _matches(self, node: NodeInfo, selector: dict[str, str] | None) -> bool:
        labels = {**node.labels, NODE_ID_LABEL: node.node_id}
        return all(labels.get(k) == v for k, v in (selector or {}).items())

    def _place(self) -> None:
        for res in list(self.waiting):
            need = int(res.bundle.get("GPU", 0))
            for node in self.node_list:
                if self._matches(node, res.selector) and len(self.free[node.node_id]) >= need:
                    res.node, res.gpus = node.node_id, self.free[node.node_id][:need]
                    del self.free[node.node_id][:need]
                    res.ref.ready_at = self.tick + self.delay
                    self.max_wait = max(self.max_wait, self.tick - res.made)
                    self.holds.append((res.node, res.gpus, self.tick, None))
                    self.waiting.remove(res)
                    break

    def reserved(self, reservation: Any) -> _Ref:
        return reservation.ref

    def release(self, reservation: Any) -> None:
        res = reservation
        if res in self.waiting:
            self.waiting.remove(res)
        elif res.node is not None:
            self.free[res.node] = sorted(self.free[res.node] + res.gpus)
            i = next(i for i, h in enumerate(self.holds)
                     if h[0] == res.node and h[1] == res.gpus and h[3] is None)
            self.holds[i] = (*self.holds[i][:3], self.tick)
            res.node = None
        self._place()

    def start_host(self, reservation: Any, gpus: int, trial: dict, ctx: dict) -> StandInHost:
        host = self.hosts.pop(0) if self.hosts else StandInHost()
        host.node_id = reservation.node or "node-1"
        host.gpu_ids = [str(g) for g in reservation.gpus]
        self.started_hosts.append(host)
        return host

    def start_loadgen(self, reservation: Any, *args: Any) -> StandInLoadGen:
        return self.loadgens.pop(0) if self.loadgens else StandInLoadGen()

    def call(self, actor: Any, method: str, *args: Any) -> _Ref:
        ready = self.tick + self.slow.get(method, self.delay)
        if method in self.lost or getattr(actor, "dead", False):
            return _Ref(ready, error=ActorDiedError())
        try:
            return _Ref(ready, value=getattr(actor, method)(*args))
        except Exception as err:  # noqa: BLE001 - what the actor raised travels with its ref
            return _Ref(ready, error=RayTaskError(method, "Traceback ...", err))

    def wait(self, refs: list[_Ref], timeout: float) -> list[_Ref]:
        self.tick += 1
        return [r for r in refs if r.ready_at <= self.tick][:1]

    def get(self, ref: _Ref, timeout: float | None = None) -> Any:
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, actor: Any) -> None:
        pass

    def node_of(self, actor: Any) -> str | None:
        return getattr(actor, "node_id", "node-1")

    def reap_on(self, node_id: str, targets: list[ReapTarget], sweeps: list[str],
                timeout_s: float) -> _Ref:
        self.reaped.append((node_id, targets, sweeps))
        return _Ref(self.tick, value=NodeReap(node_id=node_id))


def controller(tmp_path: Path, cluster: TickCluster, **space: Any) -> SweepController:
    spec_dict = minimal_spec(name="ticks")
    spec_dict["cluster"] = {"gpus": cluster.gpus, "max_concurrent_trials": 2}
    spec_dict["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"],
                           "cuda_graphs": [True, False], **space}]
    spec = parse_spec(spec_dict)
    ledger = Ledger.create("name: ticks\n", "ticks", tmp_path)
    return SweepController(spec, ledger, None, Progress(4, quiet=True), tick_s=0.0,
                           cluster=cluster)


def phases(ctl: SweepController) -> list[str]:
    return sorted(t.phase.value for t in ctl.running.values())


#: (phases of the running trials, pending, running, finished) after each tick: 4 trials,
#: 2 at a time, every call answered one tick after it was made and one answer per tick
TICKS = [
    (["launch", "place"], 2, 2, 0), (["launch", "launch"], 2, 2, 0),
    (["launch", "ready"], 2, 2, 0), (["ready", "ready"], 2, 2, 0),
    (["level", "ready"], 2, 2, 0), (["level", "level"], 2, 2, 0),
    (["level", "level"], 2, 2, 0), (["level", "level"], 2, 2, 0),
    (["level", "observe"], 2, 2, 0), (["observe", "observe"], 2, 2, 0),
    (["observe", "stop"], 2, 2, 0), (["stop", "stop"], 2, 2, 0),
    (["stop"], 2, 1, 1),  # the first trial is final; the next starts on the next tick
    (["place"], 1, 1, 2),  # the second finished as the third started
    (["launch", "place"], 0, 2, 2),
]


def test_trials_move_one_phase_per_tick_and_the_sets_follow(tmp_path):
    ctl = controller(tmp_path, TickCluster(gpus=2))
    assert len(ctl.trial_sets()["pending"]) == 4 and not ctl.trial_sets()["running"]
    for tick, (want_phases, pending, running, finished) in enumerate(TICKS, 1):
        ctl.step()
        sets = ctl.trial_sets()
        got = (phases(ctl), len(sets["pending"]), len(sets["running"]), len(sets["finished"]))
        assert got == (want_phases, pending, running, finished), f"tick {tick}"
    while not ctl.done():
        ctl.step()
    sets = ctl.trial_sets()
    assert (len(sets["pending"]), len(sets["running"]), len(sets["finished"])) == (0, 0, 4)
    results = ctl.ledger.results()
    assert {r.status for r in results.values()} == {TrialStatus.OK}
    assert all([lv.concurrency for lv in r.levels] == [1, 4] for r in results.values())
    kinds = [e.type for e in ctl.ledger.events()]
    assert kinds.count("scheduled") == kinds.count("started") == kinds.count("trial") == 4


def test_a_trial_waits_for_gpus_without_a_deadline_while_another_holds_them(tmp_path):
    # the node's second GPU is held by something else: packing sees room for two trials,
    # Ray holds one of them back
    ctl = controller(tmp_path, TickCluster(gpus=2, taken={"node-1": 1}))
    for _ in range(3):
        ctl.step()
    waiting = [t for t in ctl.running.values() if t.phase is TrialPhase.PLACE]
    assert len(ctl.running) == 2 and len(waiting) == 1
    assert waiting[0].deadline is None  # another trial of the sweep holds the GPU
    while ctl.trial_sets()["finished"] == set():
        ctl.step()
    ctl.step()
    assert all(t.phase is not TrialPhase.PLACE or t.deadline is None
               for t in ctl.running.values())


def test_a_failure_answered_by_the_host_stops_the_trial_and_the_sweep_goes_on(tmp_path):
    oom = StandInHost(fail={"wait_ready": FailureClass.STARTUP_OOM})
    cluster = TickCluster(hosts=[oom])
    ctl = controller(tmp_path, cluster)
    while not ctl.done():
        ctl.step()
    results = list(ctl.ledger.results().values())
    failed = [r for r in results if r.status is TrialStatus.FAILED]
    assert len(failed) == 1 and failed[0].reason == "startup_oom"
    assert "CUDA out of memory" in failed[0].message and oom.stopped  # stopped, not left
    assert sum(r.status is TrialStatus.OK for r in results) == 3


def test_an_exception_in_the_load_generator_is_a_client_error_not_a_lost_node(tmp_path):
    broken = StandInLoadGen(raises=ValueError("need at least two usable token ids"))
    ctl = controller(tmp_path, TickCluster(loadgens=[broken]))
    while not ctl.done():
        ctl.step()
    failed = [r for r in ctl.ledger.results().values() if r.status is TrialStatus.FAILED]
    assert [r.reason for r in failed] == ["client_error"]
    assert "ValueError: need at least two usable token ids" in failed[0].message


def test_a_lost_actor_is_node_lost(tmp_path):
    ctl = controller(tmp_path, TickCluster(lost={"run_level"}), cuda_graphs=[True],
                     profile=["vllm"])
    while not ctl.done():
        ctl.step()
    (r,) = ctl.ledger.results().values()
    assert (r.status, r.reason) == (TrialStatus.FAILED, "node_lost")


def test_a_level_that_never_answers_fails_as_hang_at_its_deadline(tmp_path):
    cluster = TickCluster(slow={"run_level": NEVER})
    ctl = controller(tmp_path, cluster, cuda_graphs=[True], profile=["vllm"])
    while not any(t.phase is TrialPhase.LEVEL for t in ctl.running.values()):
        ctl.step()
    (trial,) = ctl.running.values()
    trial.deadline = 0.0  # its deadline (level_timeout_s + failure.call_grace_s) has passed
    ctl.step()
    assert ctl.done()
    (r,) = ctl.ledger.results().values()
    assert (r.status, r.reason) == (TrialStatus.FAILED, "hang")
    assert "level phase" in r.message and cluster.started_hosts[0].stopped


def test_an_illegal_phase_move_is_a_bug_that_raises(tmp_path):
    ctl = controller(tmp_path, TickCluster(), cuda_graphs=[True], profile=["vllm"])
    ctl.step()
    (trial,) = ctl.running.values()
    with pytest.raises(RuntimeError, match="no transition launch -> observe"):
        trial._enter(TrialPhase.OBSERVE, None)


def test_a_lost_node_is_retried_as_a_second_attempt_of_the_same_trial(tmp_path):
    ctl = controller(tmp_path, TickCluster(loadgens=[StandInLoadGen(dead=True)]),
                     cuda_graphs=[True], profile=["vllm"])
    while not ctl.done():
        ctl.step()
    (r,) = ctl.ledger.results().values()
    assert (r.status, r.attempt) == (TrialStatus.OK, 2)
    events = ctl.ledger.events()
    attempts = [e for e in events if e.type == "attempt"]
    assert [(e.attempt, e.reason) for e in attempts] == [(1, "node_lost")]
    assert [e.type for e in events].count("trial") == 1  # one final result per key
    assert ctl.trial_sets()["finished"] == {r.key}


def test_an_attempt_lost_before_its_actor_ran_names_the_node_it_was_placed_on(tmp_path):
    # its node died between placement and the actor's start: no launch info, but the
    # attempt still names that node, and the retry goes to the other one
    nodes = [NodeInfo(node_id=f"node-{i}", host=f"host-{i}", gpus=1) for i in (1, 2)]
    cluster = TickCluster(nodes=nodes, lost={"launch"})
    ctl = controller(tmp_path, cluster, cuda_graphs=[True], profile=["vllm"])
    while not ctl.ledger.events() or ctl.ledger.events()[-1].type != "attempt":
        ctl.step()
    cluster.lost.clear()
    while not ctl.done():
        ctl.step()
    (lost,) = [e for e in ctl.ledger.events() if e.type == "attempt"]
    (r,) = ctl.ledger.results().values()
    assert lost.reason == "node_lost" and lost.host["node_id"] in {"node-1", "node-2"}
    assert (r.status, r.attempt) == (TrialStatus.OK, 2)
    assert r.host["node_id"] != lost.host["node_id"]


def test_retries_are_bounded_and_the_last_attempt_is_the_result(tmp_path):
    ctl = controller(tmp_path, TickCluster(lost={"run_level"}), cuda_graphs=[True],
                     profile=["vllm"])
    while not ctl.done():
        ctl.step()
    (r,) = ctl.ledger.results().values()
    assert (r.status, r.reason, r.attempt) == (TrialStatus.FAILED, "node_lost", 2)
    assert [e.type for e in ctl.ledger.events()].count("attempt") == 1  # failure.retries=1


def test_a_deterministic_failure_is_never_retried(tmp_path):
    oom = StandInHost(fail={"wait_ready": FailureClass.STARTUP_OOM})
    ctl = controller(tmp_path, TickCluster(hosts=[oom]), cuda_graphs=[True],
                     profile=["vllm"])
    while not ctl.done():
        ctl.step()
    (r,) = ctl.ledger.results().values()
    assert (r.reason, r.attempt) == ("startup_oom", 1)
    assert "attempt" not in [e.type for e in ctl.ledger.events()]


def test_attempts_before_a_resume_count_against_the_retries(tmp_path):
    first = controller(tmp_path, TickCluster(loadgens=[StandInLoadGen(dead=True)]),
                       cuda_graphs=[True], profile=["vllm"])
    while not first.running or all(t.attempt == 1 for t in first.running.values()):
        first.step()  # attempt 1 lost its node; attempt 2 has started: now the driver dies
    again = SweepController(first.spec, first.ledger, None, Progress(1, quiet=True),
                            tick_s=0.0, cluster=TickCluster(lost={"run_level"}))
    while not again.done():
        again.step()
    (r,) = again.ledger.results().values()
    assert (r.status, r.reason, r.attempt) == (TrialStatus.FAILED, "node_lost", 2)
