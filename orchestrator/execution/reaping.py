"""Reaping on every node: what a sweep started, stopped by a task on the node it ran on.

A trial's engine runs on some node of the cluster; when its driver dies (SIGKILL, OOM, a
lost laptop), its engines may outlive it there, holding GPUs. The ledger's ``started``
events say where each ran (node id, host) and which process it was (pid, start time,
process group, marker, cgroup). ``reap_sweep`` turns them into ``ReapTarget``s, sends
each alive node its own (``Cluster.reap_on``: ``actors.reaper.reap_node`` in a Ray task
pinned to that node), also asks every node to stop processes carrying the sweep's
marker, and records a ``reaped`` event saying what each node stopped.

A target goes to the node whose id it recorded; failing that (the node's raylet
restarted under a new id), to an alive node on the same host; else it is ``unreached``
(the node is gone, and its processes with it unless the machine outlived its raylet).

``reap_dead_drivers`` finds the sweeps to reap when a driver starts: those whose marked
processes or engine cgroups a node reports, and those whose ledger has open groups
(started, no result after), each only while nobody holds its driver lock (the reaping
driver takes it for the while, so a ``resume`` cannot start it meanwhile).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ray.exceptions import GetTimeoutError, RayError

from actors.cgroups import PREFIX
from actors.contracts.diskspace import disk_error
from actors.contracts.reaping import NodeReap, ReapTarget
from actors.ownership import key_is_safe
from orchestrator.errors import UsageError
from orchestrator.execution.cluster import Cluster, NodeInfo
from orchestrator.results.events import Reaped, Started
from orchestrator.results.ledger import Ledger
from orchestrator.results.lock import DriverLock, SweepBusy

__all__ = ["reap_sweep", "reap_dead_drivers", "route", "target_of", "REAP_TIMEOUT_S"]

#: how long a node's reaper waits after SIGTERM before SIGKILL
REAP_TIMEOUT_S = 10.0
#: beyond that, how long the driver waits for the nodes' answers
ANSWER_GRACE_S = 30.0


def target_of(ledger: Ledger, ev: Started) -> ReapTarget:
    """What the node's reaper may stop of ``ev``. The marker is derived from the sweep and
    the key, never read back, so a record naming another sweep's marker proves nothing;
    a key that is not a plain folder name gets no trial folder."""
    return ReapTarget(key=ev.key, pid=ev.pid, pgid=ev.pgid, start_time=ev.start_time,
                      marker=f"{ledger.sweep_id}/{ev.key}", cgroup=ev.cgroup,
                      trial_dir=str(ledger.dir / "trials" / ev.key)
                      if key_is_safe(ev.key) else None)


def route(groups: list[Started], nodes: list[NodeInfo]
          ) -> tuple[dict[str, list[Started]], list[str]]:
    """(alive node id -> the groups to reap there, node ids of groups none can reach)."""
    by_id = {n.node_id: n for n in nodes}
    by_host = {n.host: n for n in reversed(nodes) if n.host}
    out: dict[str, list[Started]] = {}
    unreached: list[str] = []
    for ev in groups:
        node = by_id.get(ev.node_id or "") or by_host.get(ev.host or "")
        if node is None:
            unreached.append(ev.node_id or ev.host or "?")
        else:
            out.setdefault(node.node_id, []).append(ev)
    return out, sorted(set(unreached))


def reap_sweep(cluster: Cluster, ledger: Ledger, reason: str, groups: list[Started],
               timeout_s: float = REAP_TIMEOUT_S) -> Reaped:
    """Stop, on each node, what is alive of ``groups`` and of the sweep's marked
    processes; append and return the ``reaped`` event."""
    nodes = cluster.nodes()
    routed, gone = route(groups, nodes)
    refs = {n.node_id: cluster.reap_on(
        n.node_id, [target_of(ledger, ev) for ev in routed.get(n.node_id, [])],
        [ledger.sweep_id], timeout_s) for n in nodes}
    killed: dict[str, list[int]] = {}
    leftovers: dict[str, list[int]] = {}
    reused: list[int] = []
    refused: dict[str, list[str]] = {}
    failed: list[str] = []
    deadline = time.monotonic() + timeout_s + ANSWER_GRACE_S  # the nodes work at once
    for node_id, ref in refs.items():
        try:
            answer: NodeReap = cluster.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except (GetTimeoutError, RayError):
            failed.append(node_id)
            continue
        if answer.killed:
            killed[node_id] = answer.killed
        if answer.leftovers:
            leftovers[node_id] = answer.leftovers
        reused += answer.reused
        if answer.refused:
            refused[node_id] = answer.refused
    event = Reaped(reason=reason, by=os.getpid(), complete=not failed and not leftovers,
                   killed=killed, reused=sorted(reused), leftovers=leftovers,
                   refused=refused,
                   unreached=sorted(set(gone) | set(failed)))
    try:
        ledger.append(event)
    except OSError as err:  # a full disk: reaped, not recorded (the next resume reaps
        if disk_error(err) is None:  # again); the sweep's own stop says why in one line
            raise
    return event


def _left_on_nodes(cluster: Cluster, nodes: list[NodeInfo]) -> tuple[set[str], list[str]]:
    """(sweep ids of the marked processes on any node, names of the engine cgroups there);
    nothing is stopped."""
    refs = [cluster.reap_on(n.node_id, [], [], 0.0) for n in nodes]
    found: set[str] = set()
    cgroups: list[str] = []
    deadline = time.monotonic() + ANSWER_GRACE_S
    for ref in refs:
        try:
            answer = cluster.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except (GetTimeoutError, RayError):
            continue
        found |= set(answer.sweeps)
        cgroups += answer.cgroup_names
    return found, cgroups


def reap_dead_drivers(cluster: Cluster, root: Path, skip: str | None = None
                      ) -> dict[str, Reaped]:
    """Reap, on every node, the sweeps under ``root`` whose driver is gone and that left
    something: marked processes on a node, or open groups in the ledger. ``skip``: the
    sweep this driver runs. Returns the ``reaped`` event of each sweep reaped."""
    sweeps = root / "sweeps"
    marked, cgroups = _left_on_nodes(cluster, cluster.nodes())
    ids = set(marked)
    if sweeps.is_dir():
        ids |= {d.name for d in sweeps.iterdir() if (d / "ledger.jsonl").is_file()}
    out: dict[str, Reaped] = {}
    for sweep_id in sorted(ids - {skip}):
        try:
            ledger = Ledger.open(sweep_id, root)
        except UsageError:
            continue  # another state root's sweep: not ours to judge
        if DriverLock(ledger.dir).holder() is not None:
            continue
        groups = ledger.open_groups()
        cgroup_left = any(name.startswith(f"{PREFIX}{sweep_id}-") for name in cgroups)
        if not groups and sweep_id not in marked and not cgroup_left:
            continue
        try:
            with DriverLock(ledger.dir).acquire("reap"):  # no resume starts meanwhile
                out[sweep_id] = reap_sweep(cluster, ledger, "driver gone", groups)
        except SweepBusy:
            continue  # a driver took it just now: its engines are its own
    return out
