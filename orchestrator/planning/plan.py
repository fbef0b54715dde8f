"""Expand a spec's space into trials and prune the infeasible ones, with reasons."""

from __future__ import annotations

import re
from dataclasses import dataclass

from actors.contracts.config import SpaceEntry, TrialConfig
from actors.contracts.shapes import ModelShape, load_shape
from actors.engines import get_adapter
from orchestrator.planning.feasibility import infeasible_reason
from orchestrator.planning.params import expand_params
from orchestrator.spec import SweepSpec

__all__ = ["PlannedTrial", "expand_entry", "plan_sweep", "spec_shape", "launch_label"]


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
    """Every distinct trial of the space (its entries' lists times ``search.params``), each
    with an infeasibility reason or None. Entries that give the same settings under
    different launch options (another build, interpreter or endpoint) give distinct trials,
    each labelled (``launch_label``); the same settings and launch are one trial."""
    shape = spec_shape(spec)
    gpn = gpus_per_node if gpus_per_node is not None else default_gpus_per_node(spec)
    produced = [(i, entry, cfg) for i, entry in enumerate(spec.space)
                for cfg in expand_params(expand_entry(entry), spec)]
    launches: dict[str, set[str]] = {}
    for _, entry, cfg in produced:
        launches.setdefault(cfg.key(), set()).add(entry.launch.model_dump_json())
    seen: set[str] = set()
    planned = []
    for i, entry, cfg in produced:
        if len(launches[cfg.key()]) > 1 and cfg.launch_label is None:
            cfg = cfg.model_copy(update={"launch_label": launch_label(entry, i)})
        if cfg.key() in seen:
            continue
        seen.add(cfg.key())
        planned.append(PlannedTrial(cfg, i, infeasible_reason(cfg, spec, shape, gpn)))
    return planned


def launch_label(entry: SpaceEntry, index: int) -> str:
    """The label that tells an entry's trials apart from another entry's with the same
    settings but another launch: the entry's ``label``, else its endpoint, executable or
    interpreter (the last 60 characters, as a label may hold), else ``entry<index>``."""
    if entry.label:
        return entry.label
    launch = entry.launch
    for value in (launch.base_url, launch.executable, launch.python):
        if value:
            text = re.sub(r"[^\w.:@/+-]", "_", value.removeprefix("https://")
                          .removeprefix("http://"))
            return text[-60:]
    return f"entry{index}"
