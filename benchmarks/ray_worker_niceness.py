"""What Ray's worker niceness costs a trial on a busy host.

Ray starts its workers at nice 15 (``worker_niceness``) and every process they start
inherits it: the engine host's engine, the load generator, its spawned shards. This
times what a sharded level does first, a ``spawn`` of a child process from inside a
Ray actor, with the workers at 15 (Ray's default) and at 0 (what ``connect_ray`` sets
for a local Ray), with ``--loops`` busy loops (``yes > /dev/null``) beside it.

    .venv/bin/python benchmarks/ray_worker_niceness.py --loops 2 --reps 3

Prints one line per niceness (the actor's niceness, the spawn's min / median / max
seconds) and writes ``benchmarks/results/ray_worker_niceness.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

from orchestrator.execution.controller import WORKER_NICENESS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _spawn_s() -> float:
    """One ``spawn`` child (importing what the worker's main module imports) to its end."""
    t0 = time.monotonic()
    p = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    return time.monotonic() - t0


@ray.remote(num_cpus=0)
class _Worker:
    def nice(self) -> int:
        return os.nice(0)

    def spawn_s(self) -> float:
        return _spawn_s()


def measure(niceness: int, reps: int) -> dict:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", _system_config={"worker_niceness": niceness})
    try:
        actor = _Worker.remote()  # type: ignore[attr-defined]
        nice = ray.get(actor.nice.remote())
        times = [ray.get(actor.spawn_s.remote()) for _ in range(reps)]
    finally:
        ray.shutdown()
    return {"worker_niceness": niceness, "actor_nice": nice, "spawn_s": times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=2, help="busy loops beside it")
    ap.add_argument("--reps", type=int, default=3, help="spawns per niceness")
    args = ap.parse_args()
    loops = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.loops)]
    try:
        bare = [_spawn_s() for _ in range(args.reps)]
        rows = [measure(n, args.reps) for n in (15, WORKER_NICENESS)]  # Ray's, ours
    finally:
        for p in loops:
            p.kill()
            p.wait()
    print(f"busy loops: {args.loops}; cpus: {os.cpu_count()}")
    print(f"  outside Ray (nice {os.nice(0)}): spawn median {statistics.median(bare):.2f} s")
    for r in rows:
        t = r["spawn_s"]
        print(f"  worker_niceness {r['worker_niceness']:>2} (actor at nice {r['actor_nice']}): "
              f"spawn {min(t):.2f} / {statistics.median(t):.2f} / {max(t):.2f} s")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ray_worker_niceness.json").write_text(json.dumps(
        {"loops": args.loops, "cpus": os.cpu_count(), "bare_spawn_s": bare, "rows": rows},
        indent=1))


if __name__ == "__main__":
    main()
