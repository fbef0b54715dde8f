"""The matched-work load generator: SSE client, level runner, Ray actor."""

from actors.loadgen.results import LevelMetrics, LevelResult, RequestRecord, ServerObservation

__all__ = ["LevelMetrics", "LevelResult", "RequestRecord", "ServerObservation"]
