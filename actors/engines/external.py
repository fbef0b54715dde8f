"""An OpenAI-compatible endpoint servesweep does not launch (a deployed server)."""

from __future__ import annotations

import os
from typing import Literal

from actors.contracts.config import SpaceEntry, TrialConfig
from actors.contracts.metrics import MetricsFormat
from actors.engines.base import EngineAdapter, Extras, LaunchContext, LaunchPlan
from actors.engines.deploy import Deployment
from actors.engines.registry import register
from actors.engines.vllm_log import VLLM_METRIC_LABELS, VLLM_METRIC_NAMES

__all__ = ["ExternalAdapter", "ExternalExtras"]


class ExternalExtras(Extras):
    """``label``: a name for the endpoint (it only labels the trial)."""

    engine: Literal["external"] = "external"
    label: str | None = None


@register
class ExternalAdapter(EngineAdapter):
    """Measures ``launch.base_url``; the API key comes from the env var ``launch.api_key_env``.

    Nothing is started or stopped; the trial config only labels the endpoint
    (``extras.label`` names it). Health is polled at ``/v1/models``, which every
    OpenAI-compatible server has. Its log is not servesweep's to read: no KV pool.
    """

    name = "external"
    launches_process = False
    health_path = "/v1/models"  # every OpenAI-compatible server has it
    extras_model = ExternalExtras
    startup_s = 1.0  # already running: the first health check
    # vLLM-style names where the server has them
    metrics_format = MetricsFormat.PROMETHEUS
    metric_names = VLLM_METRIC_NAMES
    metric_labels = VLLM_METRIC_LABELS

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

    def deployment(self, trial: TrialConfig, ctx: LaunchContext,
                   measured_argv: list[str] | None = None) -> Deployment:
        """Nothing: servesweep did not start this server and does not know its settings."""
        return Deployment.nothing(self.name, (
            f"nothing to deploy: the sweep measured an endpoint it did not start "
            f"({ctx.launch.base_url or 'launch.base_url'}); its configuration is whatever "
            "that server runs, which servesweep neither set nor read"))

