"""Level rules: invalid (errors, proven token counts), unverified, noisy (round spread),
client_bound, metrics (median over rounds, ITL per token)."""

from __future__ import annotations

import pytest

from actors.contracts.config import Workload
from actors.contracts.results import ClientHealth
from actors.loadgen.level import CHAT_TEMPLATE_MAX_OVERHEAD, aggregate_level
from actors.loadgen.records import RequestRecord, StreamProof

W = Workload(prompt_tokens=16, output_tokens=4, concurrency=[2], rounds=3, warmup_requests=0)
HEALTHY = ClientHealth(loop_lag_p99_ms=0.5, cpu_frac=0.2)


def rec(rnd: int, i: int, t0: float = 0.0, *, ttft: float = 0.010, gap: float = 0.002,
        prompt: int = 16, out: int = 4, error: str | None = None, chunks: list[int] | None = None,
        proof: StreamProof | None = None) -> RequestRecord:
    """A completed request; by default its stream proved ``out`` tokens by token ids,
    per-chunk usage and the final usage alike."""
    r = RequestRecord(index=i, round=rnd, start=t0, prompt_tokens=prompt, completion_tokens=out)
    r.proof = proof or StreamProof(token_ids=out, chunk_usage=out, final_usage=out,
                                   final_prompt=prompt, chunks=len(chunks or [1] * out))
    if error:
        r.error, r.error_detail, r.end = error, f"{error} detail", t0 + ttft
        r.prompt_tokens = r.completion_tokens = None
        return r
    chunks = chunks or [1] * out
    t = t0 + ttft
    for k in chunks:
        r.arrivals.append(t)
        r.counts.append(k)
        t += gap * k
    r.first_token = r.arrivals[0]
    r.chunk_tokens = sum(chunks)
    r.end = r.arrivals[-1] + 0.0005
    return r


def level(records, rounds=None, health=HEALTHY, w=W, scale=1.0):
    rounds = rounds or [(0, 0.1), (1, 0.1), (2, 0.1)]
    return aggregate_level(2, w, records, rounds, [], health, scale)


def good(n_rounds: int = 3) -> list[RequestRecord]:
    return [rec(r, i) for r in range(n_rounds) for i in range(4)]


def test_clean_level_is_valid_with_exact_metrics():
    res = level(good())
    assert res.status == "valid" and res.flags == [] and res.reason == ""
    m = res.metrics
    assert m.output_tok_s == pytest.approx(16 / 0.1)  # 4 requests x 4 tokens per 0.1 s round
    assert m.total_tok_s == pytest.approx(4 * 20 / 0.1)
    assert m.requests_s == pytest.approx(40)
    assert m.ttft_p50_ms == pytest.approx(10) and m.ttft_p99_ms == pytest.approx(10)
    assert m.itl_p50_ms == pytest.approx(2) and m.tpot_p50_ms == pytest.approx(2)
    assert m.e2e_p50_ms == pytest.approx(10 + 3 * 2 + 0.5)
    assert m.decode_tok_s_per_req_p50 == pytest.approx(500)
    assert m.round_spread == 0


def test_multi_token_chunk_spreads_its_gap_over_its_tokens():
    records = [rec(0, 0, chunks=[1, 3])]  # 3 tokens arrive 2 ms after the first
    res = level(records, rounds=[(0, 0.1)])
    assert res.metrics.itl_p50_ms == pytest.approx(2 / 3)
    assert res.metrics.tpot_p50_ms == pytest.approx(2 / 3)


def test_all_tokens_in_one_read_gives_no_decode_speed_instead_of_dividing_by_zero():
    records = [rec(0, i, chunks=[4]) for i in range(4)]  # an unpaced server: one read each
    res = level(records, rounds=[(0, 0.1)])
    assert res.status == "valid"
    assert res.metrics.tpot_p50_ms == 0 and res.metrics.decode_tok_s_per_req_p50 is None


def test_time_scale_converts_to_engine_time():
    res = level(good(), scale=0.1)
    assert res.metrics.ttft_p50_ms == pytest.approx(100)  # 10 ms real at 0.1 = 100 ms engine
    assert res.metrics.output_tok_s == pytest.approx(16)
    assert res.rounds[0].duration_s == pytest.approx(1.0)


def test_any_error_makes_the_level_invalid_with_its_kind():
    records = good()
    records[5] = rec(1, 1, error="http_500")
    res = level(records)
    assert res.status == "invalid"
    assert res.errors == {"http_500": 1}
    assert "1 x http_500" in res.reason and "http_500 detail" in res.reason


def test_short_output_is_invalid_with_the_counts_never_averaged_in():
    records = good()
    records[0] = rec(0, 0, out=3, chunks=[1, 1, 1])
    records[1] = rec(0, 1, out=3, chunks=[1, 1, 1])
    res = level(records)
    assert res.status == "invalid" and res.count_mismatches == 2
    assert "2 x count_mismatch: token ids 3, per-chunk usage 3, usage 3 (asked 4)" in res.reason


def test_wrong_prompt_length_is_invalid_for_completions():
    records = good()
    records[2] = rec(0, 2, prompt=17)
    res = level(records)
    assert res.status == "invalid" and "prompt 17 tokens (asked 16)" in res.reason


def test_usage_claiming_more_than_the_stream_carried_is_invalid_never_reconciled():
    records = good()
    records[0] = rec(0, 0, proof=StreamProof(final_usage=4, text_tokens=3, chunks=3))
    records[1] = rec(0, 1, proof=StreamProof(token_ids=3, chunk_usage=4, final_usage=4, chunks=3))
    res = level(records)
    assert res.status == "invalid" and res.count_mismatches == 1
    assert "usage_mismatch: counts disagree: token ids 3, per-chunk usage 4, usage 4" \
        in res.reason
    assert "unverified" not in res.flags  # an invalid level carries its reason, not the flag


def test_usage_alone_is_unverified_and_still_reports_throughput_from_it():
    records = good()
    for r in records:
        r.proof = StreamProof(final_usage=4, chunks=4)
    res = level(records)
    assert res.status == "valid" and "unverified" in res.flags
    assert res.count_sources == {"usage only": 12}
    assert res.metrics.output_tok_s == pytest.approx(16 / 0.1)
    assert "besides the final usage" in res.reason


def test_a_missing_final_usage_is_no_fault_when_token_ids_prove_the_count():
    records = good()
    for r in records:
        r.proof = StreamProof(token_ids=4, chunks=4)
        r.prompt_tokens = None
    res = level(records)
    assert res.status == "valid" and res.flags == [] and res.count_sources == {"token ids": 12}


def test_nothing_counted_at_all_is_unverified():
    records = good()
    records[0].proof = StreamProof(chunks=4)
    res = level(records)
    assert res.status == "valid" and "unverified" in res.flags and "no count at all" in res.reason


def test_chat_prompt_may_carry_template_overhead_within_the_limit():
    wc = W.model_copy(update={"api": "chat"})
    ok = [rec(0, i, prompt=16 + 7) for i in range(4)]
    assert level(ok, rounds=[(0, 0.1)], w=wc).status == "valid"
    over = [rec(0, i, prompt=16 + CHAT_TEMPLATE_MAX_OVERHEAD + 1) for i in range(4)]
    res = level(over, rounds=[(0, 0.1)], w=wc)
    assert res.status == "invalid" and "prompt 81 tokens (asked 16..80)" in res.reason
    under = [rec(0, i, prompt=15) for i in range(4)]
    assert level(under, rounds=[(0, 0.1)], w=wc).status == "invalid"


def test_no_records_is_invalid():
    res = level([], rounds=[])
    assert res.status == "invalid" and res.reason == "no requests completed"


def test_rounds_differing_beyond_the_band_are_noisy_and_median_round_is_reported():
    res = level(good(), rounds=[(0, 0.100), (1, 0.102), (2, 0.104)])  # spread 3.9%
    assert res.status == "valid" and "noisy" not in res.flags
    res = level(good(), rounds=[(0, 0.100), (1, 0.110), (2, 0.125)])
    assert res.status == "valid" and "noisy" in res.flags
    assert res.metrics.output_tok_s == pytest.approx(16 / 0.110)  # the median round
    assert res.metrics.round_spread == pytest.approx((160 - 128) / (16 / 0.110))


def test_noise_band_is_configurable():
    wide = W.model_copy(update={"noise_band": 0.5})
    res = level(good(), rounds=[(0, 0.100), (1, 0.110), (2, 0.125)], w=wide)
    assert "noisy" not in res.flags


@pytest.mark.parametrize("lag, cpu, bound", [
    (0.5, 0.2, False), (4.9, 0.89, False), (5.1, 0.2, True), (0.5, 0.91, True)])
def test_client_bound_on_loop_lag_or_cpu(lag: float, cpu: float, bound: bool):
    res = level(good(), health=ClientHealth(loop_lag_p99_ms=lag, cpu_frac=cpu))
    assert ("client_bound" in res.flags) is bound
    assert res.status == "valid"


@pytest.mark.parametrize("n_rounds, walls, median_wall", [
    (2, [0.100, 0.125], None), (4, [0.100, 0.110, 0.125, 0.200], None),
    (3, [0.100, 0.125, 0.110], 0.110)])
def test_throughput_is_the_median_over_rounds_mean_of_middle_two_when_even(
        n_rounds: int, walls: list[float], median_wall: float | None):
    res = level(good(n_rounds), rounds=list(enumerate(walls)))
    tputs = sorted(16 / x for x in walls)
    mid = len(tputs) // 2
    want = (16 / median_wall if median_wall else (tputs[mid - 1] + tputs[mid]) / 2)
    assert res.metrics.output_tok_s == pytest.approx(want)
    assert res.metrics.output_tok_s < max(tputs)  # never the faster round
    assert [r.output_tok_s for r in res.rounds] == pytest.approx([16 / x for x in walls])
    assert res.metrics.requests_s == pytest.approx(sorted(4 / x for x in walls)[mid] if
                                                   median_wall else
                                                   (sorted(4 / x for x in walls)[mid - 1] +
                                                    sorted(4 / x for x in walls)[mid]) / 2)


def test_itl_spreads_the_count_over_chunks_when_per_chunk_counts_are_unknown():
    # 8 tokens in 4 chunks 4 ms apart, counted one per chunk by the client: per token the
    # gap is 2 ms (TPOT), per chunk 4 ms
    r = rec(0, 0, out=8, chunks=[1, 1, 1, 1], gap=0.004)
    r.counts_known = False
    w8 = W.model_copy(update={"output_tokens": 8})
    res = level([r], rounds=[(0, 0.1)], w=w8)
    assert res.status == "valid" and "itl_spread" in res.flags
    m = res.metrics
    assert m.chunk_gap_p50_ms == pytest.approx(4)
    assert m.tpot_p50_ms == pytest.approx(12 / 7)
    # 7 tokens after the first over 3 later chunks: shares 3, 2, 2 -> gaps 4/3, 2, 2 ms
    assert m.itl_p50_ms == pytest.approx(2) and abs(m.itl_p50_ms - m.tpot_p50_ms) < 0.25 * \
        m.tpot_p50_ms


def test_goodput_counts_only_the_requests_that_met_every_limit_on_their_own():
    from actors.contracts.slo import SLO

    # per round: 3 fast requests (TTFT 10 ms) and 1 slow one (TTFT 50 ms); the level's TTFT
    # p99 misses a 30 ms limit, yet three quarters of the tokens were served within it
    records = [rec(r, i, ttft=0.050 if i == 3 else 0.010) for r in range(3) for i in range(4)]
    res = aggregate_level(2, W, records, [(0, 0.1), (1, 0.1), (2, 0.1)], [], HEALTHY, 1.0,
                          SLO(ttft_p99_ms=30))
    m = res.metrics
    assert m.output_tok_s == pytest.approx(160)
    assert m.goodput_tok_s == pytest.approx(120) and m.slo_met == pytest.approx(0.75)
    # each request's own ITL p99 against the ITL limit: a 5 ms gap in one request only
    slow_gap = [rec(0, 0, gap=0.005), rec(0, 1), rec(0, 2), rec(0, 3)]
    res = aggregate_level(2, W, slow_gap, [(0, 0.1)], [], HEALTHY, 1.0, SLO(itl_p99_ms=3))
    assert res.metrics.goodput_tok_s == pytest.approx(120)
    # engine time: at time scale 0.1, 10 ms of client time is 100 ms of engine time
    res = aggregate_level(2, W, good(), [(0, 0.1), (1, 0.1), (2, 0.1)], [], HEALTHY, 0.1,
                          SLO(ttft_p99_ms=50))
    assert res.metrics.goodput_tok_s == 0 and res.metrics.slo_met == 0
    # no limit set: no goodput measured (the objective then falls back to the lower bound)
    assert level(good()).metrics.goodput_tok_s is None
    assert aggregate_level(2, W, good(), [(0, 0.1)], [], HEALTHY, 1.0,
                           SLO()).metrics.goodput_tok_s is None


def test_itl_percentiles_are_the_same_whether_or_not_every_read_held_one_token():
    """The ITL percentiles reuse the chunk gaps where every request read one token per read
    (one sort instead of two); with one request of bunched reads they come from the split
    gaps of every request. Both equal the percentiles of ``request_itls`` pooled."""
    import random

    from actors.loadgen.aggregate import request_itls
    from actors.loadgen.stats import percentile

    rng = random.Random(3)
    w = Workload(prompt_tokens=16, output_tokens=12, concurrency=[2], rounds=3,
                 warmup_requests=0)
    one_each = [rec(r, i, out=12, gap=rng.uniform(0.001, 0.004)) for r in range(3)
                for i in range(4)]
    bunched = one_each[:-1] + [rec(2, 3, out=12, chunks=[1, 3, 1, 4, 1, 2], gap=0.002)]
    for records in (one_each, bunched):
        m = level(records, w=w).metrics
        pooled = [x for r in records for x in request_itls(r, 12)]
        assert m.itl_p50_ms == pytest.approx(1e3 * percentile(pooled, 50))
        assert m.itl_p99_ms == pytest.approx(1e3 * percentile(pooled, 99))
        gaps = [b - a for r in records for a, b in zip(r.arrivals, r.arrivals[1:])]
        assert m.chunk_gap_p99_ms == pytest.approx(1e3 * percentile(gaps, 99))
    assert level(bunched, w=w).metrics.itl_p99_ms != level(bunched, w=w).metrics.chunk_gap_p99_ms


def test_request_itls_split_only_the_reads_that_brought_several_tokens():
    """Each read's gap is split evenly over the tokens it brought; a read of one token is
    its gap, a read of none (e.g. a usage-only chunk) adds no ITL; without known counts
    the request's tokens are spread over its reads after the first."""
    from actors.loadgen.aggregate import request_itls

    r = RequestRecord(index=0, round=0, start=0.0)
    r.arrivals, r.counts = [0.0, 1.0, 3.0, 3.5, 6.5, 7.0], [1, 1, 2, 0, 3, 1]
    assert request_itls(r) == [1.0] * 6 + [0.5]
    r.counts = [1] * 6
    assert request_itls(r) == [1.0, 2.0, 0.5, 3.0, 0.5]
    r.counts_known = False  # 11 tokens over 5 later reads: 10 after the first, 2 each
    assert request_itls(r, 11) == [0.5, 0.5, 1.0, 1.0, 0.25, 0.25, 1.5, 1.5, 0.25, 0.25]
    assert request_itls(RequestRecord(index=1, round=0, start=0.0)) == []
