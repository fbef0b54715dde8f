"""Accuracy: our client's TTFT and ITL against the sim's ground truth, at 256 streams.

The sim (``--trace``) records the CLOCK_MONOTONIC time it wrote every token, per
``X-Request-Id``; our client stamps reads with ``perf_counter`` (the same clock on
Linux). Server pinned to core 0, client to core 1, time scale 1 (real time), one
token per chunk, 256 concurrent streams (well below the client's capacity: the
sim's 8B/H100 decode step at batch 256 offers ~15-20k tok/s).

For every measured request: truth TTFT = first token written - request sent (the
client's own start stamp), truth ITL = gaps between writes of consecutive tokens.
Reported: p50 TTFT and p50 ITL, client vs truth, their difference (target: within
0.5 ms), and the distribution of the per-token observation delay (arrival - write).

    .venv/bin/python benchmarks/loadgen_accuracy.py              # ~30 s
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import machine_note, run_ours, save, sim_server, table  # noqa: E402

from actors.loadgen.stats import percentile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--transport", default="lean")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            sim_server(Path(tmp), time_scale=1.0, trace=True, cpus="0") as srv:
        r = run_ours(srv["url"], cpus="1", streams=args.streams, requests=args.streams,
                     prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                     transport=args.transport, records=True)
        with urllib.request.urlopen(srv["url"] + "/sim/trace", timeout=30) as resp:
            trace = json.loads(resp.read())
    ttft_c, ttft_t, itl_c, itl_t, delay = [], [], [], [], []
    matched = 0
    for rnd, index, start, first, arrivals, counts in r["records"]:
        writes = trace.get(f"0-{rnd}-{index}")
        if rnd < 0 or not writes or first is None:
            continue
        matched += 1
        ttft_c.append(first - start)
        ttft_t.append(writes[0] - start)
        tok_arrival = [t for t, k in zip(arrivals, counts) for _ in range(k)]
        for j in range(1, len(arrivals)):
            itl_c.extend([(arrivals[j] - arrivals[j - 1]) / counts[j]] * counts[j])
        itl_t.extend(b - a for a, b in zip(writes, writes[1:]))
        delay.extend(a - w for a, w in zip(tok_arrival, writes))
    ms = 1e3
    rows = [
        {"metric": "TTFT p50", "client": ms * percentile(ttft_c, 50),
         "truth": ms * percentile(ttft_t, 50)},
        {"metric": "ITL p50", "client": ms * percentile(itl_c, 50),
         "truth": ms * percentile(itl_t, 50)},
        {"metric": "TTFT p99", "client": ms * percentile(ttft_c, 99),
         "truth": ms * percentile(ttft_t, 99)},
        {"metric": "ITL p99", "client": ms * percentile(itl_c, 99),
         "truth": ms * percentile(itl_t, 99)},
    ]
    for row in rows:
        row["delta"] = row["client"] - row["truth"]
    print(f"{matched} requests x {args.output_tokens} tokens at {args.streams} streams; "
          f"client {r['status']} {r['flags']}, {r['output_tok_s']:.0f} tok/s, "
          f"client CPU {r['client_cpu_frac']:.2f}, loop lag p99 {r['loop_lag_p99_ms']:.2f} ms")
    print(table(rows, [("metric", "metric", "s"), ("client", "client ms", ".3f"),
                       ("truth", "server truth ms", ".3f"), ("delta", "delta ms", "+.3f")]))
    d = {q: ms * percentile(delay, q) for q in (50, 90, 99)}
    print("observation delay (arrival - write): "
          + ", ".join(f"p{q} {v:.3f} ms" for q, v in d.items()))
    ok = all(abs(row["delta"]) <= 0.5 for row in rows[:2])
    print(f"target |delta| <= 0.5 ms at p50: {'met' if ok else 'NOT met'}")
    path = save("loadgen_accuracy", {
        "machine": machine_note(), "args": vars(args), "rows": rows, "delay_ms": d,
        "requests": matched, "client": {k: v for k, v in r.items() if k != "records"},
        "target_met": ok})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
