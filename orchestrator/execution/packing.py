"""Which node a trial runs on: packing trials of mixed ``tp`` onto nodes of unequal size.

Ray places a placement group wherever it fits, in no order a sweep controls: a run of
small trials can leave every node with a few GPUs free and none with eight, so a
``tp=8`` trial waits while GPUs idle (fragmentation). The controller decides instead,
from the alive nodes and its own trials, and pins each trial's placement group to the
node it picked (``Cluster.reserve`` with a node-id selector):

- order (``ordered``): largest ``tp`` first (``cluster.order: packed``, the default;
  the declared order among equal ``tp``), so the trials that need whole nodes get them
  while the nodes are empty, and the small ones fill what is left;
- best fit (``Packer.place``): the node whose free GPUs are closest to ``tp`` (of equal
  ones, the smaller node), so big nodes stay whole for big trials;
- no starvation: in each pass over the pending trials, the first that fits nowhere keeps
  the node it will get first (the one with most GPUs free among those big enough);
  smaller trials behind it fill other nodes but not that one (``held``);
- ``cluster.gpu_type`` / ``cluster.node_labels`` leave out the nodes that do not match;
  ``cluster.trials_per_node`` caps this sweep's trials on one node.

Pure: nodes come in as ``NodeInfo`` and trials as tokens with a ``tp``; the controller
calls ``refresh`` with the alive nodes, ``begin_pass`` before each round of starts,
``place`` / ``take`` when it starts a trial and ``give_back`` when a trial ends.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from actors.gpus import ACCELERATOR_LABEL
from orchestrator.execution.cluster import NODE_ID_LABEL, NodeInfo
from orchestrator.spec import ClusterSpec, TrialOrder

__all__ = ["Packer", "ordered", "node_matches"]

T = TypeVar("T")


def ordered(trials: list[T], order: TrialOrder, tp_of: Callable[[T], int]) -> list[T]:
    """``trials`` in the order they should start (``cluster.order``)."""
    if order is TrialOrder.DECLARED:
        return list(trials)
    return sorted(trials, key=lambda t: -tp_of(t))  # stable: declared order among equals


def node_matches(node: NodeInfo, spec: ClusterSpec) -> bool:
    """Whether ``node`` is one ``cluster.gpu_type`` and ``cluster.node_labels`` allow."""
    if spec.gpu_type is not None and (node.gpu_type or "").lower() != spec.gpu_type.lower():
        return False
    return all(node.labels.get(k) == v for k, v in spec.node_labels.items())


class Packer:
    """This sweep's view of the nodes: what it holds where, and where a trial goes next.

    ``gpus``: whether trials take GPUs (else each takes none and only
    ``trials_per_node`` limits a node)."""

    def __init__(self, spec: ClusterSpec, gpus: bool):
        self.spec, self.gpus = spec, gpus
        self.nodes: dict[str, NodeInfo] = {}
        self.seen: list[NodeInfo] = []  # every node this sweep matched (alive or not)
        self.used: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self.where: dict[Hashable, tuple[str, int]] = {}
        self.held: str | None = None

    # -- nodes ------------------------------------------------------------------------------
    def refresh(self, nodes: Iterable[NodeInfo]) -> None:
        """The alive nodes now (those the spec allows are kept)."""
        self.nodes = {n.node_id: n for n in nodes if node_matches(n, self.spec)}
        known = {n.node_id for n in self.seen}
        self.seen += [n for n in self.nodes.values() if n.node_id not in known]

    def capacity(self) -> tuple[int, int]:
        """(the most GPUs on one allowed node, the GPUs of all allowed nodes)."""
        gpus = [n.gpus for n in self.nodes.values()]
        return (max(gpus) if gpus else 0), sum(gpus)

    def free(self, node_id: str) -> int:
        return self.nodes[node_id].gpus - self.used.get(node_id, 0)

    def _need(self, tp: int) -> int:
        return tp if self.gpus else 0

    def _room(self, node: NodeInfo, need: int) -> bool:
        cap = self.spec.trials_per_node
        return (self.free(node.node_id) >= need
                and (cap is None or self.count.get(node.node_id, 0) < cap))

    # -- placing ----------------------------------------------------------------------------
    def begin_pass(self) -> None:
        """A new round of starts: no node is kept for a waiting trial yet."""
        self.held = None

    def place(self, tp: int, avoid: Iterable[str] = ()) -> str | None:
        """The node a ``tp`` trial should start on now (best fit; not one of ``avoid``
        unless no other has room); None when none has room, and then (the first time in
        this pass) the node it will get first is kept from smaller trials."""
        need, avoid = self._need(tp), set(avoid)
        open_ = [n for n in self.nodes.values() if n.node_id != self.held and self._room(n, need)]
        fits = [n for n in open_ if n.node_id not in avoid] or open_
        if fits:
            return min(fits, key=lambda n: (self.free(n.node_id) - need, n.gpus,
                                            self.count.get(n.node_id, 0), n.node_id)).node_id
        if self.held is None:
            able = [n for n in self.nodes.values() if n.gpus >= need]
            if able:
                self.held = max(able, key=lambda n: (self.free(n.node_id),
                                                     -self.count.get(n.node_id, 0),
                                                     n.node_id)).node_id
        return None

    def fallback(self) -> dict[str, str] | None:
        """A selector for a trial that fits on no allowed node now, started anyway because
        nothing of the sweep runs (it then waits ``failure.place_timeout_s`` and fails
        with the reason): the largest allowed node, else the allowed labels."""
        if self.nodes:
            big = max(self.nodes.values(), key=lambda n: (n.gpus, n.node_id))
            return {NODE_ID_LABEL: big.node_id}
        labels = dict(self.spec.node_labels)
        if self.spec.gpu_type is not None:
            labels[ACCELERATOR_LABEL] = self.spec.gpu_type
        return labels or None

    def take(self, token: Hashable, node_id: str, tp: int) -> None:
        need = self._need(tp)
        self.where[token] = (node_id, need)
        self.used[node_id] = self.used.get(node_id, 0) + need
        self.count[node_id] = self.count.get(node_id, 0) + 1

    def give_back(self, token: Hashable) -> str | None:
        """Release what ``token`` held; returns its node (None: it held none)."""
        node_id, need = self.where.pop(token, (None, 0))
        if node_id is not None:
            self.used[node_id] -= need
            self.count[node_id] -= 1
        return node_id

    def node_of(self, token: Hashable) -> str | None:
        return self.where.get(token, (None, 0))[0]
