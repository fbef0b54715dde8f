#!/usr/bin/env python3
"""Does one profile level above vLLM's output chunk predict a node's front end? Per sweep.

    .venv/bin/python benchmarks/profile_above_chunk.py [SWEEP_DIR ...] [--crossval FILE]
        # default: every sweep under tests/fixtures/h200-sweeps/ with such a level; ~1 min

What ``node_prediction.py`` does for one sweep (the committed leave-one-model-out fit of the
sweep's model shape, then ``calibrate(host=True)`` on the sweep's own profile levels), twice:

- **c=1, 32**: the short profile as ``profile-model`` measures it;
- **+ above the chunk**: the same plus the BF16 / auto-KV graphs config's level above the
  output chunk (of those measured, the nearest 192; ``max_num_seqs`` 256). Such a level
  splits every step's outputs, so ``calibrate`` fits the split cost too.

Both are scored on the same levels: every level of the sweep but the union of both
profiles. Per sweep: output tok/s mean |error| and worst, and the same over the levels above
the chunk alone. Then the same over all sweeps' levels, and per sweep the reference
config's ITL at c=256 over its ITL at c=1. Markdown to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from crossval_data import discover  # noqa: E402
from node_prediction import PROFILE_LEVELS, _newest_crossval, is_reference  # noqa: E402

from actors.sim.perf import get_profile  # noqa: E402
from orchestrator.planning.model_error import shape_key  # noqa: E402
from orchestrator.results.calibrate import Point, calibrate, predict_points  # noqa: E402

#: vLLM's output chunk, as the sim's vLLM profile holds it (VLLM_V1_OUTPUT_PROC_CHUNK_SIZE)
CHUNK = get_profile("vllm").output_chunk or 0


def above_chunk_level(points: list[Point]) -> int | None:
    levels = sorted({p.concurrency for p in points if is_reference(p) and p.concurrency > CHUNK})
    if not levels:
        return None
    return min(levels, key=lambda c: (abs(c - 1.5 * CHUNK), c))


def _errors(points: list[Point], start: dict, profile: list[Point],
            scored: list[Point]) -> list[float]:
    shape = points[0].shape
    fit = calibrate(profile, profile[0].spec, shape, "vllm", base=start,  # type: ignore[arg-type]
                    host=True)
    preds = predict_points(scored, scored[0].spec, shape, "vllm",  # type: ignore[arg-type]
                           fit.fitted)
    return [q["output_tok_s"] / p.measured["output_tok_s"] - 1 for p, q in zip(scored, preds)]


def _summary(errs: list[float]) -> str:
    if not errs:
        return "-"
    return f"{statistics.mean(map(abs, errs)):.1%} / {max(errs, key=abs):+.1%}"


def itl_ratio_rows(sweeps: list[Path]) -> list[str]:
    """Per sweep, the reference config's ITL p50 at c=1 and at c=256 and their ratio: how
    much slower a stream is at 256 (split steps, front-end bound) than alone on that node."""
    out = []
    for sweep in sweeps:
        ref = {p.concurrency: p for p in discover([sweep]).points if is_reference(p)}
        lo, hi = ref.get(1), ref.get(256)
        if lo and hi and lo.measured.get("itl_p50_ms") and hi.measured.get("itl_p50_ms"):
            a, b = lo.measured["itl_p50_ms"], hi.measured["itl_p50_ms"]
            out.append(f"| {sweep.name} | {a:.2f} | {b:.2f} | {b / a:.1f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", type=Path, nargs="*")
    ap.add_argument("--crossval", type=Path, default=None)
    a = ap.parse_args()
    cv = json.loads((a.crossval or _newest_crossval()).read_text())
    sweeps = a.sweeps or sorted((ROOT / "tests" / "fixtures" / "h200-sweeps").glob("*-vllm-*"))
    print("| sweep | extra level | scored (above chunk) | c=1, 32: mean / worst | + extra | "
          "above chunk, c=1, 32 | above chunk, + extra |")
    print("|---|---|---|---|---|---|---|")
    total: dict[str, list[float]] = {"a": [], "b": [], "a_hi": [], "b_hi": []}
    for sweep in sweeps:
        points = [p for p in discover([sweep]).points if p.trial.config.tp == 1]
        extra = above_chunk_level(points)
        if extra is None or not points or points[0].shape is None:
            continue
        lomo = next((f for f in cv["folds"] if f["kind"] == "lomo"
                     and f["name"] == shape_key(points[0].shape)), None)
        if lomo is None:
            continue
        base = [p for p in points if p.concurrency in PROFILE_LEVELS]
        plus = base + [p for p in points if p.concurrency == extra and is_reference(p)]
        scored = [p for p in points if p not in plus]
        if not base or not scored:
            continue
        ea = _errors(points, dict(lomo["fitted"]), base, scored)
        eb = _errors(points, dict(lomo["fitted"]), plus, scored)
        hi = [i for i, p in enumerate(scored)
              if min(p.concurrency, p.trial.config.max_num_seqs or 256) > CHUNK]
        total["a"] += ea
        total["b"] += eb
        total["a_hi"] += [ea[i] for i in hi]
        total["b_hi"] += [eb[i] for i in hi]
        print(f"| {sweep.name} | c={extra} | {len(scored)} ({len(hi)}) | {_summary(ea)} | "
              f"{_summary(eb)} | {_summary([ea[i] for i in hi])} | "
              f"{_summary([eb[i] for i in hi])} |")
    print(f"| all | | {len(total['a'])} ({len(total['a_hi'])}) | {_summary(total['a'])} | "
          f"{_summary(total['b'])} | {_summary(total['a_hi'])} | {_summary(total['b_hi'])} |")
    for name, errs in (("c=1, 32", total["a"]), ("+ extra", total["b"])):
        print(f"\n{name}: levels beyond 25%: {sum(abs(e) > 0.25 for e in errs)} of {len(errs)}")
    print("\n| sweep | ITL p50 at c=1, ms | at c=256 | ratio |\n|---|---|---|---|")
    print("\n".join(itl_ratio_rows(sweeps)))


if __name__ == "__main__":
    main()
