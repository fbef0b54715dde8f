"""The service-level objective: latency limits a winner must meet, and per request.

``SLO`` is the spec's ``slo:`` section. At a level, each limit applies to the level's
99th percentile (``violation`` in ``orchestrator.planning.regimes``); for **goodput**, the
same limits apply to each request on its own (``met_by``): its TTFT, the 99th percentile
of its own inter-token gaps, and its end-to-end time. The load generator counts the
output tokens of the requests that met every limit (``LevelMetrics.goodput_tok_s``).
"""

from __future__ import annotations

from pydantic import Field

from actors.contracts.config import Frozen

__all__ = ["SLO"]


class SLO(Frozen):
    """A winner must meet every limit given here at that level (milliseconds)."""

    ttft_p99_ms: float | None = Field(default=None, gt=0)
    itl_p99_ms: float | None = Field(default=None, gt=0)
    e2e_p99_ms: float | None = Field(default=None, gt=0)

    @property
    def empty(self) -> bool:
        return self.ttft_p99_ms is None and self.itl_p99_ms is None and self.e2e_p99_ms is None

    def met_by(self, ttft_ms: float, itl_p99_ms: float | None, e2e_ms: float) -> bool:
        """Whether one request met every limit (an ITL limit is met by a request with no
        gaps: a single-token answer)."""
        if self.ttft_p99_ms is not None and ttft_ms > self.ttft_p99_ms:
            return False
        if self.itl_p99_ms is not None and itl_p99_ms is not None and \
                itl_p99_ms > self.itl_p99_ms:
            return False
        return self.e2e_p99_ms is None or e2e_ms <= self.e2e_p99_ms
