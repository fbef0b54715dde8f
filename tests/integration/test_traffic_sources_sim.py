"""Every request source and regime of the user's traffic against a real sim server process,
beside test_traffic_sim.py: a ShareGPT file, a Mooncake multi-turn file, bursty (gamma)
arrivals and a trace replayed at its timestamps, each request counted against its own
target output length."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.contracts.config import Workload
from actors.contracts.traffic import (
    FileSource,
    Level,
    LevelKind,
    SyntheticSource,
    arrival_offsets,
)
from orchestrator.spec.traffic_plan import build_plan
from tests.integration.test_loadgen_sim import sim_load, sim_server
from tests.integration.test_traffic_sim import measure, measured

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sim_server(tmp_path_factory.mktemp("sim"), time_scale=1.0) as url:
        yield url


def sized(w: Workload, tmp: Path | None = None) -> Workload:
    """``w`` with prompt/output tokens set to its request list's longest (as the spec does)."""
    plan = build_plan(w, tmp)
    assert plan is not None
    return w.model_copy(update={
        "prompt_tokens": max(r.prompt_tokens for r in plan.requests),
        "output_tokens": max(r.output_tokens for r in plan.requests)})


def cv(times: list[float]) -> float:
    """Coefficient of variation of the gaps between sorted ``times``."""
    ts = sorted(times)
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


def test_a_sharegpt_file_sends_each_first_question_and_decodes_its_reply_length(sim, tmp_path):
    records = []
    for i in range(8):
        records.append({"id": f"r{i}", "conversations": [
            {"from": "human", "value": f"question {i} " + "about serving " * (3 + 2 * i)},
            {"from": "gpt", "value": " ".join(["answer"] * (4 + 3 * i))},
            {"from": "human", "value": "a follow-up the format ignores"},
            {"from": "gpt", "value": "ignored " * 50}]})
    records.insert(3, {"id": "lonely", "conversations": [{"from": "human", "value": "hi"}]})
    p = tmp_path / "sharegpt.json"
    p.write_text(json.dumps(records))
    w = sized(Workload(prompt_tokens=1, output_tokens=1, concurrency=[3], rounds=1,
                       warmup_requests=0, requests=FileSource(kind="file", path=str(p))))
    plan = build_plan(w, None)
    assert plan is not None and plan.source == "file sharegpt.json, 1 records skipped"
    res, rows = measure(sim, w, "c=3")
    assert res["status"] == "valid", res["reason"]
    assert res["errors"] == {} and res["count_mismatches"] == 0
    rows = measured(rows)
    assert sorted(int(r["index"]) for r in rows) == list(range(8))  # the one-turn record: out
    for r in rows:
        i = int(r["index"])
        # the output length is the first reply's length (words: what the sim counts)
        assert int(r["target_output_tokens"]) == 4 + 3 * i == int(r["completion_tokens"])
        assert r["target_prompt_tokens"] == "text"
    # the prompt is the first human turn as text: the server counts its words, plus the
    # same short run tag on every request
    extra = {int(r["prompt_tokens"]) - (2 + 2 * (3 + 2 * int(r["index"]))) for r in rows}
    assert len(extra) == 1 and 0 <= extra.pop() <= 2


def test_a_mooncake_multi_turn_file_carries_each_conversations_history(sim, tmp_path):
    convs = {"a": [(40, 5), (24, 9), (16, 3)], "b": [(56, 7), (32, 4), (20, 11)]}
    rows = []  # the conversations interleaved, each in turn order
    for turn in range(3):
        for conv, turns in convs.items():
            n_in, n_out = turns[turn]
            rows.append({"conversation_id": conv, "turn": turn + 1, "input_length": n_in,
                         "output_length": n_out})
    p = tmp_path / "multi.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = sized(Workload(prompt_tokens=1, output_tokens=1, concurrency=[1], rounds=1,
                       warmup_requests=0, requests=FileSource(kind="file", path=str(p),
                                                              format="mooncake")))
    res, recs = measure(sim, w, "c=1")
    assert res["status"] == "valid", res["reason"]
    assert res["errors"] == {} and res["count_mismatches"] == 0
    recs = measured(recs)
    assert sorted(int(r["index"]) for r in recs) == list(range(6))
    for r in recs:
        row = rows[int(r["index"])]
        # every turn decodes exactly its own output length
        assert int(r["target_output_tokens"]) == row["output_length"] == \
            int(r["completion_tokens"])
        # its prompt is the earlier turns (inputs and replies) and then its own input
        history = sum(i + o for i, o in convs[row["conversation_id"]][:row["turn"] - 1])
        assert int(r["prompt_tokens"]) == history + row["input_length"] == \
            int(r["target_prompt_tokens"])
    # token by token: each later turn's prompt starts with the previous turn's prompt
    core = sim_load(sim, w, 1.0, plan=build_plan(w, None))
    sent = [core.runner._body(i, 7)["prompt"] for i in range(6)]
    for i, row in enumerate(rows):
        if row["turn"] > 1:
            before = sent[i - 2]  # the same conversation's previous turn
            assert rows[i - 2]["conversation_id"] == row["conversation_id"]
            assert sent[i][:len(before)] == before and len(sent[i]) > len(before)
        else:  # first turns share nothing
            assert sent[i][:8] != sent[1 - i][:8]
    # and the server served the repeated history from its prefix cache
    assert res["prefix_hit_rate"] is not None and res["prefix_hit_rate"] > 0


def test_gamma_arrivals_below_burstiness_one_are_burstier_than_poisson(sim):
    n, rate = 48, 16.0
    src = SyntheticSource(kind="synthetic", count=n, seed=5,
                          prompt={"kind": "uniform", "min": 32, "max": 256},
                          output={"kind": "uniform", "min": 4, "max": 24})
    w = sized(Workload(prompt_tokens=1, output_tokens=1, rates=[rate], burstiness=0.25,
                       rounds=1, open_loop_s=0, warmup_requests=0, requests=src,
                       level_timeout_s=120))
    res, rows = measure(sim, w, "rate=16/s")
    assert res["status"] == "valid", res["reason"]
    assert res["level"] == {"kind": "rate", "value": rate}
    assert res["requests"] == n and res["errors"] == {} and res["count_mismatches"] == 0
    rows = measured(rows)
    assert sorted(int(r["index"]) for r in rows) == list(range(n))
    assert all(int(r["completion_tokens"]) == int(r["target_output_tokens"]) for r in rows)
    assert len({r["target_output_tokens"] for r in rows}) > 5
    # the schedule (each send less its lag) is gamma: burstier than Poisson
    due = [float(r["start_s"]) - float(r["send_lag_ms"]) / 1e3 for r in rows]
    poisson = arrival_offsets(Level(kind=LevelKind.RATE, value=rate), n, 0, w.seed, 1.0,
                              None)
    assert poisson is not None
    assert cv(due) > 1 and cv(due) > cv(poisson)
    # and the sends themselves (a late send only bunches them more)
    assert cv([float(r["start_s"]) for r in rows]) > 1
    ol = res["open_loop"]
    assert ol["offered_rps"] == rate and ol["scheduled_rps"] > 0 and ol["achieved_rps"] > 0


def test_a_trace_level_sends_at_its_timestamps_divided_by_the_speedup(sim, tmp_path):
    # three bursts a second apart (at x2), irregular inside each burst
    stamps = [0, 60, 250, 2000, 2030, 2400, 2450, 4000, 4100, 4120, 4500, 6000]
    rows = [{"timestamp": 1000 + t, "input_length": 64 + 16 * (i % 5),
             "output_length": 4 + i} for i, t in enumerate(stamps)]
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    speedup = 2.0
    w = sized(Workload(prompt_tokens=1, output_tokens=1, trace_speedups=[speedup], rounds=1,
                       warmup_requests=0, requests=FileSource(kind="file", path=str(p)),
                       level_timeout_s=120))
    res, recs = measure(sim, w, "trace x2")
    assert res["status"] == "valid", res["reason"]
    assert res["level"] == {"kind": "trace", "value": speedup}
    assert res["errors"] == {} and res["count_mismatches"] == 0
    recs = sorted(measured(recs), key=lambda r: int(r["index"]))
    assert [int(r["index"]) for r in recs] == list(range(len(stamps)))
    assert all(int(r["completion_tokens"]) == int(r["target_output_tokens"]) == 4 + i
               for i, r in enumerate(recs))
    want = [(t - stamps[0]) / 1e3 / speedup for t in stamps]  # wall s at time scale 1
    starts = [float(r["start_s"]) for r in recs]
    lags = [float(r["send_lag_ms"]) / 1e3 for r in recs]
    # the schedule is the trace's offsets over the speed-up, exactly (to the CSV's rounding)
    due = [s - lag for s, lag in zip(starts, lags, strict=True)]
    assert [d - due[0] for d in due] == pytest.approx(want, abs=2e-3)
    # the sends follow it: none early, none far late (a busy host delays a few ms; the
    # bursts are a second apart, an unscaled replay would be seconds off)
    assert all(lag > -5e-3 for lag in lags)
    assert [s - starts[0] for s in starts] == pytest.approx(want, abs=0.4)
    ol = res["open_loop"]
    assert ol["offered_rps"] == pytest.approx((len(stamps) - 1) / 6.0 * speedup)
    assert ol["scheduled_rps"] == pytest.approx(ol["offered_rps"], rel=1e-3)
    assert ol["achieved_rps"] == pytest.approx(ol["offered_rps"], rel=0.25)
    # late sends are counted against the schedule as the CSV shows each one's lag
    assert ol["late_sends"] == sum(lag > w.late_send_ms / 1e3 for lag in lags)
    assert ol["send_lag_p99_ms"] is not None
    assert 1e3 * min(lags) - 1 <= ol["send_lag_p99_ms"] <= 1e3 * max(lags) + 1
    assert ("late_sends" in res["flags"]) == (ol["late_sends"] > 0)
