"""Expand a spec's space into trials and prune the infeasible ones, with reasons."""

from __future__ import annotations

from dataclasses import dataclass

from actors.contracts.config import SpaceEntry, TrialConfig
from actors.contracts.shapes import ModelShape, load_shape
from actors.engines import get_adapter
from orchestrator.planning.feasibility import infeasible_reason
from orchestrator.spec import SweepSpec

__all__ = ["PlannedTrial", "expand_entry", "plan_sweep", "spec_shape"]


@dataclass(frozen=True)
class PlannedTrial:
    config: TrialConfig
    entry_index: int  # which space entry produced it (for its launch options)
    reason: str | None = None  # why it is infeasible; None: runnable

    @property
    def feasible(self) -> bool:
        return self.reason is None


def expand_entry(entry: SpaceEntry) -> list[TrialConfig]:
    """The cross product of an entry's axes (and its extras), in declaration order; an
    entry without a profile gets its engine's ``default_profile`` (the sim's: vLLM)."""
    return entry.expand(default_profile=get_adapter(entry.engine).default_profile)


def spec_shape(spec: SweepSpec) -> ModelShape | None:
    """The model's shape when known locally (preset, or a directory with config.json)."""
    try:
        return load_shape(spec.model.preset, spec.model.path)
    except (FileNotFoundError, ValueError, KeyError):
        return None


def default_gpus_per_node(spec: SweepSpec) -> int | None:
    if spec.cluster.address is None and spec.cluster.gpus is not None:
        return spec.cluster.gpus
    return None


def plan_sweep(spec: SweepSpec, gpus_per_node: int | None = None) -> list[PlannedTrial]:
    """Every distinct trial of the space, each with an infeasibility reason or None."""
    shape = spec_shape(spec)
    gpn = gpus_per_node if gpus_per_node is not None else default_gpus_per_node(spec)
    seen: set[str] = set()
    planned = []
    for i, entry in enumerate(spec.space):
        for cfg in expand_entry(entry):
            if cfg.key() in seen:
                continue
            seen.add(cfg.key())
            planned.append(PlannedTrial(cfg, i, infeasible_reason(cfg, spec, shape, gpn)))
    return planned
