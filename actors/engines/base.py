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

from actors.contracts.applied import AppliedConfig
from actors.contracts.config import (
    LaunchOptions,
    ModelSpec,
    SimOptions,
    SpaceEntry,
    TrialConfig,
    Workload,
)
from actors.contracts.kv import KvPool
from actors.contracts.metrics import (
    ClientProfile,
    MetricsFormat,
    MetricsSample,
    parse_prometheus,
    read_sample,
)
from actors.engines.deploy import Deployment
from actors.engines.extras import Extras, check_extras, parse_extras

__all__ = ["Deployment", "EngineAdapter", "Extras", "LaunchContext", "LaunchPlan", "LogEvent",
           "MetricsSample", "last_event", "nonce_alias", "parse_prometheus", "redact"]


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
    #: the context a quality run needs (``quality.context_tokens``; 0: none): a server
    #: whose trial sets no ``max_model_len`` takes the larger of it and the workload's
    context_tokens: int = 0
    #: a fresh random token per launch attempt (set by the host): what ``identity_name``
    #: puts where the server echoes it; "" outside the host (no echo asked for)
    nonce: str = ""


#: room for the chat template around a prompt sized in text (``workload.api: chat``)
CHAT_MARGIN_TOKENS = 256


def model_len(trial: TrialConfig, ctx: LaunchContext) -> int:
    """The context a server is started with: the trial's ``max_model_len``, else room for
    the workload's longest request (plus the chat template's tokens for chat requests) and
    the quality run's prompts and answers."""
    chat = CHAT_MARGIN_TOKENS if ctx.workload.api == "chat" else 0
    return trial.max_model_len or max(ctx.workload.request_tokens + chat, ctx.context_tokens)


def nonce_alias(ctx: LaunchContext) -> str | None:
    """The model alias carrying the launch's nonce (``EngineAdapter.identity_name`` of the
    engines that serve extra names); None without a nonce."""
    return f"servesweep-launch-{ctx.nonce}" if ctx.nonce else None


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

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> LogEvent:
        """The event back from its summary ``{"kind": ..., **data}`` (the host's
        ``Readiness.events``; the raw line is not kept there)."""
        return cls(str(summary["kind"]), {k: v for k, v in summary.items() if k != "kind"})


def last_event(events: list[LogEvent], *kinds: str) -> tuple[int, LogEvent] | None:
    """(index, event) of the last event of one of ``kinds`` that is not a dry run's."""
    for i in range(len(events) - 1, -1, -1):
        ev = events[i]
        if ev.kind in kinds and not ev.data.get("dry_run"):
            return i, ev
    return None


class EngineAdapter(abc.ABC):
    """Contract for one engine. Subclasses register with ``@register``.

    Guarantees an adapter gives the host:

    - ``build_launch`` returns an argv list and env that start exactly one server
      for the trial, bound to ``ctx.launch.host``; typed, allow-listed extras only
      (``check_space`` types every combination of an entry's extras through the
      union of the engines' ``extras_model``s when the spec is loaded, before anything
      starts; ``extras(trial)`` gives them typed). Secrets go
      only into ``LaunchPlan.env`` / ``api_key``.
    - ``parse_log_line`` is pure and total: any line gives zero or more events,
      never an exception. Events the host relies on: ``listening`` (``port``),
      ``kv_pool`` (``tokens``, optional ``blocks``/``block_size``),
      ``max_concurrency``, ``fatal`` (``failure`` class), ``applied`` (applied
      settings such as ``cuda_graphs``, ``kv_dtype``, ``quantization``, ``tp``,
      ``max_num_seqs``), and timings (``init_s``, ``compile_s``, ``graph_s``).
    - ``verify`` lists every difference between the requested and applied config
      (empty: verified). The host fails the trial as ``config_mismatch`` otherwise.
    - ``kv_pool`` is the one derivation of the server's KV pool from its log events
      (and a /metrics sample): the sweep's capacity check and ``servesweep capacity``
      both call it.
    - ``classify_exit`` says ``port_in_use`` when the server's log says its port was
      taken (``fatal`` event): the host then retries on another port.

    Ports and the proof that the host talks to its own server (``launches_process``
    engines): the host draws the port from outside the kernel's ephemeral range and
    checks it is free (``actors.procs.choose_port``), unless the adapter
    ``picks_own_port``. Health counts only once the server on the port is proven to be
    the one the host started, by one of two proofs:

    - socket ownership (every engine, needs nothing from it): every LISTEN socket on
      the port (/proc/net/tcp, tcp6) is held by the engine's processes (its process
      group or session, or carrying its marker: /proc/<pid>/fd). Decisive whenever a
      listener on the port is visible in the host's network namespace, which is the
      case for every server the host starts itself; it also catches a listener that
      speaks no HTTP, one that never answers, and a foreign socket sharing the port
      through SO_REUSEPORT (vLLM sets it when it runs several API servers).
    - a per-launch nonce the server echoes: ``identity_name(ctx)``, a name carrying
      ``ctx.nonce`` that the server lists at ``/v1/models``. Used when no listener on
      the port is visible here (a port forwarded from another network namespace) but
      something answers; an adapter without one (``identity_name`` None) cannot be
      proven there. The name is an alias: the load generator still sends
      ``served_model_name(ctx)``, so the nonce never reaches requests or results.

    Anything else on the port (a foreign server, healthy or not, a listener answering
    garbage) is ``port_in_use``: the host stops the attempt, keeps its log and retries
    on another port (3 retries), as for a server that exited with its port taken.

    Engine knowledge lives in adapters only: the driver, the host and the load
    generator ask these attributes and methods, never the engine's name
    (tests/unit/test_engine_names.py). Class attributes:

    - ``name``: the ``engine:`` of a spec.
    - ``admission``: "preempt_recompute" or "guaranteed_no_evict", how the engine admits
      requests (``admission_for`` a given trial).
    - ``extras_model``: the pydantic model (an ``Extras``) of the allowed ``extras``
      keys, their types and per-key rules.
    - ``launches_process``: False for endpoints servesweep does not start (``external``).
    - ``per_chunk_usage``: whether the server honours
      ``stream_options.continuous_usage_stats``.
    - ``token_ids``: whether requests ask for ``return_token_ids``.
    - ``picks_own_port``: whether the server takes port 0 and logs the port it bound.
    - ``health_path``, ``metrics_path``: where the host polls health and scrapes metrics.
    - ``metrics_format``, ``metric_names``, ``metric_labels``: how the metrics endpoint reads
      (``MetricsFormat``; the engine's names for ``MetricsSample``'s fields; an info
      metric's labels), handed to the load generator as data in ``client_profile()``.
    - ``serves_presets``: whether the engine can run a ``model.preset`` (a shape with no
      weights: the sim); engines that serve real weights need ``model.path``.
    - ``default_profile``: the ``profile`` a trial gets when its space entry names none
      (the sim's imitated engine); None: the engine has no profiles.
    - ``time_scaled``: whether the server runs in engine time scaled by
      ``sim.time_scale`` (real seconds = engine seconds x time_scale); the load
      generator and the forecast convert.
    - ``sim_profile``: the sim performance-model profile that imitates this engine (the
      planner's memory and prefill rules, ``plan --predict``, ``calibrate``); None: no
      profile models it (``sim_profile_for`` a given trial).
    - ``startup_s``: typical seconds to a healthy server, for ``plan --predict``
      (``startup_estimate_s`` refines it per trial and hardware kind).
    - ``kv_pool_hint``: the log lines ``kv_pool`` reads, for a message when a log has
      none; None: the engine's log states no KV pool (``kv_pool`` is always None).

    Who kills what: the host owns the process group it started and is the only
    one to signal it; adapters never touch processes.
    """

    name: ClassVar[str]
    #: "preempt_recompute" or "guaranteed_no_evict": how the engine admits requests.
    admission: ClassVar[str] = "preempt_recompute"
    #: Allowed ``extras`` keys, their types and rules (a frozen, strict ``Extras`` model).
    extras_model: ClassVar[type[Extras]]
    #: False for endpoints servesweep does not start (``external``).
    launches_process: ClassVar[bool] = True
    #: Whether the server honours ``stream_options.continuous_usage_stats`` (usage in every
    #: chunk, so a chunk carrying k tokens counts k); else one token per non-empty chunk,
    #: reconciled with the final usage.
    per_chunk_usage: ClassVar[bool] = True
    #: Whether requests ask for ``return_token_ids`` (each chunk lists its tokens' ids: the
    #: strongest count of what was streamed). Off for servers that reject unknown fields.
    token_ids: ClassVar[bool] = True
    #: Whether the server takes port 0 and logs the port it bound (no port to pick for it).
    picks_own_port: ClassVar[bool] = False
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str] = "/metrics"
    #: how the load generator reads the metrics endpoint (``client_profile``): its format,
    #: the engine's names for ``MetricsSample``'s fields, an info metric's labels
    metrics_format: ClassVar[MetricsFormat] = MetricsFormat.NONE
    metric_names: ClassVar[dict[str, list[str]]] = {}
    metric_labels: ClassVar[dict[str, tuple[str, str]]] = {}
    #: Whether the engine runs a ``model.preset`` (no weights); else it needs ``model.path``.
    serves_presets: ClassVar[bool] = False
    #: The ``profile`` of a trial whose space entry names none; None: no profiles.
    default_profile: ClassVar[str | None] = None
    #: Whether the server's clock is engine time x ``sim.time_scale``.
    time_scaled: ClassVar[bool] = False
    #: The sim performance-model profile that imitates this engine; None: none does.
    sim_profile: ClassVar[str | None] = None
    #: Typical seconds from launch to a healthy server (``plan --predict``).
    startup_s: ClassVar[float] = 100.0
    #: The log lines ``kv_pool`` reads (for messages); None: the log states no KV pool.
    kv_pool_hint: ClassVar[str | None] = None

    # -- the space and the plan -------------------------------------------------------------
    def check_space(self, entry: SpaceEntry) -> None:
        """Raise ValueError naming the field when a space entry cannot apply to this engine."""
        check_extras(self.name, entry.extras)
        if any(p is not None for p in entry.profile):
            raise ValueError(f"profile applies to engine 'sim' only, not {self.name!r}")

    def extras(self, trial: TrialConfig) -> Extras:
        """``trial.extras`` typed by ``extras_model`` (``actors.engines.extras``)."""
        return parse_extras(self.name, trial.extras)

    def infeasible(self, trial: TrialConfig, hardware: str) -> str | None:
        """A reason this engine cannot run ``trial`` on ``hardware``, or None."""
        return None

    def sim_profile_for(self, trial: TrialConfig) -> str | None:
        """The sim profile that models ``trial``'s server (``sim_profile``), or None."""
        return self.sim_profile

    def model_settings(self, trial: TrialConfig) -> dict[str, int]:
        """Settings of the performance model (``SimConfig`` fields beyond the trial's own)
        that ``trial``'s extras set: an engine option the model reads. Any engine whose
        typed extras have ``output_proc_chunk`` (its API server's output chunk) sets
        ``output_chunk``."""
        chunk = getattr(self.extras(trial), "output_proc_chunk", None)
        return {} if chunk is None else {"output_chunk": chunk}

    def startup_estimate_s(self, trial: TrialConfig, hw_kind: str) -> float:
        """Seconds to a healthy server for ``trial`` on hardware of ``hw_kind`` (gpu|cpu)."""
        return self.startup_s

    # -- launching --------------------------------------------------------------------------
    @abc.abstractmethod
    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        """The process to start (or the URL to reach) for ``trial``."""

    def served_model_name(self, ctx: LaunchContext) -> str:
        """The model name the load generator sends (what the server answers to)."""
        return ctx.model.served_name or ctx.model.path or ctx.model.display_name

    def identity_name(self, ctx: LaunchContext) -> str | None:
        """The name carrying ``ctx.nonce`` that ``build_launch`` makes the server list at
        ``/v1/models`` beside ``served_model_name``; None: the engine echoes no nonce (or
        no nonce was given). See "Ports and the proof" above."""
        return None

    # -- deploying what was measured --------------------------------------------------------
    def deployment(self, trial: TrialConfig, ctx: LaunchContext,
                   measured_argv: list[str] | None = None) -> Deployment:
        """``trial``'s server as an operator deploys it (``actors.engines.deploy``).

        Contract: pure (no process, no network, reads at most a local checkpoint's
        config like ``build_launch``). ``argv`` is the engine's own CLI form (``vllm serve
        MODEL ...``), never the benchmark node's interpreter; it keeps every serving
        setting of the trial and the spec (TP, precisions, graphs, batching limits,
        memory fraction, a served name the spec set, ``launch.env`` with secrets as
        ``${NAME}`` references) and lists in ``removed`` each benchmark-only one with why
        (host and port, a max model length the workload implied but the spec did not set,
        the nonce alias, log/cache paths, the bench node's offline switches).
        ``measured_argv`` (the redacted argv the trial recorded) is compared with what the
        adapter renders now: a difference goes to ``drift`` and clears ``measured_form``.
        ``engine_kwargs`` is set only where Ray Serve LLM runs the engine; other forms
        (a Triton repository) come in ``forms``. Engines with nothing to deploy return
        ``Deployment.nothing`` saying why. Default: not exportable."""
        return Deployment.nothing(self.name, f"servesweep cannot export engine {self.name!r}")

    # -- reading the server -----------------------------------------------------------------
    def parse_log_line(self, line: str) -> list[LogEvent]:
        return []

    def client_profile(self) -> ClientProfile:
        """What the load generator must know of this engine's server: data only (the
        metrics endpoint and its names, what its streams carry), so no engine code runs on
        the load generator's side of the seam."""
        return ClientProfile(metrics_path=self.metrics_path, metrics_format=self.metrics_format,
                             names=self.metric_names, labels=self.metric_labels,
                             per_chunk_usage=self.per_chunk_usage, token_ids=self.token_ids)

    def parse_metrics(self, text: str, t: float) -> MetricsSample:
        """One scrape as a ``MetricsSample``: the load generator's own parser
        (``actors.contracts.metrics.read_sample``) on this engine's profile."""
        return read_sample(text, t, self.client_profile())

    def applied(self, events: list[LogEvent]) -> AppliedConfig:
        """Settings the server reports it applied, folded from its log events: the common
        fields in servesweep's vocabulary, everything else as ``facts``."""
        return AppliedConfig()

    def admission_for(self, trial: TrialConfig) -> str:
        """The admission policy this trial's server uses (for the capacity check)."""
        return self.admission

    def default_block_size(self, device: str) -> int | None:
        """Tokens per KV block the engine uses on ``device`` ("GPU"/"CPU") when nothing
        says otherwise; None: no fixed default."""
        return None

    def kv_pool(self, events: list[LogEvent], metrics_sample: MetricsSample | None = None,
                trial: TrialConfig | None = None, *,
                block_size: int | None = None) -> KvPool | None:
        """The KV pool the log ``events`` (and a /metrics sample) describe; None when they
        state none. ``trial`` (when known) gives its admission policy; ``block_size`` is
        a block size the caller knows (it wins, with source "given")."""
        return None

    def verify(self, trial: TrialConfig, applied: AppliedConfig) -> list[str]:
        """Mismatches between ``trial`` and the applied settings read from the server."""
        return []

    def classify_exit(self, events: list[LogEvent], returncode: int | None) -> str:
        """Failure class for a server that exited during startup."""
        for ev in events:
            if ev.kind == "fatal":
                return ev.data.get("failure", "startup_crash")
        return "startup_crash"
