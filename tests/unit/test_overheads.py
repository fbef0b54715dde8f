"""The sweep-time estimate's overheads: measured by each sweep, learned by the next."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.planning.forecast import predict_sweep
from orchestrator.planning.overheads import (
    DEFAULTS,
    OVERHEADS_FILE,
    Overheads,
    learned,
    process_age_s,
    record,
    trial_overhead_s,
)
from orchestrator.planning.plan import plan_sweep, spec_shape
from orchestrator.results.ledger import Ledger
from orchestrator.spec import load_spec
from tests.conftest import FIXTURES, ROOT

pytestmark = pytest.mark.unit

SWEEP = FIXTURES / "h200-sweeps" / "h200-vllm-20261129-175156-fa2a"


def test_a_trials_overhead_is_its_wall_beyond_server_start_and_levels():
    r = next(iter(Ledger(SWEEP).results().values()))
    got = trial_overhead_s(r)
    assert got is not None and 0 <= got < r.wall_s - r.startup_s
    assert got == pytest.approx(r.wall_s - r.startup_s - sum(lv.wall_s for lv in r.levels))
    assert trial_overhead_s(r.model_copy(update={"levels": []})) is None


def test_sweeps_record_and_the_estimate_learns_the_median_of_the_latest(tmp_path):
    assert learned(tmp_path) == DEFAULTS and DEFAULTS.sweeps == 0
    results = list(Ledger(SWEEP).results().values())
    for i, ray_s in enumerate((1.0, 2.0, 9.0)):
        d = tmp_path / "sweeps" / f"s{i}"
        d.mkdir(parents=True)
        got = record(d, 4.0 + i, ray_s, results, 0.5)
        assert json.loads((d / OVERHEADS_FILE).read_text())["ray_start_s"] == ray_s
        assert got.sweeps == 1
        time.sleep(0.01)
    (tmp_path / "sweeps" / "broken").mkdir()
    (tmp_path / "sweeps" / "broken" / OVERHEADS_FILE).write_text("{not json")
    o = learned(tmp_path)
    assert (o.sweeps, o.ray_start_s, o.driver_start_s, o.report_s) == (3, 2.0, 5.0, 0.5)
    assert learned(tmp_path, limit=1).ray_start_s == 9.0  # only the latest


def test_the_estimate_adds_every_overhead_once_and_one_per_trial():
    spec = load_spec(ROOT / "search_spaces" / "quickstart.yaml")
    planned = plan_sweep(spec)
    n = sum(p.feasible for p in planned)
    zero = Overheads(driver_start_s=0, ray_start_s=0, per_trial_s=0, report_s=0)
    some = Overheads(driver_start_s=1, ray_start_s=2, per_trial_s=3, report_s=4)
    _, base = predict_sweep(planned, spec, spec_shape(spec), zero)
    _, more = predict_sweep(planned, spec, spec_shape(spec), some)
    parallel = max(1, spec.cluster.max_concurrent_trials or 1)
    assert more - base == pytest.approx(1 + 2 + 4 + 3 * n / parallel)


def test_process_age_is_known_on_linux():
    age = process_age_s()
    assert age is None or 0 < age < 24 * 3600
