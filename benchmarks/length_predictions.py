"""How the performance model predicts one node's levels when only the request's lengths change.

    .venv/bin/python benchmarks/length_predictions.py [--prefix h100-vllm-]

The sweeps under ``tests/fixtures/h200-sweeps/`` whose names start with ``--prefix`` (by
default the 2026-12-06 H100 node's: the 1B-like shape, BF16 with graphs, 1024 + 128, 512
and 1024 tokens and 128 + 128, one boot id) predicted twice: by the shipped vLLM profile, and
after a fit of the host's speed (``calibrate(host=True)``, as ``profile-model`` does) on
the c=1 levels and the longest outputs' c=64 level. Per level: output tok/s, ITL p50 and
TTFT p50, measured / predicted. Its output of 2026-12-06:
``benchmarks/measured/h100-lengths-20261206/predictions.txt``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from crossval_data import discover, point_label  # noqa: E402

from actors.sim.perf import FITTABLE, get_profile  # noqa: E402
from orchestrator.results.calibrate import Point, calibrate, predict_points  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "h200-sweeps"


def show(title: str, points: list[Point], factors: dict[str, float]) -> None:
    spec, shape = points[0].spec, points[0].shape
    assert spec is not None and shape is not None  # discover() gives every point both
    preds = predict_points(points, spec, shape, "vllm", factors)
    errs = []
    print(f"== {title}")
    for p, q in zip(points, preds, strict=True):
        m = p.measured
        err = q["output_tok_s"] / m["output_tok_s"] - 1
        errs.append(abs(err))
        print(f"  {point_label(p):45s} tok/s {m['output_tok_s']:8.0f} / {q['output_tok_s']:8.0f}"
              f" {100 * err:+6.1f}%  ITL p50 {m.get('itl_p50_ms', 0):5.2f} / "
              f"{q['itl_p50_ms']:5.2f} ms  TTFT p50 {m.get('ttft_p50_ms', 0):6.1f} / "
              f"{q['ttft_p50_ms']:6.1f} ms")
    print(f"  output tok/s: mean |error| {100 * sum(errs) / len(errs):.1f}%, "
          f"worst {100 * max(errs):.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", default="h100-vllm-")
    args = ap.parse_args()
    roots = sorted(d for d in FIXTURES.iterdir() if d.name.startswith(args.prefix))
    points = discover(roots).points
    if not points:
        raise SystemExit(f"no sweep under {FIXTURES} starts with {args.prefix!r}")
    shipped = {k: float(getattr(get_profile("vllm"), k)) for k in FITTABLE}
    show("the shipped profile", points, {})
    longest = max(p.spec.workload.output_tokens for p in points if p.spec)
    profile = [p for p in points if p.concurrency == 1 or (
        p.concurrency == 64 and p.spec and p.spec.workload.output_tokens == longest)]
    spec, shape = profile[0].spec, profile[0].shape
    assert spec is not None and shape is not None
    fit = calibrate(profile, spec, shape, "vllm", host=True, base=shipped)
    print(f"\nhost speed fitted on {len(profile)} levels: host_scale "
          f"{fit.fitted['host_scale']:.3f}\n")
    show("after the host-speed fit", points, fit.fitted)


if __name__ == "__main__":
    main()
