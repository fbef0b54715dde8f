"""Two trees of servesweep's load generator, interleaved against one server per step.

On a noisy VM two runs of one tree vary by more than most changes between trees, so a
change is measured against the tree before it in the same minutes: for each step, one
paced C server (core 0) and, alternately, each tree's ``loadgen_common.py ours`` (core 1,
the tree's own code and read pass: build it there first). Prints one row per run and,
per step, each tree's reading us/token (min / median / max) and in how many pairs the
second tree was cheaper.

    git worktree add /tmp/before <rev>
    (cd /tmp/before && ../main/.venv/bin/python setup.py build_ext --inplace -q)
    .venv/bin/python benchmarks/loadgen_ab.py /tmp/before . --steps 2,4 --format asked --reps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import PY, machine_note, pinned, save, sse_server, table  # noqa: E402


def _ours(tree: Path, url: str, streams: int, requests: int) -> dict:
    cfg = json.dumps({"url": url, "streams": streams, "requests": requests})
    out = subprocess.run(pinned([PY, str(tree / "benchmarks" / "loadgen_common.py"), "ours",
                                 cfg], "1"), capture_output=True, text=True, timeout=600,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs=2, type=Path, help="the tree before, then the tree after")
    ap.add_argument("--steps", default="2,4,10", help="server steps in ms")
    ap.add_argument("--format", default="asked", help="asked, text or ids")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3, help="pairs per step")
    args = ap.parse_args()
    trees = [t.resolve() for t in args.trees]
    rows: list[dict] = []
    for step in [float(s) for s in args.steps.split(",")]:
        with sse_server(step, cpus="0", kind="c", fmt=args.format) as srv:
            for rep in range(args.reps):
                for i, tree in enumerate(trees):
                    r = _ours(tree, srv["url"], args.streams, args.requests)
                    rows.append(dict(step_ms=step, rep=rep, tree=i, path=str(tree),
                                     us=r["us_stream_per_token"], per_read=r["tokens_per_read"],
                                     agg=r["us_aggregate_per_token"], passes=r.get("passes"),
                                     waits=r.get("waits"), lag=r["loop_lag_p99_ms"]))
                    print(f"{step:g} ms rep {rep} tree {i}: {rows[-1]['us']:.2f} us/tok, "
                          f"{rows[-1]['per_read']:.3f} tok/read", flush=True)
    print(table(rows, [("step_ms", "step ms", "g"), ("rep", "rep", "d"), ("tree", "tree", "d"),
                       ("us", "reading us/tok", ".2f"), ("per_read", "tok/read", ".3f"),
                       ("agg", "aggregation us/tok", ".2f"), ("passes", "passes", "d"),
                       ("waits", "waits", "d"), ("lag", "lag p99 ms", ".1f")]))
    wins = total = 0
    for step in sorted({r["step_ms"] for r in rows}):
        by = [sorted(r["us"] for r in rows if r["step_ms"] == step and r["tree"] == i)
              for i in (0, 1)]
        pairs = [(a["us"], b["us"]) for a, b in zip(
            (r for r in rows if r["step_ms"] == step and r["tree"] == 0),
            (r for r in rows if r["step_ms"] == step and r["tree"] == 1))]
        won = sum(1 for a, b in pairs if b < a)
        wins, total = wins + won, total + len(pairs)
        print(f"{step:g} ms: before {by[0][0]:.2f} / {statistics.median(by[0]):.2f} / "
              f"{by[0][-1]:.2f}, after {by[1][0]:.2f} / {statistics.median(by[1]):.2f} / "
              f"{by[1][-1]:.2f} us/tok (min / median / max); after cheaper in {won} of "
              f"{len(pairs)}")
    print(f"after cheaper in {wins} of {total} pairs")
    meta = vars(args) | {"trees": [str(t) for t in trees]}
    print(f"wrote {save('loadgen_ab', {'machine': machine_note(), 'rows': rows, 'args': meta})}")


if __name__ == "__main__":
    main()
