"""Charts a person can read at a dozen configs: no two labels overlap in the SVG."""

from __future__ import annotations

import re
from itertools import combinations

import pandas as pd
import pytest

from orchestrator.results.charts import capacity_chart, metric_chart

pytestmark = pytest.mark.unit

_TEXT = re.compile(r'<text style="font-size: ([\d.]+)px[^"]*text-anchor: (\w+)" '
                   r'x="([-\d.]+)" y="([-\d.]+)" transform="rotate\(([-\d.]+)[^"]*"[^>]*>'
                   r"(.*?)</text>")


def boxes(svg: str) -> list[tuple[str, float, float, float, float]]:
    """Each horizontal text's (label, x0, y0, x1, y1), its width estimated at 0.6 em per
    character (DejaVu Sans averages less), its height one em above the baseline."""
    out = []
    for size, anchor, x, y, rot, label in _TEXT.findall(svg):
        if float(rot) != 0:
            continue  # the rotated axis label has a column of its own
        f, w = float(size), 0.6 * float(size) * len(label)
        x0 = float(x) - (w if anchor == "end" else w / 2 if anchor == "middle" else 0)
        out.append((label, x0, float(y) - f, x0 + w, float(y)))
    return out


def overlaps(svg: str) -> list[tuple[str, str]]:
    return [(a[0], b[0]) for a, b in combinations(boxes(svg), 2)
            if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]]


def frame(configs: int) -> pd.DataFrame:
    rows = []
    for k in range(configs):
        for c in (1, 4, 16, 64, 256):
            rows.append({"key": f"k{k}", "tp": 1 + k % 2, "concurrency": c, "level_kind": "c",
                         "level_value": c,
                         "label": f"vllm tp{1 + k % 2} bf16 kv=fp8 graphs "
                                  f"max_num_seqs={8 * (k + 1)}",
                         "output_tok_s": 50.0 * c + 7 * k, "round_min_tok_s": 48.0 * c,
                         "round_max_tok_s": 52.0 * c})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("configs", [3, 12, 24])
def test_a_dozen_configs_and_more_keep_every_label_apart(configs: int):
    chart = metric_chart(frame(configs), "output_tok_s", "Output tok/s", "throughput")
    assert chart is not None
    labels = [b[0] for b in boxes(chart.svg)]
    assert sum("max_num_seqs=" in x for x in labels) == configs  # every series named
    assert overlaps(chart.svg) == []
    assert chart.svg.count('id="LineCollection') >= configs  # the rounds' spread as bars


def test_the_capacity_chart_keeps_its_labels_apart():
    curves = {f"config {k} with a long label max_num_seqs={8 * k}": [
        (r, 10.0 * r * (1 - 0.01 * k), r < 8) for r in (1, 2, 4, 6, 8, 12)] for k in range(12)}
    chart = capacity_chart(curves, {k: 6.0 for k in curves})
    assert chart is not None and overlaps(chart.svg) == []


def test_the_overlap_check_sees_an_overlap():
    svg = ('<text style="font-size: 7px; font-family: x; text-anchor: start" x="10" y="10" '
           'transform="rotate(-0 10 10)">first label</text>'
           '<text style="font-size: 7px; font-family: x; text-anchor: start" x="12" y="12" '
           'transform="rotate(-0 12 12)">second label</text>')
    assert overlaps(svg) == [("first label", "second label")]


def test_the_crossover_strip_names_a_dozen_levels_apart():
    from orchestrator.results.analysis import Winner

    ws = [Winner(1, f"k{i % 5}", f"vllm config {i % 5}", 1000.0 * r, 1, 2, 3, None, None,
                 False, 2, level=f"rate={r}/s")
          for i, r in enumerate([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])]
    from orchestrator.results.charts import crossover_chart

    chart = crossover_chart(ws)
    assert chart is not None and overlaps(chart.svg) == []
    assert all(f">rate={r}/s<" in chart.svg for r in (1, 2048))
