"""The sweep controller driven tick by tick, with stand-in actors instead of Ray.

``TickCluster`` is a ``Cluster`` whose every call answers after a set number of ticks
(one ``wait`` is one tick) and whose node has a fixed number of GPUs; the stand-in
``EngineHost`` and ``LoadGenerator`` answer the real typed messages. The controller,
the trials' phases, the verdicts and the ledger are the real ones.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import ActorDiedError, RayTaskError

from actors.contracts.messages import LaunchInfo, Observation, Readiness, StopResult
from actors.contracts.results import LevelMetrics, LevelResult
from actors.contracts.states import FailureClass, TrialStatus
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

    def launch(self) -> LaunchInfo:
        return LaunchInfo(host="node-1", marker="m", pid=4242, pgid=4242,
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

    def run_level(self, c: int, i: int) -> LevelResult:
        if self.raises is not None:
            raise self.raises
        return LevelResult(concurrency=c, status="valid", requests=2 * c, metrics=LevelMetrics(
            output_tok_s=100.0 * c, total_tok_s=150.0 * c, requests_s=c / 2))

    def records_csv(self) -> str:
        return "level,round\n"


class TickCluster:
    """A ``Cluster`` of one node with ``gpus`` GPUs where every call takes ``delay`` ticks;
    ``hosts``/``loadgens`` make the stand-ins for a trial (by the order trials start)."""

    def __init__(self, gpus: int = 2, delay: int = 1, hosts: list[StandInHost] | None = None,
                 loadgens: list[StandInLoadGen] | None = None,
                 slow: dict[str, int] | None = None, lost: set[str] | None = None):
        self.gpus, self.free, self.delay, self.tick = gpus, gpus, delay, 0
        self.hosts, self.loadgens = list(hosts or []), list(loadgens or [])
        self.slow = slow or {}  # method -> ticks (NEVER: no answer)
        self.lost = lost or set()  # methods whose actor's node is gone
        self.waiting: list[tuple[dict[str, float], _Ref]] = []
        self.started_hosts: list[StandInHost] = []

    def gpus_per_node(self) -> tuple[int, int]:
        return self.gpus, self.gpus

    def reserve(self, bundle: dict[str, float], name: str) -> Any:
        ref = _Ref(ready_at=NEVER)
        self.waiting.append((bundle, ref))
        self._place()
        return (bundle, ref)

    def _place(self) -> None:
        for bundle, ref in list(self.waiting):
            need = bundle.get("GPU", 0)
            if need <= self.free:
                self.free -= need
                ref.ready_at = self.tick + self.delay
                self.waiting.remove((bundle, ref))

    def reserved(self, reservation: Any) -> _Ref:
        return reservation[1]

    def release(self, reservation: Any) -> None:
        bundle, ref = reservation
        if ref.ready_at != NEVER:
            self.free += bundle.get("GPU", 0)
        self._place()

    def start_host(self, reservation: Any, gpus: int, trial: dict, ctx: dict) -> StandInHost:
        host = self.hosts.pop(0) if self.hosts else StandInHost()
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
        return "node-1"


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
    ctl = controller(tmp_path, TickCluster(gpus=1))
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
