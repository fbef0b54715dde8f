"""Engine adapters: one module per engine, registered by name."""

from actors.engines.base import (
    EngineAdapter,
    LaunchContext,
    LaunchPlan,
    LogEvent,
    MetricsSample,
)
from actors.engines.registry import adapter_names, get_adapter, register

# Importing registers each adapter.
from actors.engines import external, sim, trtllm, vllm  # noqa: E402,F401  isort: skip

__all__ = ["EngineAdapter", "LaunchContext", "LaunchPlan", "LogEvent", "MetricsSample",
           "adapter_names", "get_adapter", "register"]
