"""Capacity at SLO: the search for the highest request rate a config holds (pure steps).

``CapacitySearch`` is driven by a trial one measured level at a time (``next_rate``, then
``record`` the ``LevelResult`` at that rate), so the controller keeps its tick-by-tick
loop; ``plan --predict`` drives the same steps with the model's verdicts
(``record_probe``). A probe *holds* when the level may win on its own terms
(``eligibility``: valid, verified, on schedule, the sim on time; the SLO's p99 limits
aside) and at least ``share`` of its steady window's requests met every limit of the SLO
on their own (``LevelMetrics.slo_met``). The rule:

1. bracket: start at ``low``; while a rate holds, double it (capped at ``high``: a config
   that holds ``high`` is reported at ``high``, the note says so); a first rate that misses
   halves instead, down to ``low / 64`` (below: no capacity);
2. bisect the bracket [held, missed] at its midpoint until (missed - held) / held is at
   most ``tolerance``, or ``max_probes`` were spent (the note says so);
3. measure the rate found ``repeats`` times more: its band is their spread.

``result(tp)`` gives the ``SloCapacity``: requests/s and output tokens/s at SLO, per GPU,
and the cost per million output tokens when a GPU-hour price is given.
"""

from __future__ import annotations

from actors.contracts.results import CapacityProbe, LevelResult, SloCapacity
from actors.contracts.traffic import CapacitySpec, Level, LevelKind
from orchestrator.planning.eligibility import Ineligible, why_not

__all__ = ["CapacitySearch", "probe_of"]


def probe_of(level: LevelResult, share: float) -> CapacityProbe:
    """What one measured rate says: held or not, and why not."""
    m = level.metrics
    rate = level.identity.value
    reasons = [r.value for r in why_not(level, trust_usage=False) if r is not Ineligible.SLO]
    if m is not None and m.slo_met is not None and m.slo_met < share:
        reasons.append(f"{m.slo_met:.1%} met the SLO (needs {share:.1%})")
    if m is not None and m.slo_met is None:
        reasons.append("no per-request SLO share measured")
    return CapacityProbe(rate=rate, held=not reasons, slo_met=m.slo_met if m else None,
                         output_tok_s=m.output_tok_s if m else None,
                         goodput_tok_s=m.goodput_tok_s if m else None,
                         reason="; ".join(reasons))


class CapacitySearch:
    """See the module doc. ``next_rate`` is None once the search is over."""

    def __init__(self, spec: CapacitySpec):
        self.spec = spec
        self.probes: list[CapacityProbe] = []
        self.repeats: list[CapacityProbe] = []
        self.held: float | None = None  # highest rate that held
        self.missed: float | None = None  # lowest rate that missed
        self.note = ""
        self._done_searching = False

    def level(self) -> Level | None:
        rate = self.next_rate()
        return None if rate is None else Level(kind=LevelKind.RATE, value=rate)

    def next_rate(self) -> float | None:
        s = self.spec
        if not self._done_searching:
            rate = self._search_rate()
            if rate is not None:
                return rate
            self._done_searching = True
        if self.held is None or len(self.repeats) >= s.repeats:
            return None
        return self.held

    def _search_rate(self) -> float | None:
        s = self.spec
        if len(self.probes) >= s.max_probes:
            self.note = self.note or f"stopped after {s.max_probes} probes (max_probes)"
            return None
        if self.held is None and self.missed is None:
            return s.low
        if self.missed is None:  # everything held so far: go up
            if self.held is not None and self.held >= s.high:
                self.note = f"held the highest rate asked ({s.high:g}/s): capacity is more"
                return None
            return min(2 * (self.held or s.low), s.high)
        if self.held is None:  # everything missed so far: go down
            nxt = self.missed / 2
            if nxt < s.low / 64:
                self.note = f"no rate down to {self.missed:g}/s held the SLO"
                return None
            return nxt
        if (self.missed - self.held) / self.held <= s.tolerance:
            return None
        return (self.held + self.missed) / 2

    def record(self, level: LevelResult) -> CapacityProbe:
        return self.record_probe(probe_of(level, self.spec.share))

    def record_probe(self, p: CapacityProbe) -> CapacityProbe:
        """Take one probe's verdict (``record``'s, or ``plan --predict``'s from the model)."""
        if self._done_searching:
            self.repeats.append(p)
            return p
        self.probes.append(p)
        if p.held:
            self.held = max(self.held or 0.0, p.rate)
        else:
            self.missed = p.rate if self.missed is None else min(self.missed, p.rate)
        return p

    def result(self, tp: int) -> SloCapacity:
        s = self.spec
        at = [p for p in self.probes + self.repeats if self.held is not None
              and p.rate == self.held and p.output_tok_s is not None]
        toks = sorted(p.output_tok_s for p in at if p.output_tok_s is not None)
        tok = toks[(len(toks) - 1) // 2] if toks else None
        band = (toks[-1] - toks[0]) / tok if tok and len(toks) > 1 else None
        unheld = [p for p in self.repeats if not p.held]
        note = self.note
        unmeasured = [p for p in self.probes if not p.held
                      and any("met the SLO" not in why for why in p.reason.split("; "))]
        if unmeasured:  # a miss the measurement, not the SLO, decided: say so
            note = (note + "; " if note else "") + "missed for the measurement, not the SLO: " \
                + ", ".join(f"{p.rate:g}/s ({p.reason})" for p in unmeasured[:3])
        if unheld:
            note = (note + "; " if note else "") + (
                f"{len(unheld)} of {len(self.repeats)} repeats at {self.held:g}/s missed: "
                f"{unheld[0].reason}")
        cost = None
        if s.gpu_hour_usd is not None and tok:
            cost = s.gpu_hour_usd * tp / (tok * 3600) * 1e6
        rps = self.held
        return SloCapacity(
            rps=rps, output_tok_s=tok, rps_per_gpu=None if rps is None else rps / tp,
            output_tok_s_per_gpu=None if tok is None else tok / tp,
            usd_per_million_tokens=cost, band=band, share=s.share, tolerance=s.tolerance,
            bracket=(self.held, self.missed), probes=self.probes, repeats=self.repeats,
            note=note)
