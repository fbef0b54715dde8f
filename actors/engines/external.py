"""An OpenAI-compatible endpoint servesweep does not launch (a deployed server)."""

from __future__ import annotations

import os
from typing import ClassVar

from actors.engines.base import EngineAdapter, LaunchContext, LaunchPlan, MetricsSample
from actors.engines.registry import register
from actors.engines.vllm_log import parse_vllm_metrics
from orchestrator.spec import SpaceEntry, TrialConfig

__all__ = ["ExternalAdapter"]


@register
class ExternalAdapter(EngineAdapter):
    """Measures ``launch.base_url``; the API key comes from the env var ``launch.api_key_env``.

    Nothing is started or stopped; the trial config only labels the endpoint.
    ``extras.health_path`` overrides ``/health`` for servers that lack it.
    """

    name = "external"
    launches_process = False
    health_path = "/v1/models"  # every OpenAI-compatible server has it
    extras: ClassVar[dict[str, type]] = {"label": str}

    def check_space(self, entry: SpaceEntry) -> None:
        super().check_space(entry)
        if not entry.launch.base_url:
            raise ValueError("engine 'external' needs launch.base_url "
                             "(e.g. http://127.0.0.1:8000)")
        if not entry.launch.base_url.startswith(("http://", "https://")):
            raise ValueError(f"launch.base_url must start with http:// or https://, got "
                             f"{entry.launch.base_url!r}")

    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        key = os.environ.get(ctx.launch.api_key_env) if ctx.launch.api_key_env else None
        return LaunchPlan(base_url=(ctx.launch.base_url or "").rstrip("/"), api_key=key)

    def parse_metrics(self, text: str, t: float) -> MetricsSample:
        return parse_vllm_metrics(text, t)  # vLLM-style names when the server has them
