"""The report's traffic section: what every config was measured on, and how each open-loop
level held its schedule.

The request list (source, lengths, the prefix reuse it implies, its fingerprint), then one
row per trial and level: offered, scheduled and achieved request rates, requests sent late,
the steady window's kept and left-out requests, and the prefix-cache hit rate the server
reported beside the rate the list implies.
"""

from __future__ import annotations

from actors.contracts.results import TrialResult
from orchestrator.results.charts import capacity_chart
from orchestrator.results.page_blocks import Section, Table, n_text
from orchestrator.spec import SweepSpec
from orchestrator.spec.traffic_plan import mix_summary

__all__ = ["traffic_section", "capacity_section"]


def traffic_section(spec: SweepSpec, results: list[TrialResult]) -> Section:
    plan = spec.request_plan()
    mix = mix_summary(spec.workload, plan)
    s = Section("Traffic", "traffic").add(f"Source: {mix['source']}. Levels: "
                                          f"{', '.join(mix['levels'])}.")
    if plan is not None:
        p, o = mix["prompt_tokens"], mix["output_tokens"]
        s.add(f"{mix['requests']} requests per round, each decoding exactly its own output "
              f"length. Prompt tokens p50 {p['p50']}, p90 {p['p90']}, max {p['max']}; output "
              f"tokens p50 {o['p50']}, p90 {o['p90']}, max {o['max']}. An ideal prefix cache "
              f"would serve {mix['implied_prefix_hits']:.0%} of prompt tokens (what the list "
              "implies; the servers' own rates are below).")
    prints = sorted({r.workload_fingerprint for r in results if r.workload_fingerprint})
    s.add(f"Workload fingerprint (the request list and its schedule): "
          f"{', '.join(prints) or mix['fingerprint'] + ' (not recorded by these trials)'}"
          + ("; WORKLOADS DIFFER between trials: winners are not ranked across them."
             if len(prints) > 1 else "."))
    rows = []
    for r in results:
        for lv in r.levels:
            ol = lv.open_loop
            if ol is None and lv.prefix_hit_rate is None:
                continue
            rows.append([r.config.label(), lv.key,
                         n_text(ol.offered_rps if ol else None, ".2f"),
                         n_text(ol.scheduled_rps if ol else None, ".2f"),
                         n_text(ol.achieved_rps if ol else None, ".2f"),
                         n_text(ol.late_sends if ol else None, "d"),
                         f"{ol.window_kept} / {ol.window_left_out}" if ol else "-",
                         "-" if lv.prefix_hit_rate is None else f"{lv.prefix_hit_rate:.0%}"])
    if rows:
        s.add(Table(["config", "level", "offered req/s", "scheduled req/s", "achieved req/s",
                     "sent late", "window kept / left out", "prefix hits (server)"], rows))
    return s


def capacity_section(spec: SweepSpec, results: list[TrialResult]) -> Section | None:
    """Capacity at SLO per config (``workload.capacity``): the highest rate held, its
    tokens/s, per GPU, cost, band, and the goodput-against-rate chart; None when the spec
    asked for none."""
    cap = spec.workload.capacity
    if cap is None:
        return None
    s = Section("Capacity at SLO", "slo-capacity").add(
        f"The highest request rate at which {cap.share:.0%} of requests met every SLO limit "
        f"({', '.join(f'{k} <= {v:g}' for k, v in spec.slo.model_dump(exclude_none=True).items())}"
        f"), found on each warm server by doubling from {cap.low:g}/s then bisecting to "
        f"{cap.tolerance:.0%}; the band is the spread of {cap.repeats} more measurement(s) "
        "there.")
    rows, curves, knees = [], {}, {}
    found = [r for r in results if r.slo_capacity is not None]
    best = max((r for r in found if r.slo_capacity and r.slo_capacity.rps),
               key=lambda r: (r.slo_capacity.rps_per_gpu or 0)  # type: ignore[union-attr]
               , default=None)
    for r in found:
        c = r.slo_capacity
        assert c is not None
        label = r.config.label()
        rows.append([label + (" (most per GPU)" if r is best else ""),
                     n_text(c.rps, ".2f"), n_text(c.output_tok_s), n_text(c.rps_per_gpu, ".2f"),
                     n_text(c.output_tok_s_per_gpu),
                     "-" if c.usd_per_million_tokens is None else
                     f"${c.usd_per_million_tokens:,.3f}",
                     "-" if c.band is None else f"{c.band:.1%}", str(len(c.probes)),
                     c.note or "-"])
        curves[label] = [(p.rate, p.goodput_tok_s or 0.0, p.held) for p in c.probes]
        knees[label] = c.rps
    s.add(Table(["config", "req/s at SLO", "out tok/s", "req/s per GPU", "out tok/s per GPU",
                 "per M output tokens", "band", "probes", "note"], rows)
          if rows else "No trial measured its capacity.")
    return s.add(capacity_chart(curves, knees))
