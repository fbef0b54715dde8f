"""Engine adapters: one module per engine, registered by name.

- ``base``: ``EngineAdapter`` (its docstring is the contract), ``LaunchContext``,
  ``LaunchPlan``, ``LogEvent``, ``MetricsSample``.
- ``extras``: ``Extras`` and the union of every engine's extras, discriminated on
  ``engine`` (``parse_extras``, ``check_extras``).
- ``registry``: adapters by engine name.
- ``vllm`` (+ ``vllm_log``), ``trtllm`` (+ ``trtllm_log``, ``trtllm_options``), ``sim``,
  ``external``: one adapter each.
"""

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
