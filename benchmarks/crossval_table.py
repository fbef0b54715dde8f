#!/usr/bin/env python3
"""The cross-validation's stages side by side, from their JSON (benchmarks/crossval.py).

    .venv/bin/python benchmarks/crossval_table.py benchmarks/results/crossval-*.json \\
        benchmarks/results/crossval.json

One row per stage (its ``--label``) and metric: mean |error| / worst for the default profile,
leave one configuration out, leave one prompt length out and the in-sample fit, with the
points outside the goal. Markdown, for benchmarks/README.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLS = ("default", "loco", "lopo", "insample")
NAMES = {"output_tok_s": "throughput", "itl_p50_ms": "ITL p50", "tpot_p50_ms": "TPOT p50",
         "ttft_p50_ms": "TTFT p50", "ttft_p99_ms": "TTFT p99"}


def cell(s: dict | None) -> str:
    if s is None:
        return "-"
    out = f"{s['mean_abs']:.1%} / {s['worst']:+.0%}"
    return out + (f" ({s['outside_goal']})" if s.get("outside_goal") is not None else "")


def table(paths: list[Path], metrics: tuple[str, ...]) -> str:
    lines = ["| stage | metric | default profile | leave one config out | "
             "leave one prompt length out | in-sample fit |", "|---|---|---|---|---|---|"]
    for path in paths:
        doc = json.loads(path.read_text())
        label = doc.get("label") or path.stem
        n = len(doc["rows"])
        for i, m in enumerate(metrics):
            by = doc["summary"].get(m)
            if by is None:
                continue
            stage = f"{label} ({n} points)" if i == 0 else ""
            lines.append(f"| {stage} | {NAMES[m]} | "
                         + " | ".join(cell(by.get(c)) for c in COLS) + " |")
    return "\n".join(lines)


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        sys.exit(__doc__)
    print(table(paths, ("output_tok_s", "itl_p50_ms", "ttft_p50_ms", "ttft_p99_ms",
                        "tpot_p50_ms")))


if __name__ == "__main__":
    main()
