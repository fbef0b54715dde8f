"""How the short profiles made on the H200 (2026-12-04) predict the levels they did not measure.

    .venv/bin/python benchmarks/profile_predictions.py

For each sweep of the 1B-like and 3B-like shapes, every level the profile did not measure
(c=1 and c=32 are the profile's own) predicted by the shipped profile and by the profile
``servesweep profile-model`` fitted on the node (its ``model-profile-vllm.json``): output
tok/s and TTFT p50 against the measurement. Its output of 2026-12-04:
``benchmarks/measured/h200-cliff-20261204/profile-predictions.txt``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from crossval_data import discover, point_label  # noqa: E402

from orchestrator.results.calibrate import predict_points  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "h200-sweeps"
ONE_B = "h200-vllm-h-profile-20261204-051102-034b"  # the node of sweep m, 05:05
THREE_B = "h200-vllm-i-profile-20261204-051728-13a1"
PAIRS = [("h200-vllm-h-20261203-075439-cfab", ONE_B), ("h200-vllm-i-20261203-080025-706d", THREE_B),
         ("h200-vllm-j-20261203-080832-9b6f", ONE_B), ("h200-vllm-m-20261204-014328-ade5", ONE_B),
         ("h200-vllm-m-20261204-050524-805e", ONE_B)]


def main() -> None:
    for sweep, profile_sweep in PAIRS:
        points = discover([FIXTURES / sweep]).points
        doc = json.loads((FIXTURES / profile_sweep / "model-profile-vllm.json").read_text())
        for label, factors in (("shipped", {}), ("profiled", doc["factors"])):
            preds = predict_points(points, points[0].spec, points[0].shape, "vllm", factors)
            errs, ttft_errs = [], []
            print(f"== {sweep} {label}")
            for p, pr in zip(points, preds):
                if p.concurrency in (1, 32):
                    continue
                e = pr["output_tok_s"] / p.measured["output_tok_s"] - 1
                t = pr["ttft_p50_ms"] / p.measured["ttft_p50_ms"] - 1
                errs.append(abs(e))
                ttft_errs.append(abs(t))
                print(f"  {point_label(p):55s} meas {p.measured['output_tok_s']:9.1f} "
                      f"pred {pr['output_tok_s']:9.1f} err {e:+.1%} ttft {t:+.1%}")
            print(f"  mean {sum(errs) / len(errs):.1%} worst {max(errs):.1%}  ttft mean "
                  f"{sum(ttft_errs) / len(ttft_errs):.1%}")


if __name__ == "__main__":
    main()
