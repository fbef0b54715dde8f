"""The ``search:`` part of a spec: sampler, load regimes, objective, budgets, parameters.

Terms (README "Search"):

- A **load regime** is a named group of levels (``regimes: {interactive: [1, 4],
  batch: [64, 128], steady: ["rate=4/s"]}``; a bare integer is a concurrency); by default
  one regime per level, named by the level's key (``c=8``, ``rate=4/s``). A trial's value
  at a regime is the objective at that level, or the geometric mean over the group's levels.
- The **objective** is one setting used everywhere a config is ranked: ``output_tok_s``,
  ``output_tok_s_per_gpu`` (divided by ``tp``) or ``goodput`` (output tokens/s of the
  requests that met every per-request SLO), each subject to the spec's ``slo`` (TTFT p99,
  ITL p99, E2E p99): a config that misses an SLO at a regime never wins it.
- **GPU-hours** of a trial: ``tp`` x its duration; for sim trials the planner's estimate of
  the real (not time-scaled) duration.

Every model is frozen and forbids unknown fields; an error names the field and the fix.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from actors.contracts.config import AXES, Frozen, PosInt, Scalar, SpaceEntry
from actors.contracts.traffic import Level

__all__ = ["CAPACITY_REGIME", "Objective", "LatencyMetric", "Sampler", "Budget", "ParamSpec",
           "SearchSpec", "RANGE_FIELDS", "check_search_against"]


#: the one regime of a workload whose only load is its capacity search (``workload.capacity``
#: with no levels) under ``objective: slo_capacity``: configs rank by requests/s per GPU
CAPACITY_REGIME = "capacity"


class Objective(StrEnum):
    """What ranks configs (higher is better), subject to the SLOs."""

    OUTPUT_TOK_S = "output_tok_s"
    OUTPUT_TOK_S_PER_GPU = "output_tok_s_per_gpu"
    GOODPUT = "goodput"
    #: requests/s per GPU at SLO (``workload.capacity``): the same for every regime
    SLO_CAPACITY = "slo_capacity"


class LatencyMetric(StrEnum):
    """Latency a multi-objective (NSGA-II) search minimises beside the objective."""

    TTFT_P99_MS = "ttft_p99_ms"
    ITL_P99_MS = "itl_p99_ms"
    E2E_P99_MS = "e2e_p99_ms"


class Sampler(StrEnum):
    """How the next config is chosen. ``guided``: the sim's performance model ranks the
    whole space and the search measures what it ranks best or is least sure of."""

    GRID = "grid"
    RANDOM = "random"
    TPE = "tpe"
    NSGA2 = "nsga2"
    GUIDED = "guided"


class Budget(Frozen):
    """When the search stops: whichever limit is reached first. No trial starts once one is
    spent (``gpu_hours``: once the next trial's estimate would pass it); trials in flight
    finish. An integer ``budget: N`` means ``{trials: N}``."""

    trials: PosInt | None = None
    wall_s: float | None = Field(default=None, gt=0)
    gpu_hours: float | None = Field(default=None, gt=0)

    def describe(self) -> str:
        parts = [f"{self.trials} trials" if self.trials else "",
                 f"{self.wall_s:.0f} s" if self.wall_s else "",
                 f"{self.gpu_hours:g} GPU-h" if self.gpu_hours else ""]
        return ", ".join(p for p in parts if p) or "none"


#: TrialConfig fields a range parameter may set (the others are categorical lists in ``space``)
RANGE_FIELDS = ("tp", "graph_max_batch", "max_num_seqs", "max_num_tokens", "max_model_len",
                "gpu_memory_fraction")


class ParamSpec(Frozen):
    """One searched parameter, in ``search.params`` by name (a ``TrialConfig`` field from
    ``RANGE_FIELDS`` or ``extra.<option>``).

    Either a range: ``type`` int or float, ``low``..``high``, ``step`` (a float range needs a
    step unless ``log``), ``log`` (log-spaced; ``points`` values for a log range without a
    step, default 6); or a tie: ``same_as: <other param or field>`` (e.g. graph_max_batch =
    max_num_seqs). ``engines`` limits it to some engines; ``when`` to configs where other
    fields have these values (graph_max_batch only with ``cuda_graphs: true``); elsewhere the
    field keeps its space value. ``at_least: highest_concurrency`` (or a number) cuts the
    range from below (max_num_seqs >= the highest concurrency level)."""

    type: Literal["int", "float"] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = Field(default=None, gt=0)
    log: bool = False
    points: PosInt | None = None
    same_as: str | None = None
    engines: list[str] | None = None
    when: dict[str, Scalar] = Field(default_factory=dict)
    at_least: Literal["highest_concurrency"] | float | None = None

    @model_validator(mode="after")
    def _range_or_tie(self) -> ParamSpec:
        if self.same_as is not None:
            if self.type is not None or self.low is not None or self.high is not None:
                raise ValueError("a tied parameter (same_as) takes no type/low/high: its value "
                                 "is the other parameter's")
            return self
        if self.type is None or self.low is None or self.high is None:
            raise ValueError("give type (int|float), low and high, or same_as: <param>")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        if self.type == "float" and self.step is None and not self.log:
            raise ValueError("a float range needs a step (e.g. step: 0.05) or log: true, so "
                             "the space stays finite")
        if self.type == "int" and self.step is not None and self.step != int(self.step):
            raise ValueError(f"an int range needs an integer step, got {self.step}")
        return self

    def values(self, highest_concurrency: int) -> list[float]:
        """The range's points (a tie has none of its own), cut by ``at_least``."""
        if self.same_as is not None or self.low is None or self.high is None:
            return []
        lo, hi = self.low, self.high
        floor = (highest_concurrency if self.at_least == "highest_concurrency"
                 else self.at_least)
        if floor is not None:
            lo = max(lo, float(floor))
        if self.step is not None:
            n = int((hi - lo) / self.step + 1e-9)
            vals = [lo + i * self.step for i in range(n + 1)]
        elif self.log:
            n = self.points or 6
            vals = [lo] if n == 1 or lo >= hi else \
                [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
        else:  # an int range without a step: every integer
            vals = [float(v) for v in range(int(lo), int(hi) + 1)]
        if self.type == "int":
            vals = [float(round(v)) for v in vals]
        else:
            vals = [round(v, 10) for v in vals]
        return sorted(set(vals))


class SearchSpec(Frozen):
    """How configs are searched. ``kind: grid`` runs every feasible config; ``kind: optuna``
    runs a ``sampler`` (one Optuna study per load regime, told every trial's value) up to a
    ``budget``. The study lives in the sweep folder unless ``storage`` (any Optuna storage
    URL) says otherwise, and resumes with the sweep."""

    kind: Literal["grid", "optuna"] = "grid"
    sampler: Sampler = Sampler.TPE
    #: ranks configs everywhere (search, winners): see the module docstring
    objective: Objective = Objective.OUTPUT_TOK_S
    #: NSGA-II's further objectives, each minimised at the regime's levels
    also_minimize: list[LatencyMetric] = Field(default_factory=list)
    #: named groups of levels (keys ``c=8``, ``rate=4/s``, ``trace x2``; a bare integer is
    #: a concurrency); None: one regime per level, named by its key
    regimes: dict[str, list[PosInt | str]] | None = None
    at_concurrency: PosInt | None = None  # older specs: one regime of this level
    budget: Budget | None = None
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    storage: str | None = None
    #: guided: the model's relative error out of sample; None: ``model_error()``'s figure
    model_error: float | None = Field(default=None, gt=0, lt=1)
    #: tpe, random, nsga2: the studies first try the performance model's best N configs
    #: (its top picks per regime, regimes in turn; a fresh study only), then sample
    seed_from_model: int = Field(default=0, ge=0)
    #: guided and seed_from_model: without ``sim.model_profile``, first use the stored short
    #: profile of this model, shape, engine and GPU, or make one (``profile-model``; its GPU
    #: time counts in the budget). None: on when the space has an engine that is not the sim
    profile_first: bool | None = None
    seed: int = 0

    @field_validator("budget", mode="before")
    @classmethod
    def _int_budget(cls, v: Any) -> Any:
        return {"trials": v} if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("params")
    @classmethod
    def _param_names(cls, v: dict[str, ParamSpec]) -> dict[str, ParamSpec]:
        for name, p in v.items():
            if name not in RANGE_FIELDS and not name.startswith("extra."):
                raise ValueError(f"search.params.{name}: not a searchable field; use one of "
                                 f"{', '.join(RANGE_FIELDS)} or extra.<option> (profile, "
                                 "weights, kv_dtype and cuda_graphs are lists in space)")
            if p.same_as is not None and p.same_as not in (*v, *AXES):
                raise ValueError(f"search.params.{name}.same_as: {p.same_as!r} is neither a "
                                 "searched parameter nor a config field")
            for key in p.when:
                if key not in AXES and key != "engine" and not key.startswith("extra."):
                    raise ValueError(f"search.params.{name}.when: {key!r} is not a config "
                                     f"field; use engine, {', '.join(AXES)} or extra.<option>")
        return v

    @model_validator(mode="after")
    def _sampler_fits(self) -> SearchSpec:
        if self.also_minimize and self.sampler != Sampler.NSGA2:
            raise ValueError("also_minimize needs sampler: nsga2 (the others optimise one "
                             "objective per regime)")
        if self.sampler == Sampler.NSGA2 and self.kind == "optuna" and not self.also_minimize:
            raise ValueError("sampler nsga2 needs also_minimize, e.g. [ttft_p99_ms]")
        if self.regimes is not None and self.at_concurrency is not None:
            raise ValueError("give regimes or at_concurrency, not both")
        if self.seed_from_model and self.sampler in (Sampler.GRID, Sampler.GUIDED):
            raise ValueError(f"seed_from_model seeds a sampling study (tpe, random, nsga2); "
                             f"sampler {self.sampler.value} follows its own order: drop it")
        return self

    @field_validator("regimes")
    @classmethod
    def _level_keys(cls, v: dict[str, list[Any]] | None) -> dict[str, list[Any]] | None:
        for name, levels in (v or {}).items():
            for lv in levels:
                try:
                    Level.parse(lv)
                except ValueError as err:
                    raise ValueError(f"search.regimes.{name}: {err}") from None
        return v

    def regime_levels(self, levels: list[Level]) -> dict[str, list[str]]:
        """Each regime's level keys, in the workload's order (default: one regime per
        level, named by its key: ``c=8``, ``rate=4/s``)."""
        order = {lv.key: i for i, lv in enumerate(levels)}
        if self.regimes is not None:
            return {k: sorted({Level.parse(x).key for x in v},
                              key=lambda key: (order.get(key, len(order)), key))
                    for k, v in self.regimes.items()}
        if self.at_concurrency is not None:
            key = Level.of(self.at_concurrency).key
            return {key: [key]}
        if not levels and self.objective is Objective.SLO_CAPACITY:
            return {CAPACITY_REGIME: []}  # a capacity search alone: one figure per config
        return {lv.key: [lv.key] for lv in levels}


def check_search_against(search: SearchSpec, levels: list[Level],
                         space: list[SpaceEntry]) -> None:
    """Cross-checks with the workload and the space; raises ValueError naming the field."""
    keys = [lv.key for lv in levels]
    for name, mine in search.regime_levels(levels).items():
        unknown = [k for k in mine if k not in keys]
        if unknown:
            raise ValueError(f"search.regimes.{name}: levels {unknown} are not among the "
                             f"workload's levels {keys}; add them there or drop them")
        if not mine and search.regimes is not None:
            raise ValueError(f"search.regimes.{name}: give at least one level")
    for name, p in search.params.items():
        field = name.removeprefix("extra.")
        for i, entry in enumerate(space):
            if p.engines is not None and entry.engine not in p.engines:
                continue
            given = (field in entry.extras if name.startswith("extra.")
                     else field in entry.model_fields_set)
            if given:
                raise ValueError(f"space[{i}].{field} is also searched by search.params.{name}"
                                 f": give it in one place")
