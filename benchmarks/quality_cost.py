#!/usr/bin/env python3
"""What a quality run costs per config, read from a finished sweep.

    .venv/bin/python benchmarks/quality_cost.py SWEEP [SWEEP ...]   # ids, prefixes or folders

For each trial with a quality run: lm-eval's wall time, its questions, seconds per question
(the whole run, lm-eval's start included, over its questions), the agreement probe's wall
time, and the trial's total wall for comparison. Writes benchmarks/results/quality_cost.json.
Nothing is run: the figures are what the sweep measured (``TaskScore.wall_s``,
``Agreement.wall_s``), so they are exactly what ``plan``'s quality estimate should match
(``orchestrator.planning.forecast.LM_EVAL_START_S`` and ``QUESTION_S``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.results.ledger import Ledger  # noqa: E402
from orchestrator.results.report import table_text  # noqa: E402


def rows_of(ledger: Ledger) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for r in ledger.results().values():
        q = r.quality
        if q is None or (q.task is None and q.agreement is None):
            continue
        t, a = q.task, q.agreement
        out.append({"sweep": ledger.sweep_id, "config": r.config.label(),
                    "hardware": r.hardware, "questions": t.n if t else 0,
                    "lm_eval_s": t.wall_s if t else None,
                    "s_per_question": t.wall_s / t.n if t and t.n else None,
                    "agreement_s": a.wall_s if a else None,
                    "agreement_prompts": a.n if a else 0, "trial_wall_s": r.wall_s})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+")
    rows = [row for s in ap.parse_args().sweeps for row in rows_of(Ledger.open(s))]
    if not rows:
        print("no trial with a quality run in these sweeps", file=sys.stderr)
        return 1

    def f(x: object, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    print(table_text(["config", "hardware", "questions", "lm-eval s", "s/question",
                      "agreement s", "trial wall s"],
                     [[str(r["config"]), str(r["hardware"]), str(r["questions"]),
                       f(r["lm_eval_s"], ".1f"), f(r["s_per_question"], ".3f"),
                       f(r["agreement_s"], ".1f"), f(r["trial_wall_s"], ".1f")] for r in rows]))
    out = ROOT / "benchmarks" / "results" / "quality_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
