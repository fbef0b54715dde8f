"""Ledger lines are typed events: a torn line never swallows the next, an unknown event,
status, failure class or level flag is refused when written and when read back."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from actors.contracts.config import TrialConfig
from actors.contracts.results import LevelResult, TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.errors import ServesweepError
from orchestrator.results.events import DriverStarted, Scheduled, SweepCreated, TrialRecorded
from orchestrator.results.ledger import QUARANTINE, Ledger
from orchestrator.results.ledger_lines import seal

CFG = TrialConfig(engine="sim", profile="vllm")


def _ledger(tmp_path) -> Ledger:
    return Ledger.create("name: t\n", "t", tmp_path)


def _result(**kw) -> TrialResult:
    return TrialResult(key=CFG.key(), config=CFG, **kw)


def test_events_round_trip_as_typed_models(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.append(DriverStarted(pid=1, host="h"))
    ledger.append(Scheduled(key=CFG.key(), config=CFG.model_dump(mode="json")))
    ledger.record_result(_result(status=TrialStatus.OK))
    kinds = [type(e) for e in ledger.events()]
    assert kinds == [SweepCreated, DriverStarted, Scheduled, TrialRecorded]
    assert ledger.results()[CFG.key()].status is TrialStatus.OK


def test_a_torn_line_is_ended_before_the_next_append(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.append(DriverStarted(pid=1, host="h"))
    with open(ledger.path, "a") as f:
        f.write('{"type": "scheduled", "key": "ab')  # a crash mid-write
    ledger.record_result(_result(status=TrialStatus.OK))
    assert [e.type for e in ledger.events()] == ["sweep", "driver", "trial"]
    assert ledger.damage == []  # the torn bytes were moved aside, not left mid-ledger
    kept = [json.loads(x) for x in (ledger.dir / QUARANTINE).read_text().splitlines()]
    assert kept[0]["text"] == '{"type": "scheduled", "key": "ab' and kept[0]["line"] == 3


def test_a_result_with_an_unknown_class_or_flag_is_refused_where_it_is_built():
    with pytest.raises(ValidationError, match="failure class"):
        _result(status=TrialStatus.FAILED, reason="gremlins")
    with pytest.raises(ValidationError):
        LevelResult(concurrency=1, status="valid", flags=["lucky"])
    assert _result(status=TrialStatus.FAILED, reason="node_lost").reason == "node_lost"


@pytest.mark.parametrize("line", [
    {"type": "teleported", "key": "x"},
    {"type": "trial", "key": "k", "status": "ok",
     "result": {"key": "k", "config": {"engine": "sim"}, "status": "ok",
                "levels": [{"concurrency": 1, "status": "valid", "flags": ["lucky"]}]}},
    {"type": "trial", "key": "k", "status": "failed",
     "result": {"key": "k", "config": {"engine": "sim"}, "status": "failed",
                "reason": "gremlins"}},
])
def test_an_unknown_event_or_value_is_refused_where_it_is_read_back(tmp_path, line):
    ledger = _ledger(tmp_path)
    ledger.append(DriverStarted(pid=1, host="h"))
    with open(ledger.path, "a") as f:  # sealed as the ledger seals: intact, but unknown
        f.write(seal(json.dumps(line)) + "\n")
    with pytest.raises(ServesweepError, match=r"ledger.jsonl:3: not a ledger event"):
        ledger.events()


def test_a_started_event_written_before_start_times_still_reads(tmp_path):
    ledger = Ledger(tmp_path)  # a ledger written before seals and start times
    old = {"type": "started", "ts": 1.0, "key": "k", "pid": 12, "pgid": 12, "marker": "s/k",
           "host": "h", "node_id": "n"}  # a line of a ledger written before start_time
    with open(ledger.path, "a") as f:
        f.write(json.dumps(old) + "\n")
        f.write(json.dumps({"type": "reaped", "ts": 2.0, "reason": "driver gone",
                            "by": 3}) + "\n")
    started, reaped = ledger.events()
    assert (started.start_time, started.cgroup, started.node_id) == (None, None, "n")
    assert reaped.complete is False and reaped.killed == {}


def test_open_groups_are_started_without_a_result_or_a_complete_reap_since(tmp_path):
    from orchestrator.results.events import AttemptFailed, Reaped, Started

    ledger = _ledger(tmp_path)
    ledger.append(Started(key="a", pid=1, start_time=10))
    ledger.append(Started(key="b", pid=2, start_time=20))
    ledger.record_result(TrialResult(key="a", config=CFG, status=TrialStatus.OK))
    assert [g.key for g in ledger.open_groups()] == ["b"]
    ledger.append(AttemptFailed(key="b", attempt=1, reason="node_lost"))
    ledger.append(Started(key="b", pid=3, start_time=30))  # its second attempt
    assert [(g.key, g.pid) for g in ledger.open_groups()] == [("b", 3)]
    ledger.append(Reaped(reason="x", complete=False))
    assert [g.pid for g in ledger.open_groups()] == [3]  # a node did not answer
    ledger.append(Reaped(reason="x", complete=True))
    assert ledger.open_groups() == []
