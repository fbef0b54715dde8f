"""What a short profile of the user's model measures: a few configs at a few levels.

``servesweep profile-model SPEC`` (``orchestrator.commands.profile_model``) runs the sweep
this module derives from the user's spec, then fits the performance model to it. The
choice, per engine of the space:

- a **base** config: 16-bit weights, auto KV cache, CUDA graphs where the space has them
  (else the first feasible config), which sets the host and GEMM factors;
- one config per **setting the space sweeps** that the base lacks (FP8 weights, FP8 KV
  cache, CUDA graphs off), each differing from the base in that one setting where the space
  has such a config, so its factor (FP8 GEMM efficiency, FP8 KV attention cost, eager launch
  cost) is seen on its own;
- at ``PROFILE_LEVELS`` (c=1: the step's fixed cost; c=32: the batch's), the spec's prompt
  and output lengths, closed loop, two rounds.

Contract: the derived spec is a valid spec of the same model, hardware, cluster, launch
options and sim options (less ``model_profile``), every chosen config a config of the user's
space, so its points speak for the configs the user's search will meet.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from actors.contracts.config import TrialConfig
from orchestrator.planning.plan import PlannedTrial
from orchestrator.spec import SweepSpec

__all__ = ["PROFILE_LEVELS", "profile_configs", "profile_spec_data"]

#: the concurrencies a short profile measures (benchmarks/crossval.py's ``profiled`` fold)
PROFILE_LEVELS = (1, 32)
#: the axes whose values have their own factors in the performance model
_AXES = ("weights", "kv_dtype", "cuda_graphs")
_SIXTEEN_BIT = ("bf16", "fp16")


def _base(configs: list[TrialConfig]) -> TrialConfig:
    ranked = sorted(configs, key=lambda c: (c.weights not in _SIXTEEN_BIT,
                                            c.kv_dtype != "auto", not c.cuda_graphs))
    return ranked[0]


def _differs_in(c: TrialConfig, base: TrialConfig, axis: str) -> int:
    """How many other settings ``c`` changes besides ``axis`` (fewer is better)."""
    keep = {"engine", "profile", "model", axis, "launch_label", "repeat"}
    a, b = c.model_dump(exclude=keep), base.model_dump(exclude=keep)
    return sum(a[k] != b[k] for k in a)


def profile_configs(planned: list[PlannedTrial]) -> list[TrialConfig]:
    """The configs a short profile measures (see the module doc), base first per engine."""
    by_engine: dict[tuple[str, str | None], list[TrialConfig]] = {}
    for p in planned:
        if p.feasible and p.config.repeat == 0:
            by_engine.setdefault((p.config.engine, p.config.profile), []).append(p.config)
    chosen: list[TrialConfig] = []
    for configs in by_engine.values():
        base = _base(configs)
        chosen.append(base)
        for axis in _AXES:
            values = {getattr(c, axis) for c in configs} - {getattr(base, axis)}
            for value in sorted(values, key=str):
                pool = [c for c in configs if getattr(c, axis) == value]
                chosen.append(min(pool, key=partial(_differs_in, base=base, axis=axis)))
    return list({c.key(): c for c in chosen}.values())


def _entry(config: TrialConfig, raw_entries: list[dict[str, Any]],
           spec: SweepSpec) -> dict[str, Any]:
    """A space entry of exactly ``config``, with the launch options of the entry it came
    from."""
    raw: dict[str, Any] = {}
    for entry, data in zip(spec.space, raw_entries):
        if any(c.key() == config.key() for c in entry.expand()):
            raw = data
            break
    out = {k: v for k, v in raw.items() if k in ("launch", "label")}
    fields = config.model_dump(mode="json", exclude={"launch_label", "repeat"})
    fields["extras"] = {k: [v] for k, v in fields.get("extras", {}).items()}
    return {**out, **{k: v for k, v in fields.items() if v is not None and v != {}}}


def profile_spec_data(raw: dict[str, Any], spec: SweepSpec, configs: list[TrialConfig],
                      base_dir: Path | None) -> dict[str, Any]:
    """The profiling sweep's spec (as data) for the user's spec ``raw`` / ``spec``."""
    model = dict(raw.get("model") or {})
    path = model.get("path")
    if isinstance(path, str) and base_dir is not None and not Path(path).is_absolute() \
            and (base_dir / path).exists():
        model["path"] = str((base_dir / path).resolve())
    sim = {k: v for k, v in (raw.get("sim") or {}).items() if k != "model_profile"}
    workload: dict[str, Any] = {
        "prompt_tokens": spec.workload.prompt_tokens,
        "output_tokens": spec.workload.output_tokens,
        "concurrency": list(PROFILE_LEVELS), "rounds": 2,
        "warmup_requests": spec.workload.warmup_requests,
        "stall_timeout_s": spec.workload.stall_timeout_s}
    entries = raw.get("space") or []
    out: dict[str, Any] = {
        "name": f"{spec.name}-profile"[:64],
        "description": f"a short profile of {spec.name}'s model: servesweep profile-model",
        "cluster": raw.get("cluster") or {}, "model": model, "hardware": spec.hardware,
        "workload": workload, "search": {"kind": "grid"},
        "space": [_entry(c, entries, spec) for c in configs]}
    for key in ("failure",):
        if key in raw:
            out[key] = raw[key]
    if sim:
        out["sim"] = sim
    return out
