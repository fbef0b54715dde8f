"""``LoadSpec``: everything the driver hands the load generator for one trial, one typed
model across the process seam (no callables: the engine's metrics are read by the
profile's names, ``actors.contracts.metrics``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from actors.contracts.config import Frozen, PosInt, Workload
from actors.contracts.metrics import ClientProfile
from actors.contracts.slo import SLO
from actors.contracts.traffic import RequestPlan

__all__ = ["LoadSpec"]


class LoadSpec(Frozen):
    """The server to measure (``base_url``, the ``model`` name it serves, its ``api_key``
    if it wants one), the work (``workload``, the request list ``plan``: None for the fixed
    shape), the client profile of its engine, the model's vocabulary and tokenizer (prompts
    of exact lengths; the count proof over streamed text), the sim's ``time_scale``, the
    transport and shards (None: the workload's), and the SLO (per-request goodput)."""

    base_url: str
    model: str
    workload: Workload
    plan: RequestPlan | None = None
    client: ClientProfile = ClientProfile()
    vocab_size: PosInt = 32000
    tokenizer_dir: str | None = None
    time_scale: float = Field(default=1.0, ge=0)
    api_key: str | None = Field(default=None, repr=False)
    transport: Literal["lean", "aiohttp"] | None = None
    shards: PosInt | None = None
    slo: SLO | None = None
