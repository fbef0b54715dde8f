"""What a node's reaper is asked to stop, and what it answers (``actors.reaper``).

The driver builds one ``ReapTarget`` per process group the ledger says a trial started
(its ``started`` event) and sends each node the targets that ran there; the node's
reaper stops what is still alive of them, each process checked by its start time
first, and answers a ``NodeReap``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ReapTarget", "NodeReap"]


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReapTarget(_M):
    """One engine launch: its leader (pid and start time), its group, its marker, its
    cgroup, and the trial folder where its host listed the processes of its tree."""

    key: str
    pid: int | None = None
    pgid: int | None = None
    #: field 22 of /proc/<pid>/stat when it started; None (a ledger written before it
    #: was recorded): the leader cannot be told from a process that reused its pid, and
    #: is not signalled by pid
    start_time: int | None = None
    #: ``<sweep>/<key>``, derived by the driver (never read back): what the leader's
    #: environment and the cgroup's name must show
    marker: str = ""
    cgroup: str | None = None
    trial_dir: str | None = None


class NodeReap(_M):
    """A node's answer: what it stopped, what it left alone, what survived."""

    node_id: str | None = None
    host: str = ""
    killed: list[int] = Field(default_factory=list)  # pids stopped (SIGTERM, then SIGKILL)
    #: recorded pids now held by another process (another start time): left alone
    reused: list[int] = Field(default_factory=list)
    leftovers: list[int] = Field(default_factory=list)  # still alive afterwards
    cgroups_removed: list[str] = Field(default_factory=list)
    sweeps: list[str] = Field(default_factory=list)  # sweep ids of marked processes seen
    #: names of the engine cgroups below the reaper's (``servesweep-<sweep>-<key>-<hex>``)
    cgroup_names: list[str] = Field(default_factory=list)
    #: what the targets named but is not provably the trial's: left alone, with the reason
    refused: list[str] = Field(default_factory=list)
