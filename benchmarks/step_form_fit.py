"""The step model's forms, fitted in-sample on every real level: which form fits better.

    .venv/bin/python benchmarks/step_form_fit.py --form async
    .venv/bin/python benchmarks/step_form_fit.py --form sync \
        --set graph_us_per_layer=79,sched_us_per_seq=7.3,step_us=110,launch_overlap=0.69

``--form`` sets the vLLM profile's ``async_scheduling`` (``async``: the scheduler's CPU work
hides under the GPU's with the launches, vLLM 0.26's default; ``sync``: it adds after
them, the model before 2026-12-07); ``--set`` the starting values of fitted factors (by
default the shipped profile's); ``--vary`` the factors the fit moves, every other one held;
``--exclude`` leaves sweeps out.
Data: what ``benchmarks/crossval.py`` scores (``crossval_data.discover``). Prints the
in-sample mean |error| of throughput and ITL before and after the fit (``calibrate``'s
``error_before`` / ``error_after``) and, after it, each shape's mean and worst error per
metric. Its runs of 2026-12-07: benchmarks/measured/crossval-20261207/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from crossval_data import discover, parse_factors, point_label  # noqa: E402

from actors.sim import profiles  # noqa: E402
from actors.sim.perf import FITTABLE  # noqa: E402
from orchestrator.planning.model_error import shape_key  # noqa: E402
from orchestrator.results.calibrate import calibrate, predict_points  # noqa: E402

HOST_SIDE = "graph_us_per_layer,sched_us_per_seq,step_us,launch_overlap"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--form", choices=("async", "sync"), default="async")
    ap.add_argument("--vary", default=HOST_SIDE, help="comma-separated factors the fit moves")
    ap.add_argument("--set", default="", metavar="K=V,...", help="starting values")
    ap.add_argument("--max-evals", type=int, default=60)
    ap.add_argument("--exclude", default="", metavar="TEXT,...",
                    help="leave out the sweeps whose path holds any of these (a fit that has "
                         "not seen them, to predict them after)")
    a = ap.parse_args()
    vllm = profiles.PROFILES["vllm"]
    profiles.PROFILES["vllm"] = vllm.model_copy(update={"async_scheduling": a.form == "async"})
    base = parse_factors(a.set)
    vary = [k for k in a.vary.split(",") if k]
    data = discover()
    drop = [t for t in a.exclude.split(",") if t]
    pts = [p for p in data.points if not any(t in data.sources[id(p)] for t in drop)]
    t0 = time.monotonic()
    fit = calibrate(pts, pts[0].spec, pts[0].shape, "vllm",  # type: ignore[arg-type]
                    max_evals=a.max_evals, base=base,
                    freeze=frozenset(k for k in FITTABLE if k not in vary))
    print(f"{len(pts)} levels, form {a.form}: fitted "
          + ", ".join(f"{k}={fit.fitted[k]:.4g}" for k in fit.varied)
          + f" ({fit.evaluations} evaluations, {time.monotonic() - t0:.0f} s)")
    print(f"in-sample mean |error| of throughput and ITL: {fit.error_before:.1%} before, "
          f"{fit.error_after:.1%} after")
    preds = predict_points(pts, pts[0].spec, pts[0].shape, "vllm",  # type: ignore[arg-type]
                           fit.fitted)
    by: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for p, q in zip(pts, preds, strict=True):
        for m in ("output_tok_s", "itl_p50_ms", "ttft_p50_ms"):
            if m in p.measured and q.get(m):
                by.setdefault((shape_key(p.shape), m), []).append(  # type: ignore[arg-type]
                    (q[m] / p.measured[m] - 1, point_label(p)))
    for (shape, m), errs in sorted(by.items()):
        worst = max(errs, key=lambda e: abs(e[0]))
        print(f"  {shape:34s} {m:13s} n={len(errs):3d} mean "
              f"{sum(abs(e) for e, _ in errs) / len(errs):6.1%} worst {worst[0]:+7.1%} "
              f"({worst[1]})")


if __name__ == "__main__":
    main()
