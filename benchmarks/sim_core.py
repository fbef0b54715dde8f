#!/usr/bin/env python3
"""CPU cost of the sim's model core (scheduler + step model, no HTTP, no clock).

Target (issue 3): one level of 256 concurrent streams x 256 output tokens in well under a
second of CPU.   usage: .venv/bin/python benchmarks/sim_core.py [--streams 256] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import time

from actors.contracts.hardware import get_hardware
from actors.contracts.shapes import get_preset
from actors.sim.perf import SimConfig
from actors.sim.predict import build_engine, simulate_closed_loop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rows = []
    for profile in ("vllm", "trtllm"):
        cpu = []
        for _ in range(a.repeat):
            engine, _ = build_engine(get_preset("llama-3.1-8b"), get_hardware("h100-sxm"),
                                     profile, SimConfig())
            t0 = time.process_time()
            pred = simulate_closed_loop(engine, a.streams, a.streams, a.prompt, a.tokens)
            cpu.append(time.process_time() - t0)
        cpu.sort()
        rows.append({"profile": profile, "streams": a.streams, "tokens": a.tokens,
                     "iterations": engine.iterations, "cpu_s_median": round(cpu[len(cpu) // 2], 4),
                     "cpu_s_min": round(cpu[0], 4),
                     "tokens_per_cpu_s": round(a.streams * a.tokens / cpu[len(cpu) // 2]),
                     "sim_seconds": round(pred.duration_s, 3)})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
