"""Adapter for TensorRT-LLM's OpenAI server, ``trtllm-serve`` (PyTorch backend).

What a trial becomes: an argv list ``trtllm-serve MODEL --host H --port P --backend
pytorch --tp_size N --max_batch_size B --max_num_tokens T --max_seq_len L
--extra_llm_api_options FILE`` (``--config FILE`` where the release prefers it) and
the YAML options file, rendered for the target release:

- 1.x: ``kv_cache_config {free_gpu_memory_fraction, enable_block_reuse, dtype}``,
  ``cuda_graph_config {enable_padding, max_batch_size}`` (``null``: graphs off),
  ``scheduler_config {capacity_scheduler_policy}``, ``enable_chunked_prefill``.
- 0.20: graph options and the KV dtype under ``pytorch_backend_config``; that
  release silently ignored the 1.x keys, which is why the layout is per release
  and every rendered key is checked against the release's own list: the
  installed ``LlmArgs`` when ``tensorrt_llm`` is importable here, else
  ``trtllm_releases.yaml`` (public docs). A key the release does not know is an
  error at spec load (``check_space``) and again before launch.

Always rendered: ``enable_iter_perf_stats: true`` (the PyTorch backend's JSON
``/metrics`` stays empty without it, and the capacity check needs running and
waiting counts) and CUDA-graph padding on unless ``extras.cuda_graph_padding``
says otherwise (without padding, batch sizes between the captured ones run
eagerly; vLLM pads by default, so an unpadded comparison would be unfair).

Weight precision comes from the checkpoint (the PyTorch backend runs ModelOpt
pre-quantized checkpoints; it does not quantize on load): ``weights: fp8`` needs
an FP8 checkpoint, and a local checkpoint that disagrees is refused before launch.
"""

from __future__ import annotations

from pathlib import Path

from actors.contracts.applied import AppliedConfig
from actors.contracts.config import SpaceEntry, TrialConfig
from actors.contracts.hardware import Hardware, get_hardware
from actors.contracts.kv import KvPool
from actors.contracts.metrics import MetricsFormat
from actors.engines.base import (
    CHAT_MARGIN_TOKENS,
    EngineAdapter,
    LaunchContext,
    LaunchPlan,
    LogEvent,
    MetricsSample,
    model_len,
)
from actors.engines.deploy import Deployment
from actors.engines.registry import register
from actors.engines.trtllm_deploy import trtllm_deployment
from actors.engines.trtllm_log import (
    DEFAULT_TOKENS_PER_BLOCK,
    KV_POOL_LINES,
    TRTLLM_METRIC_NAMES,
    applied_from_trtllm_events,
    graphs_evidence,
    parse_trtllm_line,
    trtllm_kv_pool,
)
from actors.engines.trtllm_options import (
    DEFAULT_GRAPH_MAX_BATCH,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_TOKENS,
    KV_DTYPES,
    OPTIONS_FILE,
    TrtllmExtras,
    check_checkpoint,
    refuse_unknown,
    render_options,
    render_text,
    resolve_release,
    version_mm,
)

__all__ = ["TrtllmAdapter", "TrtllmExtras", "CHAT_MARGIN_TOKENS", "fp8_unsupported"]



def fp8_unsupported(trial: TrialConfig, hw: Hardware) -> str | None:
    """TensorRT-LLM's FP8 weights or KV cache need compute capability 8.9+ (vLLM, by
    contrast, runs FP8 weights weight-only on older GPUs). Also the sim's trtllm profile's."""
    if hw.kind != "gpu":
        return None
    for what, prec in (("weights", trial.weights), ("KV cache", trial.kv_dtype)):
        if prec == "fp8" and not hw.supports("fp8"):
            return (f"TensorRT-LLM FP8 {what} need compute capability 8.9+; {hw.name} is "
                    f"{hw.compute_capability}")
    return None


def _layout_hint(applied: AppliedConfig) -> str | None:
    version = applied.get("version")
    mm = version_mm(version) if version else None
    if mm is None:
        return None
    try:
        layout = resolve_release(f"{mm[0]}.{mm[1]}").layout
    except ValueError:
        return None
    where = "pytorch_backend_config" if layout != "1.x" else "cuda_graph_config/kv_cache_config"
    return (f"the server is TensorRT-LLM {version}, which reads graph and KV-dtype options "
            f"from {where} and ignores keys of other layouts: set launch.release: "
            f"'{mm[0]}.{mm[1]}'")


@register
class TrtllmAdapter(EngineAdapter):
    """``trtllm-serve`` from ``launch.executable`` (default ``trtllm-serve`` on PATH).

    Extras: ``capacity_scheduler_policy`` (GUARANTEED_NO_EVICT, MAX_UTILIZATION,
    STATIC_BATCH), ``enable_block_reuse``, ``enable_chunked_prefill``,
    ``cuda_graph_padding`` and ``tokens_per_block`` (releases that have it, 1.1+).

    The host proves the server its own by socket ownership only (``identity_name`` is
    None): trtllm-serve serves a single model name, so a nonce there would replace the
    name the load generator sends, and 0.20 and 1.1 have no ``--served-model-name``.
    Its leader process (the one the host starts) holds the listening socket.
    """

    name = "trtllm"
    per_chunk_usage = False  # continuous_usage_stats not confirmed for trtllm-serve
    #: trtllm-serve's request models are strict (an unknown field is a 400): no
    #: return_token_ids; its counts are proven by the model's tokenizer over the text
    token_ids = False
    admission = "guaranteed_no_evict"
    extras_model = TrtllmExtras
    health_path = "/health"
    metrics_path = "/metrics"  # JSON iteration stats, not Prometheus
    metrics_format = MetricsFormat.JSON_STATS
    metric_names = TRTLLM_METRIC_NAMES
    sim_profile = "trtllm"
    startup_s = 150.0
    kv_pool_hint = KV_POOL_LINES

    def check_space(self, entry: SpaceEntry) -> None:
        super().check_space(entry)
        if entry.launch.python:
            raise ValueError("launch.python does not apply to engine 'trtllm': name that "
                             "environment's trtllm-serve in launch.executable")
        release = resolve_release(entry.launch.release)
        for p in entry.extras.get("capacity_scheduler_policy", []):
            if p not in release.policies:
                raise ValueError(f"extras.capacity_scheduler_policy {p!r}: use one of "
                                 f"{', '.join(release.policies)}")
        for kv in entry.kv_dtype:
            if kv not in KV_DTYPES:
                raise ValueError(f"kv_dtype {kv!r}: TensorRT-LLM's KV cache dtype is 'auto' "
                                 "(the model's own) or 'fp8'")
        for trial in entry.expand():
            refuse_unknown(render_options(trial, release), release)

    def infeasible(self, trial: TrialConfig, hardware: str) -> str | None:
        # NVFP4 (10.0+) is the planner's rule for every engine (orchestrator.planning.
        # feasibility), which runs right after this
        hw = get_hardware(hardware)
        if hw.kind != "gpu":
            return f"TensorRT-LLM needs an NVIDIA GPU; hardware {hardware!r} has none"
        if not trial.cuda_graphs:  # else the same eager server would run under several keys
            if trial.graph_max_batch is not None:
                return "graph_max_batch applies only with cuda_graphs: true"
            if TrtllmExtras.of(trial.extras).cuda_graph_padding is not None:
                return "extras.cuda_graph_padding applies only with cuda_graphs: true"
        return fp8_unsupported(trial, hw)

    def admission_for(self, trial: TrialConfig) -> str:
        policy = TrtllmExtras.of(trial.extras).capacity_scheduler_policy or "GUARANTEED_NO_EVICT"
        return "preempt_recompute" if policy == "MAX_UTILIZATION" else "guaranteed_no_evict"

    def limits(self, trial: TrialConfig, ctx: LaunchContext) -> tuple[int, int, int]:
        """(max_batch_size, max_num_tokens, max_seq_len) passed on the command line."""
        seq = model_len(trial, ctx)
        return (trial.max_num_seqs or DEFAULT_MAX_BATCH,
                trial.max_num_tokens or DEFAULT_MAX_TOKENS, seq)

    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        if not ctx.model.path:
            raise ValueError("engine 'trtllm' needs model.path (a local checkpoint or HF id)")
        release = resolve_release(ctx.launch.release)
        text = render_text(trial, release)
        check_checkpoint(trial, ctx.model)
        batch, tokens, seq = self.limits(trial, ctx)
        argv = [ctx.launch.executable or "trtllm-serve", ctx.model.path,
                "--host", ctx.launch.host, "--port", str(ctx.port), "--backend", "pytorch",
                "--tp_size", str(trial.tp), "--max_batch_size", str(batch),
                "--max_num_tokens", str(tokens), "--max_seq_len", str(seq),
                release.options_flag, str(Path(ctx.trial_dir) / OPTIONS_FILE)]
        if ctx.model.tokenizer:
            argv += ["--tokenizer", ctx.model.tokenizer]
        if ctx.model.served_name:
            if not release.served_name_flag:
                raise ValueError(f"model.served_name needs trtllm-serve's --served-model-name, "
                                 f"which TensorRT-LLM {release.label} does not have: drop "
                                 "served_name (the server answers to model.path)")
            argv += [release.served_name_flag, ctx.model.served_name]
        return LaunchPlan(argv=argv, env=dict(ctx.launch.env), files={OPTIONS_FILE: text},
                          port=ctx.port)

    def deployment(self, trial: TrialConfig, ctx: LaunchContext,
                   measured_argv: list[str] | None = None) -> Deployment:
        """``trtllm-serve MODEL ...`` with its options YAML as the trial ran them, less the
        benchmark-only settings, and a Triton repository (``actors.engines.trtllm_deploy``)."""
        plan = self.build_launch(trial, ctx)
        return trtllm_deployment(trial, ctx, plan, self.limits(trial, ctx),
                                 resolve_release(ctx.launch.release), measured_argv)

    def parse_log_line(self, line: str) -> list[LogEvent]:
        return parse_trtllm_line(line)

    def applied(self, events: list[LogEvent]) -> AppliedConfig:
        return AppliedConfig.from_facts(applied_from_trtllm_events(events))

    def default_block_size(self, device: str) -> int | None:
        return DEFAULT_TOKENS_PER_BLOCK

    def kv_pool(self, events: list[LogEvent], metrics_sample: MetricsSample | None = None,
                trial: TrialConfig | None = None, *,
                block_size: int | None = None) -> KvPool | None:
        admission = self.admission_for(trial) if trial is not None else self.admission
        requested = TrtllmExtras.of(trial.extras).tokens_per_block if trial is not None else None
        return trtllm_kv_pool(events, admission, metrics_sample, block_size, requested)

    def verify(self, trial: TrialConfig, applied: AppliedConfig) -> list[str]:
        problems = []
        on, off = graphs_evidence(applied.flat())
        if trial.cuda_graphs:
            if applied.get("use_cuda_graph") is False:
                problems.append("cuda_graphs: requested on, the server reports "
                                f"{', '.join(off)}")
            elif not on:
                problems.append("cuda_graphs: requested on, but no log line confirms it (no "
                                "PyTorchConfig(use_cuda_graph=True), cuda_graph_config or "
                                "'Creating CUDA graph instances')")
            else:
                want = trial.graph_max_batch or DEFAULT_GRAPH_MAX_BATCH
                got = applied.get("graph_max_batch")
                if got is not None and got != want:
                    problems.append(f"graph_max_batch: requested {want}, server reports {got}")
                pad = TrtllmExtras.of(trial.extras).cuda_graph_padding is not False
                if applied.get("graph_padding") not in (None, pad):
                    problems.append(f"cuda_graph_padding: requested {pad}, server reports "
                                    f"{applied.get('graph_padding')}")
        elif on:
            problems.append(f"cuda_graphs: requested off, the server reports {', '.join(on)}")
        got_kv = applied.get("kv_dtype")
        if trial.kv_dtype == "fp8" and not str(got_kv or "").startswith("fp8"):
            problems.append("kv_dtype: requested fp8, " + (
                f"server reports {got_kv!r}" if got_kv else
                "but no log line states the KV cache dtype"))
        for key, requested, default in (
                ("max_num_seqs", trial.max_num_seqs, DEFAULT_MAX_BATCH),
                ("max_num_tokens", trial.max_num_tokens, DEFAULT_MAX_TOKENS)):
            got = applied.get(key)
            if got is not None and got != (requested or default):
                problems.append(f"{key}: requested {requested or default}, server reports {got}")
        layout_related = [p for p in problems if p.startswith(("cuda_graph", "graph_", "kv_"))]
        hint = _layout_hint(applied) if layout_related else None
        return problems + ([f"hint: {hint}"] if hint else [])

    def classify_exit(self, events: list[LogEvent], returncode: int | None) -> str:
        """OOM, then a taken port (the host retries on another), else a crash."""
        fatal = [ev.data.get("failure") for ev in events if ev.kind == "fatal"]
        return next((f for f in ("startup_oom", "port_in_use") if f in fatal), "startup_crash")
