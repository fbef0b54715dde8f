"""The sim's prefix cache: shared prompt blocks are computed once, counted as vLLM counts."""

from __future__ import annotations

from actors.contracts.hardware import get_hardware
from actors.contracts.shapes import get_preset
from actors.sim.perf import SimConfig
from actors.sim.predict import build_engine, simulate_closed_loop
from actors.sim.prefix_cache import PrefixCache, block_hashes
from actors.sim.scheduler import SimEngine

LLAMA8 = get_preset("llama-3.1-8b")
H200 = get_hardware("h200")


def engine(profile: str = "vllm", **overrides) -> SimEngine:
    e, _ = build_engine(LLAMA8, H200, profile, SimConfig(), jitter=0.0,
                        overrides={"frontend_us": 0.0, "admit_us_per_running": 0.0, **overrides})
    return e


def run_to_end(e: SimEngine) -> None:
    while not e.idle:
        assert e.step() is not None


def test_block_hashes_chain_so_only_a_common_prefix_matches():
    a = block_hashes(list(range(40)), 16)
    b = block_hashes(list(range(32)) + [7] * 8, 16)
    c = block_hashes([99] + list(range(1, 40)), 16)
    assert len(a) == 2 and a == b  # the partial third block has no hash
    assert c[0] != a[0] and c[1] != a[1]  # same second block, different history


def test_a_request_after_one_with_the_same_prefix_prefills_only_the_rest():
    e = engine()
    prefix = list(range(1000, 1000 + 480))
    e.add("a", 512, 4, prompt_ids=prefix + list(range(32)))
    run_to_end(e)
    assert e.prompt_tokens_total == 512
    second = e.add("b", 512, 4, prompt_ids=prefix + list(range(500, 532)))
    run_to_end(e)
    assert e.prompt_tokens_total == 512 + 32  # 30 cached blocks of 16 = 480 tokens
    assert e.cache is not None
    assert (e.cache.queries, e.cache.hits) == (1024, 480)
    assert e.cache.hit_rate == 480 / 1024
    assert second.first_token_at is not None
    # the same prompt again: all but the last token could be cached; a partial last block
    # and the one token always computed leave 16 + 1 tokens here (512 = 32 full blocks)
    e.add("c", 512, 4, prompt_ids=prefix + list(range(500, 532)))
    run_to_end(e)
    assert e.cache.hits == 480 + 496
    assert e.free_blocks == e.memory.blocks  # cached blocks count as free


def test_distinct_prompts_hit_nothing_and_requests_without_ids_are_not_looked_up():
    e = engine()
    for i in range(4):
        e.add(str(i), 256, 2, prompt_ids=[i] * 256)
    e.add("plain", 256, 2)
    run_to_end(e)
    assert e.cache is not None and e.cache.hits == 0 and e.cache.queries == 4 * 256


def test_shared_prefix_makes_ttft_shorter_in_a_closed_loop():
    no = simulate_closed_loop(engine(), 32, 64, 2048, 64)
    shared = simulate_closed_loop(engine(), 32, 64, 2048, 64, shared_prefix_tokens=1536)
    assert shared.ttft_p50_ms < 0.7 * no.ttft_p50_ms
    assert shared.output_tok_s > no.output_tok_s


def test_eviction_keeps_the_cache_within_the_free_pool():
    cache = PrefixCache(16)
    for h in range(5):
        assert cache.register(h)
        assert cache.release(h)  # unheld: cached and free
    cache.evict_to(3)
    assert list(cache.evictable) == [2, 3, 4]  # the oldest went first
    assert cache.acquire(3) is True and cache.acquire(3) is False  # held twice now
    assert cache.release(3) is False and cache.release(3) is True


def test_a_small_pool_evicts_cached_blocks_and_still_serves_everyone():
    e, mem = build_engine(LLAMA8, H200, "vllm", SimConfig(gpu_memory_fraction=0.13),
                          jitter=0.0)
    assert 0 < mem.blocks < 2000
    for i in range(64):
        e.add(str(i), 1024, 8, prompt_ids=[i] * 1024)
    run_to_end(e)
    assert e.cache is not None and len(e.cache.evictable) <= e.free_blocks == mem.blocks


def test_metrics_and_stats_line_carry_vllms_prefix_cache_names():
    from actors.sim.config import SimServerConfig
    from actors.sim.metrics_text import render_metrics
    from actors.sim.startup_log import stats_line

    cfg = SimServerConfig(profile="vllm", hardware="h200", shape=LLAMA8, settings=SimConfig(),
                          served_name="m", max_model_len=4096)
    e, mem = cfg.build()
    e.add("a", 64, 2, prompt_ids=list(range(64)))
    e.add("b", 64, 2, prompt_ids=list(range(64)))
    run_to_end(e)
    text = render_metrics(cfg, e, mem)
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 128' in text
    hits = e.cache.hits if e.cache else -1
    assert f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}' in text
    assert "Prefix cache hit rate: 37.5%" in stats_line("vllm", 0, 0, 0, 0, 0.0, 0.375)
