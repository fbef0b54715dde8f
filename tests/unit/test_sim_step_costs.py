"""The step model's launch regimes, FP8 and TP terms, and the front end's fixed delay."""

from __future__ import annotations

import pytest

from actors.contracts.hardware import get_hardware
from actors.contracts.shapes import get_preset
from actors.sim.perf import BatchShape, SimConfig, StepModel, get_profile
from actors.sim.predict import build_engine, simulate_closed_loop

LLAMA8 = get_preset("llama-3.1-8b")
H200 = get_hardware("h200")
DECODE = BatchShape(decode_seqs=8, decode_ctx=8 * 600)
MIXED = BatchShape(decode_seqs=8, decode_ctx=8 * 600, prefill_tokens=128,
                   prefill_attn=128 * 64, prefill_outputs=1)


def model(profile="vllm", overrides=None, **cfg) -> StepModel:
    return StepModel(LLAMA8, H200, get_profile(profile, overrides), SimConfig(**cfg))


def test_a_step_that_prefills_replays_piecewise_graphs_on_vllm_and_runs_eagerly_without():
    p = get_profile("vllm")
    assert model().launch_us_per_layer(DECODE) == p.graph_us_per_layer
    assert model().launch_us_per_layer(MIXED) == p.piecewise_us_per_layer
    assert model(cuda_graphs=False).launch_us_per_layer(MIXED) == p.eager_us_per_layer
    # TensorRT-LLM captures decode-only graphs: a step with a context chunk runs eagerly
    assert model("trtllm").launch_us_per_layer(MIXED) == get_profile("trtllm").eager_us_per_layer
    # more decode sequences than the graphs hold: piecewise too
    big = BatchShape(decode_seqs=600, decode_ctx=600 * 600)
    assert model().launch_us_per_layer(big) == p.piecewise_us_per_layer


def test_fp8_gemm_and_kv_efficiencies_slow_only_what_they_name():
    prefill = BatchShape(prefill_tokens=8192, prefill_attn=8192 * 256, prefill_outputs=16)
    base = model(weights="fp8").step_time(prefill)
    slow = model(weights="fp8", overrides={"fp8_gemm_eff": 0.5}).step_time(prefill)
    assert slow > 1.6 * base - 0.01  # compute-bound: half the FLOP/s, ~twice the GEMM time
    assert model(overrides={"fp8_gemm_eff": 0.5}).step_time(prefill) == \
        model().step_time(prefill)  # BF16 weights: untouched
    long_decode = BatchShape(decode_seqs=128, decode_ctx=128 * 4096)
    fp8kv = model(kv_dtype="fp8").step_time(long_decode)
    bf16kv = model().step_time(long_decode)
    none = model(kv_dtype="fp8", overrides={"fp8_kv_eff": 0.5}).step_time(long_decode)
    assert fp8kv < bf16kv  # half the bytes, read at full speed
    assert none == pytest.approx(bf16kv, rel=1e-9)  # read at half the speed: no gain


def test_tp_all_reduce_latency_and_eager_launches_that_grow_with_tp():
    """The all-reduce's software latency adds to every TP step; without graphs each rank
    beyond the first adds launch and synchronisation cost per layer, which can make TP 2
    slower than TP 1 eager while it is faster with graphs (what real H200s showed)."""
    layers = LLAMA8.layers
    additive = {"launch_overlap": 0.0, "allreduce_us": 0.0}
    plain = model(tp=2, overrides=additive).step_time(DECODE)
    slow = model(tp=2, overrides={**additive, "allreduce_us": 10.0}).step_time(DECODE)
    assert slow - plain == pytest.approx(2 * layers * 10e-6)
    assert model(overrides={"allreduce_us": 10.0}).step_time(DECODE) == \
        model(overrides={"allreduce_us": 0.0}).step_time(DECODE)  # TP 1: no all-reduce
    heavy = {"eager_tp_us_per_layer": 600.0}
    assert model(tp=2, cuda_graphs=True, overrides=heavy).step_time(DECODE) == \
        model(tp=2, cuda_graphs=True).step_time(DECODE)  # graphs: no eager launches
    itl = {}
    for tp in (1, 2):
        for graphs in (True, False):
            engine, _ = build_engine(LLAMA8, H200, "vllm", SimConfig(tp=tp, cuda_graphs=graphs),
                                     jitter=0.0, overrides=heavy)
            itl[tp, graphs] = simulate_closed_loop(engine, 1, 2, 512, 64).itl_p50_ms
    assert itl[2, True] < itl[1, True]
    assert itl[2, False] > itl[1, False]


def test_the_front_end_delays_every_request_even_on_an_idle_server():
    engine, _ = build_engine(LLAMA8, H200, "vllm", SimConfig(), jitter=0.0,
                             overrides={"frontend_us": 5000.0, "admit_us_per_running": 0.0})
    seq = engine.add("a", 64, 2)
    assert seq.visible_at == pytest.approx(0.005)
    out = engine.step()  # idles until the hand-over, then prefills
    assert out is not None and seq.first_token_at is not None
    assert seq.first_token_at > 0.005
