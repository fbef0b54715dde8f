"""Adapter for servesweep's own simulated engine (``actors.sim.server``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from actors.contracts.applied import AppliedConfig
from actors.contracts.config import LaunchOptions, ModelSpec, SpaceEntry, TrialConfig
from actors.contracts.hardware import get_hardware
from actors.contracts.kv import KvPool
from actors.contracts.metrics import MetricsFormat
from actors.contracts.shapes import load_shape
from actors.engines.base import (
    EngineAdapter,
    Extras,
    LaunchContext,
    LaunchPlan,
    LogEvent,
    MetricsSample,
    last_event,
    model_len,
    nonce_alias,
)
from actors.engines.deploy import NOT_MEASURED, Deployment, Removed
from actors.engines.extras import check_extras
from actors.engines.registry import adapter_names, get_adapter, register
from actors.engines.trtllm import fp8_unsupported
from actors.engines.trtllm_log import parse_trtllm_line, trtllm_kv_pool
from actors.engines.vllm_log import (
    VLLM_METRIC_LABELS,
    VLLM_METRIC_NAMES,
    applied_from_events,
    parse_vllm_line,
    vllm_kv_pool,
)
from actors.sim.config import SimServerConfig, parse_fault
from actors.sim.perf import DEFAULT_PROFILE, PROFILES, SimConfig

__all__ = ["SimAdapter", "SimExtras", "sim_settings"]


def sim_settings(trial: TrialConfig) -> SimConfig:
    """The performance model's view of a trial (every server setting it models): the
    trial's own fields, and what its engine's extras set (``model_settings``)."""
    fields: dict[str, Any] = {k: getattr(trial, k) for k in SimConfig.model_fields
                              if hasattr(trial, k)}
    fields.update(get_adapter(trial.engine).model_settings(trial))
    return SimConfig.model_validate(fields)

_HEADER = re.compile(r"servesweep-sim (?P<version>\S+): profile=(?P<profile>\w+) "
                     r"hardware=(?P<hardware>\S+) model=\S+ tp=(?P<tp>\d+) "
                     r"weights=(?P<weights>\w+) kv_dtype=(?P<kv_dtype>\w+) "
                     r"cuda_graphs=(?P<cuda_graphs>True|False) time_scale=(?P<time_scale>[\d.e-]+)")
_PACE = re.compile(r"^servesweep_sim_(paced_tokens|late_tokens|token_lag_seconds|first_tokens|"
                   r"late_first_tokens|behind_seconds)_total "
                   r"(\S+)$", re.M)
_BEHIND = re.compile(r"sim: engine loop behind real time by (?P<seconds>[\d.]+) s")
_POOL = re.compile(r"sim: KV pool (?P<blocks>\d+) blocks of (?P<block_size>\d+) tokens")
#: the sim profile whose log imitates TensorRT-LLM's (the others print vLLM's lines)
_TRTLLM_LOG = "trtllm"
#: failure classes in the order that decides a startup exit (the traceback around a bind
#: error is not the cause)
_FATAL_ORDER = ("startup_oom", "port_in_use", "startup_crash")


class SimExtras(Extras):
    """The sim's extras: an injected ``fault``, step-time ``jitter``, and the output chunk
    of the engine it imitates (``output_proc_chunk``, as vLLM's extra)."""

    engine: Literal["sim"] = "sim"
    fault: str | None = None
    jitter: float | None = Field(default=None, ge=0, lt=0.5)
    output_proc_chunk: int | None = Field(default=None, gt=0)

    @field_validator("fault")
    @classmethod
    def _fault(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            parse_fault(v)
        except ValueError as err:  # pydantic's ValidationError, or float() of the value
            why = err.errors()[0]["msg"] if isinstance(err, ValidationError) else str(err)
            raise ValueError(f"{v!r}: use oom, crash_after:N, stall_after:N, unhealthy or "
                             f"slow_start:S ({why})") from None
        return v


@register
class SimAdapter(EngineAdapter):
    """The performance model behind the OpenAI API; ``profile`` picks vllm or trtllm behaviour.

    Extras: ``fault`` (``oom``, ``crash_after:N``, ``stall_after:N``, ``unhealthy``,
    ``slow_start:S``), ``jitter`` (relative step-time noise, default 0.005) and
    ``output_proc_chunk`` (outputs of one step the imitated API server hands over before it
    yields; default the profile's: 128 for vllm, none for trtllm).
    """

    name = "sim"
    # the host picks its port (as for the real engines, outside the ephemeral range) and
    # proves the listener its own; the server lists ``identity_name`` at /v1/models too
    extras_model = SimExtras
    serves_presets = True  # a shape preset is all the performance model needs
    default_profile = DEFAULT_PROFILE
    time_scaled = True
    startup_s = 1.5
    # vLLM's names (the sim serves them for either profile) and its punctuality counters
    metrics_format = MetricsFormat.PROMETHEUS
    metric_names = {**VLLM_METRIC_NAMES, **{
        f"sim_{field}": [f"servesweep_sim_{name}_total"] for field, name in (
            ("paced_tokens", "paced_tokens"), ("late_tokens", "late_tokens"),
            ("lag_token_s", "token_lag_seconds"), ("first_tokens", "first_tokens"),
            ("late_first_tokens", "late_first_tokens"), ("behind_s", "behind_seconds"))}}
    metric_labels = VLLM_METRIC_LABELS
    kv_pool_hint = ("'sim: KV pool N blocks of B tokens', or the KV pool lines of the engine "
                    "its profile imitates")

    def check_space(self, entry: SpaceEntry) -> None:
        for p in entry.profile:
            if p is not None and p not in PROFILES:
                raise ValueError(f"profile {p!r} is not a sim profile; use one of "
                                 f"{', '.join(sorted(PROFILES))}")
        check_extras(self.name, entry.extras)

    def infeasible(self, trial: TrialConfig, hardware: str) -> str | None:
        # the trtllm profile imitates TensorRT-LLM's precision limits too
        if self.sim_profile_for(trial) == _TRTLLM_LOG:
            return fp8_unsupported(trial, get_hardware(hardware))
        return None

    def _profile(self, trial: TrialConfig) -> str:
        return trial.profile or DEFAULT_PROFILE

    def sim_profile_for(self, trial: TrialConfig) -> str | None:
        return self._profile(trial)

    def admission_for(self, trial: TrialConfig) -> str:
        return PROFILES[self._profile(trial)].admission

    def served_model_name(self, ctx: LaunchContext) -> str:
        return ctx.model.display_name  # the sim answers to the preset's (or served) name

    def identity_name(self, ctx: LaunchContext) -> str | None:
        return nonce_alias(ctx)  # listed at /v1/models beside the served name

    def deployment(self, trial: TrialConfig, ctx: LaunchContext,
                   measured_argv: list[str] | None = None) -> Deployment:
        """The engine the trial's profile imitates (the adapter whose ``sim_profile`` it
        is), deployed with the trial's settings; marked not measured in this form: the
        sweep measured the performance model, not that engine. A preset has no weights:
        the command names ``/models/<preset>`` for the operator to fill."""
        profile = self._profile(trial)
        target = next((get_adapter(n) for n in adapter_names()
                       if get_adapter(n).sim_profile == profile
                       and get_adapter(n).launches_process and n != self.name), None)
        if target is None:
            return Deployment.nothing(self.name, f"no engine is imitated by sim profile "
                                                 f"{profile!r}: nothing to deploy")
        removed = [Removed(setting=f"extras.{k}={v}", why="the sim's own option (fault "
                           "injection or step-time jitter), not a server setting")
                   for k, v in sorted(trial.extras.items())]
        real = trial.model_copy(update={"engine": target.name, "profile": None, "extras": {}})
        model = ctx.model if ctx.model.path else ModelSpec(
            path=f"/models/{ctx.model.preset}", served_name=ctx.model.served_name)
        launch = LaunchOptions(env=ctx.launch.env, release=ctx.launch.release)
        dep = target.deployment(real, ctx.model_copy(update={"model": model,
                                                             "launch": launch}))
        note = (f"{NOT_MEASURED} (simulated): the sweep measured servesweep's performance "
                f"model imitating {target.name} (sim profile {profile!r}), not "
                f"{target.name} itself; the numbers are predictions for this command"
                + (f"; the model was the shape preset {ctx.model.preset!r}: put its "
                   f"weights at {model.path}" if ctx.model.preset else ""))
        forms = [f.model_copy(update={"measured_form": False}) for f in dep.forms]
        return dep.model_copy(update={"measured_engine": self.name, "measured_form": False,
                                      "note": note, "removed": removed + dep.removed,
                                      "forms": forms, "drift": []})

    def server_config(self, trial: TrialConfig, ctx: LaunchContext) -> SimServerConfig:
        shape = load_shape(ctx.model.preset, ctx.model.path)
        settings = sim_settings(trial)
        ex = SimExtras.of(trial.extras)
        return SimServerConfig(
            profile=self._profile(trial), hardware=ctx.hardware, shape=shape,
            settings=settings, served_name=self.served_model_name(ctx),
            aliases=[a for a in (self.identity_name(ctx),) if a],
            max_model_len=model_len(trial, ctx),
            time_scale=ctx.sim.time_scale, seed=ctx.sim.seed,
            jitter=0.005 if ex.jitter is None else ex.jitter,
            fault=parse_fault(ex.fault),
            host=ctx.launch.host, port=ctx.port,
            stats_interval_s=max(1.0, 10.0 * ctx.sim.time_scale),
            stream_interval=ctx.sim.chunk_tokens(),
            profile_overrides=ctx.sim.profiles.get(self._profile(trial), {}))

    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        cfg = self.server_config(trial, ctx)
        path = str(Path(ctx.trial_dir) / "sim_config.json")
        argv = [sys.executable, "-m", "actors.sim.server", "--config", path]
        return LaunchPlan(argv=argv, env=dict(ctx.launch.env),  # the user's: env only
                          files={"sim_config.json": cfg.model_dump_json(indent=1)},
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

    def applied(self, events: list[LogEvent]) -> AppliedConfig:
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
        return AppliedConfig.from_facts(applied)

    def kv_pool(self, events: list[LogEvent], metrics_sample: MetricsSample | None = None,
                trial: TrialConfig | None = None, *,
                block_size: int | None = None) -> KvPool | None:
        """The pool in the format of the profile's engine (the profile from the sim's header
        line, else the trial's). The sim states its exact pool (``KV pool N blocks of B
        tokens`` or TensorRT-LLM's primary blocks) and keeps no null block: every block
        is usable, whichever engine it imitates."""
        header = last_event(events, "sim_header")
        profile = (str(header[1].data["profile"]) if header is not None else
                   self._profile(trial) if trial is not None else DEFAULT_PROFILE)
        admission = PROFILES[profile].admission if profile in PROFILES else self.admission
        if profile == _TRTLLM_LOG:
            return trtllm_kv_pool(events, admission, metrics_sample, block_size)
        return vllm_kv_pool(events, admission, metrics_sample, block_size, null_block=False)

    def classify_exit(self, events: list[LogEvent], returncode: int | None) -> str:
        """The root cause wins over the traceback around it (OOM, then port in use)."""
        found = {ev.data.get("failure") for ev in events if ev.kind == "fatal"}
        return next((f for f in _FATAL_ORDER if f in found), "startup_crash")

    def verify(self, trial: TrialConfig, applied: AppliedConfig) -> list[str]:
        want = {"profile": self._profile(trial), "tp": trial.tp, "weights": trial.weights,
                "kv_dtype": trial.kv_dtype, "cuda_graphs": trial.cuda_graphs}
        return [f"{k}: requested {v!r}, server reports {applied.get(k)!r}"
                for k, v in want.items() if applied.get(k) != v]


def _num(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None
