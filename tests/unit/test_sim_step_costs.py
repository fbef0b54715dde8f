"""The step model's launch regimes, FP8 and TP terms, and the front end's delays."""

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


def test_the_front_end_streams_each_steps_tokens_and_sets_the_step_only_when_it_is_slower():
    """The API server streams every running sequence's token each step at a cost per token
    that grows with the streams open; it runs beside the engine, so it sets a step only where
    it outlasts the engine's own work (benchmarks/measured/h200-cliff-20261204)."""
    slow = {"frontend_tok_us": 10.0, "frontend_stream_us": 0.5, "frontend_split_tok_us": 0.0}
    few = BatchShape(decode_seqs=8, decode_ctx=8 * 600)
    many = BatchShape(decode_seqs=256, decode_ctx=256 * 600)
    for b in (few, many):
        assert model(overrides={"frontend_tok_us": 0.0, "frontend_stream_us": 0.0,
                                "frontend_split_tok_us": 0.0}).step_time(b) \
            == model().engine_time(b)
    assert model(overrides=slow).step_time(few) == model().engine_time(few)  # the engine's
    m = model(overrides=slow)
    assert m.frontend(256) == pytest.approx(256 * (10 + 0.5 * 256) * 1e-6)
    assert m.step_time(many) == m.frontend(256) > m.engine_time(many)  # the front end's
    assert m.frontend(256) / 256 > 1.5 * m.frontend(128) / 128  # per token, dearer with more


def test_the_shipped_front_end_gives_the_1b_its_fall_at_256_running_and_spares_the_8b():
    """On an H200, vLLM 0.26 served the 1B-like shape (1024 + 512 tokens) at 24.3k tok/s with
    128 running and 14.7k with 256 (sweep m, 2026-12-04), where the 8B at 2048-token prompts
    kept rising: the shipped profile has the same fall, where the front end binds, and
    leaves the 8B's levels as they were."""
    shape = _one_b_shape()
    none = {"frontend_tok_us": 0.0, "frontend_stream_us": 0.0, "frontend_split_tok_us": 0.0}

    def tok_s(shape, c, prompt, out, overrides=None):
        engine, _ = build_engine(shape, H200, "vllm", SimConfig(max_num_seqs=256), jitter=0.0,
                                 overrides=overrides)
        return simulate_closed_loop(engine, c, 2 * c, prompt, out).output_tok_s

    one_b = {c: tok_s(shape, c, 1024, 512) for c in (128, 256)}
    assert one_b[256] < 0.9 * one_b[128]  # the fall
    assert tok_s(shape, 256, 1024, 512, none) > one_b[128]  # without the front end: none
    for c in (128, 256):  # the 8B at 2048-token prompts: engine-bound, untouched
        assert tok_s(LLAMA8, c, 2048, 256) == pytest.approx(tok_s(LLAMA8, c, 2048, 256, none))


def _one_b_shape():
    from pathlib import Path

    from actors.contracts.shapes import load_shape

    return load_shape(path=str(Path(__file__).resolve().parents[1] / "fixtures" / "h200-sweeps"
                               / "h200-vllm-h-20261203-075439-cfab" / "model-config"))


def test_a_new_request_waits_behind_the_front_ends_backlog_only_where_it_binds():
    """Where the front end outlasts the engine, it falls behind by the difference each step,
    and a request that arrives then waits ``frontend_backlog_steps`` times that lag before
    the scheduler sees it (vLLM 0.26 at 256 running: the engine core waited for new
    requests while they sat in the API server; TTFT p50 1.6-2.6x the model's without it)."""
    slow = {"frontend_tok_us": 10.0, "frontend_stream_us": 0.5, "frontend_split_tok_us": 0.0,
            "frontend_us": 0.0,
            "admit_us_per_running": 0.0, "frontend_backlog_steps": 10.0}
    engine, _ = build_engine(LLAMA8, H200, "vllm", SimConfig(), jitter=0.0, overrides=slow)
    for i in range(256):
        engine.add(str(i), 16, 4)
    while any(s.computed < s.prompt_len for s in engine.running + list(engine.waiting)):
        assert engine.step() is not None
    out = engine.step()  # 256 decoding: the front end's step
    assert out is not None and len(out.emitted) == 256
    m = engine.model
    decode = out.batch
    lag = m.frontend(256) - m.engine_time(decode)
    assert lag > 0 and engine.frontend_lag == pytest.approx(lag)
    late = engine.add("late", 16, 4)
    assert late.visible_at - late.arrival == pytest.approx(10.0 * lag)
    # where the engine sets the step, nobody waits longer
    quick, _ = build_engine(LLAMA8, H200, "vllm", SimConfig(), jitter=0.0,
                            overrides={**slow, "frontend_tok_us": 0.0,
                                       "frontend_stream_us": 0.0,
                                       "frontend_split_tok_us": 0.0})
    quick.add("a", 16, 4)
    quick.step()
    assert quick.frontend_lag == 0.0
    assert quick.add("b", 16, 4).visible_at == quick.now


def test_the_shipped_backlog_lengthens_the_1b_ttft_at_256_and_nothing_below_the_cliff():
    """The shipped profile's backlog raises the 1B-like shape's TTFT at 256 running (where
    its front end binds) and leaves the levels where the engine sets the step as they were."""
    shape = _one_b_shape()

    def level(c, k):
        engine, _ = build_engine(shape, H200, "vllm", SimConfig(max_num_seqs=256), jitter=0.0,
                                 overrides={"frontend_backlog_steps": k})
        return simulate_closed_loop(engine, c, 2 * c, 1024, 512)

    assert get_profile("vllm").frontend_backlog_steps > 0
    shipped = get_profile("vllm").frontend_backlog_steps
    assert level(256, shipped).ttft_p50_ms > 1.3 * level(256, 0.0).ttft_p50_ms
    assert level(32, shipped) == level(32, 0.0)


def test_host_scale_multiplies_every_host_cost_and_leaves_the_gpu_alone():
    """A host twice as slow doubles launches, scheduling and the front end's streaming; a
    step the GPU bounds with no host cost at all takes as long on either host."""
    slow = model(overrides={"host_scale": 2.0})
    for b in (DECODE, MIXED):
        assert slow.launch_us_per_layer(b) == 2 * model().launch_us_per_layer(b)
    assert slow.sched(8) == pytest.approx(2 * model().sched(8))
    assert slow.frontend(200) == pytest.approx(2 * model().frontend(200))
    no_host = {"graph_us_per_layer": 0.0, "piecewise_us_per_layer": 0.0,
               "sched_us_per_seq": 0.0, "step_us": 0.0, "frontend_tok_us": 0.0,
               "frontend_stream_us": 0.0, "frontend_split_tok_us": 0.0}
    assert model(overrides={**no_host, "host_scale": 3.0}).step_time(MIXED) == \
        model(overrides=no_host).step_time(MIXED)


def test_async_scheduling_hides_the_schedulers_work_under_the_gpu_as_launches_hide():
    """vLLM 0.26 prepares the next step while the GPU runs this one ("Asynchronous
    scheduling is enabled."): the scheduling work per running sequence overlaps the GPU's as
    the launches do, so a host-bound step (many sequences, little to read) lasts about its
    host time whatever the context, while run between steps the same work adds to it."""
    costs = {"launch_overlap": 1.0, "sched_us_per_seq": 40.0, "step_us": 100.0,
             "frontend_tok_us": 0.0, "frontend_stream_us": 0.0, "frontend_split_tok_us": 0.0}
    prof = get_profile("vllm", costs)
    on = StepModel(LLAMA8, H200, prof.model_copy(update={"async_scheduling": True}), SimConfig())
    off = StepModel(LLAMA8, H200, prof.model_copy(update={"async_scheduling": False}),
                    SimConfig())
    short, longer = (BatchShape(decode_seqs=256, decode_ctx=256 * ctx) for ctx in (16, 64))
    host = on.sched(256) + LLAMA8.layers * on.launch_us_per_layer(short) * 1e-6
    assert on.step_time(short) == pytest.approx(host)  # the GPU's work all hidden
    assert on.step_time(longer) == pytest.approx(host)  # more to read, still hidden
    assert off.step_time(short) > on.step_time(short)  # between steps: it adds
    assert off.step_time(longer) > off.step_time(short)  # and the context shows through
    # the decode fast path agrees with the step model, both ways
    for m in (on, off):
        steps = m.decode_steps(256, 256 * 16, 4)
        assert steps[0] == pytest.approx(m.step_time(short))


def test_a_step_of_more_outputs_than_the_output_chunk_costs_the_front_end_more_per_token():
    """vLLM's API server hands a step's outputs over in chunks of 128 and yields between
    them: a step of 129 outputs or more costs ``frontend_split_tok_us`` more per token. The
    chunk is an engine fact the trial may set (``output_proc_chunk``, through the adapter's
    ``model_settings``); at 512 no step of 256 splits (benchmarks/measured/
    h100-output-chunk-20261207)."""
    from actors.contracts.config import TrialConfig
    from actors.engines.sim import sim_settings

    costs = {"frontend_tok_us": 2.0, "frontend_stream_us": 0.0, "frontend_split_tok_us": 40.0}
    m = model(overrides=costs)
    assert m.output_chunk == 128
    assert m.frontend(128) == pytest.approx(128 * 2.0e-6)
    assert m.frontend(129) == pytest.approx(129 * 42.0e-6)
    wide = model(overrides=costs, output_chunk=512)
    assert wide.frontend(256) == pytest.approx(256 * 2.0e-6)
    trial = TrialConfig(engine="vllm", max_num_seqs=256, extras={"output_proc_chunk": 512})
    assert sim_settings(trial).output_chunk == 512
    assert sim_settings(TrialConfig(engine="vllm")).output_chunk is None
    assert model("trtllm", overrides=costs).frontend(256) == pytest.approx(256 * 2.0e-6)



def test_a_sim_trial_sets_the_output_chunk_of_the_engine_it_imitates():
    from actors.contracts.config import TrialConfig
    from actors.engines.sim import sim_settings

    trial = TrialConfig(engine="sim", profile="vllm", extras={"output_proc_chunk": 512})
    assert sim_settings(trial).output_chunk == 512
    shape = _one_b_shape()

    def tok_s(settings):
        engine, _ = build_engine(shape, H200, "vllm", settings, jitter=0.0)
        return simulate_closed_loop(engine, 256, 512, 1024, 512).output_tok_s

    # the shipped profile: at 256 running, a chunk of 512 spares the split's cost
    wide = sim_settings(trial.model_copy(update={"max_num_seqs": 256}))
    narrow = sim_settings(TrialConfig(engine="sim", profile="vllm", max_num_seqs=256))
    assert tok_s(wide) > 1.2 * tok_s(narrow)
