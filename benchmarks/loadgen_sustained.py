"""Sustained rate at one token per read: the fastest pace each client keeps up with.

``loadgen_capacity.py`` offers more than a client can take and counts what it got;
a client that falls behind then reads several tokens per read, which is cheaper
per token but no longer observes each token. This benchmark asks the question the
other way round. The paced C server (core 0) gives every stream one token each
step; for a range of steps, each client (core 1, one after another, interleaved)
runs 2 x streams requests of 256 tokens (connections opened before the clock: ours
opens them itself, the vLLM client gets a warm-up wave), and a step counts as *sustained* when
the client

- delivered at least ``--keep`` (97%) of the offered tokens/s over its round
  (first request sent to last token read; a closed loop of 256-token requests
  loses one step per wave: at most 99.6%), and
- read the tokens one at a time: at most ``--per-read`` (1.10) tokens per read.
  Ours counts its reads. The vLLM client does not expose them, so for it a token
  whose gap to the previous one is under half a step is counted as read with
  that one (its ITL list is per chunk, stamped as each chunk is parsed).

Both figures are computed the same way for both clients from their per-request
times. The sustained rate of a client is the highest offered rate among its
sustained steps; the ratio ours / vLLM is the issue's "rate when tokens arrive one
per read". CPU microseconds per token at each step show the cost behind it.

    .venv/bin/python benchmarks/loadgen_sustained.py                     # ~3 min
    .venv/bin/python benchmarks/loadgen_sustained.py --steps 4,5,6 --streams 256 --clients lean
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import (  # noqa: E402
    VllmClient,
    build_c_server,
    machine_note,
    proc_cpu_s,
    run_ours,
    save,
    sse_server,
    table,
)

OUTPUT = 256


def _vllm_row(r: dict, step_s: float) -> dict:
    """Delivered rate and tokens per read from the vLLM client's per-request times."""
    starts, ttfts, itls = r.get("start_times") or [], r["ttfts"], r["itls"]
    ends, tokens, reads = [], 0, 0
    for s, t, gaps in zip(starts, ttfts, itls):
        if not t:
            continue
        ends.append(s + t + sum(gaps))
        tokens += 1 + len(gaps)  # one token per chunk (the server sends one per chunk)
        reads += 1 + sum(1 for g in gaps if g >= step_s / 2)
    span = (max(ends) - min(starts)) if ends and starts else 0.0
    return dict(tokens=tokens, tok_s=tokens / span if span else None,
                per_read=tokens / reads if reads else None,
                us_tok=1e6 * r["cpu_s"] / tokens if tokens else None,
                cpu=r["cpu_s"] / span if span else None, secs=span,
                errors=len(r.get("errors") or []))


def _ours_row(r: dict) -> dict:
    span = r["round_s"]
    return dict(tokens=r["tokens"], tok_s=r["tokens"] / span if span else None,
                per_read=r["tokens_per_read"], us_tok=r["us_per_token"],
                cpu=r["client_cpu_frac"], secs=span, lag=r["loop_lag_p99_ms"],
                flags=",".join(r["flags"]), errors=0 if r["status"] != "invalid" else 1,
                reader=r.get("reader"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="4,5,6,7,8,10,12.5,14,16,20",
                    help="server steps in ms (default 4,5,6,7,8,10,12.5,14,16,20)")
    ap.add_argument("--streams", default="256")
    ap.add_argument("--clients", default="vllm,lean")
    ap.add_argument("--keep", type=float, default=0.97,
                    help="share of the offered rate a sustained step delivers (default 0.97)")
    ap.add_argument("--per-read", type=float, default=1.10,
                    help="most tokens per read a sustained step may average (default 1.10)")
    ap.add_argument("--coalesce-ms", type=float, default=1.0,
                    help="the lean transport's read coalescing when busy (0: none)")
    ap.add_argument("--pass-size", type=int, default=None,
                    help="the most sockets the lean transport reads per loop callback")
    args = ap.parse_args()
    steps = sorted(float(s) for s in args.steps.split(","))
    streams = [int(s) for s in args.streams.split(",")]
    clients = args.clients.split(",")
    build_c_server()
    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(VllmClient(cpus="1")) if "vllm" in clients else None
        for step in steps:
            srv = stack.enter_context(sse_server(step, cpus="0", kind="c"))
            for c in streams:
                for t in clients:
                    srv0 = proc_cpu_s(srv["pid"])
                    if t == "vllm":
                        assert vllm is not None
                        # its warm-up wave opens the connections, as ours does before its clock
                        r = vllm.run(srv["url"], streams=c, prompt_tokens=32, requests=2 * c,
                                     output_tokens=OUTPUT, raw=True, warmups=c)
                        row = _vllm_row(r, step / 1e3)
                        name = "vllm-bench"
                    else:
                        r = run_ours(srv["url"], cpus="1", streams=c, transport=t,
                                     coalesce_s=args.coalesce_ms / 1e3, requests=2 * c,
                                     output_tokens=OUTPUT,
                                     **({"pass_size": args.pass_size} if args.pass_size else {}))
                        row = _ours_row(r)
                        name = f"ours-{t}"
                    srv1 = proc_cpu_s(srv["pid"])
                    offered = c / step * 1e3
                    row.update(client=name, step_ms=step, streams=c, offered=offered,
                               keep=(row["tok_s"] or 0) / offered)
                    if srv0 is not None and srv1 is not None and row["secs"]:
                        row["srv_cpu"] = (srv1 - srv0) / row["secs"]
                    row["sustained"] = bool(not row["errors"] and row["keep"] >= args.keep
                                            and (row["per_read"] or 99) <= args.per_read)
                    rows.append(row)
                    print(f"{name:>10} {c} x {step:g} ms: {row['tok_s'] or 0:8.0f} tok/s "
                          f"({row['keep']:.1%} of {offered:.0f}), {row['per_read'] or 0:.2f} "
                          f"tok/read, {row['us_tok'] or 0:.1f} us/tok"
                          f"{'  sustained' if row['sustained'] else ''}", flush=True)
    rows.sort(key=lambda r: (r["streams"], r["client"], -r["offered"]))
    print(table(rows, [("streams", "streams", "d"), ("client", "client", "s"),
                       ("step_ms", "step ms", "g"), ("offered", "offered", ".0f"),
                       ("tok_s", "tok/s", ".0f"), ("keep", "delivered", ".3f"),
                       ("per_read", "tok/read", ".2f"), ("us_tok", "CPU us/tok", ".1f"),
                       ("cpu", "client CPU", ".2f"), ("srv_cpu", "server CPU", ".2f"),
                       ("lag", "lag p99 ms", ".1f"), ("flags", "flags", "s")]))
    summary = []
    for c in streams:
        best = {}
        for name in sorted({r["client"] for r in rows if r["streams"] == c}):
            ok = [r["offered"] for r in rows
                  if r["streams"] == c and r["client"] == name and r["sustained"]]
            best[name] = max(ok) if ok else None
            print(f"{c} streams, {name}: sustained up to "
                  f"{'-' if best[name] is None else format(best[name], '.0f')} tok/s")
        ref = best.get("vllm-bench")
        for name, v in best.items():
            if name != "vllm-bench" and v and ref:
                print(f"{c} streams: {name} / vllm-bench = {v / ref:.2f}x")
        summary.append(dict(streams=c, sustained=best))
    name = "loadgen_sustained-" + "-".join(str(c) for c in streams)
    path = save(name, {"machine": machine_note(), "rows": rows, "summary": summary,
                       "args": vars(args)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
