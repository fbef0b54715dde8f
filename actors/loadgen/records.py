"""What the load generator measures: per-request records and per-level results.

Times in ``RequestRecord`` are raw ``time.perf_counter()`` seconds of the
client. ``LevelResult`` holds engine-time numbers: for a sim running at
``time_scale`` s < 1, latencies were divided by s and throughputs multiplied
by s, so they read as if the simulated GPU ran in real time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RequestRecord", "StreamProof", "LevelMetrics", "ServerObservation", "ClientHealth",
           "RoundResult", "LevelResult", "LEVEL_FLAGS"]

#: Flags a valid level can carry. ``unverified``: some request's output count rests on the
#: server's final ``usage`` alone (or on a text-tokenizer count beyond its tolerance): such a
#: level cannot win unless the spec says ``workload.trust_usage``. ``itl_spread``: the server
#: said neither how many tokens each chunk carried (per-chunk usage) nor which (token ids),
#: so ITL spreads each request's count evenly over its chunks. ``sim_behind``: the sim could
#: not keep its time scale.
LEVEL_FLAGS = ("noisy", "client_bound", "queueing_mismatch", "unverified", "itl_spread",
               "unpaced", "sim_behind")


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it."""

    index: int
    round: int  # -1: warm-up
    start: float = 0.0
    end: float = 0.0
    first_token: float | None = None
    arrivals: list[float] = field(default_factory=list)  # time of each chunk with tokens
    counts: list[int] = field(default_factory=list)  # tokens in that chunk
    prompt_tokens: int | None = None  # from usage
    completion_tokens: int | None = None  # from usage
    chunk_tokens: int = 0  # tokens counted from chunks
    #: every token-bearing chunk said how many tokens it carried (per-chunk usage or token
    #: ids); False: the client counted one per chunk (ITL then spreads the final count)
    counts_known: bool = True
    error: str | None = None  # classified kind, e.g. http_500, stall, disconnect
    error_detail: str = ""
    #: the response body as read, kept for the count proof (``proof.prove``), then dropped:
    #: (framed, bytes) where framed reads are whole HTTP chunks (the lean fast path)
    body: list[tuple[bool, bytes]] = field(default_factory=list)
    proof: StreamProof | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class StreamProof:
    """The counts of one response, read back from its bytes after the level (``proof``).

    ``None``: the source was absent (or incomplete: some token-bearing chunk lacked it).
    ``text_tokens`` is the model's tokenizer over the streamed text (inexact).
    """

    token_ids: int | None = None  # ids listed in the chunks' ``token_ids``
    chunk_usage: int | None = None  # the last per-chunk ``usage.completion_tokens``
    final_usage: int | None = None  # the final usage-only event's ``completion_tokens``
    final_prompt: int | None = None  # its ``prompt_tokens``
    text_tokens: int | None = None
    chunks: int = 0  # chunks that carried tokens (text or ids)
    text: str = ""


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


class ClientHealth(_M):
    """The client's self-check over a level (the worst shard where there are several)."""

    loop_lag_p99_ms: float
    cpu_frac: float  # CPU seconds of the event-loop thread per wall second
    shards: int = 1  # processes the level's streams were spread over
    #: how the client read: "native" (the lean transport's C read pass), "python" (its
    #: pure-Python pass: no C compiler, or not Linux) or "aiohttp"
    reader: Literal["native", "python", "aiohttp"] = "python"


class RoundResult(_M):
    """One measured round (engine time). A level reports the median over its rounds."""

    round: int
    requests: int
    duration_s: float
    output_tok_s: float
    total_tok_s: float | None = None  # None in results written before rounds kept them
    requests_s: float | None = None


class LevelResult(_M):
    """One concurrency level of one trial."""

    concurrency: int
    status: Literal["valid", "invalid"]
    flags: list[str] = Field(default_factory=list)
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
    time_scale: float = 1.0
    wall_s: float = 0.0
