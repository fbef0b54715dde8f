"""``plan --predict`` on a capacity-at-SLO spec: the model drives the same bisection a
trial does, so the plan counts every probe in the sweep's duration and names the rate."""

from __future__ import annotations

import json

import pytest

from orchestrator.planning.forecast import predict_trial
from orchestrator.planning.plan import plan_sweep, spec_shape
from orchestrator.spec import load_spec
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

SPEC = ROOT / "search_spaces" / "traffic-capacity.yaml"


def _first_trial(spec):
    return next(p.config for p in plan_sweep(spec) if p.feasible)


def test_the_predicted_capacity_is_the_knee_of_its_own_probes_within_tolerance():
    spec = load_spec(SPEC)
    cap = spec.workload.capacity
    pred = predict_trial(_first_trial(spec), spec, spec_shape(spec))
    assert pred.capacity is not None
    probes = [lv for lv in pred.levels if "probe" in lv]
    assert len(probes) == pred.capacity["probes"] >= 2
    held = [float(lv["level"].split("=")[1].rstrip("/s")) for lv in probes
            if lv["probe"] == "held"]
    missed = [float(lv["level"].split("=")[1].rstrip("/s")) for lv in probes
              if lv["probe"] == "missed"]
    assert held and missed, probes  # the model's knee lies inside [low, high]
    rps = pred.capacity["rps"]
    assert rps == max(held)
    above = min(m for m in missed if m > rps)
    assert above / rps - 1 <= cap.tolerance + 1e-9
    assert pred.capacity["usd_per_million_tokens"] > 0  # the spec gives a GPU-hour price


def test_the_estimate_counts_the_probes_a_capacity_search_takes():
    spec = load_spec(SPEC)
    trial = _first_trial(spec)
    with_search = predict_trial(trial, spec, spec_shape(spec))
    without = spec.model_copy(update={"workload": spec.workload.model_copy(
        update={"capacity": None})})
    plain = predict_trial(trial, without, spec_shape(without))
    assert plain.capacity is None
    extra = len(with_search.levels) - len(plain.levels)
    assert extra == with_search.capacity["probes"]
    # every probe is a level of real sending: the estimate grows by at least its sends
    assert with_search.measure_s - plain.measure_s >= extra * spec.workload.open_loop_s \
        * spec.sim.time_scale * 0.5


def test_plan_prints_and_gives_the_predicted_capacity_per_trial(capsys):
    from orchestrator.commands.cli import main

    assert main(["plan", str(SPEC), "--predict", "--json"]) == 0
    trials = json.loads(capsys.readouterr().out)["trials"]
    caps = [t["predicted_capacity"] for t in trials if t["reason"] is None]
    assert len(caps) == 2 and all(c["rps"] > 0 and c["probes"] >= 2 for c in caps)
    assert main(["plan", str(SPEC), "--predict"]) == 0
    out = capsys.readouterr().out
    for c in caps:  # the text names each trial's rate, as the JSON does
        assert f"capacity at SLO: {c['rps']:.2f} req/s" in out
