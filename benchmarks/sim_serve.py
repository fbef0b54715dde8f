#!/usr/bin/env python3
"""How fast the sim streams over HTTP at time scale 0 (it must out-run any client).

The sim server runs pinned to one core; on the other core first a lean reader opens N
streams (raw asyncio sockets, HTTP/1.1 by hand, counting SSE events without parsing JSON)
and measures delivered tokens/s, then servesweep's own load generator reads the same
streams. For the load generator's run both processes' CPU shares are reported: the one
near 1.0 is the bottleneck (the sim must not be).

usage: .venv/bin/python benchmarks/sim_serve.py [--streams 64 256] [--tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.contracts.shapes import get_preset  # noqa: E402
from actors.sim.config import SimServerConfig  # noqa: E402
from actors.sim.perf import SimConfig  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from loadgen_common import proc_cpu_s  # noqa: E402


async def _stream(host: str, port: int, body: bytes) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    events = 0
    tail = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        data = tail + chunk
        events += data.count(b"\n\ndata: ") + data.startswith(b"data: ")
        tail = data[-8:]
        if b"[DONE]" in data:
            break
    writer.close()
    return events


async def _run(host: str, port: int, streams: int, tokens: int) -> float:
    body = json.dumps({"model": "m", "prompt": [1] * 32, "max_tokens": tokens,
                       "min_tokens": tokens, "ignore_eos": True, "stream": True}).encode()
    t0 = time.perf_counter()
    await asyncio.gather(*(_stream(host, port, body) for _ in range(streams)))
    return streams * tokens / (time.perf_counter() - t0)


async def _client(url: str, streams: int, tokens: int) -> dict:
    """servesweep's own load generator (lean client) reading the same sim: who is the limit?"""
    from actors.contracts.config import Workload
    from actors.loadgen.level import LevelRunner
    from actors.loadgen.prompts import PromptFactory

    w = Workload(prompt_tokens=32, output_tokens=tokens, concurrency=[streams], rounds=2,
                 warmup_requests=0, requests_per_round=streams)
    runner = LevelRunner(url, "m", w, PromptFactory(list(range(100, 4000)), 32), time_scale=0)
    lv = await runner.run_level(streams)
    return {"client_tok_s": round(lv.metrics.output_tok_s),
            "client_cpu_frac": round(lv.client.cpu_frac, 2), "level_status": lv.status}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--tokens", type=int, default=256)
    a = ap.parse_args()
    cfg = SimServerConfig(profile="vllm", hardware="h200", shape=get_preset("llama-3.1-8b"),
                          settings=SimConfig(max_num_seqs=1024), served_name="m",
                          max_model_len=4096, time_scale=0.0, jitter=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "sim.json"
        conf.write_text(cfg.model_dump_json())
        log = open(Path(tmp) / "sim.log", "wb")
        server = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m",
                                   "actors.sim.server", "--config", str(conf)], cwd=ROOT,
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            for _ in range(200):
                m = re.search(r":(\d+)\s*$", (Path(tmp) / "sim.log").read_text(), re.M)
                if m and "Starting sim server" in (Path(tmp) / "sim.log").read_text():
                    port = int(m.group(1))
                    break
                time.sleep(0.05)
            assert port, (Path(tmp) / "sim.log").read_text()
            os.sched_setaffinity(0, {1 % os.cpu_count()})
            for n in a.streams:
                asyncio.run(_run("127.0.0.1", port, min(n, 8), 16))  # warm-up
                rate = asyncio.run(_run("127.0.0.1", port, n, a.tokens))
                cpu0, t0 = proc_cpu_s(server.pid), time.perf_counter()
                ours = asyncio.run(_client(f"http://127.0.0.1:{port}", n, a.tokens))
                cpu1, t1 = proc_cpu_s(server.pid), time.perf_counter()
                sim_cpu = (cpu1 - cpu0) / (t1 - t0) if cpu0 is not None and cpu1 else None
                print(json.dumps({"streams": n, "tokens": a.tokens, "time_scale": 0,
                                  "sim_delivered_tok_s": round(rate), **ours,
                                  "sim_cpu_frac": round(sim_cpu, 2) if sim_cpu else None}))
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
