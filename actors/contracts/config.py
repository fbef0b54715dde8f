"""The configuration types that cross the driver/actor boundary.

A trial's server settings (``TrialConfig``), the work it is measured under
(``Workload``), the model, how to launch or reach the engine (``LaunchOptions``),
the sim's options and one engine's part of a search space (``SpaceEntry``). Every
model is frozen and forbids unknown fields. Checks that need the engines (which
engines exist, an engine's own rules for its space, the sim's profiles) run only
when validation is given ``SpecRules`` in its context (``orchestrator.spec`` does),
so this layer imports nothing else of the project.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from actors.contracts.secrets import (
    ENV_REF,
    SECRET_ERROR,
    SECRET_NAME,
    secret_fix,
    secret_reason,
)
from actors.contracts.traffic import CapacitySpec, FileSource, Level, LevelKind, RequestSource

__all__ = ["resolve_env", "ENV_REF", "SECRET_NAME", "Frozen", "TrialConfig", "Workload",
           "ModelSpec", "SimOptions", "LaunchOptions", "SpaceEntry", "SpecRules", "AXES",
           "Precision", "KvDtype", "Scalar", "PosInt"]

Precision = Literal["auto", "bf16", "fp16", "fp8", "nvfp4"]
KvDtype = Literal["auto", "bf16", "fp16", "fp8"]
Scalar = str | int | float | bool
PosInt = Annotated[int, Field(gt=0)]
LaunchLabel = Annotated[str, Field(min_length=1, max_length=60, pattern=r"^[\w.:@/+-]+$")]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _digest(fields: dict[str, Any]) -> str:
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


class TrialConfig(Frozen):
    """One server configuration: the unit a sweep measures.

    ``key()`` is a stable hash of every field and names the trial everywhere
    (ledger, MLflow, logs). ``extras`` holds engine-specific options; each
    adapter allow-lists and types them before launch.
    """

    engine: str
    profile: str | None = None  # sim only: the engine it imitates (vllm | trtllm)
    tp: PosInt = 1
    weights: Precision = "bf16"
    kv_dtype: KvDtype = "auto"
    cuda_graphs: bool = True
    graph_max_batch: PosInt | None = None
    max_num_seqs: PosInt | None = None
    max_num_tokens: PosInt | None = None
    max_model_len: PosInt | None = None
    gpu_memory_fraction: float = Field(default=0.9, gt=0, le=1)
    extras: dict[str, Scalar] = Field(default_factory=dict)  # no secret by value
    #: tells apart trials of the same settings launched differently (another vLLM build
    #: or interpreter, another endpoint); None: the settings alone name the trial
    launch_label: str | None = None
    #: which restart of a config the space repeats (``repeat: N``); 0: the first
    repeat: int = Field(default=0, ge=0)
    #: the model this config serves when its space entry names its own (a path); None: the
    #: spec's ``model``. Part of the identity: another model is another config
    model: str | None = None

    @field_validator("extras")
    @classmethod
    def _no_secret_extras(cls, v: dict[str, Scalar]) -> dict[str, Scalar]:
        for name, value in v.items():
            _refuse_secret(f"extras.{name}", value, by_name=False)
        return v

    def key(self) -> str:
        """The trial key: the identity plus the launch label and repeat where set (a trial
        without either keeps the key it had before they existed)."""
        drop = {k for k, v in (("launch_label", None), ("repeat", 0), ("model", None))
                if getattr(self, k) == v}
        return _digest(self.model_dump(mode="json", exclude=drop))

    def identity(self) -> str:
        """The config identity: the engine settings alone (no launch label, no repeat).
        Trials of one identity are the same config, measured more than once or on another
        build; ``compare`` and ``calibrate`` match by it."""
        drop = {"launch_label", "repeat"} | ({"model"} if self.model is None else set())
        return _digest(self.model_dump(mode="json", exclude=drop))

    def label(self) -> str:
        """Short human name: ``sim:trtllm tp1 bf16 kv=fp8 graphs``."""
        eng = f"{self.engine}:{self.profile}" if self.profile else self.engine
        parts = [eng, f"tp{self.tp}", self.weights, f"kv={self.kv_dtype}",
                 "graphs" if self.cuda_graphs else "eager"]
        for name in ("max_num_seqs", "max_num_tokens", "graph_max_batch"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value}")
        parts += [f"{k}={v}" for k, v in sorted(self.extras.items())]
        if self.gpu_memory_fraction != 0.9:
            parts.append(f"mem={self.gpu_memory_fraction}")
        if self.model:
            parts.append(f"model={Path(self.model).name}")
        if self.launch_label:
            parts.append(f"[{self.launch_label}]")
        if self.repeat:
            parts.append(f"#{self.repeat + 1}")
        return " ".join(parts)

    def flat_params(self) -> dict[str, str]:
        """Every field as a string, extras prefixed ``extra.``; for MLflow params."""
        out = {k: str(v) for k, v in self.model_dump().items() if k != "extras"
               and not (k in ("launch_label", "model") and v is None)
               and not (k == "repeat" and v == 0)}
        out.update({f"extra.{k}": str(v) for k, v in self.extras.items()})
        return out


class Workload(Frozen):
    """Matched work: every config gets the same requests, each decoding exactly its own
    output length. Without ``requests`` every request sends ``prompt_tokens`` and decodes
    ``output_tokens``; with a source (``actors.contracts.traffic``) the request list comes
    from it and ``prompt_tokens`` / ``output_tokens`` are its longest (filled in by
    ``orchestrator.spec``: they size the server). Levels: closed loop at each
    ``concurrency``, open loop at each of ``rates`` (gamma arrivals of shape
    ``burstiness``: 1 is Poisson, below 1 burstier, as in vLLM), the file's own timestamps sped up
    by each of ``trace_speedups``."""

    prompt_tokens: PosInt
    output_tokens: PosInt
    concurrency: list[PosInt] = Field(default_factory=list)
    requests: RequestSource | None = None
    rates: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    burstiness: float = Field(default=1.0, gt=0)
    #: an open-loop level's most requests in flight (None: unbounded but for
    #: ``MAX_IN_FLIGHT``): past it, an arrival waits and counts as sent late
    max_in_flight: PosInt | None = None
    trace_speedups: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    #: capacity at SLO: the highest rate each config holds (needs the spec's ``slo``)
    capacity: CapacitySpec | None = None
    #: a rate level sends at least rate x this many requests per round (engine seconds; the
    #: request list cycled, each pass with prompts of its own): long enough to be steady
    open_loop_s: float = Field(default=10.0, ge=0)
    #: open-loop levels: the share of the level's span left out at each end (warm-up, drain)
    steady_trim: float = Field(default=0.1, ge=0, lt=0.5)
    #: an open-loop request sent more than this late (engine ms) counts as late; any late
    #: request flags the level ``late_sends`` (it cannot win). A sped-up sim scales it down
    #: in wall time (at time scale 0.25, 50 engine ms are 12.5 wall ms)
    late_send_ms: float = Field(default=50.0, gt=0)
    rounds: PosInt | None = None  # None: 5 at concurrency <= 4, else 3
    requests_per_round: PosInt | None = None  # None: max(2 * concurrency, 4)
    warmup_requests: int = Field(default=4, ge=0)
    api: Literal["completions", "chat"] = "completions"
    shared_prefix_tokens: int = Field(default=0, ge=0)
    request_rate: float | None = Field(default=None, gt=0)  # open loop (Poisson) if set
    noise_band: float = Field(default=0.05, gt=0, lt=1)
    connect_timeout_s: float = Field(default=10, gt=0)
    stall_timeout_s: float = Field(default=60, gt=0)
    level_timeout_s: float = Field(default=900, gt=0)
    seed: int = 0
    #: the load generator's processes on the server's node, each with its own event loop
    #: and share of the streams: one core's worth of reading each (a level flagged
    #: ``client_bound`` at one shard wants more)
    client_shards: PosInt = 1
    #: ``lean`` (raw sockets, the faster) or ``aiohttp``
    client_transport: Literal["lean", "aiohttp"] = "lean"
    #: let levels flagged ``unverified`` (output counted from the server's usage alone) win
    trust_usage: bool = False

    @field_validator("concurrency", "rates", "trace_speedups")
    @classmethod
    def _sorted_unique(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} levels must be distinct, got {v}")
        return sorted(v)

    @model_validator(mode="after")
    def _prefix_fits(self) -> Workload:
        if self.shared_prefix_tokens >= self.prompt_tokens:
            raise ValueError("shared_prefix_tokens must be smaller than prompt_tokens")
        if not (self.concurrency or self.rates or self.trace_speedups or self.capacity):
            raise ValueError("give at least one level: concurrency, rates, trace_speedups "
                             "(or a capacity search)")
        if self.requests is not None and self.shared_prefix_tokens:
            raise ValueError("shared_prefix_tokens is for the fixed shape; with requests, "
                             "give prefix_groups (synthetic) or hash_ids (a file)")
        if self.trace_speedups and not isinstance(self.requests, FileSource):
            raise ValueError("trace_speedups replay a request file's timestamps: give "
                             "requests: {kind: file, path: ...}")
        return self

    def levels(self) -> list[Level]:
        """Every level in the order they run: concurrencies, rates, trace replays."""
        return ([Level.of(c) for c in self.concurrency]
                + [Level(kind=LevelKind.RATE, value=r) for r in self.rates]
                + [Level(kind=LevelKind.TRACE, value=s) for s in self.trace_speedups])

    @property
    def top_concurrency(self) -> int:
        """The highest concurrency level, else the open-loop cap the spec set (0: none set;
        sizes ``max_num_seqs >= highest_concurrency`` and the open-file check). An
        open-loop level opens connections as its sends need them, so the default cap is no
        floor for either."""
        if self.concurrency:
            return self.concurrency[-1]
        return self.max_in_flight or 0

    def in_flight_cap(self, level: Level) -> int:
        if level.kind is LevelKind.CONCURRENCY:
            return int(level.value)
        return self.max_in_flight or MAX_IN_FLIGHT

    def requests_at(self, level: Level, listed: int | None) -> int:
        """Requests per round at ``level``: the request list's ``listed`` requests, else
        the fixed shape's count (closed loop: ``requests_for``; open loop:
        ``requests_per_round``, default 64); a rate level at least ``rate x open_loop_s``
        (the list cycled)."""
        if level.kind is LevelKind.CONCURRENCY:
            return listed if listed else self.requests_for(int(level.value))
        base = listed or self.requests_per_round or 64
        if level.kind is LevelKind.RATE:
            return max(base, math.ceil(level.value * self.open_loop_s))
        return base

    def rounds_for(self, concurrency: int) -> int:
        if self.rounds is not None:
            return self.rounds
        return 5 if concurrency <= 4 else 3

    def requests_for(self, concurrency: int) -> int:
        if self.requests_per_round is not None:
            return max(self.requests_per_round, concurrency)
        return max(2 * concurrency, 4)

    @property
    def request_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


#: an open-loop level's default cap on requests in flight
MAX_IN_FLIGHT = 1024


class ModelSpec(Frozen):
    """A named shape preset (sim only) or a model path / hub id served by a real engine."""

    preset: str | None = None
    path: str | None = None
    tokenizer: str | None = None  # default: path
    served_name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.preset is None) == (self.path is None):
            raise ValueError("give exactly one of model.preset or model.path")
        return self

    @property
    def display_name(self) -> str:
        return self.served_name or self.preset or Path(self.path or "model").name


class SimOptions(Frozen):
    """Options of the simulated engine. ``time_scale`` < 1 runs faster than real time."""

    time_scale: float = Field(default=1.0, ge=0, le=1)
    seed: int = 0
    # tokens per SSE chunk; None: 1 at time_scale >= 0.5, else ceil(0.5 / time_scale), so a
    # sped-up sim does not offer the client more chunks per second than it can read
    stream_interval: PosInt | None = None
    # per-profile field overrides, e.g. what `servesweep calibrate` fitted:
    #   profiles: {vllm: {gemm_eff: 0.66, mem_eff: 0.71}}
    profiles: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: a short profile of this model (``servesweep profile-model``; ``model_profile``): its
    #: fitted factors join ``profiles`` (an entry there wins) and its band every prediction.
    #: A path, relative to the spec's folder; a sweep keeps a copy (``model-profile.json``)
    model_profile: str | None = Field(default=None, min_length=1)
    # hold mode, for measuring the scheduler, never an engine: each level of a sim trial is
    # ``hold_s`` wall-clock seconds of idle waiting (no request sent, no CPU; not scaled by
    # ``time_scale``) after the sim server started and answered its health check. Such a
    # level is ``invalid`` and flagged ``held`` (reason "hold mode ..."): a hold-mode trial
    # ends ``invalid``, is never a winner and carries no numbers (actors/sim/hold.py)
    hold_s: float | None = Field(default=None, gt=0)
    #: the bound on the sim's lateness: a level in which more than this share of the
    #: tokens went out late (``actors.sim.pace``: past their step's due time by more than
    #: the step, or 2 ms) is flagged ``sim_behind`` and cannot win
    late_share_max: float = Field(default=0.10, ge=0, le=1)
    #: and a level in which the sim lost more than this share of its wall time to stalls
    #: it could not make up (its throughput understated by as much)
    lost_share_max: float = Field(default=0.02, ge=0, le=1)

    @field_validator("profiles")
    @classmethod
    def _fittable(cls, v: dict[str, dict[str, float]],
                  info: ValidationInfo) -> dict[str, dict[str, float]]:
        rules = _rules(info)
        if rules is None:
            return v
        profiles, fittable = rules.sim_profiles(), rules.fittable()
        for name, fields in v.items():
            if name not in profiles:
                raise ValueError(f"unknown sim profile {name!r}; use one of {sorted(profiles)}")
            bad = set(fields) - set(fittable)
            if bad:
                raise ValueError(f"{name}: {sorted(bad)} cannot be set; use {', '.join(fittable)}")
        return v

    def chunk_tokens(self) -> int:
        if self.stream_interval is not None:
            return self.stream_interval
        if self.time_scale >= 0.5 or self.time_scale == 0:
            return 1
        return math.ceil(0.5 / self.time_scale)




class LaunchOptions(Frozen):
    """How to start (or reach) the engine; not part of the trial key.

    ``env`` values may be ``${NAME}`` references to the environment of the node the
    engine starts on (``resolve_env``); a variable whose name or value says it is a secret
    (``secrets.secret_reason``) must be one, so a spec, a ledger or an MLflow run never
    holds a secret's value.
    """

    python: str | None = None  # interpreter of the engine's own venv (vLLM)
    executable: str | None = None  # e.g. trtllm-serve
    base_url: str | None = None  # external engine
    api_key_env: str | None = None  # name of the env var holding the API key
    release: str | None = None  # TensorRT-LLM release layout, e.g. "1.0"
    host: str = "127.0.0.1"
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _secrets_by_reference(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            _refuse_secret(name, value)
        return v


def _refuse_secret(name: str, value: object, by_name: bool = True) -> None:
    """``launch.env`` values may be ``${NAME}`` references; an engine option (``extras``)
    may not hold a secret at all: it belongs in the engine's environment."""
    why = secret_reason(name, value, by_name)
    if why is None:
        return
    text = secret_fix(name, why) if by_name else (
        f"{why}: an engine option never holds a secret (it is stored in the spec, the "
        "ledger and MLflow); give it to the engine through launch.env as a reference, e.g. "
        'launch: {env: {MY_TOKEN: "${MY_TOKEN}"}}')
    # its own error type: an error message never repeats the value (``SECRET_ERROR``)
    raise PydanticCustomError(SECRET_ERROR, "{text}", {"text": text})


def resolve_env(env: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """``env`` with every ``${NAME}`` replaced by ``environ[NAME]``; raises ``KeyError``
    naming the variable when a referenced one is not set."""
    out = {}
    for name, value in env.items():
        m = ENV_REF.match(value)
        if m is None:
            out[name] = value
        elif m.group(1) in environ:
            out[name] = environ[m.group(1)]
        else:
            raise KeyError(f"launch.env.{name} refers to ${m.group(1)}, which is not set "
                           "in the environment of the node the engine starts on")
    return out


AXES = ("profile", "tp", "weights", "kv_dtype", "cuda_graphs", "graph_max_batch",
        "max_num_seqs", "max_num_tokens", "max_model_len", "gpu_memory_fraction")


#: the most values one axis of a space entry may list, and trials one entry may expand to
MAX_AXIS_VALUES = 1000
MAX_ENTRY_TRIALS = 20_000


def _listify(v: Any) -> Any:
    return v if isinstance(v, list) else [v]


class SpaceEntry(Frozen):
    """One engine's part of the search space: every axis is a value or a list of values."""

    engine: str
    profile: list[str | None] = [None]
    tp: list[PosInt] = [1]
    weights: list[Precision] = ["bf16"]
    kv_dtype: list[KvDtype] = ["auto"]
    cuda_graphs: list[bool] = [True]
    graph_max_batch: list[PosInt | None] = [None]
    max_num_seqs: list[PosInt | None] = [None]
    max_num_tokens: list[PosInt | None] = [None]
    max_model_len: list[PosInt | None] = [None]
    gpu_memory_fraction: list[Annotated[float, Field(gt=0, le=1)]] = [0.9]
    extras: dict[str, list[Scalar]] = Field(default_factory=dict)
    launch: LaunchOptions = LaunchOptions()
    #: names this entry's trials apart from another entry's of the same settings launched
    #: differently (``launch_label``); without it such trials get one derived from launch
    label: LaunchLabel | None = None
    #: measure each config this many times, the server restarted each time (the
    #: between-restart noise: ``compare`` and "within noise" use it)
    repeat: PosInt = 1
    #: this entry's own model (a local path, e.g. a quantized or degraded copy); None: the
    #: spec's ``model``. Its trials are other configs (the model is in the trial key)
    model: str | None = Field(default=None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _lists(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for axis in AXES:
                if axis in data:
                    data[axis] = _listify(data[axis])
            if isinstance(data.get("extras"), dict):
                data["extras"] = {k: _listify(v) for k, v in data["extras"].items()}
            lengths = {a: len(data[a]) for a in AXES if isinstance(data.get(a), list)}
            if isinstance(data.get("extras"), dict):
                lengths |= {f"extras.{k}": len(v) for k, v in data["extras"].items()
                            if isinstance(v, list)}
            for axis, n in lengths.items():
                if n > MAX_AXIS_VALUES:
                    raise ValueError(f"{axis}: {n} values; an axis may have at most "
                                     f"{MAX_AXIS_VALUES} (search a range with search.params)")
            size = math.prod(lengths.values()) if lengths else 1
            if size > MAX_ENTRY_TRIALS:
                raise ValueError(f"this entry expands to {size:,} trials; at most "
                                 f"{MAX_ENTRY_TRIALS:,} (fewer values per axis, or an Optuna "
                                 "search over ranges)")
        return data

    @field_validator("extras")
    @classmethod
    def _no_secret_extras(cls, v: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for name, values in v.items():
            for value in values:
                _refuse_secret(f"extras.{name}", value, by_name=False)
        return v

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str, info: ValidationInfo) -> str:
        rules = _rules(info)
        if rules is not None and v not in rules.engine_names():
            raise ValueError(f"unknown engine {v!r}; use one of: "
                             f"{', '.join(rules.engine_names())}")
        return v

    @model_validator(mode="after")
    def _engine_rules(self, info: ValidationInfo) -> SpaceEntry:
        rules = _rules(info)
        if rules is not None:
            rules.check_space(self)
        return self

    def expand(self, default_profile: str | None = None) -> list[TrialConfig]:
        """The cross product of the axes (and the extras), in declaration order; a sim
        entry without a profile gets ``default_profile``."""
        axes = [getattr(self, a) for a in AXES]
        extra_keys = sorted(self.extras)
        extra_vals = [self.extras[k] for k in extra_keys]
        out = []
        for combo in itertools.product(*axes, *extra_vals):
            fields = dict(zip(AXES, combo[: len(AXES)]))
            extras = dict(zip(extra_keys, combo[len(AXES):]))
            if fields["profile"] is None and default_profile is not None:
                fields["profile"] = default_profile
            for r in range(self.repeat):
                out.append(TrialConfig(engine=self.engine, extras=extras, repeat=r,
                                       launch_label=self.label, model=self.model,
                                       **fields))
        return out




class SpecRules(Protocol):
    """What validation needs to know of the engines (given as ``context={"rules": ...}``)."""

    def engine_names(self) -> list[str]: ...

    def check_space(self, entry: SpaceEntry) -> None:
        """Raise ValueError naming the field when ``entry`` cannot apply to its engine."""

    def sim_profiles(self) -> list[str]: ...

    def fittable(self) -> list[str]: ...


def _rules(info: ValidationInfo) -> SpecRules | None:
    ctx = info.context
    return ctx.get("rules") if isinstance(ctx, dict) else None
