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
per read". CPU microseconds per token at each step show the cost behind it, beside
the floor's (``--clients ...,floor``: ``floor_client.c``, one ``recvmsg`` per token in C
and nothing else, what any client pays here for the kernel's side of a read).

    .venv/bin/python benchmarks/loadgen_sustained.py                     # ~3 min
    .venv/bin/python benchmarks/loadgen_sustained.py --steps 4,5,6 --streams 256 --clients lean
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import (  # noqa: E402
    PER_READ,
    VllmClient,
    build_c_server,
    keeps_up,
    machine_note,
    proc_cpu_s,
    run_floor,
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
                us_stream=1e6 * r["cpu_s"] / tokens if tokens else None,
                cpu=r["cpu_s"] / span if span else None, secs=span,
                errors=len(r.get("errors") or []))


def _ours_row(r: dict) -> dict:
    span = r["round_s"]
    return dict(tokens=r["tokens"], tok_s=r["tokens"] / span if span else None,
                per_read=r["tokens_per_read"], us_tok=r["us_per_token"],
                us_stream=r["us_stream_per_token"], us_proof=r["us_proof_per_token"],
                us_open=r.get("us_open_per_token"), us_agg=r.get("us_aggregate_per_token"),
                per_pass=r["reads"] / r["passes"] if r.get("passes") else None,
                cpu=r["client_cpu_frac"], secs=span, lag=r["loop_lag_p99_ms"],
                wakeups=r.get("wakeups"),
                flags=",".join(r["flags"]), errors=0 if r["status"] != "invalid" else 1,
                reader=r.get("reader"), parse=r.get("parse"))


def _floor_row(r: dict) -> dict:
    tokens, span = r["tokens"], r["tokens"] / r["tok_s"] if r["tok_s"] else None
    return dict(tokens=tokens, tok_s=r["tok_s"], per_read=r["tokens_per_read"],
                us_tok=r["us_per_token"], us_stream=r["us_per_token"], cpu=r["cpu_frac"],
                secs=span, wakeups=r["wakeups"], errors=0)


def _measure(vllm: VllmClient | None, srv: dict, step: float, c: int, t: str,
             args: argparse.Namespace) -> dict:
    """One client (``vllm``, ``floor`` or a transport of ours) at one step and stream
    count."""
    srv0 = proc_cpu_s(srv["pid"])
    if t == "floor":  # the kernel's floor: one recvmsg per token in C, nothing else
        row, name = _floor_row(run_floor(srv["url"], c, OUTPUT, 2)), "floor-c"
    elif t == "vllm":
        assert vllm is not None
        # its warm-up wave opens the connections, as ours does before its clock
        r = vllm.run(srv["url"], streams=c, prompt_tokens=32, requests=2 * c,
                     output_tokens=OUTPUT, raw=True, warmups=c)
        row, name = _vllm_row(r, step / 1e3), "vllm-bench"
    else:
        r = run_ours(srv["url"], cpus="1", streams=c, transport=t,
                     coalesce_s=args.coalesce_ms / 1e3, requests=2 * c, output_tokens=OUTPUT,
                     **({"pass_size": args.pass_size} if args.pass_size else {}))
        row, name = _ours_row(r), f"ours-{t}"
    srv1 = proc_cpu_s(srv["pid"])
    offered = c / step * 1e3
    row.update(client=name, step_ms=step, streams=c, offered=offered,
               keep=(row["tok_s"] or 0) / offered)
    if srv0 is not None and srv1 is not None and row["secs"]:
        row["srv_cpu"] = (srv1 - srv0) / row["secs"]
    row["sustained"] = keeps_up(row, args.per_read)
    return row


def _cpu_summary(rows: list[dict], fmt: str, c: int) -> list[dict]:
    """Reading CPU per token of each of our clients at the steps where it kept up at one
    token per read (min / median / max), beside the floor's and the vLLM client's at the
    same steps and repetitions (an absolute figure only beside its peer's)."""
    out = []
    mine = [r for r in rows if (r["format"], r["streams"]) == (fmt, c) and r["sustained"]]
    at = {(r["rep"], r["step_ms"], r["client"]): r for r in rows
          if (r["format"], r["streams"]) == (fmt, c)}
    for name in sorted({r["client"] for r in mine} - {"vllm-bench", "floor-c"}):
        ours = [r for r in mine if r["client"] == name and r["us_stream"] is not None]
        if not ours:
            continue
        line = dict(format=fmt, streams=c, client=name, steps=len(ours))
        for key, peer in (("reading", name), ("floor", "floor-c"), ("vllm", "vllm-bench")):
            vals = sorted(v for r in ours if (v := at.get((r["rep"], r["step_ms"], peer), {})
                                              .get("us_stream")) is not None)
            if vals:
                line[key] = (vals[0], statistics.median(vals), vals[-1])
        out.append(line)
        print(f"{fmt}, {c} streams, {name} at its {len(ours)} kept-up steps: " + "; ".join(
            f"{k} {v[0]:.1f} / {v[1]:.1f} / {v[2]:.1f}" for k, v in line.items()
            if isinstance(v, tuple)) + " us/tok (min / median / max; floor and vllm at "
            "the same steps and repetitions)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="4,5,6,7,8,10,12.5,14,16,20",
                    help="server steps in ms (default 4,5,6,7,8,10,12.5,14,16,20)")
    ap.add_argument("--streams", default="256")
    ap.add_argument("--clients", default="vllm,lean,floor",
                    help="vllm (vllm bench serve's client), lean / lean-python / aiohttp "
                         "(ours), floor (floor_client.c: the kernel's cost per token)")
    ap.add_argument("--per-read", type=float, default=PER_READ,
                    help=f"most tokens per read for 'keeps up' (default {PER_READ}: the "
                         "one rule, benchmarks/README.md)")
    ap.add_argument("--formats", default="asked",
                    help="what the server's chunks carry, comma-separated: asked (per-chunk "
                         "usage when asked), text (text only + a final usage, as "
                         "TensorRT-LLM), ids (token ids, no usage)")
    ap.add_argument("--reps", type=int, default=1,
                    help="repetitions of the whole run (min / median / max of the ratio)")
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
    formats = args.formats.split(",")
    with contextlib.ExitStack() as stack:
        vllm = stack.enter_context(VllmClient(cpus="1")) if "vllm" in clients else None
        for rep, fmt, step in itertools.product(range(args.reps), formats, steps):
            with sse_server(step, cpus="0", kind="c", fmt=fmt) as srv:
                for c, t in itertools.product(streams, clients):
                    row = _measure(vllm, srv, step, c, t, args)
                    row.update(rep=rep, format=fmt)
                    rows.append(row)
                    print(f"[{rep} {fmt}] {row['client']:>10} {c} x {step:g} ms: "
                          f"{row['tok_s'] or 0:8.0f} tok/s ({row['keep']:.1%} of "
                          f"{row['offered']:.0f}), {row['per_read'] or 0:.2f} tok/read, "
                          f"{row['us_tok'] or 0:.1f} us/tok"
                          f"{'  keeps up' if row['sustained'] else ''}", flush=True)
    rows.sort(key=lambda r: (r["format"], r["rep"], r["streams"], r["client"], -r["offered"]))
    print(table(rows, [("format", "format", "s"), ("rep", "rep", "d"),
                       ("streams", "streams", "d"), ("client", "client", "s"),
                       ("step_ms", "step ms", "g"), ("offered", "offered", ".0f"),
                       ("tok_s", "tok/s", ".0f"), ("keep", "delivered", ".3f"),
                       ("per_read", "tok/read", ".2f"), ("us_tok", "CPU us/tok", ".1f"),
                       ("us_stream", "reading us/tok", ".1f"), ("us_open", "opening us/tok", ".1f"),
                       ("us_agg", "aggregation us/tok", ".1f"), ("per_pass", "reads/pass", ".1f"),
                       ("us_proof", "proof us/tok", ".1f"),
                       ("wakeups", "wake-ups", "d"),
                       ("cpu", "client CPU", ".2f"), ("srv_cpu", "server CPU", ".2f"),
                       ("lag", "lag p99 ms", ".1f"), ("parse", "parsed by", "s"),
                       ("flags", "flags", "s")]))
    summary = []
    for fmt, c in itertools.product(formats, streams):
        ratios: dict[str, list[float]] = {}
        for rep in range(args.reps):
            best: dict[str, float | None] = {}
            for name in sorted({r["client"] for r in rows}):
                ok = [r["offered"] for r in rows if (r["format"], r["streams"], r["rep"],
                      r["client"]) == (fmt, c, rep, name) and r["sustained"]]
                best[name] = max(ok) if ok else None
            ref = best.get("vllm-bench")
            for name, v in best.items():
                if name not in ("vllm-bench", "floor-c") and v and ref:
                    ratios.setdefault(name, []).append(v / ref)
            summary.append(dict(format=fmt, streams=c, rep=rep, keeps_up_to=best))
            print(f"[{rep} {fmt}] {c} streams keep up to: " + ", ".join(
                f"{k} {'-' if v is None else format(v, '.0f')} tok/s" for k, v in best.items()))
        for name, rs in ratios.items():
            rs.sort()
            print(f"{fmt}, {c} streams: {name} / vllm-bench = {rs[0]:.2f} / "
                  f"{statistics.median(rs):.2f} / {rs[-1]:.2f}x (min / median / max of "
                  f"{len(rs)})")
            summary.append(dict(format=fmt, streams=c, client=name, ratio_min=rs[0],
                                ratio_median=statistics.median(rs), ratio_max=rs[-1]))
        summary.extend(_cpu_summary(rows, fmt, c))
    name = "loadgen_sustained-" + "-".join(str(c) for c in streams)
    path = save(name, {"machine": machine_note(), "rows": rows, "summary": summary,
                       "args": vars(args)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
