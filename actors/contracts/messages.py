"""What the actors answer the driver: one frozen model per ``EngineHost`` call.

A failure is data (``failure`` + ``message``), never an exception: a broken engine is a
failed trial, not a broken sweep. ``events`` are the adapter's log events without their
raw lines (``{"kind": ..., **values}``); ``applied`` is what the server reports it runs
with, as the engine's adapter reads it (``EngineAdapter.applied``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from actors.contracts.applied import AppliedConfig
from actors.contracts.states import FailureClass

__all__ = ["LaunchInfo", "Readiness", "Observation", "StopResult"]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LaunchInfo(_Message):
    """``EngineHost.launch``: where the server runs; the ledger records it at once."""

    host: str
    node_ip: str | None = None
    node_id: str | None = None
    #: the kernel's boot id (/proc/sys/kernel/random/boot_id): one machine between two boots.
    #: Ray's node id is new with every cluster; this tells levels measured on the same machine
    #: (a host-bound model runs 1.3-2.2x apart across H200 nodes) from levels of another
    boot_id: str | None = None
    #: the niceness the engine host (and so the engine and its client) ran at: Ray's workers
    #: default to 15, which starves them beside any busy process (docs/troubleshooting.md)
    nice: int | None = None
    argv: list[str] = Field(default_factory=list)  # secrets redacted
    env: dict[str, str] = Field(default_factory=dict)  # secrets redacted
    marker: str = ""  # in the server's environment: finds its processes later
    pid: int | None = None  # None: nothing launched (external) or the launch failed
    pgid: int | None = None
    #: the leader's start time (field 22 of /proc/<pid>/stat): tells it from a process
    #: that reuses its pid later
    start_time: int | None = None
    cgroup: str | None = None  # the engine's own cgroup, where the node allows one
    gpu_ids: list[str] = Field(default_factory=list)
    gpu_model: str | None = None  # the GPUs' model (nvidia-smi, else Ray's accelerator type)
    failure: FailureClass | None = None
    message: str = ""


class Readiness(_Message):
    """``EngineHost.wait_ready``: healthy (with the applied config) or a failure."""

    base_url: str | None = None
    startup_s: float | None = None
    applied: AppliedConfig = Field(default_factory=AppliedConfig)
    mismatches: list[str] = Field(default_factory=list)  # requested vs applied, spelled out
    events: list[dict[str, Any]] = Field(default_factory=list)
    failure: FailureClass | None = None
    message: str = ""
    log_tail: str = ""


class Observation(_Message):
    """``EngineHost.observe``: is the server alive, and what its log said so far."""

    alive: bool
    returncode: int | None = None
    events: list[dict[str, Any]] = Field(default_factory=list)
    log_tail: str = ""


class StopResult(_Message):
    """``EngineHost.stop``: how the process group ended and what (if anything) is left."""

    returncode: int | None = None
    killed: bool = False  # it needed SIGKILL
    leftovers: list[int] = Field(default_factory=list)  # pids still alive after the stop
