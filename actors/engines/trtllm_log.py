"""Read TensorRT-LLM (PyTorch backend) startup logs.

Line formats come from public logs only (tests/fixtures/trtllm/SOURCES.md).
Several lines print twice (a small dry-run pool, then the real one): callers
take the last event of a kind.
"""

from __future__ import annotations

import re
from typing import Any

from actors.engines.base import LogEvent

__all__ = ["parse_trtllm_line", "applied_from_trtllm_events"]

_F = r"(\d+(?:\.\d+)?)"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("version", re.compile(r"TensorRT-LLM version: (?P<version>\S+)")),
    ("weights", re.compile(rf"Memory used after loading model weights \(inside torch\) in memory "
                           rf"usage profiling: (?P<gib>{_F[1:-1]}) GiB")),
    ("weights_announced", re.compile(rf"Use (?P<gb>{_F[1:-1]}) GB for model weights\.")),
    ("kv_memory", re.compile(
        r"Peak memory during memory usage profiling \(torch \+ non-torch\): (?P<peak_gib>[\d.]+) "
        r"GiB, available KV cache memory when calculating max tokens: (?P<gib>[\d.]+) GiB"
        r"(?:, fraction is set (?P<fraction>[\d.]+), kv size (?:per token )?is "
        r"(?P<kv_bytes_per_token>\d+)\.?)?")),
    ("kv_pool", re.compile(r"\[MemUsageChange\] Allocated (?P<gib>[\d.]+) GiB for max tokens in "
                           r"paged KV cache \((?P<tokens>\d+)\)")),
    ("block_size", re.compile(r"Number of tokens per block: (?P<block_size>\d+)\.")),
    ("kv_blocks", re.compile(r"Max KV cache blocks per sequence: (?P<per_seq>\d+) \[window "
                             r"size=(?P<window>\d+)\], tokens per block=(?P<block_size>\d+), "
                             r"primary blocks=(?P<blocks>\d+), "
                             r"secondary blocks=(?P<secondary>\d+)")),
    ("blocks_per_window", re.compile(r"blocks_per_window \{(?P<window>\d+): \((?P<blocks>\d+), "
                                     r"(?P<secondary>\d+)\)\}")),
    ("limits", re.compile(r"max_seq_len=(?P<max_seq_len>\d+), max_num_requests="
                          r"(?P<max_num_requests>\d+), max_num_tokens=(?P<max_num_tokens>\d+), "
                          r"max_batch_size=(?P<max_batch_size>\d+)")),
    ("pytorch_config", re.compile(
        r"PyTorchConfig\(.*?use_cuda_graph=(?P<use_cuda_graph>True|False), cuda_graph_batch_sizes="
        r"\[(?P<batch_sizes>[\d, ]*)\], cuda_graph_max_batch_size=(?P<max_batch>\d+), "
        r"cuda_graph_padding_enabled=(?P<padding>True|False)")),
    ("cuda_graph_config", re.compile(r"cuda_graph_config=(?:CudaGraphConfig\(.*?max_batch_size="
                                     r"(?P<max_batch>\d+).*?\)|(?P<none>None))")),
    ("graphs_created", re.compile(r"Creating CUDA graph instances for (?P<n>\d+) batch sizes")),
    ("kv_dtype", re.compile(r'Validating KV Cache config against kv_cache_dtype="(?P<dtype>\w+)"')),
    ("listening", re.compile(r"Uvicorn running on (?P<url>https?://[\w.\-\[\]]+:(?P<port>\d+))")),
]

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|Insufficient memory", re.I)
_PORT = re.compile(r"address already in use", re.I)


def parse_trtllm_line(line: str) -> list[LogEvent]:
    """Events in one TensorRT-LLM log line (see ``EngineAdapter.parse_log_line``)."""
    events = []
    for kind, pat in _PATTERNS:
        m = pat.search(line)
        if not m:
            continue
        data: dict[str, Any] = {}
        for k, v in m.groupdict().items():
            if v is None:
                continue
            if k == "batch_sizes":
                data[k] = [int(x) for x in v.replace(" ", "").split(",") if x]
            elif v in ("True", "False"):
                data[k] = v == "True"
            elif re.fullmatch(r"\d+", v):
                data[k] = int(v)
            elif re.fullmatch(r"\d+\.\d+", v):
                data[k] = float(v)
            else:
                data[k] = v
        events.append(LogEvent(kind, data, line))
    if _OOM.search(line):
        events.append(LogEvent("fatal", {"failure": "startup_oom"}, line))
    elif _PORT.search(line):
        events.append(LogEvent("fatal", {"failure": "port_in_use"}, line))
    return events


def applied_from_trtllm_events(events: list[LogEvent]) -> dict[str, Any]:
    """Applied settings: cuda_graphs (and max batch), kv_dtype, max_num_seqs, the KV pool."""
    applied: dict[str, Any] = {}
    for ev in events:  # later lines override earlier (the dry-run pool prints first)
        d = ev.data
        if ev.kind == "version":
            applied["version"] = d["version"]
        elif ev.kind == "pytorch_config":
            applied["cuda_graphs"] = d["use_cuda_graph"]
            applied["graph_max_batch"] = d["max_batch"]
            applied["graph_padding"] = d["padding"]
        elif ev.kind == "cuda_graph_config":
            applied["cuda_graphs"] = "none" not in d
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
        elif ev.kind == "block_size":
            applied["block_size"] = d["block_size"]
        elif ev.kind in ("kv_blocks", "blocks_per_window"):
            applied["kv_pool_blocks"] = d["blocks"]
    return applied
