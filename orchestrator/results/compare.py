"""Two sweeps of the same space side by side (another engine version, GPU or driver).

Trials are matched by config identity (``TrialConfig.identity``: the engine settings,
without launch label or repeat); a config repeated in a sweep counts with the median of
its repeats. Per matched config and level: the change in output tok/s (B against A) and
its noise band, the largest of both sweeps' ``noise_band`` and the noise each measured for
that config there (the spread between restarts, the spread of rounds); the verdict is
``faster`` / ``slower`` beyond the band, else ``within noise``. Per load regime (the A
spec's regimes): the geometric mean change over the configs matched at all its levels,
judged against the mean of those configs' own bands (each config's widest level there: one
noisy config does not widen every other's), and whether the regime's winner changed.

Only the same work compares: ``workload_differences`` names what differs between the two
sweeps' requests (lengths, API, shared prefix, rate, requests per round, seed, model);
the command refuses such a pair unless forced, and then every figure says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import pandas as pd

from actors.contracts.results import TrialResult
from orchestrator.results.analysis import levels_frame
from orchestrator.results.page import Section, Table, regimes_of
from orchestrator.spec import SweepSpec

__all__ = ["Verdict", "LevelChange", "RegimeVerdict", "Comparison", "compare_sweeps",
           "workload_differences", "render_comparison_text", "comparison_sections",
           "WORKLOADS_DIFFER"]

#: what a comparison of different work says beside every figure
WORKLOADS_DIFFER = "workloads differ"
#: the workload settings that define each request's work (the rest: how it is measured)
WORK_FIELDS = ("prompt_tokens", "output_tokens", "api", "shared_prefix_tokens",
               "request_rate", "requests_per_round", "seed", "burstiness", "max_in_flight",
               "steady_trim")


class Verdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    WITHIN_NOISE = "within noise"


@dataclass(frozen=True)
class LevelChange:
    identity: str
    label: str
    level: str  # the level's key (``c=8``, ``rate=4/s``)
    a_tok_s: float
    b_tok_s: float
    change: float  # b / a - 1
    band: float
    verdict: Verdict
    a_repeats: int
    b_repeats: int


@dataclass(frozen=True)
class RegimeVerdict:
    regime: str
    levels: list[str]
    configs: int  # matched at every level of the regime
    change: float | None  # geometric mean of b / a, minus 1
    band: float
    verdict: Verdict | None  # None: no config matched
    winner_a: str | None = None  # the label of each sweep's best config there (SLOs met)
    winner_b: str | None = None
    winner_changed: bool | None = None  # None: a sweep has no winner there


@dataclass(frozen=True)
class QualityChange:
    """One config's quality in both sweeps: B's score minus A's with its 95% interval
    (paired over the questions both answered where both kept them)."""

    identity: str
    label: str
    unit: str
    a_score: float
    b_score: float
    change: float
    lo: float
    hi: float
    paired: bool

    @property
    def significant(self) -> bool:
        return self.lo > 0 or self.hi < 0


def quality_changes(results_a: list[TrialResult],
                    results_b: list[TrialResult]) -> list[QualityChange]:
    """Configs (by identity) with a quality score in both sweeps."""
    from orchestrator.planning.quality import paired_drop

    def scored(results: list[TrialResult]) -> dict[str, TrialResult]:
        return {r.config.identity(): r for r in results
                if r.quality_verdict is not None and r.quality_verdict.score is not None}

    a, b = scored(results_a), scored(results_b)
    out = []
    for ident in sorted(set(a) & set(b), key=lambda i: a[i].config.label()):
        ra, rb = a[ident], b[ident]
        va, vb = ra.quality_verdict, rb.quality_verdict
        assert va is not None and vb is not None and va.score is not None \
            and vb.score is not None
        scale = 100.0 if va.unit == "points" else 1.0
        ta = ra.quality.task if ra.quality is not None else None
        tb = rb.quality.task if rb.quality is not None else None
        d = None
        if ta is not None and tb is not None and va.unit == "points":
            d = paired_drop({i: scale * x for i, x in zip(tb.doc_ids, tb.per_question)},
                            {i: scale * x for i, x in zip(ta.doc_ids, ta.per_question)})
        change = vb.score - va.score
        if d is not None:  # paired_drop gives B minus A here (B passed as "reference")
            lo, hi, paired = d.lo, d.hi, True
        else:
            half = 1.96 * math.hypot(va.stderr or 0.0, vb.stderr or 0.0)
            lo, hi, paired = change - half, change + half, False
        out.append(QualityChange(ident, ra.config.label(), va.unit, va.score, vb.score,
                                 change, lo, hi, paired))
    return out


@dataclass(frozen=True)
class Comparison:
    sweep_a: str
    sweep_b: str
    levels: list[LevelChange]
    regimes: list[RegimeVerdict]
    only_a: list[str]  # labels of configs only sweep A measured
    only_b: list[str]
    workloads_differ: list[str] = field(default_factory=list)  # forced: what differs
    quality: list[QualityChange] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"sweep_a": self.sweep_a, "sweep_b": self.sweep_b,
                "levels": [asdict(x) for x in self.levels],
                "regimes": [asdict(x) for x in self.regimes],
                "only_a": self.only_a, "only_b": self.only_b,
                "workloads_differ": self.workloads_differ,
                "quality": [dict(asdict(x), significant=x.significant)
                            for x in self.quality]}


def _per_config(results: list[TrialResult]) -> pd.DataFrame:
    """Valid levels by (identity, level): median output tok/s, noise, repeats."""
    df = levels_frame(results)
    df = df[(df["level_status"] == "valid") & df["output_tok_s"].notna()]
    rows = []
    for (ident, key), g in df.groupby(["identity", "level"]):
        med = float(g["output_tok_s"].median())
        restart = float(g["output_tok_s"].max() - g["output_tok_s"].min()) / med \
            if len(g) > 1 and med > 0 else 0.0
        rows.append({"identity": ident, "level": str(key), "order": g["level_order"].iloc[0],
                     "label": g["label"].iloc[0],
                     "tok_s": med, "noise": max(restart, float(g["round_spread"].max())),
                     "repeats": len(g)})
    return pd.DataFrame(rows, columns=["identity", "level", "order", "label", "tok_s", "noise",
                                       "repeats"])


def _verdict(change: float, band: float) -> Verdict:
    if change > band:
        return Verdict.FASTER
    if change < -band:
        return Verdict.SLOWER
    return Verdict.WITHIN_NOISE


def workload_differences(spec_a: SweepSpec, spec_b: SweepSpec) -> list[str]:
    """What differs between the two sweeps' requests, one line each (empty: the same
    work; the levels may differ, only common ones are compared)."""
    out = []
    for name in WORK_FIELDS:
        va, vb = getattr(spec_a.workload, name), getattr(spec_b.workload, name)
        if va != vb:
            out.append(f"workload.{name}: {va!r} in A, {vb!r} in B")
    ma = spec_a.model.model_dump(exclude_none=True)
    mb = spec_b.model.model_dump(exclude_none=True)
    if ma != mb:
        out.append(f"model: {ma} in A, {mb} in B")
    pa, pb = spec_a.request_plan(), spec_b.request_plan()

    def said(p: Any) -> str:
        return f"{p.source} {p.fingerprint}" if p is not None else "fixed shape"
    if said(pa) != said(pb):
        out.append(f"request list: {said(pa)} in A, {said(pb)} in B")
    return out


class _Won(NamedTuple):
    winner_a: str | None
    winner_b: str | None
    changed: bool | None


def _winners(spec: SweepSpec,
             results: list[TrialResult]) -> dict[tuple[str, ...], TrialResult | None]:
    """Each regime's best trial (SLOs met), by the regime's level keys."""
    from orchestrator.planning.regimes import best_per_regime

    levels = spec.search.regime_levels(spec.workload.levels())
    return {tuple(levels[name]): (best[0] if best else None)
            for name, best in best_per_regime(results, spec).items()}


def compare_sweeps(spec_a: SweepSpec, results_a: list[TrialResult], id_a: str,
                   spec_b: SweepSpec, results_b: list[TrialResult], id_b: str) -> Comparison:
    a, b = _per_config(results_a), _per_config(results_b)
    floor = max(spec_a.workload.noise_band, spec_b.workload.noise_band)
    joined = a.merge(b, on=["identity", "level"], suffixes=("_a", "_b"))
    changes = []
    for _, r in joined.sort_values(["label_a", "order_a"]).iterrows():
        change = r["tok_s_b"] / r["tok_s_a"] - 1
        band = max(floor, float(r["noise_a"]), float(r["noise_b"]))
        changes.append(LevelChange(str(r["identity"]), str(r["label_a"]), str(r["level"]),
                                   float(r["tok_s_a"]), float(r["tok_s_b"]), float(change),
                                   band, _verdict(change, band), int(r["repeats_a"]),
                                   int(r["repeats_b"])))
    regimes = []
    best_a, best_b = _winners(spec_a, results_a), _winners(spec_b, results_b)
    for name, levels in regimes_of(spec_a).items():
        wa, wb = best_a.get(tuple(levels)), best_b.get(tuple(levels))
        won = _Won(wa.config.label() if wa else None, wb.config.label() if wb else None,
                   wa.config.identity() != wb.config.identity() if wa and wb else None)
        by_ident: dict[str, list[LevelChange]] = {}
        for x in changes:
            if x.level in levels:
                by_ident.setdefault(x.identity, []).append(x)
        full = [xs for xs in by_ident.values() if len(xs) == len(levels)]
        if not full:
            regimes.append(RegimeVerdict(name, levels, 0, None, floor, None, *won))
            continue
        logs = [math.log1p(x.change) for xs in full for x in xs]
        change = math.expm1(sum(logs) / len(logs))
        band = sum(max(x.band for x in xs) for xs in full) / len(full)  # each config's own
        regimes.append(RegimeVerdict(name, levels, len(full), change, band,
                                     _verdict(change, band), *won))
    labels_a = dict(zip(a["identity"], a["label"]))
    labels_b = dict(zip(b["identity"], b["label"]))
    return Comparison(id_a, id_b, changes, regimes,
                      sorted(v for k, v in labels_a.items() if k not in labels_b),
                      sorted(v for k, v in labels_b.items() if k not in labels_a),
                      workload_differences(spec_a, spec_b),
                      quality_changes(results_a, results_b))


def _winner_text(r: RegimeVerdict) -> str:
    if r.winner_changed is None:
        return f"A: {r.winner_a or 'none'}; B: {r.winner_b or 'none'}"
    return f"changed: {r.winner_a} -> {r.winner_b}" if r.winner_changed else \
        f"same: {r.winner_a}"


def _rows(cmp: Comparison) -> tuple[Table, Table]:
    mark = f" ({WORKLOADS_DIFFER})" if cmp.workloads_differ else ""
    regimes = Table(["regime", "levels", "configs", "change", "noise band", "verdict",
                     "winner"], [
        [r.regime, ", ".join(map(str, r.levels)), str(r.configs),
         "-" if r.change is None else f"{100 * r.change:+.1f}%{mark}", f"{100 * r.band:.1f}%",
         r.verdict.value if r.verdict else "no config measured in both", _winner_text(r)]
        for r in cmp.regimes])
    levels = Table(["config", "level", "A tok/s", "B tok/s", "change", "noise band", "verdict"], [
        [x.label, x.level, f"{x.a_tok_s:,.1f}", f"{x.b_tok_s:,.1f}",
         f"{100 * x.change:+.1f}%{mark}", f"{100 * x.band:.1f}%", x.verdict.value]
        for x in cmp.levels])
    return regimes, levels


def _quality_table(cmp: Comparison) -> Table:
    def f(x: float, unit: str) -> str:
        return f"{x:+.1f}" if unit == "points" else f"{x:+.1%}"

    return Table(["config", "A score", "B score", "change [95% CI]", "verdict"], [
        [q.label, f(q.a_score, q.unit).lstrip("+"), f(q.b_score, q.unit).lstrip("+"),
         f"{f(q.change, q.unit)} [{f(q.lo, q.unit)}, {f(q.hi, q.unit)}]"
         + (" paired" if q.paired else ""),
         "significant" if q.significant else "not significant"] for q in cmp.quality])


def _differ_lines(cmp: Comparison) -> list[str]:
    if not cmp.workloads_differ:
        return []
    return [f"{WORKLOADS_DIFFER.upper()} (compared with --force): " +
            "; ".join(cmp.workloads_differ)]


def render_comparison_text(cmp: Comparison) -> str:
    from orchestrator.results.report import table_text

    regimes, levels = _rows(cmp)
    out = [*_differ_lines(cmp),
           f"B = {cmp.sweep_b} against A = {cmp.sweep_a} (output tok/s, matched by config "
           f"identity; {len({x.identity for x in cmp.levels})} config(s) in both)", "",
           "Per load regime:", table_text(regimes.headers, regimes.rows), "",
           "Per config and level:", table_text(levels.headers, levels.rows)]
    if cmp.quality:
        q = _quality_table(cmp)
        out += ["", "Quality (B minus A, per config):", table_text(q.headers, q.rows)]
    for side, labels in (("A", cmp.only_a), ("B", cmp.only_b)):
        if labels:
            out += ["", f"Only in {side}: " + "; ".join(labels)]
    return "\n".join(out)


def comparison_sections(cmp: Comparison) -> list[Section]:
    regimes, levels = _rows(cmp)
    head = Section("Comparison", "comparison").add(
        *_differ_lines(cmp),
        f"B = {cmp.sweep_b} against A = {cmp.sweep_a}: output tok/s of the configs both "
        "measured (matched by config identity), each change judged against its noise band.",
        regimes)
    rest = Section("Per config and level", "levels").add(levels)
    if cmp.quality:
        rest.add("Quality (B minus A, per config):", _quality_table(cmp))
    only = Section("Measured in one sweep only", "only").add(
        f"Only in A: {'; '.join(cmp.only_a) or 'none'}",
        f"Only in B: {'; '.join(cmp.only_b) or 'none'}")
    return [head, rest, only]
