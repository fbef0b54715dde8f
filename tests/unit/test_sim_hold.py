"""Sim hold mode (``sim.hold_s``): a level that waits is never taken for a measurement."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.contracts.config import SimOptions
from actors.contracts.states import LevelFlag, LevelStatus, TrialStatus
from actors.sim.hold import HOLD_REASON, held_level
from orchestrator.execution.verdicts import final_status


def test_a_held_level_is_invalid_flagged_and_makes_the_trial_invalid():
    level = held_level(4, 0.05)
    assert level.concurrency == 4 and level.wall_s >= 0.05
    assert level.status is LevelStatus.INVALID and level.flags == [LevelFlag.HELD]
    assert level.metrics is None and level.requests == 0 and "hold mode" in level.reason
    status, _, message = final_status(None, [level], None, "")
    assert status is TrialStatus.INVALID and HOLD_REASON in message


def test_hold_s_is_optional_and_positive():
    assert SimOptions().hold_s is None
    assert SimOptions(hold_s=20).hold_s == 20
    with pytest.raises(ValidationError):
        SimOptions(hold_s=0)
