"""``KvPool``: the KV cache pool a server's startup log (and /metrics) describes.

One engine adapter derives it (``EngineAdapter.kv_pool``); the sweep's capacity check
(``orchestrator.execution.trial``) and ``servesweep capacity`` both read this one
answer, so the two cannot disagree on the same log.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KvPool"]


class KvPool(BaseModel):
    """The pool in blocks, what requests can use of it, and where each number came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the pool in tokens as the log states it (vLLM 0.32 logs max concurrency x
    #: max_model_len, not blocks x block size); None: the log states only blocks
    tokens: int | None = Field(default=None, ge=0)
    blocks: int = Field(ge=0)  # KV blocks allocated
    block_size: int = Field(gt=0)  # tokens per block
    #: blocks requests can hold: vLLM reserves block 0 as its null block (blocks - 1);
    #: engines without one use every block
    usable_blocks: int = Field(ge=0)
    block_size_source: str  # where the block size came from, for a reader
    #: the server's longest request (prompt + output) as its log states it; None: not stated
    max_model_len: int | None = Field(default=None, gt=0)
    max_model_len_source: str | None = None
    max_num_seqs: int | None = Field(default=None, gt=0)  # the log's running-request limit
    #: "preempt_recompute" or "guaranteed_no_evict": the admission this server uses
    admission: str
    engine_estimate: str | None = None  # the engine's own sentence about its capacity
    #: short tags of what was read ("log: KV pool tokens", "log: KV blocks", "metrics: ...")
    sources: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # caveats worth saying to a reader
    #: indices into the events the pool was derived from, of every event used (their log
    #: lines are the evidence ``servesweep capacity`` quotes)
    evidence: list[int] = Field(default_factory=list)
