"""Scaling: the load generator sharded over 1 and 2 processes (``LevelRunner(shards=N)``).

The unpaced minimal SSE server (cheap per token: it writes 16 tokens per call; the C
one by default, ``--server python`` for the Python one) runs on core 0. One shard
runs pinned to core 1; two shards run on cores 0-1 (this machine has two cores, so
the second shard shares core 0 with the server: the server's CPU share over each
run is printed next to the result). 256 streams, 256 output tokens, 16 x 256
requests, lean transport.

    .venv/bin/python benchmarks/loadgen_scaling.py               # ~20 s
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import (  # noqa: E402
    DEFAULT_SERVER,
    machine_note,
    proc_cpu_s,
    run_ours,
    save,
    sse_server,
    table,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    # 16 per stream: a run of a few seconds, so process start and the first wave weigh little
    ap.add_argument("--requests", type=int, default=4096)
    ap.add_argument("--step-ms", type=float, default=0.0)
    ap.add_argument("--transport", default="lean")
    ap.add_argument("--server", choices=("c", "python"), default=DEFAULT_SERVER,
                    help=f"the minimal SSE server (default {DEFAULT_SERVER})")
    args = ap.parse_args()
    ncpu = os.cpu_count() or 2
    rows = []
    with sse_server(args.step_ms, cpus="0", kind=args.server) as srv:
        for shards, cpus in ((1, "1"), (2, "0-1" if ncpu <= 2 else "1-2")):
            srv0 = proc_cpu_s(srv["pid"])
            r = run_ours(srv["url"], cpus=cpus, streams=args.streams, requests=args.requests,
                         shards=shards, transport=args.transport)
            srv1 = proc_cpu_s(srv["pid"])
            rows.append({"shards": shards, "cpus": cpus, "tok_s": r["output_tok_s"],
                         "status": r["status"], "flags": ",".join(r["flags"]),
                         "cpu": r["client_cpu_frac"], "us_tok": r["us_per_token"],
                         "srv_cpu": (srv1 - srv0) / r["round_s"]
                         if srv0 is not None and srv1 is not None and r["round_s"] else None})
    for row in rows:
        row["scaling"] = row["tok_s"] / rows[0]["tok_s"]
    print(table(rows, [("shards", "shards", "d"), ("cpus", "cores", "s"),
                       ("tok_s", "tok/s", ".0f"), ("scaling", "x 1 shard", ".2f"),
                       ("cpu", "worst shard CPU", ".2f"), ("us_tok", "CPU us/tok", ".1f"),
                       ("srv_cpu", "server CPU", ".2f"),
                       ("status", "status", "s"), ("flags", "flags", "s")]))
    st = srv["stats"]
    if st:
        print(f"{args.server} server: {st['tokens']} tokens, {st['cpu_s']:.1f} CPU s "
              f"({1e6 * st['cpu_s'] / max(st['tokens'], 1):.1f} us/token)")
    path = save("loadgen_scaling", {"machine": machine_note(), "args": vars(args),
                                    "rows": rows, "server": st})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
