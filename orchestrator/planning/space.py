"""The planned trials as an Optuna search space: typed, conditional parameters.

A parameter is a field that varies among the planned configs: ``engine``, an axis
(``actors.contracts.config.AXES``) or ``extra.<option>``. Optuna records exactly the values
that run: a range in ``search.params`` whose planned values are evenly stepped is an int or
float parameter with that step (Optuna sees its order and step, and every suggestion is a
planned value); a log range (or one unevenly cut) is a categorical parameter over its
planned values, in order; any other field is categorical. (Suggesting over the whole range
and snapping made Optuna show values that never ran: ``max_num_seqs=143`` for 102.) A field
that varies only within some engines exists only for them; a ``when`` parameter only where
its condition holds; a tied one (``same_as``) is no parameter at all. ``Space.lookup`` maps
a suggestion back to its planned trial, or None when the combination is not in the space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from actors.contracts.config import AXES
from orchestrator.planning.params import field_value
from orchestrator.planning.plan import PlannedTrial
from orchestrator.spec import SweepSpec

__all__ = ["ParamKind", "Param", "Space"]


class ParamKind(StrEnum):
    CATEGORICAL = "categorical"
    INT = "int"
    FLOAT = "float"


@dataclass(frozen=True)
class Param:
    name: str
    kind: ParamKind
    choices: tuple[Any, ...]
    log: bool = False
    step: float | None = None
    engines: frozenset[str] | None = None  # None: every engine
    when: tuple[tuple[str, Any], ...] = ()

    def even_step(self) -> float | None:
        """The step between the planned values when they are evenly stepped (and not a
        log range); None otherwise."""
        vals = sorted(self.choices)
        if self.kind is ParamKind.CATEGORICAL or self.log or len(vals) < 2:
            return None
        steps = {round(b - a, 9) for a, b in zip(vals, vals[1:])}
        return steps.pop() if len(steps) == 1 else None

    def distribution(self) -> Any:
        """An Optuna distribution whose values are exactly the planned ones."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        step = self.even_step()
        if step is None:  # categorical, or a log range: its planned values, in order
            return CategoricalDistribution(list(self.choices) if self.kind is
                                           ParamKind.CATEGORICAL else sorted(self.choices))
        lo, hi = min(self.choices), max(self.choices)
        if self.kind is ParamKind.INT:
            return IntDistribution(int(lo), int(hi), step=int(step))
        return FloatDistribution(float(lo), float(hi), step=step)

    def suggest(self, trial: Any) -> Any:
        if self.kind is not ParamKind.CATEGORICAL and len(self.choices) == 1:
            return self.choices[0]
        dist = self.distribution()
        if not hasattr(dist, "step"):
            return trial.suggest_categorical(self.name, list(dist.choices))
        if self.kind is ParamKind.INT:
            return self.snap(trial.suggest_int(self.name, dist.low, dist.high, step=dist.step))
        return self.snap(trial.suggest_float(self.name, dist.low, dist.high, step=dist.step))

    def snap(self, raw: float) -> Any:
        """The planned value nearest to ``raw`` (in log space for a log range): for a
        stepped suggestion, the same value (it removes float rounding)."""
        if self.log and raw > 0:
            return min(self.choices, key=lambda c: abs(math.log(c) - math.log(raw)))
        return min(self.choices, key=lambda c: abs(c - raw))


class Space:
    """The feasible and infeasible planned trials, addressable by parameter values."""

    def __init__(self, planned: list[PlannedTrial], spec: SweepSpec):
        self.planned = planned
        ranges = {n: p for n, p in spec.search.params.items() if p.same_as is None}
        tied = {n for n, p in spec.search.params.items() if p.same_as is not None}
        engines = sorted({p.config.engine for p in planned})
        extras = sorted({k for p in planned for k in p.config.extras})
        names = ["engine", *AXES, *(f"extra.{k}" for k in extras)]
        self.params: list[Param] = []
        for name in names:
            if name in tied:
                continue
            spec_p = ranges.get(name)
            when = tuple(sorted(spec_p.when.items())) if spec_p else ()
            active = [p for p in planned
                      if all(field_value(p.config, k) == v for k, v in when)]
            per_engine = {e: _distinct(field_value(p.config, name) for p in active
                                       if p.config.engine == e) for e in engines}
            varying = frozenset(e for e, vs in per_engine.items() if len(vs) > 1)
            if not varying:
                continue
            only = None if len(varying) == len(engines) else varying
            if spec_p is not None and spec_p.engines is not None:
                only = frozenset(spec_p.engines) & frozenset(engines)
            choices = _distinct(field_value(p.config, name) for p in active
                                if only is None or p.config.engine in only)
            if spec_p is not None and spec_p.type is not None and None not in choices:
                kind = ParamKind.INT if spec_p.type == "int" else ParamKind.FLOAT
                self.params.append(Param(name, kind, tuple(sorted(choices)), spec_p.log,
                                         spec_p.step, only, when))
            else:
                self.params.append(Param(name, ParamKind.CATEGORICAL, tuple(choices),
                                         engines=only, when=when))
        # a field that does not vary for an engine has that engine's one value
        self.fixed: dict[tuple[str, str], Any] = {}
        for e in engines:
            cfgs = [p.config for p in planned if p.config.engine == e]
            for name in names:
                vs = _distinct(field_value(c, name) for c in cfgs)
                if len(vs) == 1:
                    self.fixed[(e, name)] = vs[0]
        self.index: dict[tuple, PlannedTrial] = {}
        for p in planned:
            self.index.setdefault(self.assignment_key(self.assignment(p)), p)

    def _active(self, param: Param, values: dict[str, Any]) -> bool:
        engine = values.get("engine", self.fixed.get(("", "engine")))
        if engine is None and len({p.config.engine for p in self.planned}) == 1:
            engine = self.planned[0].config.engine
        if param.engines is not None and engine not in param.engines:
            return False
        for k, v in param.when:
            have = values[k] if k in values else self.fixed.get((str(engine), k), _MISSING)
            if have != v:
                return False
        return True

    def assignment(self, planned: PlannedTrial) -> dict[str, Any]:
        """The values of the parameters active for this trial."""
        out: dict[str, Any] = {}
        for param in self.params:
            probe = {**out, **{k: field_value(planned.config, k) for k, _ in param.when}}
            probe.setdefault("engine", planned.config.engine)
            if self._active(param, probe):
                out[param.name] = field_value(planned.config, param.name)
        return out

    @staticmethod
    def assignment_key(values: dict[str, Any]) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in values.items()))

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Define-by-run: each parameter suggested only where it exists."""
        values: dict[str, Any] = {}
        for param in self.params:
            if self._active(param, values):
                values[param.name] = param.suggest(trial)
        return values

    def lookup(self, values: dict[str, Any]) -> PlannedTrial | None:
        return self.index.get(self.assignment_key(values))

    def distributions(self, values: dict[str, Any]) -> dict[str, Any]:
        by_name = {p.name: p for p in self.params}
        return {k: by_name[k].distribution() for k in values}

    def describe(self) -> list[str]:
        """One line per parameter, for ``plan``."""
        lines = []
        for p in self.params:
            where = f" (only {', '.join(sorted(p.engines))})" if p.engines else ""
            cond = "".join(f" when {k}={v}" for k, v in p.when)
            if p.kind is ParamKind.CATEGORICAL:
                dom = "{" + ", ".join(str(c) for c in p.choices) + "}"
            elif p.even_step() is None:
                dom = (f"{p.kind.value} {min(p.choices)}..{max(p.choices)}"
                       f"{' log' if p.log else ''}, as its {len(p.choices)} planned values: "
                       "{" + ", ".join(f"{c:g}" for c in sorted(p.choices)) + "}")
            else:
                dom = (f"{p.kind.value} {min(p.choices)}..{max(p.choices)} step "
                       f"{p.even_step():g} ({len(p.choices)} values)")
            lines.append(f"{p.name}: {dom}{where}{cond}")
        return lines


_MISSING = object()


def _distinct(values: Any) -> list:
    out: list = []
    for v in values:
        if v not in out:
            out.append(v)
    return out
