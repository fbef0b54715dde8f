"""What a ledger line can say: one model per event kind, a union discriminated on ``type``.

An event of an unknown kind, or a trial result with an unknown status, failure class or
level flag, is rejected when it is written (the model refuses it) and when it is read
back (``parse_event``): the ledger holds nothing its readers cannot interpret.
"""

from __future__ import annotations

import enum
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from actors.contracts.results import TrialResult
from actors.contracts.states import FailureClass, TrialStatus

__all__ = ["EventKind", "Scheduled", "Started", "TrialRecorded", "Interrupted", "Reaped",
           "DriverStarted", "AttemptFailed", "SweepCreated", "LedgerEvent", "parse_event"]


class EventKind(enum.StrEnum):
    SCHEDULED = "scheduled"  # a trial was handed to the cluster
    STARTED = "started"  # its server's process group exists (for reaping)
    TRIAL = "trial"  # a trial's final result
    INTERRUPTED = "interrupted"  # the driver stopped the sweep (Ctrl-C, SIGTERM)
    REAPED = "reaped"  # a later driver stopped what a dead one left running
    DRIVER = "driver"  # a driver took the sweep
    ATTEMPT = "attempt"  # a trial's attempt failed for a transient reason: it runs again
    SWEEP = "sweep"  # the sweep was created from this spec (its first line)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ts: float = Field(default_factory=time.time)


class Scheduled(_Event):
    type: Literal[EventKind.SCHEDULED] = EventKind.SCHEDULED
    key: str
    config: dict[str, Any]


class Started(_Event):
    """A server's process group exists: where (``node_id``, ``host``) and which process
    (``pid`` and its ``start_time``, field 22 of /proc/<pid>/stat, to tell it from a
    later process given the same pid). Fields added later have defaults, so ledgers
    written before them still read (their groups are then reaped by marker only)."""

    type: Literal[EventKind.STARTED] = EventKind.STARTED
    key: str
    pid: int | None = None
    pgid: int | None = None
    start_time: int | None = None
    marker: str = ""
    host: str | None = None
    node_id: str | None = None
    cgroup: str | None = None  # the engine's own cgroup, where its node allowed one


class TrialRecorded(_Event):
    type: Literal[EventKind.TRIAL] = EventKind.TRIAL
    key: str
    status: TrialStatus
    result: TrialResult


class Interrupted(_Event):
    type: Literal[EventKind.INTERRUPTED] = EventKind.INTERRUPTED
    reason: str
    reaped: list[Any] = Field(default_factory=list)


class Reaped(_Event):
    """A driver stopped what a sweep's engines left running. ``complete``: every node
    that had started groups of the sweep answered (or is gone), so the groups started
    before this event need no reaping again (``Ledger.open_groups``)."""

    type: Literal[EventKind.REAPED] = EventKind.REAPED
    reason: str
    by: int | None = None
    complete: bool = False
    killed: dict[str, list[int]] = Field(default_factory=dict)  # node id -> pids stopped
    reused: list[int] = Field(default_factory=list)  # recorded pids another process holds
    leftovers: dict[str, list[int]] = Field(default_factory=dict)  # node id -> pids alive
    unreached: list[str] = Field(default_factory=list)  # nodes that did not answer
    #: node id -> what the ledger named there that is not provably the sweep's (left alone)
    refused: dict[str, list[str]] = Field(default_factory=dict)


class AttemptFailed(_Event):
    """Not a result: the trial runs again (``failure.retries``); its final result follows."""

    type: Literal[EventKind.ATTEMPT] = EventKind.ATTEMPT
    key: str
    attempt: int
    reason: FailureClass
    message: str = ""
    host: dict[str, Any] = Field(default_factory=dict)  # where it ran (node id, host)


class SweepCreated(_Event):
    """The spec the sweep was created from: its digest (of ``spec.yaml``'s bytes) and its
    parsed content, so a later ``resume``/``sync``/``report`` can tell that ``spec.yaml``
    was edited, and which fields changed (``Ledger.check_spec``)."""

    type: Literal[EventKind.SWEEP] = EventKind.SWEEP
    spec_sha256: str
    spec: dict[str, Any] = Field(default_factory=dict)
    #: the request file the spec names (absolute, as it was) and its bytes' sha256; the
    #: sweep keeps a copy under ``requests/`` (``orchestrator.spec.traffic_plan``)
    requests_path: str | None = None
    requests_sha256: str | None = None


class DriverStarted(_Event):
    type: Literal[EventKind.DRIVER] = EventKind.DRIVER
    pid: int
    host: str


LedgerEvent = Annotated[Scheduled | Started | TrialRecorded | Interrupted | Reaped
                        | DriverStarted | AttemptFailed | SweepCreated,
                        Field(discriminator="type")]
_ADAPTER: TypeAdapter[LedgerEvent] = TypeAdapter(LedgerEvent)


def parse_event(line: str) -> LedgerEvent:
    """One ledger line; raises ``pydantic.ValidationError`` for an unknown or bad event."""
    return _ADAPTER.validate_json(line)
