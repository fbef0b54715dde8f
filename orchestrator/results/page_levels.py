"""The report's level flags (with their legend) and its regimes, every one of them.

``flags_section``: each flag present in the sweep with how many levels carry it, whether
it keeps a level from winning, and what it means; then every flagged level. ``regimes_rows``:
every load regime (one per level by default, or the spec's named groups) with its winner by
the search's own scores (``planning.regimes.best_per_regime``: the figure MLflow's parent
run carries), so the page, the text and the JSON name the same winners.
"""

from __future__ import annotations

from typing import Any

from actors.contracts.results import TrialResult
from actors.contracts.states import LevelFlag
from orchestrator.planning.regimes import best_per_regime
from orchestrator.results.page_blocks import Section, Table, n_text
from orchestrator.spec import SweepSpec

__all__ = ["flags_section", "regimes_rows", "flag_legend", "REGIME_HEADERS", "CAPACITY_ONLY"]

#: what the report says in place of the per-level winners when a sweep has no level (its
#: only load is the capacity search): the capacity table ranks it
CAPACITY_ONLY = ("No concurrency or rate levels: configs are ranked by requests/s per GPU "
                 "at the SLO (the capacity table below).")

REGIME_HEADERS = ["regime", "levels", "winner", "value", "objective"]


def flag_legend(results: list[TrialResult]) -> list[dict[str, Any]]:
    """Every flag some level carries: its name, levels, whether it blocks a win, meaning."""
    counts: dict[LevelFlag, int] = {}
    for r in results:
        for lv in r.levels:
            for f in lv.flags:
                counts[LevelFlag(f)] = counts.get(LevelFlag(f), 0) + 1
    return [{"flag": f.value, "levels": n, "blocks_winning": f.blocks_winning,
             "meaning": f.meaning} for f, n in sorted(counts.items())]


def flags_section(results: list[TrialResult]) -> Section:
    s = Section("Level flags", "flags")
    legend = flag_legend(results)
    if not legend:
        return s.add("No level carries a flag.")
    s.add(Table(["flag", "levels", "may it win?", "what it means"], [
        [x["flag"], str(x["levels"]), "no" if x["blocks_winning"] else "yes", x["meaning"]]
        for x in legend]))
    s.add(Table(["config", "level", "status", "flags", "reason"], [
        [r.config.label(), lv.key, lv.status.value, ", ".join(lv.flags), lv.reason or "-"]
        for r in results for lv in r.levels if lv.flags]))
    return s


def regimes_rows(spec: SweepSpec, results: list[TrialResult]) -> list[list[str]]:
    """One row per regime, in the spec's order: its levels and its winner."""
    levels = spec.search.regime_levels(spec.workload.levels())
    rows = []
    for name, best in best_per_regime(results, spec).items():
        rows.append([name, ", ".join(levels.get(name, [])),
                     best[0].config.label() if best else "none (no config valid at every "
                     "level meeting the SLO)",
                     n_text(best[1].value if best else None),
                     spec.search.objective.value])
    return rows
