"""What the load generator records per request, before a level is aggregated.

Times in ``RequestRecord`` are raw ``time.perf_counter()`` seconds of the client;
``StreamProof`` is what the count proof read back from a response's bytes. The
level's result (engine time) is ``actors.contracts.results.LevelResult``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RequestRecord", "StreamProof"]



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
    #: token events counted by the transport's scan (no JSON parse) / parsed as JSON
    scanned_events: int = 0
    parsed_events: int = 0
    error: str | None = None  # classified kind, e.g. http_500, stall, disconnect
    error_detail: str = ""
    #: the response body as read, kept for the count proof (``proof.prove``), then dropped:
    #: (framed, bytes) where framed reads are whole HTTP chunks (the lean fast path)
    body: list[tuple[bool, bytes]] = field(default_factory=list)
    proof: StreamProof | None = None
    #: this request's own targets (a request list's lengths); None: the workload's shape.
    #: ``want_prompt`` None with ``text_prompt``: the server's count is taken as is
    want_output: int | None = None
    want_prompt: int | None = None
    text_prompt: bool = False
    due: float | None = None  # open loop: when the schedule said to send it (perf_counter)

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
