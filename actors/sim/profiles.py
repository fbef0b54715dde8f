"""Engine profiles: how each engine family behaves, and which numbers are fitted.

The performance model's numbers come in three kinds, kept apart on purpose:

- **physical** (``PHYSICAL``): what a datasheet or the model's config says: memory size and
  bandwidth, dense FLOP/s per precision, interconnect bandwidth and all-reduce floor (the
  hardware catalog, ``actors/contracts/hardware.yaml``), bytes per element (``BYTES``), and
  the model's shape (layers, hidden size, heads, vocabulary, experts). Never fitted: a fit
  that moved one would make the model right for the wrong reason.
- **engine facts** (``ENGINE_FIXED``): what the engine does by design or by default, read
  from its docs, code or startup log: admission policy, block size, chunked prefill, default
  limits, which CUDA-graph modes it captures, memory it reserves. Never fitted either.
- **fitted** (``FITTED``): efficiencies (the share of a physical peak a kernel reaches) and
  software costs (launch, scheduling, front-end microseconds) that no datasheet gives.
  ``servesweep calibrate`` fits these, and only these, to measured trials; a spec's
  ``sim.profiles`` may override them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EngineProfile", "PROFILES", "DEFAULT_PROFILE", "get_profile", "FITTABLE", "FITTED",
           "HOST_TERMS",
           "ENGINE_FIXED", "PHYSICAL"]


class EngineProfile(BaseModel):
    """How one engine family behaves where real engines differ.

    ``calibrate`` fits the fields named in ``FITTED``; the rest are engine facts.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    admission: Literal["guaranteed_no_evict", "preempt_recompute"]
    block_size: int
    chunked_prefill: bool
    default_max_num_seqs: int
    default_max_num_tokens: int
    default_graph_max_batch: int
    #: a step that prefills (or decodes more sequences than the full graphs hold) replays
    #: piecewise graphs, attention run eagerly between them (vLLM V1's FULL_AND_PIECEWISE
    #: with torch.compile); False: such a step runs eagerly (TensorRT-LLM's default)
    piecewise_graphs: bool = False
    #: reuse the KV of cached prompt blocks (vLLM V1's automatic prefix caching, on by
    #: default; TensorRT-LLM's KV cache block reuse, on by default in its LLM API)
    prefix_caching: bool = True
    #: the scheduler prepares the next step while the GPU runs this one, so a step's CPU
    #: work (scheduling and input preparation per running sequence, ``sched_us_per_seq`` and
    #: ``step_us``) overlaps the GPU's as launches do (``launch_overlap``) instead of adding
    #: to it; False: it runs between steps. vLLM 0.26 enables it by default (its startup
    #: log: "Asynchronous scheduling is enabled."; ../shared/fixtures/); TensorRT-LLM's
    #: overlap scheduler is not modelled (no measurement of it here)
    async_scheduling: bool = False
    # -- fitted (FITTED): what a kernel reaches of a physical peak, what software costs -----
    gemm_eff: float = Field(gt=0, le=1)  # of the dense FLOP/s peak, GEMMs and attention
    mem_eff: float = Field(gt=0, le=1)  # of the HBM bandwidth, weights and KV streamed
    eager_us_per_layer: float = Field(ge=0)  # launch cost per layer per iteration, no graphs
    # the same replaying a full graph (decode-only batch); fitted, it also carries the CPU
    # work of a decode iteration that the GPU's work hides at larger batches (sampling,
    # output handling): the split is not identifiable from models of one depth
    graph_us_per_layer: float = Field(ge=0)
    # the same for a step that replays piecewise graphs with attention launched between them
    piecewise_us_per_layer: float = Field(default=40, ge=0)
    sched_us_per_seq: float = Field(ge=0)  # CPU scheduling cost per running sequence
    # CPU cost of one iteration besides launches, whatever the batch: scheduling, input
    # preparation, sampling, handing outputs to the front end
    step_us: float = Field(default=0.0, ge=0)
    # share of the shorter of (GPU time, launch time) that hides behind the longer: the CPU
    # launches the next kernels while the GPU runs. 0: they add up; 1: the step takes the
    # longer of the two. vLLM 0.26 eager on an H200 (2048-token prompts, c = 128): ITL
    # 15.0 ms, as with graphs (14.8), where adding ~12 ms of launches would give ~27 ms
    launch_overlap: float = Field(default=0.0, ge=0, le=1)
    # bandwidth achieved streaming FP8 weights relative to BF16 (small-batch FP8 GEMMs do not
    # reach the bandwidth roofline): vLLM 0.26 on an H200 decoded 8B FP8 at 3.36 ms vs
    # 4.77 ms BF16, 1.42x where halving the bytes would give ~1.9x
    fp8_weight_eff: float = Field(default=0.72, gt=0, le=1)
    # FLOP/s FP8 GEMMs reach relative to BF16's efficiency x the FP8 peak (per-token
    # activation quantisation, scales): 1 = twice BF16's compute rate
    fp8_gemm_eff: float = Field(default=1.0, gt=0, le=1)
    # bandwidth the attention kernel achieves reading an FP8 KV cache relative to a BF16
    # one (it dequantises as it reads): 1 = half the bytes take half the time
    fp8_kv_eff: float = Field(default=1.0, gt=0, le=1)
    # software latency of one TP all-reduce beyond the catalog's link floor (the kernel's
    # launch and the ranks' flag exchange), microseconds
    allreduce_us: float = Field(default=0.0, ge=0)
    # without graphs, extra launch and synchronisation cost per layer for each rank beyond
    # the first (each rank's CPU launches its own kernels; every all-reduce waits for the
    # slowest), microseconds; no measurement here constrains it yet (no TP > 1 eager run)
    eager_tp_us_per_layer: float = Field(default=0.0, ge=0)
    # a new request reaches the scheduler this long after it arrived, per sequence running
    # then (the HTTP front end streams every running sequence's tokens and admits new
    # requests in between); requests keep their order. vLLM 0.26 on an H200, 8B, 512 in /
    # 256 out: ~0.3 ms gives its TTFT p50 at c = 8, 32 and 128 (otherwise 2-5x too low)
    admit_us_per_running: float = Field(default=300, ge=0)
    # and this long on an idle server: the API server's work per request (parse, queue to
    # the engine core) plus the first output's way back. vLLM 0.26, H200, c = 1: TTFT
    # 16-21 ms for a 128-token prompt whose prefill computes in ~3 ms
    frontend_us: float = Field(default=0.0, ge=0)
    # the API server's work per streamed token (detokenise, build and write one SSE chunk),
    # microseconds, plus this much more per stream open: its one event loop serves every
    # stream, and its cost per token grew with them (py-spy on an H200, 1B-like model, vLLM
    # 0.26: at 96-224 running the engine core stepped 79-93% of the time and the API server
    # idled 8-25%; at 256 running the API server's loop was busy 93-97% and the engine core
    # waited for new requests 40-72% of the time: benchmarks/measured/h200-cliff-20261204).
    # The front end runs beside the engine, so a step's tokens reach the clients no faster
    # than it streams them: a step of n decoding sequences lasts at least
    # n x (frontend_tok_us + frontend_stream_us x n). 0 and 0: the front end never binds.
    # The stacks bound its cost per token at >= 35 us at 128 streams and >= 63 us at 256:
    # about proportional to the streams open, so the vLLM profile's per-token constant is
    # near 0 and the per-stream term carries the cost (a fit on the 3B-like and 8B levels
    # alone, started there, stays there: frontend_tok_us 0.68, frontend_stream_us 0.244)
    frontend_tok_us: float = Field(default=0.0, ge=0)
    frontend_stream_us: float = Field(default=0.0, ge=0)
    # and this much more per token in a step of more outputs than ``output_chunk``: vLLM
    # 0.26's API server hands a step's outputs to their streams in chunks of
    # VLLM_V1_OUTPUT_PROC_CHUNK_SIZE (128) and yields to its event loop between them
    # (vllm/v1/engine/async_llm.py, output_handler). On one H100 node, a 1B-like model at
    # 1024 + 512 tokens: ITL p50 3.4-3.6 ms at 128 running, 6.6 ms at 136, 13-15 ms at 256
    # (about 50 us a token from 136 up); with the chunk at 512, 3.9 ms at 144 and 5.8 ms at
    # 256, 30k tok/s where the default gave 16k (benchmarks/measured/
    # h100-output-chunk-20261207). This, not the streams open, is the cliff above 128.
    frontend_split_tok_us: float = Field(default=0.0, ge=0)
    # where the front end binds, it is behind the engine by its excess each step (its time to
    # stream the step's tokens less the engine's), and a new request waits behind that
    # backlog: this many steps' excess before the scheduler sees it. py-spy on an H200 (1B-
    # like, vLLM 0.26, benchmarks/measured/h200-cliff-20261204): at 256 running the engine
    # core waited for new requests 40-72% of the time, the requests being in the API server;
    # measured TTFT p50 there was 1.6-2.6x the model's without it, ITL 10-15% below.
    # 0: a request waits no longer when the front end binds (the model before 2026-12-07).
    frontend_backlog_steps: float = Field(default=0.0, ge=0)
    # one machine's host speed relative to the one the CPU-side costs above were fitted on:
    # every HOST_TERMS cost is read times this. A 1B-like model on H200 nodes ran 1.3-2.2x
    # apart at c=1 and by the same factor at c=256 (benchmarks/measured/
    # h200-1b-same-node-20261204), so a profile fits this one factor with the individual
    # host costs held, and its c=1 point carries over to the node's high concurrencies
    host_scale: float = Field(default=1.0, gt=0)
    # -- engine facts (ENGINE_FIXED): memory the engine keeps -----------------------------
    activation_reserve_gib: float = Field(ge=0)
    # memory CUDA graphs take out of the KV pool's budget when on (vLLM 0.26: none; it sizes
    # the pool as the budget less weights, peak activation and non-torch memory, and its
    # graphs, 0.04-0.67 GiB in our logs, come on top: benchmarks/kv_pool.py)
    graph_pool_gib: float = Field(ge=0)
    # the API server's output chunk (above): outputs of one step it processes before it
    # yields; None: it never splits a step's outputs (no such limit modelled)
    output_chunk: int | None = Field(default=None, gt=0)


# The vLLM profile's fitted factors are `servesweep calibrate`'s in-sample fit (trf, 2026-12-01)
# on every real measurement the project holds (benchmarks/crossval.py: 58 levels of vLLM 0.26
# on H200s, 8B shapes, prompts of 128-4096 tokens, c = 1-256; benchmarks/README.md), but for
# the front end's streaming costs (frontend_tok_us, frontend_stream_us), fitted on 2026-12-04
# with every other factor held: 155 levels, 8B, 3B- and 1B-like shapes (c = 256: 46% -> 22%
# mean error; benchmarks/measured/h200-cliff-20261204), refitted the same way on 2026-12-07
# from a cost per token proportional to the streams open (209 levels; the fit from 7.6 and
# 0.16 had let a fit without the 1B-like levels move the cost into the per-token constant,
# 33 us, which binds at 128 streams where the engine does: benchmarks/measured/
# crossval-20261207d), and for the four host-side factors
# of the step (graph_us_per_layer, sched_us_per_seq, step_us, launch_overlap), refitted on
# 2026-12-07 with every other factor held when asynchronous scheduling entered the model:
# 194 levels, 8B, 3B- and 1B-like shapes, H200s and an H100 (in-sample 17.6% -> 16.3% mean
# throughput and ITL error, benchmarks/step_form_fit.py; profiled on the point's node
# 11.1% -> 9.7% mean throughput error, benchmarks/measured/crossval-20261207), and for the
# front end's backlog (frontend_backlog_steps), fitted in-sample on 2026-12-07 with every
# other factor held (209 levels, from 30: 43.7; the 1B-like TTFT p50 35.0% -> 25.3% mean,
# throughput and ITL 16.1% -> 16.0%; benchmarks/measured/crossval-20261207e), and the four
# front-end factors again on 2026-12-07 when the output chunk entered the model (its split
# cost frontend_split_tok_us with frontend_tok_us, frontend_stream_us and
# frontend_backlog_steps, every other factor held; 254 levels, in-sample throughput and ITL
# 17.1% -> 15.4%, the 1B-like throughput 24.6% -> 20.2%: benchmarks/step_form_fit.py,
# benchmarks/measured/h100-output-chunk-20261207). The
# TensorRT-LLM profile has no measurement to fit: its GEMM efficiency and overheads are
# chosen so that it leads at low-to-mid concurrency (leaner launches, better bandwidth use)
# and vLLM at high concurrency, the crossover the seed article measured on 4xH100; its newer
# factors stay neutral (what the model did before they existed). Published TensorRT-LLM
# numbers are a held-out check of it (benchmarks/crossval_published.py), never a target.
PROFILES: dict[str, EngineProfile] = {
    # vLLM V1: preempts and recomputes, 16-token blocks, chunked prefill, full graphs for
    # decode batches and piecewise graphs for the rest (FULL_AND_PIECEWISE), prefix caching.
    "vllm": EngineProfile(
        name="vllm", admission="preempt_recompute", block_size=16, chunked_prefill=True,
        default_max_num_seqs=256, default_max_num_tokens=8192, default_graph_max_batch=512,
        piecewise_graphs=True, async_scheduling=True, gemm_eff=0.58, mem_eff=0.79,
        eager_us_per_layer=440, graph_us_per_layer=29.1, piecewise_us_per_layer=41,
        sched_us_per_seq=12.1, step_us=1015, launch_overlap=0.49, fp8_weight_eff=0.75,
        fp8_gemm_eff=0.78, fp8_kv_eff=0.62,
        allreduce_us=0.8, eager_tp_us_per_layer=0.0, admit_us_per_running=270,
        frontend_us=10800, frontend_tok_us=1.93, frontend_stream_us=0.031,
        frontend_split_tok_us=46.3, frontend_backlog_steps=63.9,
        activation_reserve_gib=0.8, graph_pool_gib=0.0, output_chunk=128),
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

#: Profile fields ``calibrate`` fits (and ``sim.profiles`` may override), in a fixed order.
FITTABLE = ("gemm_eff", "mem_eff", "eager_us_per_layer", "graph_us_per_layer",
            "piecewise_us_per_layer", "sched_us_per_seq", "step_us", "launch_overlap",
            "fp8_weight_eff",
            "fp8_gemm_eff", "fp8_kv_eff", "allreduce_us", "eager_tp_us_per_layer",
            "admit_us_per_running", "frontend_us", "frontend_tok_us", "frontend_stream_us",
            "frontend_split_tok_us", "frontend_backlog_steps", "host_scale")
#: The CPU-side costs, each read times ``host_scale``: what a faster or slower host changes.
HOST_TERMS = ("eager_us_per_layer", "graph_us_per_layer", "piecewise_us_per_layer",
              "sched_us_per_seq", "step_us", "eager_tp_us_per_layer", "admit_us_per_running",
              "frontend_us", "frontend_tok_us", "frontend_stream_us", "frontend_split_tok_us")
#: The same, as a set: efficiencies and software costs, fitted to measurements.
FITTED: frozenset[str] = frozenset(FITTABLE)
#: Profile fields that are engine facts (design, documented defaults): never fitted.
ENGINE_FIXED: frozenset[str] = frozenset({
    "name", "admission", "block_size", "chunked_prefill", "default_max_num_seqs",
    "default_max_num_tokens", "default_graph_max_batch", "piecewise_graphs", "prefix_caching",
    "async_scheduling", "activation_reserve_gib",
    "graph_pool_gib", "output_chunk"})
#: Physical constants the model reads (hardware catalog fields, bytes per element, the
#: model's shape): never fitted, never overridden by a profile.
PHYSICAL: frozenset[str] = frozenset({
    "hardware.hbm_gib", "hardware.hbm_tb_s", "hardware.tflops", "hardware.link_gb_s",
    "hardware.allreduce_floor_us", "BYTES", "shape.layers", "shape.hidden", "shape.heads",
    "shape.kv_heads", "shape.head_dim", "shape.intermediate", "shape.vocab",
    "shape.experts", "shape.experts_per_token", "shape.expert_intermediate",
    "shape.shared_expert_intermediate", "shape.linear_state_bytes_per_layer",
    "shape.full_attention_layers", "shape.tied_embeddings"})


def get_profile(name: str, overrides: dict[str, float] | None = None) -> EngineProfile:
    """A named profile with optional overrides of fitted fields (e.g. from ``calibrate``)."""
    if name not in PROFILES:
        raise KeyError(f"unknown sim profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    prof = PROFILES[name]
    if overrides:
        unknown = set(overrides) - FITTED
        if unknown:
            raise ValueError(f"profile fields {sorted(unknown)} cannot be overridden; "
                             f"use {', '.join(FITTABLE)}")
        prof = EngineProfile.model_validate({**prof.model_dump(), **overrides})
    return prof
