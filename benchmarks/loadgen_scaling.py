"""Scaling: the load generator sharded over 1 and 2 processes (``LevelRunner(shards=N)``).

The unpaced minimal SSE server (cheap per token: it writes 16 tokens per call)
runs on core 0. One shard runs pinned to core 1; two shards run on cores 0-1
(this machine has two cores, so the second shard shares core 0 with the server:
the server's CPU share is printed next to the result). 256 streams, 256 output
tokens, 4 x 256 requests, lean transport.

    .venv/bin/python benchmarks/loadgen_scaling.py               # ~30 s
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import machine_note, run_ours, save, sse_server, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--step-ms", type=float, default=0.0)
    ap.add_argument("--transport", default="lean")
    args = ap.parse_args()
    ncpu = os.cpu_count() or 2
    rows = []
    with sse_server(args.step_ms, cpus="0") as srv:
        for shards, cpus in ((1, "1"), (2, "0-1" if ncpu <= 2 else "1-2")):
            r = run_ours(srv["url"], cpus=cpus, streams=args.streams, requests=args.requests,
                         shards=shards, transport=args.transport)
            rows.append({"shards": shards, "cpus": cpus, "tok_s": r["output_tok_s"],
                         "status": r["status"], "flags": ",".join(r["flags"]),
                         "cpu": r["client_cpu_frac"], "us_tok": r["us_per_token"]})
    for row in rows:
        row["scaling"] = row["tok_s"] / rows[0]["tok_s"]
    print(table(rows, [("shards", "shards", "d"), ("cpus", "cores", "s"),
                       ("tok_s", "tok/s", ".0f"), ("scaling", "x 1 shard", ".2f"),
                       ("cpu", "worst shard CPU", ".2f"), ("us_tok", "CPU us/tok", ".1f"),
                       ("status", "status", "s"), ("flags", "flags", "s")]))
    st = srv["stats"]
    if st:
        print(f"server: {st['tokens']} tokens, {st['cpu_s']:.1f} CPU s "
              f"({1e6 * st['cpu_s'] / max(st['tokens'], 1):.1f} us/token)")
    path = save("loadgen_scaling", {"machine": machine_note(), "args": vars(args),
                                    "rows": rows, "server": st})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
