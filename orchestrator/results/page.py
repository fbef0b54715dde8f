"""The report page: one self-contained HTML file (charts inline as SVG, styles inline, no
script, nothing fetched) and its Markdown twin, built from the same sections.

``build_sections`` turns a sweep (spec, results, what the ledger says is unfinished) into
``Section``s of tables and charts; ``render_html`` and ``render_markdown`` only format
them. Sections, in order: the sweep and its state; winners per load regime (margin, noise
band, "within noise"); the crossover chart; throughput, TTFT and ITL by concurrency,
throughput per GPU beside raw; the Pareto front of throughput vs TTFT p99 per regime;
KV capacity; each trial's applied-config verification; failures; unfinished trials.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from actors.contracts.results import TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.results.analysis import Winner, levels_frame, winners
from orchestrator.results.charts import crossover_chart, metric_chart, pareto_chart
from orchestrator.results.page_blocks import Section, Table
from orchestrator.results.page_blocks import n_text as _n
from orchestrator.results.page_levels import (
    CAPACITY_ONLY,
    REGIME_HEADERS,
    flags_section,
    regimes_rows,
)
from orchestrator.results.page_traffic import capacity_section, traffic_section
from orchestrator.results.quality_view import quality_cell, quality_section
from orchestrator.spec import SweepSpec

__all__ = ["Section", "Table", "build_sections", "render_html", "render_markdown",
           "regimes_of", "regime_frame"]


def regimes_of(spec: SweepSpec) -> dict[str, list[str]]:
    """Named groups of level keys: the spec's ``search.regimes`` where it has them, else
    one regime per level, named by its key (the search's own rule)."""
    return spec.search.regime_levels(spec.workload.levels())


def regime_frame(df: pd.DataFrame, levels: list[str]) -> pd.DataFrame:
    """One row per config over the regime's levels, only configs valid at all of them:
    throughput as the geometric mean, TTFT p99 as the worst."""
    at = df[df["level"].isin(levels)]
    rows = []
    for key, g in at.groupby("key"):
        if len(g) < len(levels) or g["output_tok_s"].isna().any() or \
                (g["output_tok_s"] <= 0).any():
            continue
        tok = float(math.exp(sum(math.log(v) for v in g["output_tok_s"]) / len(g)))
        rows.append({"key": key, "label": g["label"].iloc[0], "tp": int(g["tp"].iloc[0]),
                     "output_tok_s": tok, "ttft_p99_ms": g["ttft_p99_ms"].max(),
                     "concurrency": int(g["concurrency"].iloc[0]), "level": levels[0]})
    return pd.DataFrame(rows, columns=["key", "label", "tp", "output_tok_s", "ttft_p99_ms",
                                       "concurrency", "level"])


def _front(rf: pd.DataFrame) -> set[str]:
    keep = set()
    for _, row in rf.dropna(subset=["ttft_p99_ms"]).iterrows():
        beaten = ((rf["output_tok_s"] >= row["output_tok_s"])
                  & (rf["ttft_p99_ms"] <= row["ttft_p99_ms"])
                  & ((rf["output_tok_s"] > row["output_tok_s"])
                     | (rf["ttft_p99_ms"] < row["ttft_p99_ms"]))).any()
        if not beaten:
            keep.add(str(row["key"]))
    return keep


def _winner_rows(ws: list[Winner], band: float,
                 accuracy: dict[str, str] | None = None) -> list[list[str]]:
    rows = []
    acc = accuracy or {}
    for w in ws:
        if w.key is None:
            rows.append([w.name, "-", "-", "-", "-", w.note or "no winner"]
                        + (["-"] if accuracy is not None else []))
            continue
        margin = "-" if w.margin is None else f"+{100 * w.margin:.1f}%"
        verdict = ("within noise" if w.within_noise else
                   "only candidate" if w.margin is None else "beyond noise")
        rows.append([w.name, w.label or "", _n(w.output_tok_s), margin,
                     f"{100 * max(band, w.noise_band):.1f}%",
                     f"{verdict} (vs {w.runner_up or '-'})"
                     + (f"; median of {w.repeats} restarts" if w.repeats > 1 else "")]
                    + ([acc.get(w.key, "-")] if accuracy is not None else []))
    return rows


def build_sections(spec: SweepSpec, results: list[TrialResult], sweep_id: str,
                   unfinished: list[str] | None = None,
                   interrupted: str | None = None) -> list[Section]:
    """Every section of the report (see the module doc). ``unfinished``: labels of trials
    the plan holds and the ledger has no final result for; ``interrupted``: why the last
    driver stopped early, if it did."""
    band = spec.workload.noise_band
    w = spec.workload
    df_all = levels_frame(results, spec.search.objective, spec.slo)
    df = df_all[df_all["level_status"] == "valid"]
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    plan = spec.request_plan()
    work = (f"every request sends {w.prompt_tokens} prompt tokens and decodes exactly "
            f"{w.output_tokens}" if plan is None else
            f"requests from {plan.source} ({len(plan.requests)} per round), each decoding "
            "exactly its own output length")
    prints = sorted({r.workload_fingerprint for r in results if r.workload_fingerprint})
    head = Section("Sweep", "sweep").add(
        f"{sweep_id} ({spec.name}): {len(results)} trials "
        f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items())) or 'none'}); {work}; "
        f"levels {', '.join(lv.key for lv in w.levels())}; workload fingerprint "
        f"{', '.join(prints) or 'not recorded'}"
        + (" (WORKLOADS DIFFER: winners are not ranked across them)" if len(prints) > 1
           else "") + ".",
        f"Objective: {spec.search.objective.value} among valid levels meeting the SLO "
        f"({_slo_text(spec)}); noise band {100 * band:.0f}% (a lead smaller than this is "
        "reported as within noise).")
    if any(r.time_scale != 1.0 for r in results):
        head.add("Sim time is scaled: latencies and throughputs are in simulated time.")
    if interrupted or unfinished:
        head.add(f"This sweep did not finish: {interrupted or 'stopped early'}; "
                         f"{len(unfinished or [])} planned trial(s) have no result (below).")
    sections = [head]

    ws = winners(results, spec.slo, band, w.trust_usage, spec.search.objective)
    by_level = {x.name: x for x in ws}
    win = Section("Winners per load regime", "winners")
    for regime, levels in regimes_of(spec).items():
        if len(levels) == 1 and levels[0] in by_level:
            continue  # single-level regimes: one table below
        rf = regime_frame(df, levels)
        if rf.empty:
            win.add(f"{regime} ({levels}): no config valid at every level.")
            continue
        best = rf.sort_values("output_tok_s", ascending=False).iloc[0]
        win.add(f"{regime} ({', '.join(map(str, levels))}): {best['label']} "
                        f"({best['output_tok_s']:,.1f} tok/s, geometric mean)")
    win.add("Every load regime (a regime of several levels: the geometric mean of its "
            "levels; a config must be valid at all of them):",
            Table(REGIME_HEADERS, regimes_rows(spec, results)))
    if w.levels():
        accuracy = {r.key: quality_cell(r) for r in results} if spec.quality else None
        win.add("Every level:", Table(
            ["level", "winner", "out tok/s", "margin", "noise band", "verdict"]
            + (["accuracy (drop [95% CI])"] if accuracy is not None else []),
            _winner_rows(ws, band, accuracy)))
        per_gpu = winners(_per_gpu(results), spec.slo, band, w.trust_usage)
        win.add(crossover_chart(ws),
                "Per GPU (output tok/s divided by TP) the winners are:",
                Table(["level", "winner per GPU", "out tok/s per GPU", "raw winner"],
                      [[p.name, p.label or "-", _n(p.output_tok_s),
                        by_level[p.name].label or "-"] for p in per_gpu]))
    else:  # capacity only: no concurrency or rate level to win at
        win.add(CAPACITY_ONLY)
    sections.append(win)

    curves = Section("By level", "curves")
    for kind in dict.fromkeys(lv.kind.value for lv in w.levels()):
        suffix = "" if kind == "c" else f"_{kind}"
        for metric, title, name, gpu in (
                ("output_tok_s", "Output tok/s", "throughput", False),
                ("output_tok_s", "Output tok/s per GPU", "throughput_per_gpu", True),
                ("ttft_p50_ms", "TTFT p50 (ms)", "ttft_p50", False),
                ("ttft_p99_ms", "TTFT p99 (ms)", "ttft_p99", False),
                ("itl_p50_ms", "ITL p50 (ms)", "itl_p50", False)):
            curves.add(metric_chart(df, metric, title, name + suffix, per_gpu=gpu,
                                    kind=kind))
    if not curves.charts:
        curves.add("No valid level to draw.")
    sections.append(curves)

    pareto = Section("Throughput vs latency (Pareto front)", "pareto")
    for i, (regime, levels) in enumerate(regimes_of(spec).items()):
        rf = regime_frame(df, levels)
        front = _front(rf)
        c = pareto_chart(rf, front, regime, f"pareto_{i}")
        if c:
            pareto.add(c, Table([f"{regime}: on the front", "out tok/s", "TTFT p99 ms"], [
                [str(r["label"]), _n(r["output_tok_s"]), _n(r["ttft_p99_ms"])]
                for _, r in rf[rf["key"].isin(front)].sort_values(
                    "output_tok_s", ascending=False).iterrows()]))
    sections.append(pareto)
    slo_cap = capacity_section(spec, results)
    quality = quality_section(spec, results)
    sections += ([slo_cap] if slo_cap else []) + ([quality] if quality else []) + [
                 flags_section(results),
                                                  traffic_section(spec, results),
                                                  _capacity(results), _verification(results),
                 _failures(results),
                 Section("Unfinished trials", "unfinished",
                         [f"{u}" for u in unfinished] if unfinished else
                         ["None: every planned trial has a final result."])]
    return sections


def _slo_text(spec: SweepSpec) -> str:
    limits = spec.slo.model_dump(exclude_none=True)
    return ", ".join(f"{k} <= {v:g}" for k, v in limits.items()) or "none set"


def _per_gpu(results: list[TrialResult]) -> list[TrialResult]:
    """The results with every level's output tok/s divided by its trial's TP."""
    out = []
    for r in results:
        levels = [lv.model_copy(update={"metrics": lv.metrics.model_copy(update={
            "output_tok_s": lv.metrics.output_tok_s / r.config.tp})}) if lv.metrics else lv
            for lv in r.levels]
        out.append(r.model_copy(update={"levels": levels}))
    return out


def on_off(v: bool | None) -> str:
    return "-" if v is None else ("on" if v else "off")


def _capacity(results: list[TrialResult]) -> Section:
    s = Section("KV capacity", "capacity").add(
        "Requests that fit at full length in the KV pool the server reported, and what "
        "/metrics showed at each level.")
    rows = []
    for r in results:
        cap = r.capacity
        for lv in r.levels:
            fits = cap.full_length_capacity if cap else None
            rows.append([r.config.label(), _n(cap.pool_tokens if cap else None, ",d"),
                         _n(fits, ",d"), lv.key,
                         "-" if fits is None else ("yes" if lv.concurrency <= fits else "no"),
                         _n(lv.server.running_max, ",.0f"), _n(lv.server.waiting_max, ",.0f"),
                         _n(lv.server.preemptions, ",.0f")])
    s.add(Table(["config", "pool tokens", "fit at full length", "level", "all fit",
                 "running max", "waiting max", "preemptions"], rows))
    return s


def _verification(results: list[TrialResult]) -> Section:
    s = Section("Applied config", "applied").add(
        "What each server reported it runs with (read from its own log), and whether that "
        "matched what was asked.")
    rows = []
    for r in results:
        a = r.applied
        if r.reason == "config_mismatch":
            verdict = "MISMATCH: " + r.message
        elif a:
            verdict = "verified"
        else:
            verdict = "not reached" if r.status is not TrialStatus.OK else "nothing stated"
        compile_s = a.facts.get("compile_s")
        rows.append([r.config.label(), a.version or "-", _n(a.tp, "d"), a.weights or "-",
                     a.kv_dtype or "-", on_off(a.cuda_graphs),
                     _n(r.startup_s, ".1f"),
                     _n(compile_s if isinstance(compile_s, int | float) else None, ".1f"),
                     _n(a.kv_pool_tokens, ",d"), verdict])
    s.add(Table(["config", "engine version", "tp", "weights", "kv", "graphs", "ready s",
                 "compile s", "KV pool tokens", "verification"], rows))
    return s


def _failures(results: list[TrialResult]) -> Section:
    bad = [r for r in results if r.status is not TrialStatus.OK]
    s = Section("Failures", "failures")
    if not bad:
        s.add("None: every trial counted.")
    else:
        s.add(Table(["config", "status", "class", "message"], [
            [r.config.label(), r.status.value, r.reason, r.message] for r in bad]))
    return s


# -- rendering ------------------------------------------------------------------------------
_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}figure{margin:1em 0}svg{max-width:100%;height:auto}
nav a{margin-right:1em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}"""


#: tables with more rows than this fold into a <details> on the page
LONG_TABLE = 15


def render_html(title: str, sections: list[Section]) -> str:
    """One file that opens offline: styles inline, charts as inline SVG, no script."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(title)}</h1><nav>"
           + "".join(f'<a href="#{s.anchor}">{e(s.title)}</a>' for s in sections) + "</nav>"]
    for s in sections:
        out.append(f'<section id="{s.anchor}"><h2>{e(s.title)}</h2>')
        for b in s.blocks:
            if isinstance(b, str):
                out.append(f"<p>{e(b)}</p>")
            elif isinstance(b, Table):
                long = len(b.rows) > LONG_TABLE  # folded: a summary line says what it holds
                if long:
                    out.append(f"<details><summary>{len(b.rows)} rows: "
                               f"{e(', '.join(b.headers[:3]))}, ...</summary>")
                out.append('<table class="data"><thead><tr>'
                           + "".join(f"<th>{e(h)}</th>" for h in b.headers)
                           + "</tr></thead><tbody>")
                out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
                        for row in b.rows]
                out.append("</tbody></table>" + ("</details>" if long else ""))
            else:
                out.append(f'<figure class="chart" data-chart="{e(b.name)}">{b.svg}'
                           f"<figcaption>{e(b.title)}</figcaption></figure>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)


def render_markdown(title: str, sections: list[Section], chart_prefix: str = "chart-") -> str:
    """The same sections as Markdown; charts are ``<chart_prefix><name>.svg`` files beside
    it."""
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for b in s.blocks:
            if isinstance(b, str):
                out += [b, ""]
            elif isinstance(b, Table):
                out.append("| " + " | ".join(b.headers) + " |")
                out.append("|" + "---|" * len(b.headers))
                out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
                        for row in b.rows]
                out.append("")
            else:
                out += [f"![{b.title}]({chart_prefix}{b.name}.svg)", ""]
    return "\n".join(out)
