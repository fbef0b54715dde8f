"""Capacity: streamed tokens/s one client core sustains, ours vs ``vllm bench serve``'s client.

The minimal SSE server runs pinned to core 0: by default the C one (``sse_server.c``,
built with gcc into benchmarks/results/ on first use; 8-13 us of CPU per token at one
token per write, ~100k tok/s from one core), with ``--server python`` the Python one
(``loadgen_sse_server.py``, 10-16 us per token). At 2 ms x 256 (128k offered) either
server's core is near its limit too: see the server CPU column. Every client runs
pinned to core 1, one after another against the same server:

- ours, lean transport (``actors.loadgen.pool``, the default: its native read pass),
- ours, lean transport with its pure-Python read pass (``--clients lean-python``: what
  runs where no C compiler is found),
- ours, aiohttp transport,
- ``vllm bench serve``'s client loop (``loadgen_vllm_client.py``; vLLM imported once).

Modes: ``unpaced`` (the server writes every token at once: reads carry many tokens)
and ``paced S ms`` (one token to every stream each S ms, so one token per read
while the client keeps up; offered tokens/s = streams / S). 256 output tokens,
32 prompt tokens, 2 x streams requests per run. Reported per run: output tok/s,
the offered rate, the client's CPU microseconds per token, for ours the tokens per read
(reads that carried tokens: 1.0 means every token was read on its own), TTFT/ITL p50, the
ratio ours / vLLM, and the server's CPU share and CPU microseconds per token over
that run, so that a saturated server (not a client limit) is visible.

    .venv/bin/python benchmarks/loadgen_capacity.py                        # ~40 s
    .venv/bin/python benchmarks/loadgen_capacity.py --modes 5 --streams 256   # 51.2k offered
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import (  # noqa: E402
    DEFAULT_SERVER,
    VllmClient,
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
    ap.add_argument("--modes", default="0,2",
                    help="server step in ms per mode, 0 = unpaced (default 0,2)")
    ap.add_argument("--streams", default="64,256")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--clients", default="vllm,lean,aiohttp")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--server", choices=("c", "python"), default=DEFAULT_SERVER,
                    help=f"the minimal SSE server (default {DEFAULT_SERVER})")
    ap.add_argument("--coalesce-ms", type=float, default=1.0,
                    help="the lean transport's read coalescing when busy (0: none)")
    ap.add_argument("--formats", default="asked",
                    help="what the C server's chunks carry, comma-separated: asked, text, ids "
                         "(benchmarks/README.md)")
    ap.add_argument("--pass-size", type=int, default=None,
                    help="the most sockets the lean transport reads per loop callback "
                         "(default: the transport's, 16)")
    args = ap.parse_args()
    steps = [float(s) for s in args.modes.split(",")]
    streams = [int(s) for s in args.streams.split(",")]
    clients = args.clients.split(",")
    formats = args.formats.split(",")
    if formats != ["asked"] and args.server != "c":
        ap.error("--formats needs --server c")
    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(VllmClient(cpus="1")) if "vllm" in clients else None
        servers = {(fmt, s): stack.enter_context(sse_server(s, cpus="0", kind=args.server,
                                                            fmt=fmt))
                   for fmt in formats for s in steps}
        for (fmt, step), srv in servers.items():
            for c in streams:
                base = dict(mode="unpaced" if step == 0 else f"paced {step:g} ms", streams=c,
                            offered=(c / step * 1e3) if step else None, format=fmt)
                for t in clients:  # interleaved: every client meets the same conditions
                    if t == "vllm" and vllm is None:
                        continue
                    srv0 = proc_cpu_s(srv["pid"])
                    if t == "vllm":
                        r = vllm.run(srv["url"], streams=c, prompt_tokens=32,
                                     requests=args.requests_per_stream * c,
                                     output_tokens=args.output_tokens)
                        toks = r.get("total_output_tokens") or 0
                        row = dict(base, client="vllm-bench", tok_s=r["output_throughput"],
                                   us_tok=1e6 * r["cpu_s"] / toks if toks else None,
                                   us_stream=1e6 * r["cpu_s"] / toks if toks else None,
                                   ttft=r.get("median_ttft_ms"), itl=r.get("median_itl_ms"),
                                   status="ok" if not r["errors"] else "errors", flags="",
                                   cpu=r["cpu_s"] / r["duration"], secs=r["duration"])
                    else:
                        r = run_ours(srv["url"], cpus="1", streams=c, transport=t,
                                     coalesce_s=args.coalesce_ms / 1e3,
                                     pass_size=args.pass_size,
                                     requests=args.requests_per_stream * c,
                                     output_tokens=args.output_tokens)
                        toks = r["tokens"]
                        row = dict(base, client=f"ours-{t}", tok_s=r["output_tok_s"],
                                   us_tok=r["us_per_token"], ttft=r["ttft_p50_ms"],
                                   us_stream=r["us_stream_per_token"],
                                   us_proof=r["us_proof_per_token"],
                                   itl=r["itl_p50_ms"], status=r["status"],
                                   flags=",".join(r["flags"]), cpu=r["client_cpu_frac"],
                                   secs=r["round_s"], per_read=r["tokens_per_read"],
                                   lag=r["loop_lag_p99_ms"], reader=r.get("reader"),
                                   parse=r.get("parse"))
                    # the server's CPU over this client's run (it idles between runs): a
                    # share near 1 means the server, not the client, set the rate
                    srv1 = proc_cpu_s(srv["pid"])
                    if srv0 is not None and srv1 is not None and toks:
                        row["srv_us_tok"] = 1e6 * (srv1 - srv0) / toks
                        row["srv_cpu"] = (srv1 - srv0) / row["secs"] if row["secs"] else None
                    rows.append(row)
    server_stats = {f"{f} {s:g}": srv["stats"] for (f, s), srv in servers.items()}
    for r in rows:  # ratio to the vLLM client in the same format, mode and streams
        ref = next((x for x in rows if x["client"] == "vllm-bench" and x["mode"] == r["mode"]
                    and x["streams"] == r["streams"] and x["format"] == r["format"]), None)
        r["vs_vllm"] = r["tok_s"] / ref["tok_s"] if ref and ref["tok_s"] else None
    rows.sort(key=lambda r: (r["format"], r["mode"], r["streams"], r["client"]))
    print(table(rows, [("format", "format", "s"), ("mode", "mode", "s"),
                       ("streams", "streams", "d"),
                       ("offered", "offered tok/s", ".0f"), ("client", "client", "s"),
                       ("tok_s", "tok/s", ".0f"), ("vs_vllm", "x vLLM", ".2f"),
                       ("us_tok", "CPU us/tok", ".1f"),
                       ("us_stream", "reading us/tok", ".1f"), ("us_proof", "proof us/tok", ".1f"),
                       ("per_read", "tok/read", ".2f"),
                       ("cpu", "client CPU", ".2f"), ("lag", "lag p99 ms", ".1f"),
                       ("srv_cpu", "server CPU", ".2f"), ("srv_us_tok", "srv us/tok", ".1f"),
                       ("ttft", "TTFT p50 ms", ".1f"), ("itl", "ITL p50 ms", ".2f"),
                       ("parse", "parse", "s"), ("flags", "flags", "s")]))
    for s, st in server_stats.items():
        if st:
            print(f"{args.server} server ({s} ms): {st['tokens']} tokens, {st['cpu_s']:.1f} "
                  f"CPU s over {st['wall_s']:.1f} s alive "
                  f"({1e6 * st['cpu_s'] / max(st['tokens'], 1):.1f} us/token)")
    path = save("loadgen_capacity", {"machine": machine_note(), "rows": rows,
                                     "servers": server_stats, "args": vars(args)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
