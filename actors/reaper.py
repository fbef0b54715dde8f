"""A node's reaper: stops, on its own node, what a dead driver's trials left running.

The driver sends each node (a Ray task pinned to it: ``reap_task`` with a
``NodeAffinitySchedulingStrategy``) the ``ReapTarget``s the ledger's ``started`` events
place there, and the ids of sweeps whose driver is gone. ``reap_node`` stops:

- a target's leader, when its pid still names the process that started at the recorded
  start time (a pid the kernel handed to another process is listed in ``reused`` and
  left alone) and carries the trial's marker, with the group and session it leads and
  its descendants;
- the processes its host listed in the trial folder (``proctree.PROCS_FILE``: what left
  the group and dropped the marker), each checked by its start time and the host's
  watch window, when that host is gone (a live host stops its own);
- every member of the target's cgroup (``actors.cgroups``), then the cgroup itself, when
  it is one servesweep made for that trial below this worker's cgroup;
- every process whose marker names one of ``sweeps``, and every cgroup named for one of
  them below this worker's cgroup (one whose ``started`` line was torn is found so).

Whatever a record names that the kernel does not show to be ours (``actors.ownership``)
is left alone and listed in ``NodeReap.refused`` with the reason.

SIGTERM first, then SIGKILL after ``timeout_s``; every signal is sent only after the
process's start time is checked again. With no targets and no sweeps it kills nothing
and only says which sweeps' marked processes run there (``NodeReap.sweeps``).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from actors.cgroups import EngineCgroup
from actors.contracts.reaping import NodeReap, ReapTarget
from actors.ownership import (
    cgroup_refusal,
    engine_cgroups,
    key_is_safe,
    leader_refusal,
    listed_refusal,
    listed_window,
    sweep_cgroups,
)
from actors.procs import marked_processes
from actors.proctree import (
    PROCS_FILE,
    ProcStat,
    alive_same,
    all_stats,
    descendants,
    read_procs_file,
    signal_if_same,
)

__all__ = ["reap_node", "reap_task"]


def _procs_files(trial_dir: str) -> list[Path]:
    d = Path(trial_dir)
    return [d / PROCS_FILE, *sorted(d.glob(f"attempt-*/{PROCS_FILE}"))]


def _host_alive(path: Path) -> bool:
    try:
        host = int(json.loads(path.read_text()).get("host_pid", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return False
    return host > 0 and Path(f"/proc/{host}").exists()


def _with_tree(victims: dict[int, int], st: ProcStat, stats: dict[int, ProcStat]) -> None:
    victims[st.pid] = st.start_time
    for d in descendants(st.pid, stats):
        victims[d.pid] = d.start_time


def _collect(target: ReapTarget, stats: dict[int, ProcStat], victims: dict[int, int],
             reused: list[int], cgroups: list[EngineCgroup], refused: list[str]) -> None:
    """Add to ``victims`` what of ``target`` is provably the trial's (``actors.ownership``);
    list in ``refused`` what the record names but the kernel does not show to be ours."""
    if not key_is_safe(target.key):
        refused.append(f"key {target.key[:60]!r}: not a trial key")
        return
    if target.pid is not None and target.start_time is not None:
        st = stats.get(target.pid)
        if st is not None and st.start_time != target.start_time:
            reused.append(target.pid)
        elif st is not None and st.state != "Z":
            why = leader_refusal(st, target.marker)
            if why is not None:
                refused.append(why)
            else:
                _with_tree(victims, st, stats)
                for other in stats.values():  # the group and session it leads: its own
                    if st.pid in (other.pgid, other.sid) and other.state != "Z":
                        _with_tree(victims, other, stats)
    if target.trial_dir:
        for path in _procs_files(target.trial_dir):
            if path.is_file() and not _host_alive(path):
                window = listed_window(path)
                for pid, start in read_procs_file(path).items():
                    st = stats.get(pid)
                    if st is None or st.start_time != start or st.state == "Z":
                        continue
                    why = listed_refusal(st, window)
                    if why is None:
                        _with_tree(victims, st, stats)
                    else:
                        refused.append(why)
    if target.cgroup:
        cg = EngineCgroup(Path(target.cgroup))
        if cg.path.is_dir():
            why = cgroup_refusal(cg.path, target.marker)
            if why is not None:
                refused.append(why)
                return
            cgroups.append(cg)
            for pid in cg.pids():
                st = stats.get(pid)
                if st is not None:
                    victims[pid] = st.start_time


def reap_node(targets: list[ReapTarget], sweeps: list[str], timeout_s: float = 10.0,
              node_id: str | None = None) -> NodeReap:
    """Stop what is alive here of ``targets`` and of the marked processes of ``sweeps``."""
    stats = all_stats()
    victims: dict[int, int] = {}
    reused: list[int] = []
    cgroups: list[EngineCgroup] = []
    refused: list[str] = []
    for t in targets:
        _collect(ReapTarget.model_validate(t), stats, victims, reused, cgroups, refused)
    wanted = set(sweeps)
    named = {str(cg.path) for cg in cgroups}
    engine_cgs = engine_cgroups()
    for sweep in sorted(wanted):  # incl. those whose ``started`` line was torn
        for path in sweep_cgroups(sweep, engine_cgs):
            if str(path) not in named:
                cg = EngineCgroup(path)
                cgroups.append(cg)
                victims.update({p: stats[p].start_time for p in cg.pids() if p in stats})
    seen: set[str] = set()
    for pid, _, marker in marked_processes(""):
        sweep = marker.split("/", 1)[0]
        seen.add(sweep)
        if sweep in wanted and pid in stats:
            _with_tree(victims, stats[pid], stats)
    victims.pop(os.getpid(), None)
    killed = [p for p, s in victims.items() if signal_if_same(p, s, signal.SIGTERM)]
    for cg in cgroups:
        cg.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive_same(p, s) for p, s in victims.items()):
        time.sleep(0.1)
    for p, s in victims.items():
        if signal_if_same(p, s, signal.SIGKILL) and p not in killed:
            killed.append(p)
    for cg in cgroups:
        cg.signal(signal.SIGKILL)
    for _ in range(50):
        if not any(alive_same(p, s) for p, s in victims.items()):
            break
        time.sleep(0.1)
    removed = [str(cg.path) for cg in cgroups if not cg.pids() and cg.remove()]
    return NodeReap(node_id=node_id, host=socket.gethostname(), killed=sorted(killed),
                    reused=sorted(reused), cgroups_removed=removed, sweeps=sorted(seen),
                    refused=refused, cgroup_names=[p.name for p in engine_cgs],
                    leftovers=sorted(p for p, s in victims.items() if alive_same(p, s)))


def _reap_here(targets: list[ReapTarget], sweeps: list[str], timeout_s: float) -> NodeReap:
    import ray

    node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    return reap_node(targets, sweeps, timeout_s, node_id)


@functools.cache
def reap_task() -> Any:
    """``reap_node`` as a Ray task (no CPU reserved, never retried); the caller pins it to
    a node with ``.options(scheduling_strategy=NodeAffinitySchedulingStrategy(...))``."""
    import ray

    return ray.remote(num_cpus=0, max_retries=0)(_reap_here)
