"""A workload whose only load is its capacity search, ranked by ``objective: slo_capacity``,
has one regime (``CAPACITY_REGIME``); named regimes still need levels."""

from __future__ import annotations

import pytest

from actors.contracts.traffic import Level
from orchestrator.spec.search import (
    CAPACITY_REGIME,
    Objective,
    SearchSpec,
    check_search_against,
)

pytestmark = pytest.mark.unit


def test_a_capacity_only_workload_has_one_regime_under_the_capacity_objective():
    search = SearchSpec(objective=Objective.SLO_CAPACITY)
    assert search.regime_levels([]) == {CAPACITY_REGIME: []}
    check_search_against(search, [], [])  # no level to name: nothing to refuse


def test_levels_keep_their_own_regimes_and_other_objectives_get_none_without_levels():
    levels = [Level.parse("rate=4/s"), Level.parse("c=8")]
    assert SearchSpec(objective=Objective.SLO_CAPACITY).regime_levels(levels) == {
        "rate=4/s": ["rate=4/s"], "c=8": ["c=8"]}
    assert SearchSpec().regime_levels([]) == {}


def test_a_named_regime_without_levels_is_still_refused():
    search = SearchSpec(objective=Objective.SLO_CAPACITY, regimes={"busy": []})
    with pytest.raises(ValueError, match="search.regimes.busy: give at least one level"):
        check_search_against(search, [], [])
