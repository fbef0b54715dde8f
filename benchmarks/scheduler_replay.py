"""Replaying measured trial durations through the real controller in virtual time.

``replay(policy, nodes, held)`` runs a ``SweepController`` (with its ``Packer``) over a
``VirtualCluster``: nodes of the given GPU counts, every actor call answered at once
except a trial's one level, which takes exactly the seconds that trial held its GPUs in a
measured run (``held``, by trial key); time jumps from one answer to the next. So the
makespan depends on the placement policy alone:

- ``packed`` / ``declared``: servesweep's packing with that ``cluster.order``;
- ``ray``: no packing (the controller sees no GPUs, as before packing existed, and asks
  for up to one trial per GPU at once, in the declared order); the cluster holds each
  placement group of ``tp`` GPUs on the first node with room, first come first served
  with backfill (an approximation of Ray's own placement group scheduling).

Used by ``scheduler_efficiency.py``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.contracts.messages import LaunchInfo, Observation, Readiness, StopResult
from actors.contracts.reaping import NodeReap
from actors.contracts.results import LevelMetrics, LevelResult
from orchestrator.execution.cluster import NODE_ID_LABEL, NodeInfo
from orchestrator.execution.controller import SweepController
from orchestrator.execution.progress import Progress
from orchestrator.results.ledger import Ledger
from orchestrator.spec import parse_spec

__all__ = ["VirtualCluster", "replay", "SPACE"]

NEVER = float("inf")
SPACE = {"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4, 8],
         "cuda_graphs": [True, False]}
_ids = itertools.count()


@dataclass(eq=False)
class Ref:
    ready_at: float
    value: Any = None


@dataclass(eq=False)
class Hold:
    key: str
    tp: int
    selector: dict[str, str] | None
    ref: Ref
    node: str | None = None
    gpus: list[int] = field(default_factory=list)
    start: float = NEVER


class Host:
    def __init__(self, hold: Hold):
        self.hold = hold

    def launch(self) -> LaunchInfo:
        return LaunchInfo(host=self.hold.node or "", node_id=self.hold.node, pid=next(_ids),
                          gpu_ids=[str(g) for g in self.hold.gpus])

    def wait_ready(self, timeout_s: float) -> Readiness:
        return Readiness(base_url="http://virtual", startup_s=0.0)

    def api_key_for_client(self) -> None:
        return None

    def observe(self) -> Observation:
        return Observation(alive=True)

    def stop(self, timeout_s: float) -> StopResult:
        return StopResult(returncode=0)

    def log_text(self) -> str:
        return ""


class LoadGen:
    def __init__(self, seconds: float):
        self.seconds = seconds

    def run_level(self, c: int, i: int) -> LevelResult:
        return LevelResult(concurrency=c, status="valid", requests=c, wall_s=self.seconds,
                           metrics=LevelMetrics(output_tok_s=1.0, total_tok_s=1.0,
                                                requests_s=1.0))

    def records_csv(self) -> str:
        return ""


class VirtualCluster:
    """A ``Cluster`` in virtual time (see the module docstring). ``hide_gpus``: tell the
    controller there are no GPUs (the ``ray`` policy) while placing by each trial's tp."""

    def __init__(self, sizes: list[int], held: dict[str, float], tp: dict[str, int],
                 hide_gpus: bool = False):
        self.node_list = [NodeInfo(node_id=f"n{i}", host=f"h{i}", gpus=g)
                          for i, g in enumerate(sizes)]
        self.free = {n.node_id: list(range(n.gpus)) for n in self.node_list}
        self.held, self.tp, self.hide = held, tp, hide_gpus
        self.now = 0.0
        self.waiting: list[Hold] = []
        self.holds: list[Hold] = []
        self.ends: dict[int, float] = {}

    def nodes(self) -> list[NodeInfo]:
        return [n.model_copy(update={"gpus": 0}) if self.hide else n for n in self.node_list]

    def reserve(self, bundle: dict[str, float], name: str,
                selector: dict[str, str] | None = None) -> Hold:
        key = name.removeprefix("servesweep-")
        hold = Hold(key, self.tp[key], selector, Ref(NEVER))
        self.waiting.append(hold)
        self._place()
        return hold

    def _place(self) -> None:
        for hold in list(self.waiting):  # first come first served, with backfill
            for node in self.node_list:
                if hold.selector and hold.selector.get(NODE_ID_LABEL) not in (None,
                                                                              node.node_id):
                    continue
                if len(self.free[node.node_id]) >= hold.tp:
                    hold.node, hold.gpus = node.node_id, self.free[node.node_id][:hold.tp]
                    del self.free[node.node_id][:hold.tp]
                    hold.start, hold.ref.ready_at = self.now, self.now
                    self.waiting.remove(hold)
                    self.holds.append(hold)
                    break

    def reserved(self, reservation: Hold) -> Ref:
        return reservation.ref

    def release(self, reservation: Hold) -> None:
        if reservation in self.waiting:
            self.waiting.remove(reservation)
        elif reservation.node is not None:
            self.free[reservation.node] += reservation.gpus
            self.ends[id(reservation)] = self.now
        self._place()

    def start_host(self, reservation: Hold, gpus: int, trial: dict, ctx: dict) -> Host:
        return Host(reservation)

    def start_loadgen(self, reservation: Hold, *args: Any) -> LoadGen:
        return LoadGen(self.held[reservation.key])

    def call(self, actor: Any, method: str, *args: Any) -> Ref:
        delay = actor.seconds if method == "run_level" else 0.0
        return Ref(self.now + delay, getattr(actor, method)(*args))

    def wait(self, refs: list[Ref], timeout: float) -> list[Ref]:
        ready = [r for r in refs if r.ready_at <= self.now]
        if not ready:
            nxt = min((r.ready_at for r in refs), default=NEVER)
            if nxt == NEVER:
                raise RuntimeError("every trial waits for room that never comes")
            self.now = nxt
            ready = [r for r in refs if r.ready_at <= self.now]
        return ready

    def get(self, ref: Ref, timeout: float | None = None) -> Any:
        return ref.value

    def kill(self, actor: Any) -> None:
        pass

    def node_of(self, actor: Any) -> str | None:
        return None

    def reap_on(self, node_id: str, targets: list, sweeps: list[str],
                timeout_s: float) -> Ref:
        return Ref(self.now, NodeReap(node_id=node_id))


def replay(policy: str, sizes: list[int], held: dict[str, float], tmp: Path) -> dict[str, Any]:
    """Makespan, lower bound, efficiency and GPU-busy fraction of ``policy``."""
    gpus = sum(sizes)
    cluster_opts: dict[str, Any] = {"address": "virtual",
                                    "order": "packed" if policy == "packed" else "declared"}
    if policy == "ray":
        cluster_opts["max_concurrent_trials"] = gpus
    spec = parse_spec({
        "name": f"replay-{policy}", "cluster": cluster_opts,
        "model": {"preset": "llama-3.1-8b"}, "hardware": "h100-sxm",
        "workload": {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [2]},
        "space": [SPACE]})
    from orchestrator.planning.plan import plan_sweep

    tp = {p.config.key(): p.config.tp for p in plan_sweep(spec)}
    missing = set(tp) - set(held)
    if missing:
        raise ValueError(f"no measured duration for {len(missing)} trial(s)")
    cluster = VirtualCluster(sizes, held, tp, hide_gpus=policy == "ray")
    ledger = Ledger.create(f"name: replay-{policy}\n", f"replay-{policy}", tmp)
    ctl = SweepController(spec, ledger, None, Progress(len(tp), quiet=True), tick_s=0.0,
                          cluster=cluster)  # type: ignore[arg-type]
    while not ctl.done():
        ctl.step()
    spans = [(h.tp, h.start, cluster.ends[id(h)]) for h in cluster.holds]
    gpu_s = sum(t * (e - s) for t, s, e in spans)
    makespan = max(e for _, _, e in spans)
    bound = max(gpu_s / gpus, max(e - s for _, s, e in spans))
    return {"makespan_s": round(makespan, 1), "lower_bound_s": round(bound, 1),
            "efficiency": round(bound / makespan, 3),
            "gpu_busy": round(gpu_s / (gpus * makespan), 3),
            "start_order_tp": [h.tp for h in sorted(cluster.holds, key=lambda h: h.start)]}
