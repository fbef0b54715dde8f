"""The sweep spec: what a user writes in search_spaces/*.yaml.

Every model is frozen and forbids unknown fields, so a typo is an error that
names the field rather than a silently ignored setting. ``load_spec`` turns
pydantic's errors into one line per problem: ``space[0].kv_dtype: ...``. The
parts that cross to the actors (trial config, workload, model, launch and sim
options, space entries) are ``actors.contracts.config``; the engines' own rules
are applied through ``EngineRules`` (``orchestrator.spec.rules``).
"""

from __future__ import annotations

import difflib
import enum
import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from actors.contracts.config import (
    Frozen,
    ModelSpec,
    PosInt,
    SimOptions,
    SpaceEntry,
    TrialConfig,
    Workload,
)
from actors.contracts.hardware import hardware_names
from actors.contracts.model_profile import ModelProfile
from actors.contracts.quality import QualitySpec
from actors.contracts.secrets import SECRET_ERROR
from actors.contracts.shapes import preset_names
from actors.contracts.slo import SLO
from actors.contracts.states import FailureClass
from actors.contracts.traffic import RequestPlan
from actors.engines import adapter_names, get_adapter
from orchestrator.errors import SpecError
from orchestrator.spec.model_profiles import apply_model_profile, profile_spent_s
from orchestrator.spec.quality_checks import (
    check_quality,
    check_task_files,
    context_problems,
    preflight_quality,
    task_dir,
)
from orchestrator.spec.rules import EngineRules
from orchestrator.spec.search import SearchSpec, check_search_against
from orchestrator.spec.traffic_plan import build_plan, fill_lengths
from orchestrator.spec.yaml_load import MAX_BYTES, bounded, load_yaml

__all__ = ["ClusterSpec", "TrialOrder", "SLO", "SearchSpec", "FailurePolicy", "SweepSpec",
           "load_spec", "parse_spec", "format_validation_error"]


class TrialOrder(enum.StrEnum):
    """The order a grid search starts its trials in."""

    PACKED = "packed"  # largest tp first (declared order among equal tp): less fragmentation
    DECLARED = "declared"  # the order the space declares


_RAY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+/-]{0,62}$")


class ClusterSpec(Frozen):
    """Where trials run. ``address`` null starts a local Ray; ``gpus`` declares logical GPUs.

    Placement: each trial's ``tp`` GPUs are one placement group on one node, the node
    chosen by servesweep (best fit, largest ``tp`` first: ``order``). ``gpu_type`` runs
    trials only on nodes of that Ray accelerator type (e.g. ``H100``: the node's
    ``accelerator_type:H100`` resource or ``ray.io/accelerator-type`` label);
    ``node_labels`` only on nodes carrying every label given; ``trials_per_node: 1`` runs
    one trial at a time on a node (no neighbour sharing its PCIe, CPUs or memory).
    """

    address: str | None = None
    gpus: int | None = Field(default=None, ge=0)
    cpus: int | None = Field(default=None, ge=1)
    max_concurrent_trials: PosInt | None = None
    namespace: str = "servesweep"
    gpu_type: str | None = None
    node_labels: dict[str, str] = Field(default_factory=dict)
    trials_per_node: PosInt | None = None
    order: TrialOrder = TrialOrder.PACKED

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, v: str | None) -> str | None:
        if v is not None and not _RAY_NAME.match(v):
            raise ValueError("gpu_type is a Ray accelerator type such as H100, A100 or L4 "
                             "(letters, digits, '.', '_', '+', '-')")
        return v

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not _RAY_NAME.match(key) or not _RAY_NAME.match(str(value)):
                raise ValueError(f"node label {key!r}: {value!r} is not a Ray node label (a "
                                 "key and a value of letters, digits, '.', '_', '+', '/', "
                                 "'-', each 1-63 long)")
        return v


class FailurePolicy(Frozen):
    """What a failed trial does to the sweep (failed trials are results, not errors)."""

    max_failures: int | None = Field(default=None, ge=0)  # stop after this many; None: never
    fail_fast: bool = False
    startup_timeout_s: float = Field(default=900, gt=0)
    stop_timeout_s: float = Field(default=30, gt=0)
    # how long a trial may wait for a node while no other trial of the sweep holds one
    # (the room is then taken by something else, or a node is gone)
    place_timeout_s: float = Field(default=600, gt=0)
    # a trial that failed for a transient reason (``retry_on``) runs again, up to
    # ``retries`` more attempts, recorded as attempts of that one trial (one final result
    # per trial key); a deterministic failure (an OOM of that exact config) never is
    retries: int = Field(default=1, ge=0)
    retry_on: list[FailureClass] = Field(default_factory=lambda: [FailureClass.NODE_LOST])
    # the phase deadlines of a trial (TrialExecution): the host's launch call, a liveness
    # check or the last observation, and the grace beyond a call's own timeout (startup,
    # level, stop) after which the call itself counts as hung
    launch_timeout_s: float = Field(default=120, gt=0)
    observe_timeout_s: float = Field(default=60, gt=0)
    call_grace_s: float = Field(default=60, gt=0)
    stop_grace_s: float = Field(default=30, gt=0)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: ``org/name``: a model hub id (the engine resolves it, from its cache where offline)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_FD_HEADROOM = 256  # files besides a level's sockets: Ray, logs, the metrics scraper


def _nofile() -> tuple[int, int]:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0, 0
    inf = resource.RLIM_INFINITY
    return (0 if soft == inf else soft), (2**20 if hard == inf else hard)


class SweepSpec(Frozen):
    """A whole sweep: model, hardware, workload, search and the space of server configs."""

    name: str
    description: str = ""
    cluster: ClusterSpec = ClusterSpec()
    model: ModelSpec
    hardware: str = "h100-sxm"
    workload: Workload
    slo: SLO = SLO()
    #: sampler, load regimes, objective, budgets (terms: orchestrator.spec.search)
    search: SearchSpec = SearchSpec()
    sim: SimOptions = SimOptions()
    failure: FailurePolicy = FailurePolicy()
    #: accuracy beside speed: a task and/or agreement, a reference, a gate
    #: (``actors.contracts.quality``; rules: ``orchestrator.spec.quality_checks``)
    quality: QualitySpec | None = None
    space: list[SpaceEntry] = Field(min_length=1)

    #: the folder the spec was read from (a request file's relative path starts there)
    _base_dir: Path | None = PrivateAttr(default=None)
    _plan: list[RequestPlan | None] = PrivateAttr(default_factory=list)
    #: the short profile ``sim.model_profile`` names, read when the spec loaded
    _model_profile: ModelProfile | None = PrivateAttr(default=None)
    #: the seconds the sweep spent making that profile (``search.profile_first``), which
    #: its budget counts as spent
    _profile_spent_s: float = PrivateAttr(default=0.0)

    @property
    def profile_spent_s(self) -> float:
        """GPU seconds this sweep spent profiling its model first (0: none)."""
        return self._profile_spent_s

    @property
    def model_profile(self) -> ModelProfile | None:
        """The model's short profile (``sim.model_profile``), if the spec names one."""
        return self._model_profile

    def request_plan(self) -> RequestPlan | None:
        """The workload's request list (None: the fixed shape), built once."""
        if not self._plan:
            model = self.model
            self._plan.append(build_plan(self.workload, self._base_dir,
                                         model.tokenizer or model.path))
        return self._plan[0]

    def model_for(self, cfg: TrialConfig) -> ModelSpec:
        """The model ``cfg`` serves: its space entry's own (``model``), else the spec's."""
        if cfg.model is None:
            return self.model
        return ModelSpec(path=cfg.model, served_name=self.model.served_name)

    def quality_task_dir(self) -> Path | None:
        """The quality task's folder, absolute (relative: from the spec's folder)."""
        return task_dir(self.quality, self._base_dir) if self.quality is not None else None

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("name must be 1-64 of letters, digits, '.', '_' or '-'")
        return v

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, v: str) -> str:
        if v not in hardware_names():
            raise ValueError(f"unknown hardware {v!r}; use one of: {', '.join(hardware_names())}")
        return v

    @model_validator(mode="after")
    def _model_source(self) -> SweepSpec:
        engines = {e.engine for e in self.space}
        if self.model.preset is not None:
            if self.model.preset not in preset_names():
                raise ValueError(f"model.preset {self.model.preset!r} is unknown; use one of: "
                                 f"{', '.join(preset_names())} (or model.path)")
            real = sorted(e for e in engines
                          if not (e in adapter_names() and get_adapter(e).serves_presets))
            if real:
                raise ValueError(f"engines {real} serve real weights: give model.path, "
                                 "not model.preset")
        return self

    @model_validator(mode="after")
    def _capacity_has_an_slo(self) -> SweepSpec:
        if self.search.objective.value == "slo_capacity" and self.workload.capacity is None:
            raise ValueError("search.objective slo_capacity ranks by workload.capacity: give "
                             "workload.capacity (e.g. {low: 1, share: 0.99})")
        if self.workload.capacity is not None and self.slo.empty:
            raise ValueError("workload.capacity finds the highest rate meeting the slo: give "
                             "slo limits (e.g. slo: {ttft_p99_ms: 500, itl_p99_ms: 50})")
        return self

    @model_validator(mode="after")
    def _quality_applies(self) -> SweepSpec:
        if self.quality is not None:
            check_quality(self.quality, self.space)
        for i, e in enumerate(self.space):
            if e.model is not None and e.engine in adapter_names() \
                    and get_adapter(e.engine).serves_presets:
                raise ValueError(f"space[{i}].model: engine {e.engine!r} serves the spec's "
                                 "model preset; an entry's own model is for real engines")
        return self

    @model_validator(mode="after")
    def _search_fits(self) -> SweepSpec:
        check_search_against(self.search, self.workload.levels(), self.space)
        _check_extra_params(self)
        return self


def _check_extra_params(spec: SweepSpec) -> None:
    """Each ``extra.<option>`` parameter against the typed extras of every engine it applies
    to: an option the engine lacks, or a range end its model refuses, is the spec's error
    (named ``search.params.extra.<option>``), not a failure when the search draws it."""
    top = spec.workload.top_concurrency
    for name, p in spec.search.params.items():
        if not name.startswith("extra.") or p.same_as is not None:
            continue
        option = name.removeprefix("extra.")
        values = p.values(top)
        ends = {"low": values[0], "high": values[-1]} if values else {}
        for engine in sorted({e.engine for e in spec.space} & set(p.engines or adapter_names())):
            fields = get_adapter(engine).extras_model.model_fields
            if option not in fields:
                raise ValueError(
                    f"search.params.{name}: {option!r} is not an option of engine {engine!r} "
                    f"(its options: {', '.join(sorted(set(fields) - {'engine'}))}); limit the "
                    f"parameter with engines: [...] or pick one of those")
            for end, v in ends.items():
                value = int(v) if p.type == "int" else v
                try:
                    get_adapter(engine).extras_model.model_validate({option: value})
                except ValidationError as err:
                    why = err.errors()[0]["msg"].removeprefix("Value error, ")
                    raise ValueError(f"search.params.{name}.{end}: {value!r} is refused by "
                                     f"engine {engine!r}: {why}") from None


def _unwrap(tp: Any) -> Any:
    """``list[X]``, ``dict[str, X]``, ``X | None`` -> ``X``."""
    while typing.get_origin(tp) in (list, dict, typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[-1] if args else None
    return tp


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model a location's last part is a field of (``space[0].tpp``: the
    space entry's); None where the path leaves the models."""
    current: Any = SweepSpec
    for part in loc[:-1]:
        current = _unwrap(current)
        if isinstance(part, int) or not (isinstance(current, type)
                                         and issubclass(current, BaseModel)):
            continue  # a list index, or a dict's key: the unwrapped type stands
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = field.annotation
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unknown_field(loc: tuple[Any, ...]) -> str:
    """"not a field" with the nearest allowed name and the allowed ones."""
    model = _model_at(loc)
    if model is None:
        return "not a field here"
    names = sorted(model.model_fields)
    near = difflib.get_close_matches(str(loc[-1]), names, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"not a field here; {hint}allowed: {', '.join(names)}"


def format_validation_error(err: ValidationError, source: str = "spec") -> str:
    lines = [f"{source}: {err.error_count()} problem(s)"]
    for e in err.errors():
        loc = ""
        for part in e["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = _unknown_field(tuple(e["loc"]))
        got = e.get("input")
        hide = e["type"] in ("missing", SECRET_ERROR) or isinstance(got, dict)
        got_txt = "" if hide else f" (got {got!r})"
        lines.append(f"  {loc or '<top>'}: {msg}{got_txt}")
    return "\n".join(lines)


def parse_spec(data: Any, source: str = "spec", base_dir: Path | None = None) -> SweepSpec:
    """Validate a spec's data; ``base_dir`` (the spec's folder) resolves a request file's
    relative path, whose longest request sets the workload's lengths."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the top level must be a mapping of fields, got "
                        f"{type(data).__name__}")
    plan = None
    if isinstance(data.get("workload"), dict):
        raw_model = data.get("model")
        model: dict[str, Any] = raw_model if isinstance(raw_model, dict) else {}
        tok = model.get("tokenizer") or model.get("path")
        try:
            work, plan = fill_lengths(data["workload"], base_dir,
                                      tok if isinstance(tok, str) else None)
            data = {**data, "workload": work}
        except SpecError as err:
            raise SpecError(f"{source}: {err}") from None
    data, model_profile = apply_model_profile(data, base_dir, source)
    try:
        spec = SweepSpec.model_validate(data, context={"rules": EngineRules()})
        spec._base_dir = base_dir
        spec._model_profile = model_profile
        spec._profile_spent_s = profile_spent_s(base_dir)
        if spec.quality is not None:
            problems = check_task_files(spec.quality, base_dir)
            if problems:
                raise SpecError(f"{source}: " + "; ".join(problems))
        if plan is not None:  # the file was read to size the workload: keep its list
            spec._plan.append(plan)
        return spec
    except ValidationError as err:
        raise SpecError(bounded(format_validation_error(err, source))) from None


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a YAML spec; raises ``SpecError`` naming every bad field."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"spec file not found: {p}")
    if p.stat().st_size > MAX_BYTES:  # refused before it is read into memory
        raise SpecError(f"{p}: {p.stat().st_size:,} bytes; a spec may have at most "
                        f"{MAX_BYTES:,}")
    return parse_spec(load_yaml(p.read_text(errors="replace"), str(p)), str(p), p.parent)


def preflight(spec: SweepSpec) -> None:
    """What this machine must offer before a sweep of ``spec`` starts here (``run``,
    ``resume``); ``SpecError`` (exit 2) naming the field, before Ray or any folder exists.
    On a local Ray (``cluster.address`` null) the engines and the load generator run on
    this machine: a real engine's ``model.path`` must exist here (a hub id ``org/name``
    is the engine's to resolve), and the top level's sockets must fit the open-file
    limit (else a level fails 80,000 connects in). A cluster's token is checked by the
    commands that join it (``orchestrator.execution.cluster_auth``: the layer above)."""
    if spec.cluster.address is not None:
        return
    problems = []
    path = spec.model.path
    real = sorted(e for e in {x.engine for x in spec.space} if e in adapter_names()
                  and get_adapter(e).launches_process and not get_adapter(e).serves_presets)
    if path and real and not Path(path).exists() and not _HUB_ID.match(path):
        problems.append(f"model.path: {path!r} does not exist on this machine, where the "
                        f"local Ray runs {', '.join(real)}: give the model's local directory")
    for i, e in enumerate(spec.space):
        if e.model is not None and not Path(e.model).exists() and not _HUB_ID.match(e.model):
            problems.append(f"space[{i}].model: {e.model!r} does not exist on this machine: "
                            "give the model's local directory")
    if spec.quality is not None:
        python = next((e.launch.python for e in spec.space if e.launch.python), None)
        problems += preflight_quality(spec.quality, python)
        models = {spec.model.path} | {e.model for e in spec.space if e.model}
        problems += context_problems(spec.quality, sorted(m for m in models if m))
    soft, hard = _nofile()
    top = spec.workload.top_concurrency
    if soft and top + _FD_HEADROOM > soft:
        problems.append(f"workload.concurrency: {top} needs about {top + _FD_HEADROOM} open "
                        f"files, and this process may open {soft} (hard limit {hard}): "
                        f"lower the level, or raise the limit first (`ulimit -n "
                        f"{min(hard, top + _FD_HEADROOM)}` in the shell that runs servesweep)")
    if problems:
        raise SpecError("spec: " + "; ".join(problems))
