"""servesweep's open-loop client beside guidellm and ``vllm bench serve`` on one request file.

Part 1, the peers: the sim (time scale 1, pinned to core 0) serves servesweep's own
exported request file (``servesweep plan --export-requests``: JSONL ``{prompt,
output_tokens}``, long text prompts so TTFT is well above the vLLM client's own 2 ms),
sent open loop at a Poisson rate by each client in turn (pinned to core 1). Each reports
output tokens/s and TTFT p50. The three draw their Poisson schedules differently (vLLM
rescales its draws to the offered rate; guidellm and servesweep send their seeded draws
as they are), and below capacity throughput follows the rate actually sent, so throughput
is compared per request sent: output tok/s / achieved requests/s. servesweep's figures
are its level's (the steady window; ``--steady-trim 0``: every request, as the peers count
theirs); the peers' are theirs (all requests over their duration). Targets: within 3% of
servesweep's on both (TTFT only where its p50 >= 50 ms). Each client's TTFT p50 is also set
against the server's own for the same requests (the sim's ``--trace``: first token written
minus arrival at the handler), so a client's own cost shows as client - server. A peer
that did not hold the schedule (sent more than 1.5x or under 0.5x the offered rate) is
void and not compared.

Part 2, the open-loop client alone: rate levels of short requests at rising rates; per
rate the schedule's own rate, the sends, the late sends and the client's CPU share. It
holds a rate when the sends are within 1% of its schedule with no late send, at one
core or less; the benchmark states the highest rate held.

    make peers                                   # guidellm into .venv-peers (once)
    .venv/bin/python benchmarks/peers_traffic.py [--rate 6] [--requests 240]
    .venv/bin/python benchmarks/peers_traffic.py --part client --rates 50,100,200,400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers_common as peers  # noqa: E402
from loadgen_common import ROOT, machine_note, save, sim_server, table  # noqa: E402

from actors.contracts.config import Workload  # noqa: E402
from actors.contracts.loadspec import LoadSpec  # noqa: E402
from actors.contracts.traffic import FileSource  # noqa: E402
from actors.engines import get_adapter  # noqa: E402
from actors.loadgen.actor import LoadGeneratorCore  # noqa: E402
from orchestrator.spec.traffic_plan import build_plan  # noqa: E402


def ours(url: str, path: Path, rate: float, n: int, seed: int, model: str = "m",
         steady_trim: float = 0.05) -> dict:
    """servesweep's load generator: one rate level over the file, no warm-up; its figures
    from the level's steady window (``steady_trim`` of the span cut at each end; 0: every
    request, as the peers count theirs)."""
    w = Workload(prompt_tokens=1, output_tokens=1, rates=[rate], rounds=1, warmup_requests=0,
                 open_loop_s=0, seed=seed, requests=FileSource(kind="file", path=str(path),
                                                              limit=n), steady_trim=steady_trim,
                 level_timeout_s=1800)
    plan = build_plan(w, None)
    assert plan is not None
    w = w.model_copy(update={"prompt_tokens": max(r.prompt_tokens for r in plan.requests),
                             "output_tokens": max(r.output_tokens for r in plan.requests)})
    core = LoadGeneratorCore(LoadSpec(base_url=url, model=model, workload=w, plan=plan,
                                      client=get_adapter("sim").client_profile()))
    lv = asyncio.run(core.run_level(f"rate={rate:g}/s", 0))
    m, ol = lv.metrics, lv.open_loop
    assert m is not None and ol is not None, lv.reason
    return {"tool": "servesweep", "output_tok_s": m.output_tok_s, "ttft_p50_ms": m.ttft_p50_ms,
            "requests": lv.requests, "offered_rps": rate, "achieved_rps": ol.achieved_rps,
            "scheduled_rps": ol.scheduled_rps, "late_sends": ol.late_sends,
            "status": lv.status.value, "flags": [str(f) for f in lv.flags]}


def _prefix_hits(url: str) -> float | None:
    """The server's ``vllm:prefix_cache_hits_total`` (tokens served from cache)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    hits = [float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
            if ln.startswith("vllm:prefix_cache_hits_total")]
    return sum(hits) if hits else None


#: servesweep's measured requests carry ``X-Request-Id: <salt>-<round>-<index>`` (round >= 0);
#: its connection-opening wave (one-token requests) carries none and is not the level's
OURS_MEASURED = re.compile(r"^\d+-\d+-\d+$")


def _server_ttft_p50_ms(url: str, ours_only: bool) -> tuple[float | None, int]:
    """The server's own TTFT p50 (its first token's write minus the request's arrival at
    the handler, ``/sim/trace`` and ``/sim/arrivals``) over the requests a client measured
    (every one it streamed; for servesweep, its measured rounds' only), and how many: what
    each client's TTFT is set against, so a difference between clients can be told from a
    difference between client and server."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/sim/trace", timeout=30) as resp:
            trace = json.loads(resp.read())
        with urllib.request.urlopen(f"{url}/sim/arrivals", timeout=30) as resp:
            arrivals = json.loads(resp.read())
    except OSError:
        return None, 0
    ttfts = sorted(1000 * (t[0] - arrivals[rid]) for rid, t in trace.items()
                   if t and rid in arrivals and (not ours_only or OURS_MEASURED.match(rid)))
    if not ttfts:
        return None, 0
    mid = len(ttfts) // 2
    p50 = ttfts[mid] if len(ttfts) % 2 else (ttfts[mid - 1] + ttfts[mid]) / 2
    return p50, len(ttfts)


def _void(row: dict, rate: float) -> str | None:
    """Why a peer's run measured another workload than the one offered, or None."""
    sent = row.get("achieved_rps")
    if sent and not 0.5 * rate <= sent <= 1.5 * rate:
        return f"sent {sent:.3g} req/s against {rate:g} offered"
    early = [f for f in row.get("flags") or () if f.startswith("targets_before_start")]
    return early[0] if early else None


def part_peers(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="peers-traffic-"))
    src = peers.make_request_file(tmp / "source.jsonl", n=args.requests, seed=args.seed,
                                  prompt_words=args.prompt_words, output_tokens=(32, 160))
    spec = tmp / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "peers", "model": {"preset": "llama-3.1-8b"}, "space": [{"engine": "sim"}],
        "workload": {"requests": {"kind": "file", "path": src.name}, "rates": [args.rate]}}))
    exported = tmp / "requests.jsonl"  # servesweep's own export of its request list
    subprocess.run([sys.executable, "-m", "orchestrator.commands.cli", "plan", str(spec),
                    "--export-requests", str(exported)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    rows = []
    clients = [("servesweep", lambda url: ours(url, exported, args.rate, args.requests,
                                               args.seed, steady_trim=args.steady_trim))]
    for run in (peers.run_vllm_bench, peers.run_guidellm):
        clients.append((run.__name__, lambda url, run=run: run(
            url, "m", exported, args.rate, args.requests, args.seed, cpus="1")))
    for name, client in clients:
        # a peer that did not hold its schedule ran again (guidellm 0.8.1 sets its start
        # event before it writes the Poisson offset: a worker that wakes in between
        # schedules from 1970 and sends every request at once), at most --peer-attempts
        for attempt in range(1, 1 + (1 if name == "servesweep" else args.peer_attempts)):
            # a fresh server per run: the sim caches prefixes as vLLM does, so a client sent
            # after another meets the same prompts' blocks still cached (guidellm, third,
            # read 20 ms TTFTs at 2/s and 0.5/s, where 120 and 40 prompts fit in the pool)
            with sim_server(tmp, time_scale=1.0, cpus="0", trace=True) as srv:
                try:
                    row = client(srv["url"])
                except (FileNotFoundError, RuntimeError, subprocess.SubprocessError) as err:
                    row = {"tool": name, "error": str(err)[:300]}
                row["prefix_cache_hits"] = _prefix_hits(srv["url"])
                row["server_ttft_p50_ms"], row["server_requests"] = _server_ttft_p50_ms(
                    srv["url"], ours_only=name == "servesweep")
            if row.get("ttft_p50_ms") and row["server_ttft_p50_ms"]:
                row["client_minus_server_ms"] = row["ttft_p50_ms"] - row["server_ttft_p50_ms"]
            row["attempt"] = attempt
            if name == "servesweep" or not (void := _void(row, args.rate)):
                break
            row["void"] = void
            print(f"{row['tool']}: attempt {attempt} void, {void}: not compared",
                  file=sys.stderr)
        rows.append(row)
    base = rows[0]
    for r in rows:
        if r.get("output_tok_s") and r.get("achieved_rps") and "void" not in r:
            r["tok_per_req_sent"] = r["output_tok_s"] / r["achieved_rps"]
    for r in rows[1:]:
        if "tok_per_req_sent" in r:
            r["tok_per_req_vs_ours"] = r["tok_per_req_sent"] / base["tok_per_req_sent"] - 1
            r["ttft_vs_ours"] = r["ttft_p50_ms"] / base["ttft_p50_ms"] - 1
    print(table(rows, [("tool", "client", "s"), ("achieved_rps", "sent req/s", ".3f"),
                       ("output_tok_s", "out tok/s", ".1f"),
                       ("tok_per_req_sent", "tok/s per req/s", ".2f"),
                       ("tok_per_req_vs_ours", "vs ours", "+.2%"),
                       ("ttft_p50_ms", "TTFT p50 ms", ".1f"), ("ttft_vs_ours", "vs ours", "+.2%"),
                       ("prefix_cache_hits", "cached tokens", ".0f"),
                       ("server_ttft_p50_ms", "server's TTFT p50 ms", ".1f"),
                       ("client_minus_server_ms", "client - server ms", "+.2f")]))
    return {"rate": args.rate, "requests": args.requests, "seed": args.seed,
            "prompt_words": list(args.prompt_words), "steady_trim": args.steady_trim,
            "rows": rows}


def part_client(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="peers-client-"))
    rows = []
    with sim_server(tmp, time_scale=1.0, cpus="0") as srv:
        for rate in (float(x) for x in args.rates.split(",")):
            w = Workload(prompt_tokens=64, output_tokens=8, rates=[rate], rounds=1,
                         warmup_requests=0, open_loop_s=args.seconds, seed=args.seed,
                         level_timeout_s=600)
            core = LoadGeneratorCore(LoadSpec(base_url=srv["url"], model="m", workload=w,
                                              client=get_adapter("sim").client_profile()))
            lv = asyncio.run(core.run_level(f"rate={rate:g}/s", 0))
            ol, c = lv.open_loop, lv.client
            assert ol is not None and c is not None, lv.reason
            held = (ol.scheduled_rps is not None and not ol.late_sends and c.cpu_frac <= 1.0
                    and abs(ol.achieved_rps / ol.scheduled_rps - 1) <= 0.01)
            rows.append({"offered_rps": rate, "scheduled_rps": ol.scheduled_rps,
                         "achieved_rps": ol.achieved_rps,
                         "vs_schedule": ol.achieved_rps / (ol.scheduled_rps or rate) - 1,
                         "vs_offered": ol.achieved_rps / rate - 1, "late": ol.late_sends,
                         "lag_p99_ms": ol.send_lag_p99_ms, "cpu": c.cpu_frac,
                         "status": lv.status.value, "held": held})
    print(table(rows, [("offered_rps", "offered", ".0f"), ("scheduled_rps", "schedule", ".2f"),
                       ("achieved_rps", "sent", ".2f"), ("vs_schedule", "vs schedule", "+.2%"),
                       ("vs_offered", "vs offered", "+.2%"), ("late", "late", "d"),
                       ("lag_p99_ms", "lag p99 ms", ".2f"), ("cpu", "client CPU", ".2f"),
                       ("held", "held", "")]))
    best = max((r["offered_rps"] for r in rows if r["held"]), default=None)
    print(f"highest rate held (sends within 1% of the schedule, none late, <= 1 core): {best}")
    return {"rows": rows, "highest_held_rps": best, "seconds": args.seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("peers", "client", "both"), default="both")
    ap.add_argument("--rate", type=float, default=6.0)
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--steady-trim", type=float, default=0.05,
                    help="peers part: servesweep's steady window trim (0: every request)")
    ap.add_argument("--prompt-words", type=lambda v: tuple(int(x) for x in v.split(",")),
                    default=(1200, 3000), metavar="LO,HI", help="peers part: prompt words")
    ap.add_argument("--peer-attempts", type=int, default=3,
                    help="runs of a peer that did not hold its schedule, at most")
    ap.add_argument("--rates", default="50,100,200,400")
    ap.add_argument("--seconds", type=float, default=20.0, help="client part: per rate")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out: dict = {"machine": machine_note()}
    if args.part in ("peers", "both"):
        out["peers"] = part_peers(args)
    if args.part in ("client", "both"):
        out["client"] = part_client(args)
    print(f"saved {save('peers_traffic', out)}")


if __name__ == "__main__":
    main()
