"""Read TensorRT-LLM (PyTorch backend) startup logs and its JSON ``/metrics``.

Line formats come from public logs only (tests/fixtures/trtllm/SOURCES.md);
where a format is known only from TensorRT-LLM's source (no public log quotes
it), the pattern says so. Several lines print twice (a small estimation
dry-run pool, then the real one): callers take the last event of a kind, and
``applied_from_trtllm_events`` does exactly that.
"""

from __future__ import annotations

import re
from typing import Any

from actors.contracts.kv import KvPool
from actors.contracts.metrics import MetricsSample
from actors.engines.base import LogEvent, last_event

__all__ = ["parse_trtllm_line", "applied_from_trtllm_events",
           "TRTLLM_METRIC_NAMES", "graphs_evidence", "trtllm_kv_pool", "DEFAULT_TOKENS_PER_BLOCK",
           "KV_POOL_LINES"]

#: TensorRT-LLM's ``kv_cache_config.tokens_per_block`` when nothing sets it
DEFAULT_TOKENS_PER_BLOCK = 32
#: what ``trtllm_kv_pool`` needs in a log
KV_POOL_LINES = ("'[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N)' or "
                 "'Max KV cache blocks per sequence ... primary blocks=N'")

_N = r"\d+(?:\.\d+)?"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("version", re.compile(r"TensorRT-LLM version: (?P<version>\S+)")),
    ("weights", re.compile(rf"Memory used after loading model weights \(inside torch\) in memory "
                           rf"usage profiling: (?P<gib>{_N}) GiB")),
    ("weights_announced", re.compile(rf"Use (?P<gb>{_N}) GB for model weights\.")),
    # 1.1.0rc3 ends "kv size is N."; newer source "kv size per token is N."; the DESIGN note
    # "B bytes/token + F bytes fixed cost" form is accepted but not seen in a public log.
    ("kv_memory", re.compile(
        rf"Peak memory during memory usage profiling \(torch \+ non-torch\): (?P<peak_gib>{_N}) "
        rf"GiB, available KV cache memory when calculating max tokens: (?P<gib>{_N}) GiB"
        rf"(?:, fraction is set (?P<fraction>{_N}), kv size (?:per token )?is "
        r"(?P<kv_bytes_per_token>\d+)(?: bytes/token \+ (?P<kv_fixed_bytes>\d+) bytes fixed "
        r"cost)?)?")),
    ("kv_pool", re.compile(rf"\[MemUsageChange\] Allocated (?P<gib>{_N}) GiB for max tokens in "
                           r"paged KV cache \((?P<tokens>\d+)\)")),
    ("block_size", re.compile(r"Number of tokens per block: (?P<block_size>\d+)\.")),
    ("kv_blocks", re.compile(r"Max KV cache blocks per sequence: (?P<per_seq>\d+) \[window "
                             r"size=(?P<window>\d+)\], tokens per block=(?P<block_size>\d+), "
                             r"primary blocks=(?P<blocks>\d+), "
                             r"secondary blocks=(?P<secondary>\d+)")),
    # DESIGN.md's `blocks_per_window {W: (N, 0)}` entry; the "[kv cache manager] Primary/
    # secondary blocks for window sizes set to {W: (N, S)}" form is known from source only.
    ("blocks_per_window", re.compile(r"(?:blocks_per_window|blocks for window sizes set to) "
                                     r"\{(?P<window>\d+): \((?P<blocks>\d+), "
                                     r"(?P<secondary>\d+)\)")),
    ("limits", re.compile(r"max_seq_len=(?P<max_seq_len>\d+), max_num_requests="
                          r"(?P<max_num_requests>\d+), max_num_tokens=(?P<max_num_tokens>\d+), "
                          r"max_batch_size=(?P<max_batch_size>\d+)")),
    ("cuda_graph_config", re.compile(r"cuda_graph_config=(?:CudaGraphConfig\(.*?max_batch_size="
                                     r"(?P<max_batch>\d+).*?\)|(?P<none>None))")),
    ("graphs_created", re.compile(r"Creating CUDA graph instances for (?P<n>\d+) batch sizes")),
    ("kv_dtype", re.compile(r'Validating KV Cache config against kv_cache_dtype="(?P<dtype>\w+)"'
                            r'|KV cache quantization set to "(?P<quant>\w+)"')),
    ("listening", re.compile(r"Uvicorn running on (?P<url>https?://[\w.\-\[\]]+:(?P<port>\d+))")),
]

# PyTorchConfig(...) is a dataclass repr: read the fields we verify wherever they sit, since
# the field order and set differ between releases (0.20 vs 1.x).
_PYTORCH_CONFIG = re.compile(r"PyTorchConfig\((?P<body>.*)\)")
_PYCFG_FIELDS = {
    "use_cuda_graph": ("use_cuda_graph", r"(True|False)"),
    "batch_sizes": ("cuda_graph_batch_sizes", r"(\[[\d, ]*\]|None)"),
    "max_batch": ("cuda_graph_max_batch_size", r"(\d+)"),
    "padding": ("cuda_graph_padding_enabled", r"(True|False)"),
    "kv_cache_dtype": ("kv_cache_dtype", r"'?(\w+)'?"),
    "iter_perf_stats": ("enable_iter_perf_stats", r"(True|False)"),
}

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|Insufficient memory|"
                  r"out of memory error", re.I)
_PORT = re.compile(r"address already in use", re.I)


def _value(v: str) -> Any:
    if v in ("True", "False"):
        return v == "True"
    if v == "None":
        return None
    if v.startswith("["):
        return [int(x) for x in v.strip("[]").replace(" ", "").split(",") if x]
    if re.fullmatch(r"\d+", v):
        return int(v)
    if re.fullmatch(r"\d+\.\d+", v):
        return float(v)
    return v


def _pytorch_config(line: str) -> LogEvent | None:
    m = _PYTORCH_CONFIG.search(line)
    if not m:
        return None
    data: dict[str, Any] = {}
    for key, (field, pat) in _PYCFG_FIELDS.items():
        f = re.search(rf"\b{field}={pat}", m["body"])
        if f:
            data[key] = _value(f.group(1))
    return LogEvent("pytorch_config", data, line)


def parse_trtllm_line(line: str) -> list[LogEvent]:
    """Events in one TensorRT-LLM log line (see ``EngineAdapter.parse_log_line``)."""
    events: list[LogEvent] = []
    ev = _pytorch_config(line)
    if ev is not None:
        events.append(ev)
    for kind, pat in _PATTERNS:
        m = pat.search(line)
        if not m:
            continue
        data = {k: _value(v) for k, v in m.groupdict().items() if v is not None}
        if kind == "kv_dtype" and "quant" in data:
            data = {"dtype": data["quant"]}
        if kind == "blocks_per_window" and "dry run" in line:
            data["dry_run"] = True
        events.append(LogEvent(kind, data, line))
    if _OOM.search(line):
        events.append(LogEvent("fatal", {"failure": "startup_oom"}, line))
    elif _PORT.search(line):
        events.append(LogEvent("fatal", {"failure": "port_in_use"}, line))
    return events


def graphs_evidence(applied: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(signs graphs are on, signs they are off) among the applied facts, as readable phrases."""
    on, off = [], []
    if applied.get("use_cuda_graph") is True:
        on.append("PyTorchConfig(use_cuda_graph=True)")
    elif applied.get("use_cuda_graph") is False:
        off.append("PyTorchConfig(use_cuda_graph=False)")
    if applied.get("cuda_graph_config") is True:
        on.append("cuda_graph_config=CudaGraphConfig(...)")
    elif applied.get("cuda_graph_config") is False:
        off.append("cuda_graph_config=None")
    if applied.get("graphs_captured"):
        on.append(f"'Creating CUDA graph instances for {applied['graphs_captured']} batch sizes'")
    return on, off


def applied_from_trtllm_events(events: list[LogEvent]) -> dict[str, Any]:
    """Applied settings: CUDA graphs (and their max batch), KV dtype, limits, the KV pool."""
    applied: dict[str, Any] = {}
    for ev in events:  # later lines override earlier (the dry-run pool prints first)
        d = ev.data
        if ev.kind == "version":
            applied["version"] = d["version"]
        elif ev.kind == "pytorch_config":
            for src, dst in (("use_cuda_graph", "use_cuda_graph"), ("max_batch", "graph_max_batch"),
                             ("padding", "graph_padding"), ("batch_sizes", "graph_batch_sizes"),
                             ("iter_perf_stats", "iter_perf_stats")):
                if src in d:
                    applied[dst] = d[src]
            if d.get("kv_cache_dtype"):
                applied["kv_dtype"] = d["kv_cache_dtype"]
        elif ev.kind == "cuda_graph_config":
            applied["cuda_graph_config"] = "none" not in d
            if "max_batch" in d:
                applied["graph_max_batch"] = d["max_batch"]
        elif ev.kind == "graphs_created":
            applied["graphs_captured"] = d["n"]
        elif ev.kind == "kv_dtype":
            applied["kv_dtype"] = d["dtype"]
        elif ev.kind == "limits":
            applied["max_num_seqs"] = d["max_batch_size"]
            applied["max_num_tokens"] = d["max_num_tokens"]
            applied["max_model_len"] = d["max_seq_len"]
        elif ev.kind == "kv_pool":
            applied["kv_pool_tokens"] = d["tokens"]
            applied["kv_pool_gib"] = d["gib"]
        elif ev.kind == "block_size":
            applied["block_size"] = d["block_size"]
        elif ev.kind in ("kv_blocks", "blocks_per_window") and not d.get("dry_run"):
            applied["kv_pool_blocks"] = d["blocks"]
            if "block_size" in d:
                applied["block_size"] = d["block_size"]
        elif ev.kind == "weights":
            applied["weights_gib"] = d["gib"]
        elif ev.kind == "kv_memory":
            applied["kv_memory_gib"] = d["gib"]
            if "kv_bytes_per_token" in d:
                applied["kv_bytes_per_token"] = d["kv_bytes_per_token"]
    on, off = graphs_evidence(applied)
    if on or off:
        applied["cuda_graphs"] = bool(on) and applied.get("use_cuda_graph") is not False
    return applied


def trtllm_kv_pool(events: list[LogEvent], admission: str,
                   metrics: MetricsSample | None = None, block_size: int | None = None,
                   requested_block_size: int | None = None) -> KvPool | None:
    """The KV pool of a TensorRT-LLM(-format) log: None without a pool line.

    The pool prints twice (a dry run, then the real one): the last line counts. The
    primary block count is preferred to the token total (hybrid models count
    non-attention state slots in the latter). Block size: ``block_size`` (given), the
    blocks line's ``tokens per block``, ``Number of tokens per block``, /metrics
    ``tokensPerBlock``, the trial's ``tokens_per_block``, the default (32). There is no
    null block: every block is usable.
    """
    pool = last_event(events, "kv_pool")
    primary = last_event(events, "kv_blocks", "blocks_per_window")
    if pool is None and primary is None:
        return None
    evidence: list[int] = []
    sources: list[str] = []
    notes: list[str] = []
    tokens = int(pool[1].data["tokens"]) if pool is not None else None
    if pool is not None:
        evidence.append(pool[0])
        sources.append("log: KV pool tokens")
    logged_bs = last_event(events, "block_size")
    if block_size:
        bs, bs_source = block_size, "given"
    elif primary is not None and primary[1].data.get("block_size"):
        bs, bs_source = int(primary[1].data["block_size"]), "tokens per block in the log"
    elif logged_bs is not None:
        bs, bs_source = int(logged_bs[1].data["block_size"]), "tokens per block in the log"
        evidence.append(logged_bs[0])
    elif metrics is not None and metrics.block_size:
        bs, bs_source = metrics.block_size, "metrics"
    elif requested_block_size:
        bs, bs_source = requested_block_size, "trial config: extras.tokens_per_block"
    else:
        bs, bs_source = DEFAULT_TOKENS_PER_BLOCK, "TensorRT-LLM default"
        notes.append(f"block size {bs} is TensorRT-LLM's default (tokens_per_block): pass "
                     "--block-size if the server used another")
    sources.append(f"block size: {bs_source}")
    if primary is not None:
        evidence.append(primary[0])
        sources.append("log: KV blocks")
        blocks = int(primary[1].data["blocks"])
        if tokens is not None and tokens != blocks * bs:
            notes.append(f"the token total ({tokens:,}) differs from primary blocks x block size "
                         f"({blocks:,} x {bs}): using the primary block count")
    elif metrics is not None and metrics.num_blocks:
        blocks = metrics.num_blocks
        sources.append("metrics: KV blocks")
    else:
        blocks = (tokens or 0) // bs
    limits = last_event(events, "limits")
    max_len = max_seqs = None
    if limits is not None:
        max_len = int(limits[1].data["max_seq_len"])
        max_seqs = int(limits[1].data["max_batch_size"])
        evidence.append(limits[0])
        sources.append("log: max model length")
    return KvPool(tokens=tokens, blocks=blocks, block_size=bs, usable_blocks=blocks,
                  block_size_source=bs_source, max_model_len=max_len,
                  max_model_len_source=("max_seq_len in the executor limits"
                                        if max_len is not None else None),
                  max_num_seqs=max_seqs, admission=admission, sources=sources, notes=notes,
                  evidence=sorted(set(evidence)))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


#: trtllm-serve's ``/metrics``: a JSON list of iteration stats (newest last), not
#: Prometheus. An empty list (no iteration since the last poll: the server drains its queue
#: on every read), other JSON, or a missing field gives None for that value; KV usage is
#: used / max blocks. TensorRT-LLM reports no cumulative preemption counter.
TRTLLM_METRIC_NAMES: dict[str, list[str]] = {
    "running": ["numActiveRequests"],
    "waiting": ["numQueuedRequests"],
    "num_blocks": ["kvCacheStats.maxNumBlocks"],
    "kv_blocks_used": ["kvCacheStats.usedNumBlocks"],
    "kv_blocks_free": ["kvCacheStats.freeNumBlocks"],
    "block_size": ["kvCacheStats.tokensPerBlock"],
}
