"""The engine adapter contract and the value types adapters exchange with the host.

An ``EngineAdapter`` knows one engine: how to launch it for a trial, how to read
its log and ``/metrics``, and how to tell whether the server really runs the
configuration that was asked for. Adapters are stateless and pure: they never
start, signal or wait on processes themselves (``EngineHost`` does), so every
method can be unit-tested on strings.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.spec import (
    LaunchOptions,
    ModelSpec,
    SimOptions,
    SpaceEntry,
    TrialConfig,
    Workload,
)

__all__ = ["EngineAdapter", "LaunchContext", "LaunchPlan", "LogEvent", "MetricsSample",
           "FAILURE_CLASSES", "parse_prometheus", "redact"]

#: Failure classes of a trial (DESIGN.md "States, flags, winners").
FAILURE_CLASSES = ("startup_oom", "startup_crash", "startup_timeout", "unhealthy",
                   "crash_mid_run", "hang", "node_lost", "config_mismatch", "client_error")

_SECRET_ENV = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD)", re.I)


def redact(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Copies with secret values replaced by ``***`` (env names matching TOKEN/KEY/...)."""
    secrets = {v for k, v in env.items() if _SECRET_ENV.search(k) and v}
    safe_argv = ["***" if a in secrets else a for a in argv]
    safe_env = {k: ("***" if _SECRET_ENV.search(k) else v) for k, v in env.items()}
    return safe_argv, safe_env


class LaunchContext(BaseModel):
    """What an adapter needs besides the trial: the sweep's fixed parts and where to write."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sweep_id: str
    trial_key: str
    trial_dir: str
    model: ModelSpec
    hardware: str
    workload: Workload
    sim: SimOptions = SimOptions()
    launch: LaunchOptions = LaunchOptions()
    port: int = 0  # 0: the server picks one and logs it (adapters that support it)


class LaunchPlan(BaseModel):
    """An argv list (never a shell string), extra env, and files to write before launch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # name in trial_dir -> content
    port: int = 0
    base_url: str | None = None  # set when no process is launched (external)
    api_key: str | None = None  # sent as a bearer token; never recorded


@dataclass(frozen=True)
class LogEvent:
    """One fact read from a server log line. ``kind`` names it; ``data`` holds the values."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    line: str = ""


@dataclass(frozen=True)
class MetricsSample:
    """One scrape of the server's metrics, normalised across engines (None: not reported)."""

    t: float
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    preemptions_total: float | None = None
    block_size: int | None = None
    num_blocks: int | None = None
    time_scale: float | None = None


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text -> {name: [(labels, value), ...]}; comments and junk lines skipped."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.setdefault(m.group(1), []).append((labels, value))
    return out


class EngineAdapter(abc.ABC):
    """Contract for one engine. Subclasses register with ``@register``.

    Guarantees an adapter gives the host:

    - ``build_launch`` returns an argv list and env that start exactly one server
      for the trial, bound to ``ctx.launch.host``; typed, allow-listed extras only
      (``check_space`` rejects the rest when the spec is loaded, before anything
      starts). Secrets go only into ``LaunchPlan.env`` / ``api_key``.
    - ``parse_log_line`` is pure and total: any line gives zero or more events,
      never an exception. Events the host relies on: ``listening`` (``port``),
      ``kv_pool`` (``tokens``, optional ``blocks``/``block_size``),
      ``max_concurrency``, ``fatal`` (``failure`` class), ``applied`` (applied
      settings such as ``cuda_graphs``, ``kv_dtype``, ``quantization``, ``tp``,
      ``max_num_seqs``), and timings (``init_s``, ``compile_s``, ``graph_s``).
    - ``verify`` lists every difference between the requested and applied config
      (empty: verified). The host fails the trial as ``config_mismatch`` otherwise.

    Who kills what: the host owns the process group it started and is the only
    one to signal it; adapters never touch processes.
    """

    name: ClassVar[str]
    #: "preempt_recompute" or "guaranteed_no_evict": how the engine admits requests.
    admission: ClassVar[str] = "preempt_recompute"
    #: Allowed ``extras`` keys and their types.
    extras: ClassVar[dict[str, type]] = {}
    #: False for endpoints servesweep does not start (``external``).
    launches_process: ClassVar[bool] = True
    #: Whether the server honours ``stream_options.continuous_usage_stats`` (usage in every
    #: chunk, so a chunk carrying k tokens counts k); else one token per non-empty chunk,
    #: reconciled with the final usage.
    per_chunk_usage: ClassVar[bool] = True
    #: Whether requests ask for ``return_token_ids`` (each chunk lists its tokens' ids: the
    #: strongest count of what was streamed). Off for servers that reject unknown fields.
    token_ids: ClassVar[bool] = True
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str] = "/metrics"

    def check_space(self, entry: SpaceEntry) -> None:
        """Raise ValueError naming the field when a space entry cannot apply to this engine."""
        for key, values in entry.extras.items():
            if key not in self.extras:
                allowed = ", ".join(sorted(self.extras)) or "none"
                raise ValueError(f"extras.{key} is not an option of engine {self.name!r} "
                                 f"(allowed: {allowed})")
            typ = self.extras[key]
            for v in values:
                ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
                if typ is float and isinstance(v, int) and not isinstance(v, bool):
                    ok = True
                if not ok:
                    raise ValueError(f"extras.{key} must be {typ.__name__}, got {v!r}")
        if any(p is not None for p in entry.profile):
            raise ValueError(f"profile applies to engine 'sim' only, not {self.name!r}")

    def infeasible(self, trial: TrialConfig, hardware: str) -> str | None:
        """A reason this engine cannot run ``trial`` on ``hardware``, or None."""
        return None

    @abc.abstractmethod
    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        """The process to start (or the URL to reach) for ``trial``."""

    def parse_log_line(self, line: str) -> list[LogEvent]:
        return []

    def parse_metrics(self, text: str, t: float) -> MetricsSample:
        return MetricsSample(t=t)

    def applied(self, events: list[LogEvent]) -> dict[str, Any]:
        """Settings the server reports it applied, folded from its log events."""
        return {}

    def admission_for(self, trial: TrialConfig) -> str:
        """The admission policy this trial's server uses (for the capacity check)."""
        return self.admission

    def verify(self, trial: TrialConfig, applied: dict[str, Any]) -> list[str]:
        """Mismatches between ``trial`` and the applied settings read from the server."""
        return []

    def classify_exit(self, events: list[LogEvent], returncode: int | None) -> str:
        """Failure class for a server that exited during startup."""
        for ev in events:
            if ev.kind == "fatal":
                return ev.data.get("failure", "startup_crash")
        return "startup_crash"
