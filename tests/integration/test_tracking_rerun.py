"""A trial run again (its ledger record was damaged, ``resume`` reran it) gets one MLflow
run holding the new result only: MLflow keeps every value logged at a step, so writing the
rerun into the earlier run left both values at step 0 (issue 28). Real MLflow (sqlite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.results.records import (
    KIND_TAG,
    RECORDED_TAG,
    SWEEP_ID_TAG,
    TRIAL_KEY_TAG,
    SweepRecord,
    TrialRecord,
)
from orchestrator.results.tracking import Tracker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _record(recorded_ms: int, tok_s: float) -> TrialRecord:
    tags = {SWEEP_ID_TAG: "s-1", KIND_TAG: "trial", TRIAL_KEY_TAG: "k1",
            RECORDED_TAG: str(recorded_ms)}
    return TrialRecord(key="k1", run_name="s-1/k1", status="FINISHED", tags=tags,
                       params={"trial_key": "k1"}, metrics=[("output_tok_s_c4", tok_s, 0)],
                       timestamp_ms=recorded_ms)


def test_a_rerun_trial_has_one_run_with_the_new_value_only(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: rerun\n")
    tracker = Tracker(tmp_path)
    tracker.open_sweep(SweepRecord("rerun", "s-1", {}, spec), running=True)
    first = _record(1_000, 100.0)
    assert tracker.ensure_trial(first) == ("created", 0)
    assert tracker.ensure_trial(first) == ("unchanged", 0)  # the same result: left alone

    outcome, removed = tracker.ensure_trial(_record(2_000, 250.0))  # the rerun's result
    assert (outcome, removed) == ("created", 1)
    (run,) = tracker.search({SWEEP_ID_TAG: "s-1", KIND_TAG: "trial", TRIAL_KEY_TAG: "k1"})
    history = tracker.client.get_metric_history(run.info.run_id, "output_tok_s_c4")
    assert [(m.step, m.value) for m in history] == [(0, 250.0)]
    assert tracker.ensure_trial(_record(2_000, 250.0)) == ("unchanged", 0)  # a second sync
