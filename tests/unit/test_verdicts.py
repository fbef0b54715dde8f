"""A trial's decisions as pure functions, and its phases' transition table."""

from __future__ import annotations

import pytest

from actors.contracts.messages import Observation
from actors.contracts.results import Capacity, LevelResult, ServerObservation
from actors.contracts.states import FailureClass, LevelFlag, TrialStatus
from orchestrator.execution import verdicts
from orchestrator.execution.trial import TIMEOUT_CLASS, TRANSITIONS, TrialPhase
from orchestrator.planning.capacity import predict_level


def level(c: int = 4, status: str = "valid", errors: dict | None = None, reason: str = "",
          **server) -> LevelResult:
    return LevelResult(concurrency=c, status=status, errors=errors or {}, reason=reason,
                       server=ServerObservation(**server))


@pytest.mark.parametrize("errors, check", [
    ({}, False), ({"http_500": 2}, False), ({"disconnect": 1}, True), ({"stall": 1}, True),
    ({"level_timeout": 1}, True), ({"connect": 3, "http_500": 1}, True)])
def test_a_level_with_connection_or_stall_errors_asks_whether_the_server_lives(errors, check):
    assert verdicts.needs_check(level(status="invalid" if errors else "valid",
                                      errors=errors)) is check


def test_after_a_check_a_dead_server_crashed_a_stalled_one_hung_else_go_on():
    stalled = level(status="invalid", errors={"stall": 4}, reason="4 x stall")
    gone = level(status="invalid", errors={"disconnect": 4}, reason="4 x disconnect")
    cls, msg = verdicts.after_check(Observation(alive=False, returncode=-9), gone)
    assert cls is FailureClass.CRASH_MID_RUN and "code -9 at c=4" in msg
    cls, msg = verdicts.after_check(Observation(alive=True), stalled)
    assert cls is FailureClass.HANG and "4 x stall" in msg
    assert verdicts.after_check(Observation(alive=True), gone) is None


def test_sim_behind_is_judged_per_level_against_the_bound():
    on_time = level(1, sim_paced_tokens=1000, sim_late_share=0.01, sim_lag_mean_ms=0.4)
    late = level(4, sim_paced_tokens=1000, sim_late_share=0.30, sim_lag_mean_ms=9.0)
    real_engine = level(16)  # no sim counters: nothing to judge
    assert verdicts.flag_sim_pace(on_time, 0.05).flags == []
    flagged = verdicts.flag_sim_pace(late, 0.05)
    assert flagged.flags == [LevelFlag.SIM_BEHIND]
    assert "30.0% of 1000 tokens late, 0.0% of first tokens (bound 5%)" in flagged.reason
    lost = level(8, sim_paced_tokens=1000, sim_late_share=0.0, sim_lost_share=0.05)
    assert verdicts.flag_sim_pace(lost, 0.05).flags == [LevelFlag.SIM_BEHIND]  # 5% > 2%
    assert verdicts.flag_sim_pace(lost, 0.05, lost_share_max=0.1).flags == []
    assert verdicts.flag_sim_pace(late, 0.5).flags == []  # a looser bound lets it pass
    assert verdicts.flag_sim_pace(real_engine, 0.0).flags == []


def test_after_the_last_level_the_note_counts_lagging_levels_and_an_exit_fails():
    levels = [level(1), verdicts.flag_sim_pace(level(4, sim_late_share=0.5), 0.05)]
    obs = Observation(alive=True, events=[{"kind": "sim_behind", "seconds": 2.5}])
    out, note, failure = verdicts.after_observe(obs, levels)
    assert [lv.flags for lv in out] == [[], [LevelFlag.SIM_BEHIND]]  # only the late one
    assert "2.5 s behind" in note and "1 of 2 level(s) flagged sim_behind" in note
    assert failure is None
    _, _, failure = verdicts.after_observe(Observation(alive=False, returncode=1), levels)
    assert failure[0] is FailureClass.CRASH_MID_RUN


def test_queueing_mismatch_is_flagged_only_on_valid_levels_that_disagree():
    pred = predict_level("guaranteed_no_evict", 100, 16, 512, 256, 64)  # 48 blocks each: 2 run
    agrees = level(64, running_max=2, waiting_max=62, waiting_p50=62)
    assert verdicts.flag_queueing(agrees, pred) == agrees
    disagrees = level(64, running_max=64, waiting_max=0, waiting_p50=0)
    flagged = verdicts.flag_queueing(disagrees, pred)
    assert LevelFlag.QUEUEING_MISMATCH in flagged.flags and flagged.reason
    assert verdicts.flag_queueing(disagrees, None) == disagrees
    invalid = level(64, status="invalid", running_max=64, waiting_max=0, waiting_p50=0)
    assert verdicts.flag_queueing(invalid, pred) == invalid


def test_final_status():
    ok = [level(1), level(4)]
    assert verdicts.final_status(None, ok, None, "a note") == (TrialStatus.OK, "", "a note")
    bad = [level(1), level(4, status="invalid", reason="2 x http_500")]
    assert verdicts.final_status(None, bad, None, "") == (
        TrialStatus.INVALID, "invalid_level", "c=4: 2 x http_500")
    cap = Capacity(policy="preempt_recompute", rejects_requests=True, note="too long")
    assert verdicts.final_status(None, bad, cap, "")[2] == "too long; c=4: 2 x http_500"
    assert verdicts.final_status((FailureClass.HANG, "stuck"), ok, None, "") == (
        TrialStatus.FAILED, "hang", "stuck")


def test_every_phase_but_done_can_fail_to_stop_and_only_stop_reaches_done():
    for phase in TrialPhase:
        if phase not in (TrialPhase.STOP, TrialPhase.DONE):
            assert TrialPhase.STOP in TRANSITIONS[phase], phase
            assert phase in TIMEOUT_CLASS
        assert (TrialPhase.DONE in TRANSITIONS[phase]) is (phase is TrialPhase.STOP)
    assert TRANSITIONS[TrialPhase.DONE] == frozenset()
    assert set(TRANSITIONS) == set(TrialPhase)


def test_every_phase_is_reachable_from_place():
    seen, todo = set(), [TrialPhase.PLACE]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(TRANSITIONS[p])
    assert seen == set(TrialPhase)
