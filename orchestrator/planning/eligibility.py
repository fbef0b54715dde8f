"""Who may win: the one rule that decides whether a measured level can rank.

Every place that ranks levels asks ``why_not``: the winners per level and per regime
(``results.analysis``, ``results.export``), the search's scores (``planning.regimes``,
which every sampler and the guided search read) and the report (which prints the
reasons). A level may win only when ``why_not`` returns nothing; otherwise the reasons
say why, in the order they are checked:

- ``invalid``: the level is not valid (errors, counts not proven, hold mode);
- ``no_metrics``: nothing was measured;
- ``unverified``: counted from the server's usage alone, unless the spec trusts usage
  (``workload.trust_usage``);
- ``sim_behind``: the sim could not keep its time scale on this host, so its numbers
  follow the host's load rather than the model (``actors.sim.pace``);
- ``late_sends``: an open-loop level sent some request late (the load offered was not the
  schedule's);
- ``slo``: a limit of the spec's SLO is missed there (judged only when an SLO is given:
  the search treats SLOs as Optuna constraints instead, so it passes none);
- ``quality_drop``: the trial's quality dropped beyond ``quality.max_drop`` against the
  reference (its 95% interval wholly above it);
- ``quality_unproven``: the interval straddles ``max_drop``, or quality was not measured
  (the sim, a failed run), and the spec does not set ``quality.allow_unproven``. The
  search gets both as a constraint instead (``planning.regimes.trial_scores``).
"""

from __future__ import annotations

import enum

from actors.contracts.quality import QualityVerdict
from actors.contracts.results import LevelMetrics, LevelResult
from actors.contracts.slo import SLO
from actors.contracts.states import LevelFlag, LevelStatus

__all__ = ["Ineligible", "why_not", "may_win", "slo_misses"]

_SLO_FIELDS = ("ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms")


class Ineligible(enum.StrEnum):
    """Why a measured level cannot win (see the module doc)."""

    INVALID = "invalid"
    NO_METRICS = "no_metrics"
    UNVERIFIED = "unverified"
    SIM_BEHIND = "sim_behind"
    LATE_SENDS = "late_sends"
    SLO = "slo"
    QUALITY_DROP = "quality_drop"
    QUALITY_UNPROVEN = "quality_unproven"

    def hint(self) -> str:
        """What a user can do about it."""
        return _HINTS[self]


_HINTS = {
    Ineligible.INVALID: "see the level's reason",
    Ineligible.NO_METRICS: "nothing was measured",
    Ineligible.UNVERIFIED: "set workload.trust_usage to let usage-only counts win",
    Ineligible.SIM_BEHIND: "raise sim.time_scale, or run on an idle host",
    Ineligible.LATE_SENDS: "lower the rate, raise workload.max_in_flight or client_shards",
    Ineligible.SLO: "misses a limit of the spec's slo",
    Ineligible.QUALITY_DROP: "its accuracy dropped beyond quality.max_drop",
    Ineligible.QUALITY_UNPROVEN: "measure more questions (quality.task.limit), or set "
                                 "quality.allow_unproven",
}


def slo_misses(metrics: LevelMetrics, slo: SLO) -> list[str]:
    """The SLO limits the level's percentiles miss (a missing percentile misses)."""
    out = []
    for name in _SLO_FIELDS:
        limit = getattr(slo, name)
        if limit is None:
            continue
        value = getattr(metrics, name)
        if value is None or value > limit:
            out.append(name)
    return out


def why_not(level: LevelResult, *, trust_usage: bool = False, slo: SLO | None = None,
            quality: QualityVerdict | None = None) -> list[Ineligible]:
    """Every reason ``level`` may not win; empty: it may. ``quality``: its trial's."""
    reasons: list[Ineligible] = []
    if level.status != LevelStatus.VALID:
        reasons.append(Ineligible.INVALID)
    if level.metrics is None:
        reasons.append(Ineligible.NO_METRICS)
    if LevelFlag.UNVERIFIED in level.flags and not trust_usage:
        reasons.append(Ineligible.UNVERIFIED)
    if LevelFlag.SIM_BEHIND in level.flags:
        reasons.append(Ineligible.SIM_BEHIND)
    if LevelFlag.LATE_SENDS in level.flags:
        reasons.append(Ineligible.LATE_SENDS)
    if slo is not None and level.metrics is not None and slo_misses(level.metrics, slo):
        reasons.append(Ineligible.SLO)
    if quality is not None and quality.blocks:
        reasons.append(Ineligible.QUALITY_DROP if quality.gate.value == "rejected"
                       else Ineligible.QUALITY_UNPROVEN)
    return reasons


def may_win(level: LevelResult, *, trust_usage: bool = False, slo: SLO | None = None,
            quality: QualityVerdict | None = None) -> bool:
    return not why_not(level, trust_usage=trust_usage, slo=slo, quality=quality)
