"""What a user reads in the terminal (tables of winners and crossovers) and what scripts
read (JSON); the page and its charts are ``page`` and ``charts``."""

from __future__ import annotations

import textwrap
from typing import Any

from actors.contracts.results import TrialResult
from actors.contracts.states import LevelFlag, TrialStatus
from orchestrator.results.analysis import crossovers, winners
from orchestrator.results.page_levels import (
    CAPACITY_ONLY,
    REGIME_HEADERS,
    flag_legend,
    regimes_rows,
)
from orchestrator.results.quality_view import (
    QUALITY_HEADERS,
    quality_cell,
    quality_json,
    quality_rows,
    quality_section,
)
from orchestrator.spec import SweepSpec

__all__ = ["render_text", "report_json", "winners_export", "table_text", "shorten"]


def _n(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table_text(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; no trailing spaces."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(out)


def shorten(text: str, width: int = 160) -> str:
    """``text`` on one line, cut at a word boundary with "..." when longer than ``width``."""
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


def render_text(spec: SweepSpec, results: list[TrialResult], sweep_id: str,
                tracking_hint: str = "") -> str:
    band = spec.workload.noise_band
    ws = winners(results, spec.slo, band, spec.workload.trust_usage, spec.search.objective)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    w = spec.workload
    parts = [f"Sweep {sweep_id}: {len(results)} trials "
             f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); "
             + (f"{w.prompt_tokens} prompt + {w.output_tokens} output tokens per request"
                if spec.workload.requests is None else
                f"requests from workload.requests (longest {w.prompt_tokens} prompt + "
                f"{w.output_tokens} output tokens)")]
    if any(r.time_scale != 1.0 for r in results):
        parts.append("(sim time scaled: latencies and throughputs shown in simulated time)")
    rows = []
    by_key = {r.key: r for r in results}
    for win in ws:
        if win.key is None:
            rows.append([win.name, "-", "-", "-", "-", "-", win.note]
                        + (["-"] if spec.quality else []))
            continue
        margin = "-" if win.margin is None else f"+{100 * win.margin:.1f}%"
        if win.within_noise:
            margin += " (within noise)"
        flags = f"  [{win.note}]" if win.note else ""  # the winning level's own flags
        rows.append([win.name, win.label or "", _n(win.output_tok_s, ".1f"),
                     _n(win.ttft_p50_ms, ".1f"), _n(win.ttft_p99_ms, ".1f"),
                     _n(win.itl_p50_ms, ".2f"), f"{margin} vs {win.runner_up or '-'}{flags}"]
                    + ([quality_cell(by_key[win.key])] if spec.quality else []))
    if w.levels():
        parts.append(f"\nWinner per level (highest {spec.search.objective.value} among "
                     "valid levels"
                     + (" meeting the SLO" if spec.slo.model_dump(exclude_none=True) else "")
                     + "):")
        parts.append(table_text(["level", "winner", "out tok/s", "TTFT p50 ms",
                                 "TTFT p99 ms", "ITL p50 ms", "margin to runner-up"]
                                + (["accuracy (drop [95% CI])"] if spec.quality else []),
                                rows))
    else:  # capacity only: no concurrency or rate level to win at
        parts.append("\n" + CAPACITY_ONLY)
    if spec.quality is not None:
        section = quality_section(spec, results)
        assert section is not None
        parts.append("\n" + str(section.blocks[0]))
        parts.append(table_text(QUALITY_HEADERS, quality_rows(results)))
    parts.append("\nEvery load regime (its winner by the search's own score):")
    parts.append(table_text(REGIME_HEADERS, regimes_rows(spec, results)))
    legend = flag_legend(results)
    if legend:
        parts.append("\nLevel flags (the table's notes; a flag marked 'no' keeps a level from "
                     "winning):")
        parts += [f"  {x['flag']:<18} {x['levels']:>3} level(s), may win: "
                  f"{'no ' if x['blocks_winning'] else 'yes'}  {x['meaning']}" for x in legend]
    parts.append("\nStartup per config (ready: launch to healthy; compile: torch.compile, "
                 "from the server's log):")
    parts.append(table_text(["config", "ready s", "compile s"], [
        [r.config.label(), _n(r.startup_s, ".1f"),
         _n(c if isinstance(c := r.applied.facts.get("compile_s"), int | float) else None,
            ".1f")] for r in results if r.status.has_measurements()]))
    xs = crossovers(ws)
    if xs:
        parts.append("\nCrossover(s):")
        for x in xs:
            noise = "  (within noise: a winner leads by less than the band)" \
                if x.within_noise else ""
            parts.append(f"  between {x.between[0]} and {x.between[1]}: "
                         f"{x.from_label}  ->  {x.to_label}{noise}")
    elif w.levels():
        parts.append("\nNo crossover: one configuration wins at every level."
                     if any(win.key for win in ws) else "\nNo winner at any level.")
    caps = [r for r in results if r.slo_capacity is not None]
    if caps:
        parts.append("\nCapacity at SLO (highest rate where "
                     f"{spec.workload.capacity.share if spec.workload.capacity else 0:.0%} of "
                     "requests met every limit):")
        parts.append(table_text(
            ["config", "req/s", "out tok/s", "per GPU req/s", "$/M tokens", "band", "note"],
            [[r.config.label(), _n(sc.rps, ".2f"), _n(sc.output_tok_s, ".1f"),
              _n(sc.rps_per_gpu, ".2f"), _n(sc.usd_per_million_tokens, ".3f"),
              "-" if sc.band is None else f"{sc.band:.1%}", sc.note or "-"]
             for r in caps if (sc := r.slo_capacity) is not None]))
    doubtful = [(r, lv) for r in results for lv in r.levels
                if lv.status == "valid" and LevelFlag.UNVERIFIED in lv.flags]
    if doubtful:
        trust = spec.workload.trust_usage
        parts.append("\nUnverified levels (output counted from the server's usage alone; "
                     + ("they may win: workload.trust_usage is set):" if trust else
                        "they cannot win unless workload.trust_usage):"))
        for r, lv in doubtful:
            parts.append(f"  {lv.key:<9} {r.config.label()}: {shorten(lv.reason)}")
    bad = [r for r in results if r.status in (TrialStatus.FAILED, TrialStatus.INFEASIBLE,
                                              TrialStatus.INVALID)]
    if bad:
        parts.append("\nTrials that did not fully count:")
        for r in bad:
            parts.append(f"  {r.status.value:<10} {r.config.label()}: {r.reason}"
                         + (f" - {shorten(r.message)}" if r.message and r.message != r.reason
                            else ""))
    if tracking_hint:
        parts.append("\n" + tracking_hint)
    return "\n".join(parts)


def report_json(spec: SweepSpec, results: list[TrialResult], sweep_id: str) -> dict[str, Any]:
    from dataclasses import asdict

    ws = winners(results, spec.slo, spec.workload.noise_band,
                 spec.workload.trust_usage, spec.search.objective)
    return {
        "sweep_id": sweep_id, "spec_name": spec.name,
        "workload": spec.workload.model_dump(mode="json"),
        "trials": [{"key": r.key, "label": r.config.label(), "status": r.status.value,
                    "reason": r.reason, "message": r.message,
                    "config": r.config.model_dump(mode="json"),
                    "startup_s": r.startup_s,
                    "compile_s": r.applied.facts.get("compile_s"), "time_scale": r.time_scale,
                    "capacity": r.capacity.model_dump() if r.capacity else None,
                    "quality": quality_json(r),
                    "levels": [dict(lv.model_dump(mode="json"), key=lv.key)
                               for lv in r.levels]}
                   for r in results],
        "winners": [asdict(w) for w in ws],
        "regimes": [dict(zip(REGIME_HEADERS, row, strict=True))
                    for row in regimes_rows(spec, results)],
        "flags": flag_legend(results),
        "crossovers": [asdict(c) for c in crossovers(ws)],
    }


def winners_export(spec: SweepSpec, results: list[TrialResult]) -> list[dict[str, Any]]:
    """Per level: the winning config and the exact server command it ran with."""
    by_key = {r.key: r for r in results}
    out = []
    for w in winners(results, spec.slo, spec.workload.noise_band,
                     spec.workload.trust_usage, spec.search.objective):
        if w.key is None:
            continue
        r = by_key[w.key]
        out.append({"level": w.name, "concurrency": w.concurrency, "label": w.label,
                    "output_tok_s": w.output_tok_s, "ttft_p99_ms": w.ttft_p99_ms,
                    "margin": w.margin, "within_noise": w.within_noise,
                    "config": r.config.model_dump(mode="json"),
                    "command": r.host.get("argv"), "engine_version": r.versions.get("engine"),
                    "hardware": r.hardware})
    return out
