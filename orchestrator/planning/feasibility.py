"""Rules that prune a trial before launch, each returning a reason a user can act on."""

from __future__ import annotations

from actors.contracts.config import TrialConfig
from actors.contracts.hardware import Hardware, get_hardware
from actors.contracts.shapes import ModelShape
from actors.engines import get_adapter
from actors.engines.sim import sim_settings
from actors.sim.perf import DEFAULT_PROFILE, PROFILES, plan_memory
from actors.sim.predict import resolve_limits
from orchestrator.spec import SweepSpec

__all__ = ["infeasible_reason", "family_of"]


def family_of(trial: TrialConfig) -> str | None:
    """The sim profile that models the trial's engine (a sim trial: its own profile), whose
    documented limits apply; None when no profile models the engine (``external``)."""
    return get_adapter(trial.engine).sim_profile_for(trial)


def _heads(trial: TrialConfig, shape: ModelShape) -> str | None:
    tp = trial.tp
    if shape.heads % tp:
        return f"tp={tp} does not divide the {shape.heads} attention heads of {shape.name}"
    if shape.kv_heads % tp and tp % shape.kv_heads:
        return (f"tp={tp} neither divides nor evenly replicates the {shape.kv_heads} KV heads "
                f"of {shape.name}")
    return None


def _precision(trial: TrialConfig, hw: Hardware) -> str | None:
    if hw.kind == "cpu":
        return None  # the engine's own CPU rules (adapter.infeasible) apply
    if trial.weights == "nvfp4" and not hw.supports("nvfp4"):
        return f"NVFP4 weights need compute capability 10.0+; {hw.name} is {hw.compute_capability}"
    # FP8 is the engine's own rule (adapter.infeasible): TensorRT-LLM needs CC 8.9+, vLLM
    # runs FP8 weights weight-only on older GPUs (the trial runs, the check records it)
    return None


def _memory(trial: TrialConfig, shape: ModelShape, hw: Hardware, request_tokens: int) -> str | None:
    if hw.kind == "cpu":
        return None
    profile = PROFILES[family_of(trial) or DEFAULT_PROFILE]
    cfg = sim_settings(trial)
    seqs, tokens = resolve_limits(profile.name, cfg)
    mem = plan_memory(shape, hw, profile, cfg, seqs, tokens)
    if mem.blocks < mem.blocks_for(request_tokens):
        need = request_tokens * mem.kv_bytes_per_token / 2**30
        return (f"weights {mem.weights_gib:.1f} GiB/GPU + runtime reserves + one "
                f"{request_tokens}-token request's KV ({need:.2f} GiB) do not fit "
                f"{trial.gpu_memory_fraction} x {hw.hbm_gib:.0f} GiB of {hw.name}")
    return None


def infeasible_reason(trial: TrialConfig, spec: SweepSpec, shape: ModelShape | None,
                      gpus_per_node: int | None) -> str | None:
    """Why ``trial`` cannot run, or None. ``shape`` None skips the shape-based rules."""
    hw = get_hardware(spec.hardware)
    w = spec.workload
    if gpus_per_node is not None and trial.tp > gpus_per_node and hw.kind == "gpu":
        return f"tp={trial.tp} exceeds the {gpus_per_node} GPUs of the largest node"
    if trial.max_model_len is not None and trial.max_model_len < w.request_tokens:
        return (f"max_model_len={trial.max_model_len} is shorter than one request "
                f"({w.prompt_tokens} + {w.output_tokens} tokens)")
    fam = family_of(trial)
    prof = PROFILES.get(fam) if fam else None
    chunked = trial.extras.get("enable_chunked_prefill")
    if prof is not None and not (prof.chunked_prefill if chunked is None else chunked):
        budget = trial.max_num_tokens or prof.default_max_num_tokens
        if w.prompt_tokens > budget:
            return (f"{fam} without chunked prefill needs the whole prompt ({w.prompt_tokens} "
                    f"tokens) in one step, but max_num_tokens={budget}")
    reason = get_adapter(trial.engine).infeasible(trial, spec.hardware)
    if reason:
        return reason
    reason = _precision(trial, hw)
    if reason or shape is None:
        return reason
    return _heads(trial, shape) or _memory(trial, shape, hw, w.request_tokens)
