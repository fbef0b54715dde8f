"""The user's traffic against a real sim server process: request lists, rates, traces, prefix
reuse and multi-turn chats, each request counted against its own target."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.contracts.config import Workload
from actors.contracts.traffic import FileSource, SyntheticSource
from orchestrator.spec.traffic_plan import build_plan
from tests.integration.test_loadgen_sim import sim_load, sim_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sim_server(tmp_path_factory.mktemp("sim"), time_scale=1.0) as url:
        yield url


def measure(url: str, w: Workload, level: str, tmp: Path | None = None
            ) -> tuple[dict, list[dict[str, str]]]:
    plan = build_plan(w, tmp)
    core = sim_load(url, w, 1.0, plan=plan)
    res = asyncio.run(core.run_level(level, 0)).model_dump(mode="json")
    return res, list(csv.DictReader(io.StringIO(core.records_csv())))


def measured(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in rows if int(r["round"]) >= 0]


def test_a_length_distribution_at_a_poisson_rate_counts_each_request_against_its_own(sim):
    src = SyntheticSource(kind="synthetic", count=24, seed=3,
                          prompt={"kind": "lognormal", "mean": 200, "stdev": 120, "min": 16,
                                  "max": 800},
                          output={"kind": "uniform", "min": 4, "max": 40})
    w = Workload(prompt_tokens=800, output_tokens=40, rates=[30.0], rounds=1, open_loop_s=0,
                 warmup_requests=2, requests=src, level_timeout_s=60)
    res, rows = measure(sim, w, "rate=30/s")
    assert res["status"] == "valid", res["reason"]
    assert res["level"] == {"kind": "rate", "value": 30.0} and res["count_mismatches"] == 0
    rows = measured(rows)
    assert len(rows) == 24
    targets = [int(r["target_output_tokens"]) for r in rows]
    assert len(set(targets)) > 5  # mixed lengths, each proven on its own
    assert all(int(r["completion_tokens"]) == int(r["target_output_tokens"]) for r in rows)
    assert all(int(r["prompt_tokens"]) == int(r["target_prompt_tokens"]) for r in rows)
    ol = res["open_loop"]
    assert ol["offered_rps"] == 30.0
    assert ol["achieved_rps"] == pytest.approx(ol["scheduled_rps"], rel=0.05)  # held
    assert ol["window_kept"] + ol["window_left_out"] == 24 and ol["window_left_out"] > 0
    assert all(r["send_lag_ms"] != "" for r in rows)


def test_a_trace_replays_its_timestamps_and_its_shared_prefixes_hit_the_cache(sim, tmp_path):
    rows = [{"timestamp": 40 * i, "input_length": 1024 + 64 * (i % 3), "output_length": 8,
             "hash_ids": [1, 2, 100 + i]} for i in range(12)]
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = Workload(prompt_tokens=1216, output_tokens=8, trace_speedups=[2.0], rounds=1,
                 warmup_requests=0, requests=FileSource(kind="file", path=str(p),
                                                        block_tokens=512))
    res, recs = measure(sim, w, "trace x2")
    assert res["status"] == "valid", res["reason"]
    # 440 ms of trace at x2: 11 gaps of 20 ms -> 50 requests/s offered
    assert res["open_loop"]["offered_rps"] == pytest.approx(11 / 0.44 * 2)
    starts = sorted(float(r["start_s"]) for r in measured(recs))
    assert starts[-1] - starts[0] == pytest.approx(0.22, abs=0.08)
    # the first two blocks (1024 tokens) are shared: the server's cache found them
    assert res["prefix_hit_rate"] is not None and res["prefix_hit_rate"] > 0.3


def test_a_multi_turn_chat_carries_its_history_and_the_counts_hold(sim, tmp_path):
    rows = []
    for conv in ("a", "b"):
        for turn in (1, 2, 3):
            rows.append({"conversation_id": conv, "turn": turn,
                         "prompt": f"question {turn} from {conv} " + "word " * 20,
                         "output_tokens": 6, "reply": "an answer " * 5})
    p = tmp_path / "chat.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = Workload(prompt_tokens=1, output_tokens=1, concurrency=[2], rounds=1,
                 warmup_requests=0, api="chat",
                 requests=FileSource(kind="file", path=str(p)))
    plan = build_plan(w, None)
    assert plan is not None
    w = w.model_copy(update={"prompt_tokens": max(r.prompt_tokens for r in plan.requests),
                             "output_tokens": 6})
    res, recs = measure(sim, w, "c=2")
    assert res["status"] == "valid", res["reason"]
    by_turn = {}
    for r in measured(recs):
        by_turn.setdefault(int(r["index"]) % 3, []).append(int(r["prompt_tokens"]))
    # each turn's prompt holds the earlier turns and their replies: it grows turn by turn
    assert max(by_turn[0]) < min(by_turn[1]) and max(by_turn[1]) < min(by_turn[2])
    assert all(r["target_prompt_tokens"] == "text" for r in measured(recs))


def test_an_open_loop_level_that_cannot_keep_its_schedule_is_flagged(sim):
    w = Workload(prompt_tokens=64, output_tokens=64, rates=[200.0], rounds=1,
                 requests_per_round=12, warmup_requests=0, max_in_flight=1, open_loop_s=0)
    res, _ = measure(sim, w, "rate=200/s")
    assert res["status"] == "valid"
    assert "late_sends" in res["flags"] and res["open_loop"]["late_sends"] >= 5
    assert "late_sends" in res["reason"]
