"""Traffic: sources, request files, bad input, fingerprints, level identity, schedules."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest
from pydantic import ValidationError

from actors.contracts.config import Workload
from actors.contracts.traffic import (
    FileSource,
    LengthDist,
    Level,
    LevelKind,
    arrival_offsets,
)
from actors.loadgen.aggregate import judge_request
from actors.loadgen.prompts import PromptFactory
from actors.loadgen.proof import Verdict
from actors.loadgen.records import RequestRecord, StreamProof
from orchestrator.errors import SpecError
from orchestrator.spec.model import parse_spec
from orchestrator.spec.traffic_files import read_requests
from orchestrator.spec.traffic_plan import build_plan, mix_summary, workload_fingerprint

pytestmark = pytest.mark.unit


def words(text: str) -> int:
    return len(text.split())


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def spec_data(requests: dict | None = None, **work: object) -> dict:
    w: dict[str, object] = {"concurrency": [2]}
    if requests is not None:
        w["requests"] = requests
    else:
        w.update(prompt_tokens=64, output_tokens=16)
    w.update(work)
    return {"name": "t", "model": {"preset": "llama-3.1-8b"}, "workload": w,
            "space": [{"engine": "sim"}]}


# -- lengths and levels -------------------------------------------------------------------
def test_length_distributions_stay_in_bounds_and_are_seeded():
    for dist, mean in ((LengthDist(kind="lognormal", mean=300, stdev=150, min=16, max=2000), 300),
                       (LengthDist(kind="normal", mean=100, stdev=20, min=1, max=400), 100),
                       (LengthDist(kind="uniform", min=10, max=30), 20)):
        xs = [dist.draw(random.Random(i)) for i in range(3000)]
        assert min(xs) >= (dist.min or 1) and max(xs) <= dist.longest
        assert statistics.mean(xs) == pytest.approx(mean, rel=0.06)
        assert [dist.draw(random.Random(7)) for _ in range(3)] == \
            [dist.draw(random.Random(7)) for _ in range(3)]
    assert LengthDist.model_validate(128).value == 128  # a bare integer is a fixed length


@pytest.mark.parametrize("bad, says", [
    ({"kind": "uniform", "min": 50, "max": 10}, "min (50) is above max (10)"),
    ({"kind": "lognormal", "mean": 100, "max": 500}, "needs stdev"),
    ({"kind": "fixed", "value": -3}, "greater than 0"),
    ({"kind": "normal", "mean": 900, "stdev": 5, "max": 100}, "mean (900.0) is above max"),
])
def test_bad_lengths_name_the_problem(bad: dict, says: str):
    with pytest.raises(ValidationError, match=r"(?s)" + says.replace("(", r"\(")
                       .replace(")", r"\)")):
        LengthDist.model_validate(bad)


def test_level_keys_parse_back_and_order():
    levels = [Level.parse(x) for x in (8, "c=2", "rate=0.5/s", "rate=4", "trace", "trace x2")]
    assert [lv.key for lv in levels] == ["c=8", "c=2", "rate=0.5/s", "rate=4/s", "trace",
                                         "trace x2"]
    assert all(Level.parse(lv.key) == lv for lv in levels)
    assert [lv.key for lv in sorted(levels, key=lambda lv: lv.order)] == \
        ["c=2", "c=8", "rate=0.5/s", "rate=4/s", "trace", "trace x2"]
    for bad in ("c=0", "rate=-1/s", "fast", "c=1.5"):
        with pytest.raises(ValueError):
            Level.parse(bad)


def test_a_rate_is_never_read_as_a_concurrency():
    w = Workload(prompt_tokens=8, output_tokens=4, concurrency=[4], rates=[4.0])
    assert [lv.key for lv in w.levels()] == ["c=4", "rate=4/s"]
    assert w.levels()[1].concurrency is None and w.in_flight_cap(w.levels()[1]) > 4
    # a rate-only workload has no highest concurrency: the default in-flight cap (1024) is no
    # floor for max_num_seqs ranges nor for the open-file check
    rate_only = Workload(prompt_tokens=8, output_tokens=4, rates=[4.0])
    assert rate_only.top_concurrency == 0
    assert rate_only.model_copy(update={"max_in_flight": 64}).top_concurrency == 64


def test_schedules_are_seeded_poisson_or_gamma():
    lv = Level(kind=LevelKind.RATE, value=10)
    a = arrival_offsets(lv, 4000, 0, 0, 1.0, None)
    assert a == arrival_offsets(lv, 4000, 0, 0, 1.0, None)  # every config: the same times
    assert a != arrival_offsets(lv, 4000, 1, 0, 1.0, None)  # another round: other times
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.08)
    bursty = arrival_offsets(lv, 4000, 0, 0, 0.25, None)
    bgaps = [y - x for x, y in zip(bursty, bursty[1:], strict=False)]
    assert statistics.mean(bgaps) == pytest.approx(0.1, rel=0.1)
    assert statistics.stdev(bgaps) / statistics.mean(bgaps) == pytest.approx(2.0, rel=0.15)
    assert arrival_offsets(Level.of(4), 10, 0, 0, 1.0, None) is None


# -- request files ---------------------------------------------------------------------------
def test_mooncake_rows_share_blocks_by_hash_id(tmp_path: Path):
    p = jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1000, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 3]},
        {"timestamp": 1500, "input_length": 600, "output_length": 8, "hash_ids": [1, 9]},
        {"timestamp": 2500, "input_length": 300, "output_length": 5}])
    reqs, skipped = read_requests(p, FileSource(kind="file", path=str(p)), words)
    assert skipped == 0 and [r.prompt_tokens for r in reqs] == [1100, 600, 300]
    assert [(s.key, s.tokens) for s in reqs[0].segments] == [("h1", 512), ("h2", 512),
                                                            ("h3", 76)]
    assert [(s.key, s.tokens) for s in reqs[1].segments] == [("h1", 512), ("h9", 88)]
    assert reqs[2].segments[0].key == "u2" and reqs[1].at_s == 1.5
    w = Workload(prompt_tokens=1, output_tokens=1, trace_speedups=[1.0],
                 requests=FileSource(kind="file", path=str(p)))
    plan = build_plan(w, None)
    assert plan is not None and plan.timed and [r.at_s for r in plan.requests] == [0, 0.5, 1.5]
    # request 2 reuses request 1's first block: 512 of 2000 prompt tokens
    assert plan.implied_hit_share() == pytest.approx(512 / 2000)


def test_prompt_files_sharegpt_and_multi_turn(tmp_path: Path):
    p = jsonl(tmp_path / "p.jsonl", [{"prompt": "one two three", "output_tokens": 7},
                                     {"prompt": "four five", "output_tokens": 3}])
    reqs, _ = read_requests(p, FileSource(kind="file", path=str(p)), words)
    assert [(r.prompt_tokens, r.output_tokens, r.text) for r in reqs] == [(3, 7, True),
                                                                         (2, 3, True)]
    g = tmp_path / "g.json"
    g.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "hi there"},
                           {"from": "gpt", "value": "hello to you too"}]},
        {"conversations": [{"from": "human", "value": "alone"}]}]))
    reqs, skipped = read_requests(g, FileSource(kind="file", path=str(g)), words)
    assert skipped == 1 and reqs[0].output_tokens == 4 and reqs[0].prompt_tokens == 2
    m = jsonl(tmp_path / "m.jsonl", [
        {"conversation_id": "a", "turn": 1, "prompt": "hello there", "output_tokens": 4,
         "reply": "hi how are you"},
        {"conversation_id": "b", "turn": 1, "input_length": 5, "output_length": 2},
        {"conversation_id": "a", "turn": 2, "prompt": "fine thanks", "output_tokens": 4}])
    with pytest.raises(SpecError, match="line 2"):  # one file, one format
        read_requests(m, FileSource(kind="file", path=str(m), format="prompts"), words)
    m = jsonl(tmp_path / "m.jsonl", [
        {"conversation_id": "a", "turn": 1, "prompt": "hello there", "output_tokens": 4,
         "reply": "hi how are you"},
        {"conversation_id": "a", "turn": 2, "prompt": "fine thanks", "output_tokens": 4}])
    reqs, _ = read_requests(m, FileSource(kind="file", path=str(m)), words)
    turn2 = reqs[1]
    assert [s.role for s in turn2.segments] == ["user", "assistant", "user"]
    assert turn2.prompt_tokens == 2 + 4 + 2 and turn2.turn == 2  # history with the reply
    n = jsonl(tmp_path / "n.jsonl", [
        {"conversation_id": 7, "turn": 1, "input_length": 50, "output_length": 10},
        {"conversation_id": 7, "turn": 2, "input_length": 20, "output_length": 10}])
    reqs, _ = read_requests(n, FileSource(kind="file", path=str(n)), words)
    assert reqs[1].prompt_tokens == 50 + 10 + 20
    assert reqs[1].segments[0].key == reqs[0].segments[0].key  # the same first turn


@pytest.mark.parametrize("rows, says", [
    ([{"input_length": 10, "output_length": -3}], r"line 1: output_length must be an integer"),
    (['{"input_length": 10, "output_length": 3}', "{oops"], r"line 2: not JSON"),
    ([{"input_length": 10, "output_length": 3}, [1, 2]], r"line 2: each line must be a JSON"),
    ([{"input_length": 10, "output_length": 3, "hash_ids": ["a"]}], r"hash_ids must be"),
    ([{"prompt": "", "output_tokens": 3}], r"line 1: prompt must be non-empty text"),
    ([{"input_length": 10, "output_length": 3, "timestamp": 5},
      {"input_length": 10, "output_length": 3}], r"request 2 lacks a timestamp"),
    ([{"input_length": 10, "output_length": 3, "conversation_id": "x", "turn": 2}],
     r"turn 2 follows turn 0"),
    ([{"conversation_id": "x", "turn": 1, "prompt": "a b", "output_tokens": 2},
      {"conversation_id": "x", "turn": 2, "prompt": "c d", "output_tokens": 2}],
     r"line 2: .*needs turn 1's reference reply"),
    ([{"input_length": 10_000_000, "output_length": 3}], r"input_length must be an integer"),
    ([{"text": "what"}], r"line 1: cannot tell the format"),
])
def test_bad_request_files_name_the_file_line_and_field(tmp_path: Path, rows: list, says: str):
    p = tmp_path / "bad.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    with pytest.raises(SpecError, match=says) as err:
        read_requests(p, FileSource(kind="file", path=str(p)), words)
    assert str(p) in str(err.value)


def test_a_missing_or_empty_file_is_refused_before_anything(tmp_path: Path):
    src = {"kind": "file", "path": "nope.jsonl"}
    with pytest.raises(SpecError, match="nope.jsonl does not exist"):
        parse_spec(spec_data(src), "s.yaml", tmp_path)
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(SpecError, match="e.jsonl: the request file is empty"):
        parse_spec(spec_data({"kind": "file", "path": "e.jsonl"}), "s.yaml", tmp_path)


@pytest.mark.parametrize("work, says", [
    ({"rates": [0]}, "workload.rates"),
    ({"rates": [-2.0]}, "workload.rates"),
    ({"concurrency": [], "rates": []}, "give at least one level"),
    ({"trace_speedups": [2]}, "trace_speedups replay a request file"),
])
def test_bad_levels_name_the_field(work: dict, says: str):
    with pytest.raises(SpecError, match=says):
        parse_spec(spec_data(**work))


def test_the_source_sets_the_lengths_and_refuses_others(tmp_path: Path):
    src = {"kind": "synthetic", "count": 8, "prompt": {"kind": "uniform", "min": 10,
                                                        "max": 90}, "output": 12}
    spec = parse_spec(spec_data(src))
    assert (spec.workload.prompt_tokens, spec.workload.output_tokens) == (90, 12)
    with pytest.raises(SpecError, match="workload.prompt_tokens: the request source sets it"):
        parse_spec(spec_data(src, prompt_tokens=50))
    bad = dict(src, prompt={"kind": "uniform", "min": 90, "max": 10})
    with pytest.raises(SpecError, match=r"min \(90\) is above max \(10\)"):
        parse_spec(spec_data(bad))


# -- fingerprints ----------------------------------------------------------------------------
def test_fingerprints_follow_the_requests_and_their_schedule(tmp_path: Path):
    p = jsonl(tmp_path / "t.jsonl", [{"input_length": 40, "output_length": 8}] * 3)
    data = spec_data({"kind": "file", "path": "t.jsonl"}, rates=[2.0])
    a = parse_spec(data, "s", tmp_path)
    fa = workload_fingerprint(a.workload, a.request_plan())
    b = parse_spec(data, "s", tmp_path)
    assert workload_fingerprint(b.workload, b.request_plan()) == fa  # same file, same id
    c = parse_spec(dict(data, workload=dict(data["workload"], rates=[3.0])), "s", tmp_path)
    assert workload_fingerprint(c.workload, c.request_plan()) != fa  # another schedule
    jsonl(p, [{"input_length": 40, "output_length": 9}] * 3)
    d = parse_spec(data, "s", tmp_path)
    assert workload_fingerprint(d.workload, d.request_plan()) != fa  # an edited file
    mix = mix_summary(d.workload, d.request_plan())
    assert mix["requests"] == 3 and mix["output_tokens"]["max"] == 9
    assert mix["levels"] == ["c=2", "rate=2/s"]


# -- prompts and the count proof ------------------------------------------------------------------
def test_planned_prompts_share_equal_segments_within_a_round_only(tmp_path: Path):
    p = jsonl(tmp_path / "t.jsonl", [
        {"input_length": 700, "output_length": 4, "hash_ids": [5, 6]},
        {"input_length": 600, "output_length": 4, "hash_ids": [5, 7]}])
    plan = build_plan(Workload(prompt_tokens=1, output_tokens=1, concurrency=[1],
                               requests=FileSource(kind="file", path=str(p))), None)
    assert plan is not None
    f = PromptFactory(list(range(100, 5000)), 1, seed=0, nonce=1)
    a, b = (f.planned(r, 0, chat=False) for r in plan.requests)
    assert isinstance(a, list) and len(a) == 700 and len(b) == 600
    assert a[:512] == b[:512] and a[512:600] != b[512:600]
    assert f.planned(plan.requests[0], 1, chat=False)[:512] != a[:512]  # another round
    other = PromptFactory(list(range(100, 5000)), 1, seed=0, nonce=2)
    assert other.planned(plan.requests[0], 0, chat=False)[:16] != a[:16]  # another run


def test_each_request_is_judged_against_its_own_target():
    w = Workload(prompt_tokens=100, output_tokens=50, concurrency=[1])
    rec = RequestRecord(index=0, round=0, want_output=7, want_prompt=33, prompt_tokens=33,
                        proof=StreamProof(token_ids=7, chunk_usage=7, final_usage=7,
                                          final_prompt=33, chunks=7))
    assert judge_request(w, rec).verdict is Verdict.VERIFIED
    short = RequestRecord(index=0, round=0, want_output=8, want_prompt=33, prompt_tokens=33,
                          proof=StreamProof(token_ids=7, chunk_usage=7, final_usage=7,
                                            chunks=7))
    assert judge_request(w, short).verdict is Verdict.COUNT_MISMATCH
    text = RequestRecord(index=0, round=0, want_output=7, text_prompt=True, prompt_tokens=91,
                         proof=StreamProof(token_ids=7, chunk_usage=7, final_usage=7,
                                           chunks=7))
    assert judge_request(w, text).verdict is Verdict.VERIFIED  # its length: the server's


def test_the_exported_request_file_is_what_peers_read_and_reads_back(tmp_path: Path):
    """``plan --export-requests``: JSONL {prompt, output_tokens}, the same lengths in the
    same order (token segments as one word per token: what the sim counts)."""
    from orchestrator.spec.traffic_plan import export_requests

    src = {"kind": "synthetic", "count": 6, "seed": 2, "prompt": {"kind": "uniform",
                                                                  "min": 5, "max": 40},
           "output": {"kind": "uniform", "min": 1, "max": 9}, "prefix_groups": 2,
           "prefix_tokens": 4}
    spec = parse_spec(spec_data(src))
    plan = spec.request_plan()
    assert plan is not None
    out = tmp_path / "r.jsonl"
    assert export_requests(plan, out) == 6
    back, _ = read_requests(out, FileSource(kind="file", path=str(out), format="prompts"),
                            words)
    assert [r.output_tokens for r in back] == [r.output_tokens for r in plan.requests]
    assert [r.prompt_tokens for r in back] == [r.prompt_tokens for r in plan.requests]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(rows[0]) == {"prompt", "output_tokens"}
