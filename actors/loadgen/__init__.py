"""The matched-work load generator: SSE client, level runner, Ray actor.

Modules, from one request up to the Ray actor:

- ``prompts``: exact-length token-id (or sized text) prompts, distinct per request and run.
- ``sse``, ``client``: SSE parsing, token counting per chunk, the aiohttp transport.
- ``http1``, ``pool``, ``fastread`` (+ ``fastread.c``): the lean transport (raw keep-alive
  sockets in one epoll set, kernel receive stamps; an optional native read pass, which keeps
  a stream's token reads in C between its first token and its end).
- ``level``: one concurrency level (warm-up, rounds, /metrics sampling); ``shards`` spreads
  a level over processes; ``selfcheck`` measures loop lag and CPU for ``client_bound``.
- ``stats``, ``aggregate``: percentiles and the level rules (invalid, noisy, client_bound).
- ``results``: the pydantic records and results; ``actor``: the Ray actor.
"""

from actors.contracts.results import LevelMetrics, LevelResult, ServerObservation
from actors.loadgen.records import RequestRecord

__all__ = ["LevelMetrics", "LevelResult", "RequestRecord", "ServerObservation"]
