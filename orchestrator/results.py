"""Trial states and the ``TrialResult`` every trial ends with."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from actors.loadgen.results import LevelResult
from orchestrator.spec import TrialConfig

__all__ = ["TrialStatus", "TrialResult", "Capacity"]


class TrialStatus(str, enum.Enum):
    """pending/running while the sweep works on it; the other four are final."""

    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"  # ran, every level valid
    INVALID = "invalid"  # ran, some level invalid (valid levels kept)
    FAILED = "failed"  # did not run to the end; ``reason`` holds the failure class
    INFEASIBLE = "infeasible"  # pruned before launch; ``reason`` says why

    def is_finished(self) -> bool:
        return self not in (TrialStatus.PENDING, TrialStatus.RUNNING)

    def has_measurements(self) -> bool:
        return self in (TrialStatus.OK, TrialStatus.INVALID)


class Capacity(BaseModel):
    """The KV pool a server reported and what it implies for the workload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str
    pool_tokens: int | None = None
    block_size: int | None = None
    pool_blocks: int | None = None
    blocks_per_request: int | None = None
    full_length_capacity: int | None = None  # requests that fit at full length
    max_model_len: int | None = None  # the server's longest request (log, else the config)
    rejects_requests: bool = False  # prompt + output > max_model_len: every request refused
    note: str = ""  # why, when ``rejects_requests``
    sources: list[str] = Field(default_factory=list)


class TrialResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    config: TrialConfig
    status: TrialStatus
    reason: str = ""  # failure class or infeasibility reason
    message: str = ""
    levels: list[LevelResult] = Field(default_factory=list)
    capacity: Capacity | None = None
    startup_s: float | None = None
    wall_s: float | None = None
    applied: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)  # node, gpu ids, argv (redacted), pid
    hardware: str = ""
    time_scale: float = 1.0
    log_tail: str = ""
    attempt: int = 1

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)
