"""Results: one concurrency level (``LevelResult``) and one trial (``TrialResult``).

``LevelResult`` holds engine-time numbers: for a sim running at ``time_scale`` s < 1,
latencies were divided by s and throughputs multiplied by s, so they read as if the
simulated GPU ran in real time. A trial ends ``ok``, ``invalid``, ``failed`` (with a
failure class) or ``infeasible`` (``TrialStatus``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.contracts.applied import AppliedConfig
from actors.contracts.config import TrialConfig
from actors.contracts.quality import QualityResult, QualityVerdict
from actors.contracts.states import (
    INVALID_LEVEL,
    FailureClass,
    LevelFlag,
    LevelStatus,
    TrialStatus,
)
from actors.contracts.traffic import Level

__all__ = ["LevelMetrics", "ServerObservation", "HostLoad", "ClientHealth", "RoundResult",
           "OpenLoop", "LevelResult", "CapacityProbe", "SloCapacity", "Capacity", "TrialResult"]

class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LevelMetrics(_M):
    """Median-round throughput and pooled latency percentiles of one concurrency level."""

    output_tok_s: float
    total_tok_s: float
    requests_s: float
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    decode_tok_s_per_req_p50: float | None = None
    #: gaps between the reads that brought tokens (per chunk, not per token), beside ITL
    chunk_gap_p50_ms: float | None = None
    chunk_gap_p99_ms: float | None = None
    round_spread: float = 0.0
    #: with an SLO: output tokens/s of the requests that met every limit on their own
    #: (median over rounds), and the share of requests that did (``actors.contracts.slo``)
    goodput_tok_s: float | None = None
    slo_met: float | None = None


class ServerObservation(_M):
    """What ``/metrics`` said during the level (None: not reported by the engine)."""

    samples: int = 0
    running_max: float | None = None
    running_p50: float | None = None
    waiting_max: float | None = None
    waiting_p50: float | None = None
    kv_usage_max: float | None = None
    preemptions: float | None = None
    block_size: int | None = None
    num_blocks: int | None = None
    #: the sim's punctuality over the level (``actors.sim.pace``; None from a real engine):
    #: tokens its paced steps wrote, the share written late, their mean lateness (wall ms),
    #: and the share of the requests' first tokens written late (their TTFT)
    sim_paced_tokens: float | None = None
    sim_late_share: float | None = None
    sim_lag_mean_ms: float | None = None
    sim_late_first_share: float | None = None
    #: share of the level's wall time the sim lost to stalls it could not make up (a step
    #: more than 50 ms late restarts its schedule: the time is gone from its throughput)
    sim_lost_share: float | None = None


class HostLoad(_M):
    """The machine the level ran on, while it ran (the sim's numbers depend on it)."""

    cpus: int  # CPUs this process may run on
    load_1m: float | None = None  # the 1-minute load average at the level's end
    #: share of all CPUs' time spent busy (not idle or iowait) during the level
    busy: float | None = None


class ClientHealth(_M):
    """The client's self-check over a level (the worst shard where there are several)."""

    loop_lag_p99_ms: float
    cpu_frac: float  # CPU seconds of the event-loop thread per wall second
    shards: int = 1  # processes the level's streams were spread over
    #: how the client read: "native" (the lean transport's C read pass), "python" (its
    #: pure-Python pass: no C compiler, or not Linux) or "aiohttp"
    reader: Literal["native", "python", "aiohttp"] = "python"
    #: token events counted without a JSON parse (the transport's scan, native or Python,
    #: or the counter's usage scan) and those parsed as JSON: which path parsed the stream
    events_scanned: int = 0
    events_json: int = 0
    #: reads of the measured rounds that the native pass kept in C (whole token reads of a
    #: stream between its first token and its end: no Python ran for them)
    reads_kept: int = 0

    @property
    def parse(self) -> str:
        """"scan" (at least 95% of token events without JSON), "json" (at most 5%),
        else "mixed"; "none" before any event was counted."""
        total = self.events_scanned + self.events_json
        if not total:
            return "none"
        frac = self.events_scanned / total
        return "scan" if frac >= 0.95 else "json" if frac <= 0.05 else "mixed"


class RoundResult(_M):
    """One measured round (engine time). A level reports the median over its rounds."""

    round: int
    requests: int
    duration_s: float
    output_tok_s: float
    total_tok_s: float | None = None  # None in results written before rounds kept them
    requests_s: float | None = None


class OpenLoop(_M):
    """How an open-loop level (a rate or a trace) held its schedule, and the steady window
    its metrics come from: each round's span of sends, from its first to its last, less
    ``workload.steady_trim`` of it at each end, and opening no sooner than one median
    request duration after the first send (the server has filled: not ramping up, not
    draining). Throughput counts the tokens that arrived inside the window over its
    length; latencies come from the requests sent inside it (each to its end). A round
    too short for a window is measured whole."""

    offered_rps: float  # requests per engine second the level asked (its rate)
    #: the seeded schedule's own rate (a finite Poisson draw differs from the rate by
    #: chance: about 1/sqrt(n)), and the sends the client made (median rounds): the client
    #: held its schedule when these two agree
    scheduled_rps: float | None = None
    achieved_rps: float  # sends per engine second the client made (median round)
    late_sends: int = 0  # requests sent more than ``workload.late_send_ms`` late
    send_lag_p99_ms: float | None = None  # engine ms from scheduled to sent, p99
    window_kept: int = 0  # requests whose latencies count
    window_left_out: int = 0  # measured requests outside the window


class LevelResult(_M):
    """One level of one trial. ``level`` is its identity (``key``: ``c=32``,
    ``rate=4/s``, ``trace x2``); ``concurrency`` the most requests it let in flight (a
    closed loop's level; an open loop's cap). Results written before levels had kinds
    have no ``level``: they were concurrencies."""

    concurrency: int
    level: Level | None = None
    open_loop: OpenLoop | None = None
    #: prefix-cache hits / queries the server reported over the level (None: not reported)
    prefix_hit_rate: float | None = None
    status: LevelStatus
    flags: list[LevelFlag] = Field(default_factory=list)
    reason: str = ""
    requests: int = 0
    metrics: LevelMetrics | None = None
    rounds: list[RoundResult] = Field(default_factory=list)
    errors: dict[str, int] = Field(default_factory=dict)
    count_mismatches: int = 0
    #: what proved the output counts, request by request: source -> requests ("token ids",
    #: "per-chunk usage", "tokenizer", "usage only", "none")
    count_sources: dict[str, int] = Field(default_factory=dict)
    server: ServerObservation = ServerObservation()
    client: ClientHealth | None = None
    host_load: HostLoad | None = None
    time_scale: float = 1.0
    wall_s: float = 0.0

    @property
    def identity(self) -> Level:
        return self.level if self.level is not None else Level.of(self.concurrency)

    @property
    def key(self) -> str:
        """The level's name everywhere: ``c=32``, ``rate=4/s``, ``trace x2``."""
        return self.identity.key


class CapacityProbe(_M):
    """One rate the capacity search measured."""

    rate: float  # requests per engine second offered
    held: bool  # valid, on schedule, and ``share`` of requests met every SLO limit
    slo_met: float | None = None
    output_tok_s: float | None = None
    goodput_tok_s: float | None = None
    reason: str = ""  # why it did not hold


class SloCapacity(_M):
    """Capacity at SLO of one config (``actors.contracts.traffic.CapacitySpec``). ``rps``
    None: not even the lowest rate held (``note`` says why). ``band``: the spread of the
    repeated measurements at ``rps`` (output tok/s, max minus min over the median)."""

    rps: float | None
    output_tok_s: float | None = None
    rps_per_gpu: float | None = None
    output_tok_s_per_gpu: float | None = None
    usd_per_million_tokens: float | None = None
    band: float | None = None
    share: float
    tolerance: float
    bracket: tuple[float | None, float | None] = (None, None)  # held below, missed above
    probes: list[CapacityProbe] = Field(default_factory=list)
    repeats: list[CapacityProbe] = Field(default_factory=list)
    note: str = ""


class Capacity(BaseModel):
    """The KV pool a server reported and what it implies for the workload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str
    pool_tokens: int | None = None
    block_size: int | None = None
    pool_blocks: int | None = None
    #: blocks requests can hold (``KvPool.usable_blocks``: vLLM keeps one as its null block)
    usable_blocks: int | None = None
    blocks_per_request: int | None = None
    full_length_capacity: int | None = None  # requests that fit at full length (usable blocks)
    max_model_len: int | None = None  # the server's longest request (log, else the config)
    rejects_requests: bool = False  # prompt + output > max_model_len: every request refused
    note: str = ""  # why, when ``rejects_requests``
    sources: list[str] = Field(default_factory=list)


class TrialResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    config: TrialConfig
    status: TrialStatus
    #: a ``FailureClass`` value (failed), ``invalid_level`` (invalid), why it was pruned
    #: (infeasible), empty (ok)
    reason: str = ""
    message: str = ""
    levels: list[LevelResult] = Field(default_factory=list)
    capacity: Capacity | None = None
    startup_s: float | None = None
    wall_s: float | None = None
    applied: AppliedConfig = Field(default_factory=AppliedConfig)
    versions: dict[str, str] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)  # node, gpu ids, argv (redacted), pid
    hardware: str = ""
    time_scale: float = 1.0
    log_tail: str = ""
    attempt: int = 1
    #: the work it was measured on: request list and schedule
    #: (``orchestrator.spec.traffic_plan.workload_fingerprint``; empty: written before)
    workload_fingerprint: str = ""
    #: capacity at SLO (``workload.capacity``), when the spec asked for it
    slo_capacity: SloCapacity | None = None
    #: the quality run on its warm server (``quality:``) and its standing against the
    #: reference (decided when the trial finished: the reference runs first)
    quality: QualityResult | None = None
    quality_verdict: QualityVerdict | None = None

    @model_validator(mode="after")
    def _reason_fits_status(self) -> TrialResult:
        if self.status is TrialStatus.FAILED and self.reason not in set(FailureClass):
            raise ValueError(f"a failed trial's reason must be a failure class "
                             f"({', '.join(FailureClass)}), not {self.reason!r}")
        if self.status is TrialStatus.INVALID and self.reason != INVALID_LEVEL:
            raise ValueError(f"an invalid trial's reason is {INVALID_LEVEL!r}, "
                             f"not {self.reason!r}")
        return self

    def level(self, key: int | str) -> LevelResult | None:
        """The level named ``key`` (``c=8``, ``rate=4/s``; an integer is a concurrency)."""
        want = Level.parse(key).key
        return next((lv for lv in self.levels if lv.key == want), None)
