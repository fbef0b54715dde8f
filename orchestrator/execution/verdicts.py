"""The trial's decisions as pure functions: what a phase's answer means for the trial.

``TrialExecution`` calls these with the typed messages the actors answered and acts on
the result; none of them does I/O, so each rule is unit-tested on its own
(tests/unit/test_verdicts.py).
"""

from __future__ import annotations

from actors.contracts.messages import Observation
from actors.contracts.results import Capacity, LevelResult
from actors.contracts.states import INVALID_LEVEL, FailureClass, LevelFlag, TrialStatus
from orchestrator.planning.capacity import LevelPrediction, check_observation

__all__ = ["SERVER_GONE", "HUNG", "needs_check", "after_check", "after_observe",
           "flag_queueing", "flag_sim_pace", "final_status", "Failure"]

#: request errors that mean the server may be gone (check whether it is alive)
SERVER_GONE = frozenset({"connect", "disconnect", "truncated"})
#: request errors that mean the server stopped streaming
HUNG = frozenset({"stall", "level_timeout"})

Failure = tuple[FailureClass, str]


def needs_check(level: LevelResult) -> bool:
    """After this level, ask the host whether the server is still alive."""
    return bool(set(level.errors) & (SERVER_GONE | HUNG))


def after_check(obs: Observation, last: LevelResult) -> Failure | None:
    """The server after a level with connection or stall errors: exited (crash), alive
    but stalled (hang), or fine (the errors are the level's own: measure on)."""
    if not obs.alive:
        return (FailureClass.CRASH_MID_RUN, f"server exited with code {obs.returncode} at "
                f"{last.key}: {last.reason}")
    if set(last.errors) & HUNG:
        return (FailureClass.HANG, f"server alive but stopped streaming at "
                f"{last.key}: {last.reason}")
    return None


def after_observe(obs: Observation, levels: list[LevelResult]
                  ) -> tuple[list[LevelResult], str, Failure | None]:
    """After the last level: the levels (flagged ``sim_behind`` where the sim could not
    keep its time scale), a note for the trial, and a failure if the server exited."""
    note = ""
    behind = [e for e in obs.events if e.get("kind") == "sim_behind"]
    lagging = [lv for lv in levels if LevelFlag.SIM_BEHIND in lv.flags]
    if behind or lagging:  # each level was judged on its own (``flag_sim_pace``)
        lost = f"sim fell {behind[-1]['seconds']:.1f} s behind its time scale; " if behind else ""
        note = (f"{lost}{len(lagging)} of {len(levels)} level(s) flagged sim_behind; "
                "raise sim.time_scale or run on an idle host")
    failure = None
    if not obs.alive:
        failure = (FailureClass.CRASH_MID_RUN,
                   f"server exited with code {obs.returncode} after the last level")
    return levels, note, failure


def flag_sim_pace(level: LevelResult, late_share_max: float,
                  lost_share_max: float = 0.02) -> LevelResult:
    """A level of a sim whose tokens, or whose requests' first tokens, went out late beyond
    ``late_share_max`` (the spec's ``sim.late_share_max``), or that lost more than
    ``lost_share_max`` of its wall time to stalls, is flagged ``sim_behind``, with the
    shares as its reason: its
    numbers follow the host's load, not the model. Levels without the sim's counters
    (a real engine, an old sim) are left as they are."""
    s = level.server
    tokens = s.sim_late_share is not None and s.sim_late_share > late_share_max
    first = s.sim_late_first_share is not None and s.sim_late_first_share > late_share_max
    lost = s.sim_lost_share is not None and s.sim_lost_share > lost_share_max
    if not (tokens or first or lost):
        return level
    why = (f"sim behind its time scale: {100 * (s.sim_late_share or 0):.1f}% of "
           f"{s.sim_paced_tokens or 0:.0f} tokens late, "
           f"{100 * (s.sim_late_first_share or 0):.1f}% of first tokens "
           f"(bound {100 * late_share_max:.0f}%), mean lag {s.sim_lag_mean_ms or 0:.1f} ms, "
           f"{100 * (s.sim_lost_share or 0):.1f}% of the time lost "
           f"(bound {100 * lost_share_max:.0f}%)")
    return level.model_copy(update={
        "flags": [*level.flags, LevelFlag.SIM_BEHIND],
        "reason": f"{level.reason}; {why}" if level.reason else why})


def flag_queueing(level: LevelResult, prediction: LevelPrediction | None) -> LevelResult:
    """A valid level whose /metrics disagree with the capacity prediction is flagged
    ``queueing_mismatch`` with the difference as its reason."""
    if prediction is None or level.status != "valid":
        return level
    s = level.server
    problem = check_observation(prediction, s.running_max, s.waiting_p50, s.waiting_max,
                                s.preemptions)
    if problem is None:
        return level
    return level.model_copy(update={"flags": [*level.flags, LevelFlag.QUEUEING_MISMATCH],
                                    "reason": f"capacity check: {problem}"})


def final_status(failure: Failure | None, levels: list[LevelResult],
                 capacity: Capacity | None, note: str) -> tuple[TrialStatus, str, str]:
    """(status, reason, message) of a finished trial: failed with its class, invalid if
    any level is (the capacity's rejection first: the cause before its symptoms), or ok."""
    if failure is not None:
        return TrialStatus.FAILED, failure[0].value, failure[1]
    invalid = [lv for lv in levels if lv.status == "invalid"]
    if invalid:
        message = "; ".join(f"{lv.key}: {lv.reason}" for lv in invalid)
        if capacity is not None and capacity.rejects_requests:
            message = f"{capacity.note}; {message}"
        return TrialStatus.INVALID, INVALID_LEVEL, message
    return TrialStatus.OK, "", note
