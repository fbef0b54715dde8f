"""What one wake-up costs a process on this machine, in its own CPU time.

A client that sleeps between reads pays for every wake-up: the kernel's way back from
idle, cold caches and TLBs, and the event loop's turn. On a bare-metal host that is a few
microseconds; on a nested VM it can be a hundred times that, and it then sets what a
slow token step costs per token. Two rows per sleep length:

- ``epoll``: a bare ``epoll.poll(timeout)`` on an empty set, in a plain loop;
- ``asyncio``: a timer callback that re-arms itself (``loop.call_at``), as
  ``actors.loadgen.selfcheck.LagMonitor`` probes the loop.

Columns: the sleep, wake-ups, CPU microseconds per wake-up, and the share of one core that
a probe at that period costs.

    .venv/bin/python benchmarks/loadgen_wakeups.py            # ~20 s, pinned to core 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import machine_note, save, table  # noqa: E402


def _epoll(sleep_s: float, seconds: float) -> tuple[int, float]:
    ep = select.epoll()
    n = max(int(seconds / sleep_s), 50)
    c0 = time.process_time()
    for _ in range(n):
        ep.poll(sleep_s)
    return n, time.process_time() - c0


def _asyncio(sleep_s: float, seconds: float) -> tuple[int, float]:
    async def run() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        count = [0]

        def tick() -> None:
            count[0] += 1
            handle[0] = loop.call_at(loop.time() + sleep_s, tick)

        c0 = time.process_time()
        handle = [loop.call_at(loop.time() + sleep_s, tick)]
        await asyncio.sleep(seconds)
        handle[0].cancel()
        return count[0], time.process_time() - c0
    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sleeps-ms", default="1,2,5,10,20,25,50")
    ap.add_argument("--seconds", type=float, default=1.5, help="per row")
    ap.add_argument("--cpu", default="1", help="core to pin to ('' for none)")
    args = ap.parse_args()
    if args.cpu and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(args.cpu)})
    rows = []
    for ms in [float(x) for x in args.sleeps_ms.split(",")]:
        for kind, fn in (("epoll", _epoll), ("asyncio", _asyncio)):
            n, cpu = fn(ms / 1e3, args.seconds)
            rows.append({"kind": kind, "sleep_ms": ms, "wakeups": n,
                         "us_per_wakeup": 1e6 * cpu / max(n, 1),
                         "core_share": cpu / max(n, 1) / (ms / 1e3)})
    print(table(rows, [("kind", "kind", "s"), ("sleep_ms", "sleep ms", "g"),
                       ("wakeups", "wake-ups", "d"), ("us_per_wakeup", "CPU us/wake-up", ".1f"),
                       ("core_share", "core share", ".4f")]))
    print(f"wrote {save('loadgen_wakeups', {'machine': machine_note(), 'rows': rows})}")


if __name__ == "__main__":
    main()
