"""Everything a sim server process needs, as one JSON-serialisable model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from actors.contracts.hardware import get_hardware
from actors.contracts.shapes import ModelShape
from actors.sim.perf import PROFILES, MemoryPlan, SimConfig
from actors.sim.predict import build_engine
from actors.sim.scheduler import SimEngine

__all__ = ["Fault", "StreamOptions", "SimServerConfig", "parse_fault"]

FaultKind = Literal["none", "oom", "crash_after", "stall_after", "unhealthy", "slow_start",
                    "disconnect_after", "error_every", "short_by"]


class Fault(BaseModel):
    """An injected failure: ``kind`` and its number (requests, tokens or seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FaultKind = "none"
    value: float = 0


def parse_fault(text: str | None) -> Fault:
    """``"crash_after:3"`` -> Fault(kind="crash_after", value=3); None or "" -> no fault.

    Server faults: ``oom``, ``crash_after:N`` (requests), ``stall_after:N`` (tokens),
    ``unhealthy``, ``slow_start:S``. Stream faults, for testing clients:
    ``disconnect_after:N`` (close each stream after N tokens), ``error_every:N`` (every
    Nth request gets HTTP 500), ``short_by:K`` (decode K fewer tokens than asked).
    """
    if not text:
        return Fault()
    kind, _, value = str(text).partition(":")
    return Fault(kind=kind, value=float(value or 0))  # type: ignore[arg-type]


class StreamOptions(BaseModel):
    """How the sim streams: honest by default. The other settings make a limited or lying
    server on purpose, to prove the load generator cannot be fooled (tests/e2e)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token_ids: bool = True  # honour ``return_token_ids`` (each chunk lists its ids)
    chunk_usage: bool = True  # honour ``stream_options.continuous_usage_stats``
    final_usage: bool = True  # send the usage-only event (when ``include_usage``)
    #: stream this many tokens fewer than the usage claims (spread over the stream)
    withhold: int = Field(default=0, ge=0)
    #: with ``withhold``: per-chunk usage claims the withheld tokens too (consistent lie)
    inflate_chunk_usage: bool = False
    duplicate_every: int = Field(default=0, ge=0)  # send every k-th token event twice


class SimServerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    hardware: str
    shape: ModelShape
    settings: SimConfig
    served_name: str
    #: more names /v1/models lists (and requests may use): the host's per-launch nonce
    aliases: list[str] = Field(default_factory=list)
    max_model_len: int = Field(gt=0)
    time_scale: float = Field(default=1.0, ge=0, le=1)
    seed: int = 0
    jitter: float = Field(default=0.005, ge=0, lt=0.5)
    fault: Fault = Fault()
    host: str = "127.0.0.1"
    port: int = 0
    trace: bool = False
    stats_interval_s: float = Field(default=10.0, gt=0)
    stream_interval: int = Field(default=1, ge=1)
    stream: StreamOptions = StreamOptions()
    tokenizer: str | None = None  # a directory with tokenizer.json: the text of the tokens
    #: serve HTTPS with this PEM certificate and key (paths; both or neither)
    tls_cert: str | None = None
    tls_key: str | None = None
    profile_overrides: dict[str, float] = Field(default_factory=dict)  # e.g. calibrated

    @model_validator(mode="after")
    def _tls_pair(self) -> SimServerConfig:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        return self

    @field_validator("profile")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in PROFILES:
            raise ValueError(f"unknown sim profile {v!r}; use one of {sorted(PROFILES)}")
        return v

    def build(self) -> tuple[SimEngine, MemoryPlan]:
        return build_engine(self.shape, get_hardware(self.hardware), self.profile, self.settings,
                            seed=self.seed, jitter=self.jitter,
                            overrides=self.profile_overrides)
