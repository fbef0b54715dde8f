"""``search.params`` applied to the configs the space entries expand to.

Each base config (one point of a space entry's lists) becomes one config per combination of
its range parameters' values; a parameter applies only to its ``engines`` and where its
``when`` fields match (so graph_max_batch varies only with graphs on); a tied parameter
(``same_as``) copies the other's value (graph_max_batch = max_num_seqs). Parameters apply
in the order the spec lists them, so a tie or a ``when`` may name an earlier one.
"""

from __future__ import annotations

from typing import Any

from actors.contracts.config import TrialConfig
from orchestrator.spec import SweepSpec
from orchestrator.spec.search import ParamSpec

__all__ = ["field_value", "with_field", "applies", "expand_params"]


def field_value(cfg: TrialConfig, name: str) -> Any:
    """A config's value of ``engine``, an axis, or ``extra.<option>`` (None when unset)."""
    if name.startswith("extra."):
        return cfg.extras.get(name[6:])
    return getattr(cfg, name)


def with_field(cfg: TrialConfig, name: str, value: Any) -> TrialConfig:
    if name.startswith("extra."):
        return cfg.model_copy(update={"extras": {**cfg.extras, name[6:]: value}})
    return TrialConfig.model_validate({**cfg.model_dump(), name: value})


def applies(p: ParamSpec, cfg: TrialConfig) -> bool:
    if p.engines is not None and cfg.engine not in p.engines:
        return False
    return all(field_value(cfg, k) == v for k, v in p.when.items())


def _typed(p: ParamSpec, v: float) -> int | float:
    return int(v) if p.type == "int" else v


def expand_params(configs: list[TrialConfig], spec: SweepSpec) -> list[TrialConfig]:
    """Every config times the values of the parameters that apply to it."""
    params = spec.search.params
    if not params:
        return configs
    highest = spec.workload.top_concurrency
    out = configs
    for name, p in params.items():
        nxt: list[TrialConfig] = []
        for cfg in out:
            if not applies(p, cfg):
                nxt.append(cfg)
            elif p.same_as is not None:
                nxt.append(with_field(cfg, name, field_value(cfg, p.same_as)))
            else:
                nxt += [with_field(cfg, name, _typed(p, v)) for v in p.values(highest)]
        out = nxt
    return out
