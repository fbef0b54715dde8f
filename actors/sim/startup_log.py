"""Log lines the sim prints, in the format of the engine its profile imitates.

The vLLM profile prints vLLM 0.26's own lines (see tests/fixtures/vllm) and the
TensorRT-LLM profile TensorRT-LLM 1.x's, so the real adapters' log parsers and
the capacity check run unchanged against the sim.
"""

from __future__ import annotations

import os
import time

from actors.contracts.hardware import GIB
from actors.sim.perf import PROFILES, MemoryPlan, graph_sizes

__all__ = ["startup_lines", "oom_lines", "stats_line", "SIM_VERSION"]

SIM_VERSION = "0.1.0"


def _vllm(msg: str, level: str = "INFO", who: str = "EngineCore") -> str:
    stamp = time.strftime("%m-%d %H:%M:%S")
    return f"({who} pid={os.getpid()}) {level} {stamp} [sim.py:1] {msg}"


def _trt(msg: str, level: str = "I") -> str:
    return f"[{time.strftime('%m/%d/%Y-%H:%M:%S')}] [TRT-LLM] [{level}] {msg}"


def _header(cfg) -> str:
    s = cfg.settings
    return (f"servesweep-sim {SIM_VERSION}: profile={cfg.profile} hardware={cfg.hardware} "
            f"model={cfg.shape.name} tp={s.tp} weights={s.weights} kv_dtype={s.kv_dtype} "
            f"cuda_graphs={s.cuda_graphs} time_scale={cfg.time_scale} seed={cfg.seed}")


def startup_lines(cfg, mem: MemoryPlan) -> list[str]:
    """Lines stating weights memory, the KV pool (tokens, blocks) and max concurrency."""
    s = cfg.settings
    prof = PROFILES[cfg.profile]
    graph_max = s.graph_max_batch or prof.default_graph_max_batch
    conc = mem.max_concurrency(cfg.max_model_len)
    if cfg.profile == "trtllm":
        seqs = s.max_num_seqs or prof.default_max_num_seqs
        tokens = s.max_num_tokens or prof.default_max_num_tokens
        sizes = ", ".join(str(x) for x in graph_sizes(graph_max))
        return [
            f"[TensorRT-LLM] TensorRT-LLM version: 1.1.0-sim{SIM_VERSION}",
            _trt(_header(cfg)),
            _trt(f"PyTorchConfig(use_cuda_graph={s.cuda_graphs}, cuda_graph_batch_sizes=[{sizes}], "
                 f"cuda_graph_max_batch_size={graph_max}, cuda_graph_padding_enabled=True)"),
            _trt(f'Validating KV Cache config against kv_cache_dtype="{s.kv_dtype}"'),
            _trt(f"Use {mem.weights_gib * GIB / 1e9:.2f} GB for model weights."),
            _trt(f"Memory used after loading model weights (inside torch) in memory usage "
                 f"profiling: {mem.weights_gib:.2f} GiB"),
            _trt(f"Peak memory during memory usage profiling (torch + non-torch): "
                 f"{mem.weights_gib + mem.activation_gib:.2f} GiB, available KV cache memory "
                 f"when calculating max tokens: {mem.kv_gib:.2f} GiB, fraction is set "
                 f"{s.gpu_memory_fraction}, kv size is {int(mem.kv_bytes_per_token)}. device "
                 f"total memory {cfg_hbm(cfg):.2f} GiB"),
            f"[TensorRT-LLM][INFO] Max KV cache blocks per sequence: "
            f"{mem.blocks_for(cfg.max_model_len)} [window size={cfg.max_model_len}], tokens per "
            f"block={mem.block_size}, primary blocks={mem.blocks}, secondary blocks=0",
            f"[TensorRT-LLM][INFO] Number of tokens per block: {mem.block_size}.",
            f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated {mem.kv_gib:.2f} GiB for max "
            f"tokens in paged KV cache ({mem.kv_tokens}).",
            _trt(f"max_seq_len={cfg.max_model_len}, max_num_requests={seqs}, max_num_tokens="
                 f"{tokens}, max_batch_size={seqs}"),
            _trt(f"sim: maximum concurrency for {cfg.max_model_len} tokens per request: "
                 f"{conc:.2f}x"),
        ] + ([_trt(f"Creating CUDA graph instances for {len(graph_sizes(graph_max))} batch "
                   "sizes.")] if s.cuda_graphs else [])
    lines = [_vllm(_header(cfg), who="APIServer")]
    if not s.cuda_graphs:
        lines.append(_vllm("Enforce eager set, disabling torch.compile and CUDAGraphs. This is "
                           "equivalent to setting -cc.mode=none -cc.cudagraph_mode=none",
                           "WARNING", "APIServer"))
    if s.kv_dtype == "fp8":
        lines.append(_vllm("Using fp8 data type to store kv cache. It reduces the GPU memory "
                           "footprint and boosts the performance.", who="APIServer"))
    mode = "FULL_AND_PIECEWISE: (2, 1)" if s.cuda_graphs else "NONE: 0"
    quant = "fp8" if s.weights == "fp8" else "None"
    dtype = "torch.float16" if s.weights == "fp16" else "torch.bfloat16"
    lines += [
        _vllm(f"Initializing a V1 LLM engine (v0.26.0-sim) with config: model='{cfg.shape.name}', "
              f"dtype={dtype}, max_seq_len={cfg.max_model_len}, tensor_parallel_size={s.tp}, "
              f"quantization={quant}, enforce_eager={not s.cuda_graphs}, "
              f"kv_cache_dtype={s.kv_dtype}, compilation_config={{'cudagraph_mode': "
              f"<CUDAGraphMode.{mode}>, 'max_cudagraph_capture_size': {graph_max}}}"),
        _vllm(f"Model loading took {mem.weights_gib:.2f} GiB and 0.10 seconds"),
        _vllm(f"Available KV cache memory: {mem.kv_gib:.2f} GiB"),
        _vllm(f"GPU KV cache size: {mem.kv_tokens:,} tokens"),
        _vllm(f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x"),
        _vllm(f"sim: KV pool {mem.blocks} blocks of {mem.block_size} tokens"),
    ]
    if s.cuda_graphs:
        lines.append(_vllm(f"Graph capturing finished in 1 secs, took {mem.graph_gib:.2f} GiB"))
    return lines


def cfg_hbm(cfg) -> float:
    from actors.contracts.hardware import get_hardware

    return get_hardware(cfg.hardware).hbm_gib


def oom_lines(cfg, mem: MemoryPlan) -> list[str]:
    """What a CUDA out-of-memory at start looks like (the server then exits non-zero)."""
    need = max(mem.weights_gib + mem.activation_gib, 0.01)
    return [
        _header(cfg),
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need:.2f} GiB. GPU 0 has "
        f"a total capacity of {cfg_hbm(cfg):.2f} GiB of which 0 bytes is free.",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]


def stats_line(profile: str, prompt_tps: float, gen_tps: float, running: int, waiting: int,
               kv_usage: float, prefix_hit_rate: float = 0.0) -> str:
    """The periodic stats line (vLLM's format for both profiles)."""
    return _vllm(f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation "
                 f"throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, Waiting: "
                 f"{waiting} reqs, GPU KV cache usage: {100 * kv_usage:.1f}%, Prefix cache hit "
                 f"rate: {100 * prefix_hit_rate:.1f}%", who="APIServer")
