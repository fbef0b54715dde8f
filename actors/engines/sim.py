"""Adapter for servesweep's own simulated engine (``actors.sim.server``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, ClassVar

from actors.engines.base import EngineAdapter, LaunchContext, LaunchPlan, LogEvent, MetricsSample
from actors.engines.registry import register
from actors.engines.trtllm_log import parse_trtllm_line
from actors.engines.vllm_log import applied_from_events, parse_vllm_line, parse_vllm_metrics
from actors.sim.config import SimServerConfig, parse_fault
from actors.sim.perf import PROFILES, SimConfig
from actors.sim.shapes import load_shape
from orchestrator.spec import SpaceEntry, TrialConfig

__all__ = ["SimAdapter", "sim_settings"]


def sim_settings(trial: TrialConfig) -> SimConfig:
    """The performance model's view of a trial (every server setting it models)."""
    return SimConfig(**{k: getattr(trial, k) for k in SimConfig.model_fields})

_HEADER = re.compile(r"servesweep-sim (?P<version>\S+): profile=(?P<profile>\w+) "
                     r"hardware=(?P<hardware>\S+) model=\S+ tp=(?P<tp>\d+) "
                     r"weights=(?P<weights>\w+) kv_dtype=(?P<kv_dtype>\w+) "
                     r"cuda_graphs=(?P<cuda_graphs>True|False) time_scale=(?P<time_scale>[\d.e-]+)")
_BEHIND = re.compile(r"sim: engine loop behind real time by (?P<seconds>[\d.]+) s")
_POOL = re.compile(r"sim: KV pool (?P<blocks>\d+) blocks of (?P<block_size>\d+) tokens")


@register
class SimAdapter(EngineAdapter):
    """The performance model behind the OpenAI API; ``profile`` picks vllm or trtllm behaviour.

    Extras: ``fault`` (``oom``, ``crash_after:N``, ``stall_after:N``, ``unhealthy``,
    ``slow_start:S``) and ``jitter`` (relative step-time noise, default 0.005).
    """

    name = "sim"
    extras: ClassVar[dict[str, type]] = {"fault": str, "jitter": float}

    def check_space(self, entry: SpaceEntry) -> None:
        saved = entry.profile
        for p in saved:
            if p is not None and p not in PROFILES:
                raise ValueError(f"profile {p!r} is not a sim profile; use one of "
                                 f"{', '.join(sorted(PROFILES))}")
        for f in entry.extras.get("fault", []):
            try:
                parse_fault(str(f))
            except ValueError as err:
                raise ValueError(f"extras.fault {f!r}: use oom, crash_after:N, stall_after:N, "
                                 f"unhealthy or slow_start:S ({err.errors()[0]['msg']})") from None
        probe = entry.model_copy(update={"profile": [None]})
        super().check_space(probe)

    def admission_for(self, trial: TrialConfig) -> str:
        return PROFILES[trial.profile or "vllm"].admission

    def server_config(self, trial: TrialConfig, ctx: LaunchContext) -> SimServerConfig:
        shape = load_shape(ctx.model.preset, ctx.model.path)
        settings = sim_settings(trial)
        return SimServerConfig(
            profile=trial.profile or "vllm", hardware=ctx.hardware, shape=shape,
            settings=settings, served_name=ctx.model.display_name,
            max_model_len=trial.max_model_len or ctx.workload.request_tokens,
            time_scale=ctx.sim.time_scale, seed=ctx.sim.seed,
            jitter=float(trial.extras.get("jitter", 0.005)),
            fault=parse_fault(str(trial.extras.get("fault", "")) or None),
            host=ctx.launch.host, port=ctx.port,
            stats_interval_s=max(1.0, 10.0 * ctx.sim.time_scale),
            stream_interval=ctx.sim.chunk_tokens(),
            profile_overrides=ctx.sim.profiles.get(trial.profile or "vllm", {}))

    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        cfg = self.server_config(trial, ctx)
        path = str(Path(ctx.trial_dir) / "sim_config.json")
        argv = [sys.executable, "-m", "actors.sim.server", "--config", path]
        return LaunchPlan(argv=argv, files={"sim_config.json": cfg.model_dump_json(indent=1)},
                          port=ctx.port)

    def parse_log_line(self, line: str) -> list[LogEvent]:
        m = _HEADER.search(line)
        if m:
            d: dict[str, Any] = m.groupdict()
            d["tp"] = int(d["tp"])
            d["cuda_graphs"] = d["cuda_graphs"] == "True"
            d["time_scale"] = float(d["time_scale"])
            return [LogEvent("sim_header", d, line)]
        m = _BEHIND.search(line)
        if m:
            return [LogEvent("sim_behind", {"seconds": float(m["seconds"])}, line)]
        m = _POOL.search(line)
        if m:
            return [LogEvent("kv_blocks", {k: int(v) for k, v in m.groupdict().items()}, line)]
        return parse_vllm_line(line) + parse_trtllm_line(line)

    def parse_metrics(self, text: str, t: float) -> MetricsSample:
        return parse_vllm_metrics(text, t)

    def applied(self, events: list[LogEvent]) -> dict[str, Any]:
        applied = applied_from_events(events)
        for ev in events:
            if ev.kind == "sim_header":
                applied.update({k: ev.data[k] for k in ("profile", "tp", "weights", "kv_dtype",
                                                        "cuda_graphs", "time_scale")})
                applied["version"] = f"sim-{ev.data['version']}"
            elif ev.kind == "engine_config" and "max_seq_len" in ev.data:  # vllm profile
                applied["max_model_len"] = int(ev.data["max_seq_len"])
            elif ev.kind == "limits":  # trtllm profile
                applied["max_model_len"] = int(ev.data["max_seq_len"])
        return applied

    def verify(self, trial: TrialConfig, applied: dict[str, Any]) -> list[str]:
        want = {"profile": trial.profile or "vllm", "tp": trial.tp, "weights": trial.weights,
                "kv_dtype": trial.kv_dtype, "cuda_graphs": trial.cuda_graphs}
        return [f"{k}: requested {v!r}, server reports {applied.get(k)!r}"
                for k, v in want.items() if applied.get(k) != v]
