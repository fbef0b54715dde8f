#!/usr/bin/env python3
"""A new sweep predicted before it joins the data: the committed fit, then its own profile.

    .venv/bin/python benchmarks/node_prediction.py SWEEP_DIR [--crossval FILE] [--set K=V,...]

What `crossval.py`'s "profiled on the point's node" fold does, for one sweep the committed
cross-validation has not seen: start from that file's leave-one-model-out fit of the sweep's
model shape (the model never profiled), fit ``host_scale`` alone on the sweep's own c=1 and
c=32 levels (``calibrate(host=True)``, what ``profile-model`` does), and predict its other
levels. Prints measured and predicted output tok/s, ITL and TTFT p50 per level, the errors,
and the precision effects (FP8 weights, FP8 KV against BF16 at the same level). ``--set``
overrides factors of that fit before the profile (e.g. a factor the model had not yet, at 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from crossval_data import discover, parse_factors, point_label  # noqa: E402

from orchestrator.planning.model_error import shape_key  # noqa: E402
from orchestrator.results.calibrate import Point, calibrate, predict_points  # noqa: E402

PROFILE_LEVELS = (1, 32)
METRICS = ("output_tok_s", "itl_p50_ms", "ttft_p50_ms")


def is_reference(p: Point) -> bool:
    """The config a profile level above the output chunk is measured on: TP 1, BF16, auto
    KV, CUDA graphs, vLLM's default ``max_num_seqs`` (256), no extras."""
    c = p.trial.config
    return (c.tp == 1 and c.weights == "bf16" and c.kv_dtype == "auto" and c.cuda_graphs
            and c.max_num_seqs in (None, 256) and not c.extras)


def _newest_crossval() -> Path:
    return sorted((ROOT / "benchmarks" / "measured").glob("crossval-*/crossval.json"))[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--crossval", type=Path, default=None,
                    help="the cross-validation whose lomo fit to start from (default: the "
                         "newest committed one)")
    ap.add_argument("--set", default="", metavar="K=V,...",
                    help="override factors of the starting fit")
    ap.add_argument("--extra-level", type=int, default=None, metavar="C",
                    help="add the BF16 / auto-KV config's level at concurrency C to the "
                         "profile (a level above the output chunk: the front end's speed)")
    a = ap.parse_args()
    cv_path = (a.crossval or _newest_crossval()).resolve()
    cv = json.loads(cv_path.read_text())
    points = discover([a.sweep]).points
    if not points:
        raise SystemExit(f"{a.sweep}: no measured levels")
    shape = points[0].shape
    assert shape is not None
    key = shape_key(shape)
    lomo = next((f for f in cv["folds"] if f["kind"] == "lomo" and f["name"] == key), None)
    if lomo is None:
        raise SystemExit(f"{cv_path}: no leave-one-model-out fold for {key}")
    def profiled(p: Point) -> bool:
        return p.concurrency in PROFILE_LEVELS or (p.concurrency == a.extra_level
                                                   and is_reference(p))
    profile = [p for p in points if profiled(p)]
    rest = [p for p in points if not profiled(p)]
    start = dict(lomo["fitted"])
    start.update(parse_factors(a.set))
    fit = calibrate(profile, profile[0].spec, shape, "vllm",  # type: ignore[arg-type]
                    base=start, host=True)
    preds = predict_points(rest, rest[0].spec, shape, "vllm", fit.fitted)  # type: ignore[arg-type]
    print(f"{a.sweep.name}: {key}; start: {cv_path.relative_to(ROOT)} lomo fit; profile on "
          f"{len(profile)} levels (c={', '.join(map(str, PROFILE_LEVELS))}"
          f"{f', BF16 c={a.extra_level}' if a.extra_level else ''}): host_scale "
          f"{fit.fitted['host_scale']:.3f}, frontend_split_tok_us "
          f"{fit.fitted['frontend_split_tok_us']:.1f}\n")
    print("| level | measured tok/s | predicted | error | ITL p50 measured / predicted | "
          "TTFT p50 measured / predicted |")
    print("|---|---|---|---|---|---|")
    errs: dict[str, list[float]] = {m: [] for m in METRICS}
    by: dict[tuple[str, int], float] = {}
    for p, q in zip(rest, preds):
        m = p.measured
        for k in METRICS:
            if m.get(k) and q.get(k):
                errs[k].append(q[k] / m[k] - 1)
        c = p.trial.config
        by[(f"{c.weights}/{c.kv_dtype}", p.concurrency)] = m["output_tok_s"]
        by[(f"pred {c.weights}/{c.kv_dtype}", p.concurrency)] = q["output_tok_s"]
        print(f"| {point_label(p)} | {m['output_tok_s']:.0f} | {q['output_tok_s']:.0f} | "
              f"{q['output_tok_s'] / m['output_tok_s'] - 1:+.1%} | "
              f"{m.get('itl_p50_ms', 0):.2f} / {q['itl_p50_ms']:.2f} | "
              f"{m.get('ttft_p50_ms', 0):.0f} / {q['ttft_p50_ms']:.0f} |")
    print()
    for k in METRICS:
        v = errs[k]
        if v:
            print(f"{k}: mean |error| {statistics.mean(map(abs, v)):.1%}, worst "
                  f"{max(v, key=abs):+.1%} ({len(v)} levels)")
    print("\nprecision effects against bf16/auto at the same level (measured, predicted):")
    for (cfg, c), v in sorted(by.items(), key=lambda t: (t[0][1], t[0][0])):
        base = by.get(("bf16/auto", c))
        if cfg.startswith("pred") or cfg == "bf16/auto" or base is None:
            continue
        pb, pv = by[("pred bf16/auto", c)], by[(f"pred {cfg}", c)]
        me, pe = v / base - 1, pv / pb - 1
        sign = "" if abs(me) <= 0.05 else (" right sign" if me * pe > 0 else " WRONG sign")
        print(f"  c={c} {cfg}: {me:+.1%}, {pe:+.1%}{sign}")


if __name__ == "__main__":
    main()
