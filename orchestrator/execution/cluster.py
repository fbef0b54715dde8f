"""``Cluster``: everything the controller and a trial ask of Ray, behind one seam.

The controller's step loop and a trial's phases only reserve a node, start the two
actors on it, call their methods, wait for answers, and clean up. ``RayCluster`` does
that on Ray; tests drive the same loop tick by tick with stand-in actors
(tests/unit/test_controller_ticks.py), so the loop is tested without a cluster.

Contract: ``call`` returns a ref at once; ``wait`` returns the refs whose answers are
there (in the order given, at most ``timeout`` seconds); ``get`` returns a ref's answer
or raises what the call raised (Ray's own errors for a lost node or actor:
``ray.exceptions.RayError`` subclasses, which ``failures.classify_ray_error`` sorts).
``nodes`` lists the alive nodes (what ``packing`` places trials on); ``reserve`` with a
``selector`` holds the bundle only on a node carrying those labels (``NODE_ID_LABEL``:
that one node); ``reap_on`` runs ``actors.reaper`` on one node.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import Field

from actors.contracts.config import Frozen
from actors.contracts.reaping import ReapTarget
from actors.gpus import ACCELERATOR_LABEL, ACCELERATOR_RESOURCE

__all__ = ["Cluster", "RayCluster", "NodeInfo", "NODE_ID_LABEL", "node_info"]

#: the label Ray gives every node: its id (a selector on it pins a placement group)
NODE_ID_LABEL = "ray.io/node-id"


class NodeInfo(Frozen):
    """An alive node as placement sees it."""

    node_id: str
    host: str = ""
    gpus: int = 0
    gpu_type: str | None = None  # Ray's accelerator type (resource or label), e.g. H100
    labels: dict[str, str] = Field(default_factory=dict)


class Cluster(Protocol):
    def nodes(self) -> list[NodeInfo]:
        """The alive nodes."""

    def reserve(self, bundle: dict[str, float], name: str,
                selector: dict[str, str] | None = None) -> Any:
        """A reservation of ``bundle`` on one node (a placement group), on a node carrying
        every label of ``selector`` when one is given."""

    def reserved(self, reservation: Any) -> Any:
        """A ref that answers once the reservation holds a node."""

    def release(self, reservation: Any) -> None: ...

    def start_host(self, reservation: Any, gpus: int, trial: dict[str, Any],
                   ctx: dict[str, Any]) -> Any:
        """An ``EngineHost`` actor on the reserved node."""

    def start_loadgen(self, reservation: Any, *args: Any) -> Any:
        """A ``LoadGenerator`` actor on the reserved node."""

    def call(self, actor: Any, method: str, *args: Any) -> Any:
        """Call ``actor.method(*args)``; returns a ref."""

    def wait(self, refs: list[Any], timeout: float) -> list[Any]: ...

    def get(self, ref: Any, timeout: float | None = None) -> Any: ...

    def kill(self, actor: Any) -> None: ...

    def node_of(self, actor: Any) -> str | None:
        """The node an actor runs on (None: it cannot say)."""

    def reap_on(self, node_id: str, targets: list[ReapTarget], sweeps: list[str],
                timeout_s: float) -> Any:
        """``actors.reaper.reap_node`` as a task on node ``node_id``; a ref to its
        ``NodeReap``."""


def node_info(raw: dict[str, Any]) -> NodeInfo:
    """A ``NodeInfo`` from one entry of ``ray.nodes()``."""
    resources = raw.get("Resources") or {}
    labels = {str(k): str(v) for k, v in (raw.get("Labels") or {}).items()}
    types = [r[len(ACCELERATOR_RESOURCE):] for r in resources
             if r.startswith(ACCELERATOR_RESOURCE)]
    return NodeInfo(node_id=raw["NodeID"], host=raw.get("NodeManagerHostname") or "",
                    gpus=int(resources.get("GPU", 0)), labels=labels,
                    gpu_type=labels.get(ACCELERATOR_LABEL) or (types[0] if types else None))


class RayCluster:
    """``Cluster`` on Ray: placement groups of one bundle (STRICT_PACK), actors scheduled
    into them with ``num_cpus=0``."""

    def nodes(self) -> list[NodeInfo]:
        import ray

        return [node_info(n) for n in ray.nodes() if n.get("Alive")]

    def reserve(self, bundle: dict[str, float], name: str,
                selector: dict[str, str] | None = None) -> Any:
        from ray.util.placement_group import placement_group

        return placement_group([bundle], strategy="STRICT_PACK", name=name,
                               bundle_label_selector=[selector] if selector else None)

    def reserved(self, reservation: Any) -> Any:
        return reservation.ready()

    def release(self, reservation: Any) -> None:
        from ray.exceptions import RayError
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(reservation)
        except RayError:
            pass

    @staticmethod
    def _into(reservation: Any) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"num_cpus": 0, "scheduling_strategy": PlacementGroupSchedulingStrategy(
            reservation, placement_group_bundle_index=0)}

    def start_host(self, reservation: Any, gpus: int, trial: dict[str, Any],
                   ctx: dict[str, Any]) -> Any:
        from actors.engine_host import EngineHost

        return EngineHost.options(num_gpus=gpus, **self._into(reservation)).remote(trial, ctx)

    def start_loadgen(self, reservation: Any, *args: Any) -> Any:
        from actors.loadgen.actor import LoadGenerator

        return LoadGenerator.options(**self._into(reservation)).remote(*args)

    def call(self, actor: Any, method: str, *args: Any) -> Any:
        return getattr(actor, method).remote(*args)

    def wait(self, refs: list[Any], timeout: float) -> list[Any]:
        import ray

        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        return ready

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        import ray

        return ray.get(ref, timeout=timeout)

    def kill(self, actor: Any) -> None:
        import ray
        from ray.exceptions import RayError

        try:
            ray.kill(actor)
        except RayError:
            pass

    def node_of(self, actor: Any) -> str | None:
        from ray.exceptions import GetTimeoutError, RayError

        try:
            return self.get(actor.__ray_call__.remote(_node_id), timeout=10)
        except (GetTimeoutError, RayError):
            return None

    def reap_on(self, node_id: str, targets: list[ReapTarget], sweeps: list[str],
                timeout_s: float) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from actors.reaper import reap_task

        return reap_task().options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=False)).remote(targets, sweeps, timeout_s)


def _node_id(_actor: object) -> str:
    import ray

    return ray.get_runtime_context().get_node_id()
