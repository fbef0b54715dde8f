"""Capacity: streamed tokens/s one client core sustains, ours vs ``vllm bench serve``'s client.

The minimal SSE server (``loadgen_sse_server.py``) runs pinned to core 0; every
client runs pinned to core 1, one after another against the same server:

- ours, lean transport (``actors.loadgen.http1``, the default),
- ours, aiohttp transport,
- ``vllm bench serve``'s client loop (``loadgen_vllm_client.py``; vLLM imported once).

Modes: ``unpaced`` (the server writes every token at once: reads carry many tokens)
and ``paced S ms`` (one token to every stream each S ms, so one token per read
while the client keeps up; offered tokens/s = streams / S). 256 output tokens,
32 prompt tokens, 2 x streams requests per run. Reported per run: output tok/s,
the offered rate, the client's CPU microseconds per token, TTFT/ITL p50, and the
ratio ours / vLLM. The server's CPU share is printed so that a saturated server
(not a client limit) is visible.

    .venv/bin/python benchmarks/loadgen_capacity.py                        # ~60 s
    .venv/bin/python benchmarks/loadgen_capacity.py --modes 5 --streams 256   # 51.2k offered
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import (  # noqa: E402
    VllmClient,
    machine_note,
    run_ours,
    save,
    sse_server,
    table,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="0,2",
                    help="server step in ms per mode, 0 = unpaced (default 0,2)")
    ap.add_argument("--streams", default="64,256")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--clients", default="vllm,lean,aiohttp")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    args = ap.parse_args()
    steps = [float(s) for s in args.modes.split(",")]
    streams = [int(s) for s in args.streams.split(",")]
    clients = args.clients.split(",")
    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(VllmClient(cpus="1")) if "vllm" in clients else None
        servers = {s: stack.enter_context(sse_server(s, cpus="0")) for s in steps}
        for step, srv in servers.items():
            for c in streams:
                base = dict(mode="unpaced" if step == 0 else f"paced {step:g} ms", streams=c,
                            offered=(c / step * 1e3) if step else None)
                for t in clients:  # interleaved: every client meets the same conditions
                    if t == "vllm" and vllm is not None:
                        r = vllm.run(srv["url"], streams=c, prompt_tokens=32,
                                     requests=args.requests_per_stream * c,
                                     output_tokens=args.output_tokens)
                        toks = r.get("total_output_tokens") or 0
                        rows.append(dict(base, client="vllm-bench", tok_s=r["output_throughput"],
                                         us_tok=1e6 * r["cpu_s"] / toks if toks else None,
                                         ttft=r.get("median_ttft_ms"), itl=r.get("median_itl_ms"),
                                         status="ok" if not r["errors"] else "errors", flags="",
                                         cpu=r["cpu_s"] / r["duration"]))
                        continue
                    r = run_ours(srv["url"], cpus="1", streams=c, transport=t,
                                 requests=args.requests_per_stream * c,
                                 output_tokens=args.output_tokens)
                    rows.append(dict(base, client=f"ours-{t}", tok_s=r["output_tok_s"],
                                     us_tok=r["us_per_token"], ttft=r["ttft_p50_ms"],
                                     itl=r["itl_p50_ms"], status=r["status"],
                                     flags=",".join(r["flags"]),
                                     cpu=r["client_cpu_frac"]))
    server_stats = {f"{s:g}": srv["stats"] for s, srv in servers.items()}
    for r in rows:  # ratio to the vLLM client in the same mode and streams
        ref = next((x for x in rows if x["client"] == "vllm-bench" and x["mode"] == r["mode"]
                    and x["streams"] == r["streams"]), None)
        r["vs_vllm"] = r["tok_s"] / ref["tok_s"] if ref and ref["tok_s"] else None
    rows.sort(key=lambda r: (r["mode"], r["streams"], r["client"]))
    print(table(rows, [("mode", "mode", "s"), ("streams", "streams", "d"),
                       ("offered", "offered tok/s", ".0f"), ("client", "client", "s"),
                       ("tok_s", "tok/s", ".0f"), ("vs_vllm", "x vLLM", ".2f"),
                       ("us_tok", "CPU us/tok", ".1f"), ("cpu", "client CPU", ".2f"),
                       ("ttft", "TTFT p50 ms", ".1f"), ("itl", "ITL p50 ms", ".2f"),
                       ("flags", "flags", "s")]))
    for s, st in server_stats.items():
        if st:
            print(f"server step {s} ms: {st['tokens']} tokens, {st['cpu_s']:.1f} CPU s "
                  f"over {st['wall_s']:.1f} s alive")
    path = save("loadgen_capacity", {"machine": machine_note(), "rows": rows,
                                     "servers": server_stats, "args": vars(args)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
