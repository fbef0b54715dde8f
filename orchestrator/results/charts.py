"""The report's charts, drawn with matplotlib as SVG text (inlined in the HTML page, written
beside the Markdown twin): nothing is fetched when the page opens.

Every function takes the levels frame (``analysis.levels_frame``, valid levels only) or
the winners and returns one ``Chart`` (an SVG document and its alt text), or None when
there is nothing to draw.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from orchestrator.results.analysis import Winner

__all__ = ["Chart", "metric_chart", "crossover_chart", "pareto_chart"]


@dataclass(frozen=True)
class Chart:
    name: str  # file stem: ``throughput`` -> charts/throughput.svg
    title: str
    svg: str  # a standalone SVG document, no XML prologue


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text (searchable, small)
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _plt().close(fig)
    text = buf.getvalue()
    text = re.sub(r"^<\?xml[^>]*>\s*", "", text)
    return re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)


#: each level kind's x axis: (what a chart is "by", the axis label)
AXIS = {"c": ("concurrency", "concurrency (requests in flight)"),
        "rate": ("request rate", "offered request rate (requests/s)"),
        "trace": ("trace speed-up", "trace replay speed-up (x)")}


def _log2_axis(ax: Any, levels: list[float], kind: str = "c") -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [f"{c:g}" for c in levels])
    ax.minorticks_off()
    ax.set_xlabel(AXIS[kind][1])


def legend(ax: Any) -> None:
    """The legend beside the plot, one label per line: legible at a dozen series and more
    (inside the axes, labels covered the lines and each other)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0.0, frameon=False, ncol=1 if len(labels) <= 22 else 2)


def metric_chart(df: pd.DataFrame, metric: str, title: str, name: str,
                 per_gpu: bool = False, kind: str = "c") -> Chart | None:
    """One line per configuration: ``metric`` against the levels of one kind
    (``c``: concurrency, ``rate``, ``trace``), divided by TP when ``per_gpu``."""
    if "level_kind" in df.columns:
        df = df[df["level_kind"] == kind]
    df = df.dropna(subset=[metric])
    if df.empty:
        return None
    x = "level_value" if "level_value" in df.columns else "concurrency"
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    bars = metric == "output_tok_s" and "round_min_tok_s" in df.columns
    for label, g in df.groupby("label"):
        g = g.sort_values(x)
        div = g["tp"] if per_gpu else 1
        y = g[metric] / div
        if bars:  # the spread of the level's rounds (its figure is their median)
            lo = (y - g["round_min_tok_s"].fillna(g[metric]) / div).clip(lower=0)
            hi = (g["round_max_tok_s"].fillna(g[metric]) / div - y).clip(lower=0)
            ax.errorbar(g[x], y, yerr=[lo, hi], marker="o", label=label, linewidth=1.2,
                        capsize=3)
        else:
            ax.plot(g[x], y, marker="o", label=label, linewidth=1.2)
    _log2_axis(ax, sorted(float(c) for c in df[x].unique()), kind)
    ax.set_ylabel(title + (" (bars: the rounds' spread)" if bars else ""))
    ax.set_title(f"{title} by {AXIS[kind][0]}")
    ax.grid(True, alpha=0.3)
    legend(ax)
    fig.tight_layout()
    return Chart(name, f"{title} by {AXIS[kind][0]}", _svg(fig))


def crossover_chart(ws: list[Winner], name: str = "crossover",
                    title: str = "Winner at each level") -> Chart | None:
    """A strip: one cell per level, coloured by its winner; cells whose lead is within the
    noise band are hatched."""
    ws = [w for w in ws if w.key]
    if not ws:
        return None
    plt = _plt()
    labels = list(dict.fromkeys(w.label or "" for w in ws))
    colours = plt.get_cmap("tab10")
    # a cell wide enough for its level's name and its figure at 7 pt (a dozen levels and
    # more: the strip grows rather than the names overlapping)
    width = max(8.5, 0.11 * max(len(w.name) for w in ws) * len(ws))
    fig, ax = plt.subplots(figsize=(width, 1.1))
    for i, w in enumerate(ws):
        k = labels.index(w.label or "")
        ax.barh(0, 1, left=i, color=colours(k % 10), edgecolor="white",
                hatch="//" if w.within_noise else None)
        ax.text(i + 0.5, 0, f"{(w.output_tok_s or 0):,.0f}", ha="center", va="center",
                fontsize=7, color="white")
    ax.set_xticks([i + 0.5 for i in range(len(ws))], [w.name for w in ws], fontsize=7)
    ax.set_xlabel("level (cell: the winner's output tok/s; hatched: within noise)")
    ax.set_yticks([])
    ax.set_xlim(0, len(ws))
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(k % 10)) for k in range(len(labels))]
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.5),
              ncol=1, frameon=False)
    ax.set_title(title)
    return Chart(name, title, _svg(fig))


def pareto_chart(df: pd.DataFrame, front_keys: set[str], regime: str,
                 name: str) -> Chart | None:
    """Throughput against TTFT p99 for every config at the regime's levels; the Pareto
    front (not beaten on both) drawn as a line."""
    df = df.dropna(subset=["output_tok_s", "ttft_p99_ms"])
    if df.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    on = df[df["key"].isin(front_keys)].sort_values("ttft_p99_ms")
    off = df[~df["key"].isin(front_keys)]
    ax.scatter(off["ttft_p99_ms"], off["output_tok_s"], color="#999", s=18,
               label="dominated")
    ax.plot(on["ttft_p99_ms"], on["output_tok_s"], marker="o", color="#d62728",
            label="Pareto front")
    for _, row in on.iterrows():
        ax.annotate(str(row["label"]), (row["ttft_p99_ms"], row["output_tok_s"]), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("TTFT p99 (ms, lower is better)")
    ax.set_ylabel("output tok/s (higher is better)")
    ax.set_title(f"Throughput vs latency: {regime}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return Chart(name, f"Throughput vs latency: {regime}", _svg(fig))


def capacity_chart(curves: dict[str, list[tuple[float, float, bool]]],
                   knees: dict[str, float | None], name: str = "slo_capacity"
                   ) -> Chart | None:
    """Goodput (output tok/s of the requests that met every SLO limit) against the
    offered rate, one line per config from its capacity probes (hollow: the probe missed
    the SLO share), its capacity at SLO marked by a dashed line."""
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    colours = plt.get_cmap("tab10")
    for i, (label, pts) in enumerate(sorted(curves.items())):
        pts = sorted(pts)
        colour = colours(i % 10)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, linewidth=1.2,
                label=label)
        for rate, good, held in pts:
            ax.plot(rate, good, marker="o", color=colour,
                    markerfacecolor=colour if held else "white")
        knee = knees.get(label)
        if knee is not None:
            ax.axvline(knee, color=colour, linestyle="--", linewidth=0.8)
    ax.set_xlabel("offered request rate (requests/s; dashed: capacity at SLO)")
    ax.set_ylabel("goodput (output tok/s meeting the SLO)")
    ax.set_title("Goodput against rate (filled: the SLO share held)")
    ax.grid(True, alpha=0.3)
    legend(ax)
    fig.tight_layout()
    return Chart(name, "Goodput against rate", _svg(fig))
