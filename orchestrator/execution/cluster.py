"""``Cluster``: everything the controller and a trial ask of Ray, behind one seam.

The controller's step loop and a trial's phases only reserve a node, start the two
actors on it, call their methods, wait for answers, and clean up. ``RayCluster`` does
that on Ray; tests drive the same loop tick by tick with stand-in actors
(tests/unit/test_controller_ticks.py), so the loop is tested without a cluster.

Contract: ``call`` returns a ref at once; ``wait`` returns the refs whose answers are
there (in the order given, at most ``timeout`` seconds); ``get`` returns a ref's answer
or raises what the call raised (Ray's own errors for a lost node or actor:
``ray.exceptions.RayError`` subclasses, which ``failures.classify_ray_error`` sorts).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Cluster", "RayCluster"]


class Cluster(Protocol):
    def gpus_per_node(self) -> tuple[int, int]:
        """(the most GPUs on any alive node, all GPUs)."""

    def reserve(self, bundle: dict[str, float], name: str) -> Any:
        """A reservation of ``bundle`` on one node (a placement group)."""

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


class RayCluster:
    """``Cluster`` on Ray: placement groups of one bundle (STRICT_PACK), actors scheduled
    into them with ``num_cpus=0``."""

    def gpus_per_node(self) -> tuple[int, int]:
        import ray

        per_node = [int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n.get("Alive")]
        return (max(per_node) if per_node else 0), sum(per_node)

    def reserve(self, bundle: dict[str, float], name: str) -> Any:
        from ray.util.placement_group import placement_group

        return placement_group([bundle], strategy="STRICT_PACK", name=name)

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


def _node_id(_actor: object) -> str:
    import ray

    return ray.get_runtime_context().get_node_id()
