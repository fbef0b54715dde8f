#!/usr/bin/env python3
"""The worst held-out levels of a cross-validation, beside how well their node repeats itself.

    .venv/bin/python benchmarks/crossval_worst.py \
        benchmarks/measured/crossval-20261207e/crossval.json          # 1 s
    .venv/bin/python benchmarks/crossval_worst.py FILE --fold onnode --beyond 0.25

For each level of ``--fold`` (default: profiled on the point's node) whose output tok/s error
is beyond ``--beyond``, the same node's other measurements of the same engine state:

- **repeats**: the same settings, workload and concurrency measured again on that node (another
  sweep of the session);
- **capped twins**: with ``max_num_seqs`` below the concurrency, every level at or above it
  runs the same number of sequences in the engine (the rest wait), so the model predicts them
  the same; their measured throughput should be too.

The spread of those (max / min - 1) is what the node itself could not repeat: a model's error
on that level below the spread cannot be told from noise. Beside them, the level's own rounds
(each a full pass of its requests; the level's figure is their median) and how far the
prediction lies beyond the range they span (0 inside it), and its TTFT p50 measured and
predicted. Markdown to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from crossval_data import Dataset, config_group, discover, node_of, point_label  # noqa: E402

from actors.contracts.traffic import LevelKind  # noqa: E402
from orchestrator.results.calibrate import Point  # noqa: E402


def _state(p: Point) -> tuple:
    """What the engine runs at this level: the model, settings, workload and the sequences
    it holds (the model too: two shapes with the same settings are not one engine state)."""
    w = p.spec.workload if p.spec else None
    cap = p.trial.config.max_num_seqs or 256
    return (p.shape, config_group(p), w.prompt_tokens if w else 0,
            w.output_tokens if w else 0, min(p.concurrency, cap))


def round_range(p: Point) -> tuple[float, float] | None:
    """The lowest and highest output tok/s of the level's rounds (None: fewer than two)."""
    for lv in p.trial.levels:
        if lv.identity.kind is LevelKind.CONCURRENCY and lv.concurrency == p.concurrency:
            vals = [r.output_tok_s for r in lv.rounds if r.output_tok_s]
            return (min(vals), max(vals)) if len(vals) > 1 else None
    return None


def beyond_range(predicted: float, lo: float, hi: float) -> float:
    """How far ``predicted`` is outside [lo, hi], relative to the nearer end (0 inside)."""
    if predicted > hi:
        return predicted / hi - 1
    if predicted < lo:
        return predicted / lo - 1
    return 0.0


def _ttft(row: dict, fold: str) -> str:
    m, p = row["measured"].get("ttft_p50_ms"), row[fold].get("ttft_p50_ms")
    return "-" if not m or not p else f"{m:.0f} / {p:.0f}"


def fold_args(doc: str, beyond: float) -> argparse.Namespace:
    """The command line these scripts share: a crossval JSON, a fold, a threshold."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("crossval", type=Path)
    ap.add_argument("--fold", default="onnode")
    ap.add_argument("--beyond", type=float, default=beyond)
    return ap.parse_args()


def row_points(rows: list[dict], data: Dataset) -> list[Point]:
    """Each cross-validation row's measured point, found by its sweep and label (data
    measured since the file was written may be here too); exits naming a row not found."""
    by_key: dict[tuple[str, str], list[Point]] = {}
    for p in data.points:
        by_key.setdefault((data.sources.get(id(p), ""), point_label(p)), []).append(p)
    pts = []
    for r in rows:
        found = by_key.get((r.get("source", ""), r["point"]))
        if not found:
            sys.exit(f"{r['point']} of {r.get('source')} is not in the data found here")
        pts.append(found.pop(0))
    return pts


def main() -> None:
    a = fold_args(__doc__ or "", beyond=0.25)
    rows = json.loads(a.crossval.read_text())["rows"]
    data = discover()
    pts = row_points(rows, data)
    nodes = [node_of(p, data.sources.get(id(p), "")) for p in pts]
    same: dict[tuple, list[int]] = {}
    for i, p in enumerate(pts):
        same.setdefault((nodes[i], *_state(p)), []).append(i)
    print(f"| level ({a.fold}) | node | error | same engine state on that node: tok/s | "
          "spread | its rounds: tok/s | beyond them | TTFT p50 ms measured / predicted |")
    print("|---|---|---|---|---|---|---|---|")
    worst = sorted((i for i, r in enumerate(rows)
                    if abs((r.get("err_" + a.fold) or {}).get("output_tok_s") or 0) > a.beyond),
                   key=lambda i: -abs(rows[i]["err_" + a.fold]["output_tok_s"]))
    for i in worst:
        group = same[(nodes[i], *_state(pts[i]))]
        vals = [pts[j].measured["output_tok_s"] for j in group]
        spread = max(vals) / min(vals) - 1 if len(vals) > 1 else None
        seen = ", ".join(f"{pts[j].measured['output_tok_s']:.0f} (c={pts[j].concurrency})"
                         for j in group)
        rr = round_range(pts[i])
        rounds = beyond = "-"
        if rr is not None:
            rounds = f"{rr[0]:.0f}-{rr[1]:.0f}"
            beyond = f"{beyond_range(rows[i][a.fold]['output_tok_s'], *rr):+.1%}"
        print(f"| {rows[i]['point']} | {nodes[i]} | "
              f"{rows[i]['err_' + a.fold]['output_tok_s']:+.1%} | {seen} | "
              f"{'-' if spread is None else f'{spread:.1%}'} | {rounds} | {beyond} | "
              f"{_ttft(rows[i], a.fold)} |")


if __name__ == "__main__":
    main()
