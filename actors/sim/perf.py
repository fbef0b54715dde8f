"""The sim's performance model: engine profiles, memory plan and step time.

Step time is a roofline (GEMM and attention FLOPs against weight and KV bytes
moved, each with an efficiency factor per profile) plus a TP all-reduce per
layer (a bandwidth term and a small-message latency floor), plus the
per-iteration launch cost, part of which hides behind the GPU's work (launches
are asynchronous: ``launch_overlap``; with the engine's asynchronous scheduling, its
scheduling work hides the same way): full CUDA graphs for decode-only batches
up to the graph max batch size (padded to a captured size), piecewise graphs
for other steps where the engine captures them (vLLM), eager launches
otherwise; plus CPU time per iteration and per sequence; and no shorter than the API
server takes to stream the step's tokens (``frontend``). Everything here is pure
arithmetic: no clocks, no I/O. The profiles, and which of their numbers are fitted
and which are physical, are in ``actors.sim.profiles``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from actors.contracts.hardware import BYTES, GIB, Hardware
from actors.contracts.shapes import ModelShape
from actors.sim.profiles import (
    DEFAULT_PROFILE,
    ENGINE_FIXED,
    FITTABLE,
    FITTED,
    HOST_TERMS,
    PHYSICAL,
    PROFILES,
    EngineProfile,
    get_profile,
)

__all__ = ["EngineProfile", "PROFILES", "DEFAULT_PROFILE", "get_profile", "FITTABLE", "FITTED",
           "HOST_TERMS",
           "ENGINE_FIXED", "PHYSICAL", "SimConfig", "MemoryPlan", "plan_memory", "StepModel",
           "BatchShape", "graph_sizes"]


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
    #: the API server's output chunk (an engine option, set through the engine's extras:
    #: ``EngineAdapter.model_settings``); None: the profile's ``output_chunk``
    output_chunk: int | None = None


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
        self.output_chunk = cfg.output_chunk or profile.output_chunk
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
        if cfg.kv_dtype == "fp8":  # read at a lower share of the bandwidth (dequantised)
            self._kv_per_token /= profile.fp8_kv_eff
        self._state_per_seq = shape.state_bytes_per_seq(tp)
        self._peak = hw.peak_flops(cfg.weights) * profile.gemm_eff
        if cfg.weights == "fp8" and hw.supports("fp8"):
            self._peak *= profile.fp8_gemm_eff
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

    def launch_us_per_layer(self, b: BatchShape) -> float:
        """Launch cost per layer of one iteration: a full graph for a decode-only batch the
        graphs hold, piecewise graphs for any other step where the engine captures them
        (graphs on), else eager launches."""
        p = self.profile
        if b.prefill_tokens == 0 and self.padded(b.decode_seqs) is not None:
            us = p.graph_us_per_layer
        elif self.cfg.cuda_graphs and p.piecewise_graphs:
            us = p.piecewise_us_per_layer
        else:
            us = p.eager_us_per_layer + (self.cfg.tp - 1) * p.eager_tp_us_per_layer
        return us * p.host_scale

    def allreduce(self, tokens: int) -> float:
        tp = self.cfg.tp
        if tp == 1 or tokens == 0:
            return 0.0
        msg = tokens * self.shape.hidden * 2
        # the catalog's floor is for 2 GPUs; a ring-like algorithm adds hops as tp grows
        floor = (self.hw.allreduce_floor_us * tp / 2 + self.profile.allreduce_us) * 1e-6
        wire = 2 * (tp - 1) / tp * msg / (self.hw.link_gb_s * 1e9)
        return 2 * self.shape.layers * (floor + wire)

    def step_time(self, b: BatchShape) -> float:
        """Seconds for one iteration of ``b`` (0 for an empty batch): the engine's time, or
        the front end's to stream the step's tokens where that is longer."""
        if b.tokens == 0:
            return 0.0
        return max(self.step_parts(b))

    def step_parts(self, b: BatchShape) -> tuple[float, float]:
        """(the engine's seconds, the front end's) for one iteration of a non-empty ``b``:
        the step lasts the longer; the front end's excess is its lag behind the engine."""
        return self.engine_time(b), self.frontend(b.seqs)

    def engine_time(self, b: BatchShape) -> float:
        """Seconds the engine itself takes for one iteration of a non-empty ``b``."""
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
        gpu = max(gemm + attn, moved / self._bw) + self.allreduce(tokens)
        launch = self.shape.layers * self.launch_us_per_layer(b) * 1e-6
        return self._overlapped(gpu, launch, self.sched(b.seqs))

    def _overlapped(self, gpu: float, launch: float, cpu: float) -> float:
        """A step's time from its GPU, launch and other CPU seconds: kernels launch
        asynchronously (the CPU issues the next while the GPU runs this one), so the shorter
        of (GPU time, host time) hides behind the longer, in part (``launch_overlap``); the
        host time is the launches, plus the scheduling work under asynchronous scheduling
        (else that work runs between steps and adds)."""
        p = self.profile
        host = launch + cpu if p.async_scheduling else launch
        rest = 0.0 if p.async_scheduling else cpu
        return gpu + host - p.launch_overlap * min(gpu, host) + rest

    def frontend(self, streams: int) -> float:
        """Seconds the API server needs to stream one token to each of ``streams`` clients:
        a step ends no sooner (the front end is a stage beside the engine, not after it).
        A step of more outputs than the output chunk is handed over in parts, and each of
        its tokens costs ``frontend_split_tok_us`` more."""
        p = self.profile
        per_token = p.frontend_tok_us + p.frontend_stream_us * streams
        if self.output_chunk is not None and streams > self.output_chunk:
            per_token += p.frontend_split_tok_us
        return streams * per_token * p.host_scale * 1e-6

    def sched(self, seqs: int) -> float:
        """Seconds of CPU work in one iteration of ``seqs`` sequences besides launches."""
        p = self.profile
        return (seqs * p.sched_us_per_seq + p.step_us) * p.host_scale * 1e-6

    def decode_steps(self, batch: int, ctx: int, count: int) -> list[float]:
        """``step_time`` of ``count`` decode-only iterations of ``batch`` sequences whose
        context starts at ``ctx`` and grows by ``batch`` each (the constant terms once)."""
        first = BatchShape(decode_seqs=batch, decode_ctx=ctx)
        pad = self.padded(batch)
        tokens = pad if pad is not None else batch
        body = self._body_bytes
        if self.shape.experts:
            touched = min(1.0, tokens * self.shape.experts_per_token / self.shape.experts)
            body *= 0.3 + 0.7 * touched
        gemm = (tokens * self._flops_per_token + batch * self._head_flops) / self._peak
        attn_c = self._attn_flops_per_ctx / self._attn_peak
        base = body + self._embed_bytes + batch * self._state_per_seq
        kv, bw = self._kv_per_token, self._bw
        ar = self.allreduce(tokens)
        launch = self.shape.layers * self.launch_us_per_layer(first) * 1e-6
        sched = self.sched(batch)
        front = self.frontend(batch)
        out = []
        for i in range(count):
            c = ctx + i * batch
            gpu = max(gemm + attn_c * c, (base + c * kv) / bw) + ar
            out.append(max(self._overlapped(gpu, launch, sched), front))
        return out

