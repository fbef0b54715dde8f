"""The sim's performance model: engine profiles, memory plan and step time.

Step time is a roofline (GEMM and attention FLOPs against weight and KV bytes
moved, each with an efficiency factor per profile) plus per-iteration launch
overhead that CUDA graphs cut (only for batches up to the graph max batch
size, padded to a captured size) plus a TP all-reduce per layer with a
bandwidth term and a small-message latency floor. Everything here is pure
arithmetic: no clocks, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.contracts.hardware import BYTES, GIB, Hardware
from actors.contracts.shapes import ModelShape

__all__ = ["EngineProfile", "PROFILES", "DEFAULT_PROFILE", "get_profile", "FITTABLE", "SimConfig",
           "MemoryPlan", "plan_memory", "StepModel", "BatchShape", "graph_sizes"]


class EngineProfile(BaseModel):
    """How one engine family behaves where real engines differ.

    ``calibrate`` fits the efficiency and overhead fields to measured trials.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    admission: Literal["guaranteed_no_evict", "preempt_recompute"]
    block_size: int
    chunked_prefill: bool
    default_max_num_seqs: int
    default_max_num_tokens: int
    default_graph_max_batch: int
    gemm_eff: float = Field(gt=0, le=1)
    mem_eff: float = Field(gt=0, le=1)
    eager_us_per_layer: float = Field(ge=0)  # launch cost per layer per iteration, no graphs
    graph_us_per_layer: float = Field(ge=0)  # the same, replaying a captured graph
    sched_us_per_seq: float = Field(ge=0)  # CPU scheduling cost per running sequence
    # bandwidth achieved streaming FP8 weights relative to BF16 (small-batch FP8 GEMMs do not
    # reach the bandwidth roofline): vLLM 0.26 on an H200 decoded 8B FP8 at 3.36 ms vs
    # 4.77 ms BF16, 1.42x where halving the bytes would give ~1.9x
    fp8_weight_eff: float = Field(default=0.72, gt=0, le=1)
    # a new request reaches the scheduler this long after it arrived, per sequence running
    # then (the HTTP front end streams every running sequence's tokens and admits new
    # requests in between); requests keep their order. vLLM 0.26 on an H200, 8B, 512 in /
    # 256 out: 0.3 ms gives its TTFT p50 at c = 8, 32 and 128 (otherwise 2-5x too low)
    admit_us_per_running: float = Field(default=300, ge=0)
    activation_reserve_gib: float = Field(ge=0)
    graph_pool_gib: float = Field(ge=0)  # memory CUDA graphs keep when on


# Default factors: mem_eff and the vLLM overheads match vLLM 0.26 on an H200 (8B, c=1: 4.6 ms
# TPOT with graphs, 17.7 ms eager). The GEMM efficiencies are chosen so that TensorRT-LLM
# leads at low-to-mid concurrency (leaner launches, better bandwidth use) and vLLM at high
# concurrency (prefill-heavy, compute-bound steps), the crossover the seed article measured
# on 4xH100. They are starting points: `servesweep calibrate` fits them to measured trials.
PROFILES: dict[str, EngineProfile] = {
    # vLLM V1: preempts and recomputes, 16-token blocks, chunked prefill, graphs captured
    # up to 512; eager mode pays PyTorch launch costs (H200 8B: 17.7 ms vs 4.6 ms TPOT).
    "vllm": EngineProfile(
        name="vllm", admission="preempt_recompute", block_size=16, chunked_prefill=True,
        default_max_num_seqs=256, default_max_num_tokens=8192, default_graph_max_batch=512,
        gemm_eff=0.72, mem_eff=0.75, eager_us_per_layer=380, graph_us_per_layer=12,
        sched_us_per_seq=12, activation_reserve_gib=0.8, graph_pool_gib=0.4),
    # TensorRT-LLM (PyTorch backend): GUARANTEED_NO_EVICT, 32-token blocks, no chunked
    # prefill by default, graphs up to batch 128 unless configured, leaner C++ runtime.
    "trtllm": EngineProfile(
        name="trtllm", admission="guaranteed_no_evict", block_size=32, chunked_prefill=False,
        default_max_num_seqs=2048, default_max_num_tokens=8192, default_graph_max_batch=128,
        gemm_eff=0.58, mem_eff=0.82, eager_us_per_layer=220, graph_us_per_layer=6,
        sched_us_per_seq=20, activation_reserve_gib=0.8, graph_pool_gib=0.4),
}

#: The profile of a sim trial whose space entry names none, and the one that forecasts an
#: engine no profile imitates.
DEFAULT_PROFILE = "vllm"

#: Profile fields ``calibrate`` fits (and ``sim.profiles`` may override).
FITTABLE = ("gemm_eff", "mem_eff", "eager_us_per_layer", "graph_us_per_layer", "sched_us_per_seq",
            "fp8_weight_eff", "admit_us_per_running")


def get_profile(name: str, overrides: dict[str, float] | None = None) -> EngineProfile:
    """A named profile with optional field overrides (e.g. from ``servesweep calibrate``)."""
    if name not in PROFILES:
        raise KeyError(f"unknown sim profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    prof = PROFILES[name]
    if overrides:
        unknown = set(overrides) - set(FITTABLE)
        if unknown:
            raise ValueError(f"profile fields {sorted(unknown)} cannot be overridden; "
                             f"use {', '.join(FITTABLE)}")
        prof = EngineProfile.model_validate({**prof.model_dump(), **overrides})
    return prof


class SimConfig(BaseModel):
    """The server settings the model needs (a subset of ``TrialConfig``, resolved)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = 1
    weights: str = "bf16"
    kv_dtype: str = "auto"
    cuda_graphs: bool = True
    graph_max_batch: int | None = None
    max_num_seqs: int | None = None
    max_num_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_fraction: float = 0.9


def _bytes(precision: str) -> float:
    return BYTES["bf16" if precision == "auto" else precision]


def graph_sizes(max_batch: int) -> list[int]:
    """Captured batch sizes: 1, 2, 4, 8, then every 8 (vLLM's and TRT-LLM's shape)."""
    sizes = [s for s in (1, 2, 4) if s <= max_batch]
    sizes += list(range(8, max_batch + 1, 8))
    if sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory split and the KV block pool it leaves."""

    weights_gib: float
    activation_gib: float
    graph_gib: float
    state_gib: float
    kv_gib: float
    kv_bytes_per_token: float
    block_size: int
    blocks: int

    @property
    def kv_tokens(self) -> int:
        return self.blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def max_concurrency(self, tokens_per_request: int) -> float:
        return self.kv_tokens / tokens_per_request


def plan_memory(shape: ModelShape, hw: Hardware, profile: EngineProfile, cfg: SimConfig,
                max_num_seqs: int, max_num_tokens: int) -> MemoryPlan:
    """Weights per GPU, reserves, and the KV pool in blocks; ``blocks`` may be <= 0 (OOM)."""
    weights = shape.params() * _bytes(cfg.weights) / cfg.tp
    act = profile.activation_reserve_gib * GIB + max_num_tokens * shape.hidden * 12
    graph = profile.graph_pool_gib * GIB if cfg.cuda_graphs else 0.0
    state = max_num_seqs * shape.state_bytes_per_seq(cfg.tp)
    kv_per_token = shape.kv_bytes_per_token(_bytes(cfg.kv_dtype), cfg.tp)
    kv = cfg.gpu_memory_fraction * hw.hbm_bytes - weights - act - graph - state
    blocks = math.floor(kv / (kv_per_token * profile.block_size)) if kv > 0 else 0
    return MemoryPlan(weights_gib=weights / GIB, activation_gib=act / GIB, graph_gib=graph / GIB,
                      state_gib=state / GIB, kv_gib=max(kv, 0) / GIB,
                      kv_bytes_per_token=kv_per_token, block_size=profile.block_size,
                      blocks=blocks)


@dataclass(frozen=True)
class BatchShape:
    """What one iteration computes: decode sequences and prefill chunks."""

    decode_seqs: int = 0
    decode_ctx: int = 0  # sum of context lengths the decode sequences attend over
    prefill_tokens: int = 0
    prefill_attn: float = 0.0  # sum over chunks of n * (ctx_before + n / 2)
    prefill_outputs: int = 0  # chunks that finish a prompt (produce a token)

    @property
    def seqs(self) -> int:
        return self.decode_seqs + self.prefill_outputs

    @property
    def tokens(self) -> int:
        return self.decode_seqs + self.prefill_tokens


class StepModel:
    """Seconds per iteration for a batch, for one (model, hardware, profile, config)."""

    def __init__(self, shape: ModelShape, hw: Hardware, profile: EngineProfile, cfg: SimConfig):
        self.shape, self.hw, self.profile, self.cfg = shape, hw, profile, cfg
        self.graph_max = cfg.graph_max_batch or profile.default_graph_max_batch
        self._sizes = graph_sizes(self.graph_max)
        tp = cfg.tp
        embed = shape.vocab * shape.hidden
        body = shape.params() - embed * (1 if shape.tied_embeddings else 2)
        self._body_bytes = body * _bytes(cfg.weights) / tp
        if cfg.weights == "fp8":
            self._body_bytes /= profile.fp8_weight_eff
        self._embed_bytes = embed * _bytes(cfg.weights) / tp
        active = shape.params(active=True) - embed * (1 if shape.tied_embeddings else 2)
        self._flops_per_token = 2 * active / tp
        self._head_flops = 2 * embed / tp
        self._attn_flops_per_ctx = 4 * shape.attn_layers * shape.heads * shape.head_dim / tp
        self._kv_per_token = shape.kv_bytes_per_token(_bytes(cfg.kv_dtype), tp)
        self._state_per_seq = shape.state_bytes_per_seq(tp)
        self._peak = hw.peak_flops(cfg.weights) * profile.gemm_eff
        self._attn_peak = hw.peak_flops("bf16") * profile.gemm_eff
        self._bw = hw.hbm_tb_s * 1e12 * profile.mem_eff

    def padded(self, batch: int) -> int | None:
        """The captured size that serves ``batch``, or None when graphs cannot."""
        if not self.cfg.cuda_graphs or batch > self.graph_max:
            return None
        for size in self._sizes:
            if size >= batch:
                return size
        return None

    def overhead(self, b: BatchShape) -> float:
        """Launch plus scheduling cost of one iteration, seconds."""
        layers = self.shape.layers
        graphed = b.prefill_tokens == 0 and self.padded(b.decode_seqs) is not None
        per_layer = self.profile.graph_us_per_layer if graphed else self.profile.eager_us_per_layer
        return (layers * per_layer + b.seqs * self.profile.sched_us_per_seq) * 1e-6

    def allreduce(self, tokens: int) -> float:
        tp = self.cfg.tp
        if tp == 1 or tokens == 0:
            return 0.0
        msg = tokens * self.shape.hidden * 2
        # the catalog's floor is for 2 GPUs; a ring-like algorithm adds hops as tp grows
        floor = self.hw.allreduce_floor_us * 1e-6 * tp / 2
        wire = 2 * (tp - 1) / tp * msg / (self.hw.link_gb_s * 1e9)
        return 2 * self.shape.layers * (floor + wire)

    def step_time(self, b: BatchShape) -> float:
        """Seconds for one iteration of ``b`` (0 for an empty batch)."""
        if b.tokens == 0:
            return 0.0
        pad = self.padded(b.decode_seqs) if b.prefill_tokens == 0 else None
        tokens = pad if pad is not None else b.tokens
        moe = self.shape.experts
        body = self._body_bytes
        if moe:  # only experts some token in the batch routes to are read
            touched = min(1.0, tokens * self.shape.experts_per_token / moe)
            body *= 0.3 + 0.7 * touched
        gemm = (tokens * self._flops_per_token + b.seqs * self._head_flops) / self._peak
        attn = self._attn_flops_per_ctx * (b.decode_ctx + b.prefill_attn) / self._attn_peak
        moved = (body + self._embed_bytes + (b.decode_ctx + b.prefill_tokens) * self._kv_per_token
                 + b.seqs * self._state_per_seq)
        roof = max(gemm + attn, moved / self._bw)
        return roof + self.overhead(b) + self.allreduce(tokens)
