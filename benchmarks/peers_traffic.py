"""servesweep's open-loop client beside guidellm and ``vllm bench serve`` on one request file.

Part 1, the peers: the sim (time scale 1, pinned to core 0) serves servesweep's own
exported request file (``servesweep plan --export-requests``: JSONL ``{prompt,
output_tokens}``, long text prompts so TTFT is well above the vLLM client's own 2 ms),
sent open loop at a Poisson rate by each client in turn (pinned to core 1). Each reports
output tokens/s and TTFT p50. The three draw their Poisson schedules differently (vLLM
rescales its draws to the offered rate; guidellm and servesweep send their seeded draws
as they are), and below capacity throughput follows the rate actually sent, so throughput
is compared per request sent: output tok/s / achieved requests/s. servesweep's figures
are its level's (the steady window); the peers' are theirs (all requests over their
duration). Targets: within 3% of servesweep's on both (TTFT only where its p50 >= 50 ms).

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


def ours(url: str, path: Path, rate: float, n: int, seed: int, model: str = "m"
         ) -> dict:
    """servesweep's load generator: one rate level over the file, no warm-up."""
    w = Workload(prompt_tokens=1, output_tokens=1, rates=[rate], rounds=1, warmup_requests=0,
                 open_loop_s=0, seed=seed, requests=FileSource(kind="file", path=str(path),
                                                              limit=n), steady_trim=0.05,
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


def part_peers(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="peers-traffic-"))
    src = peers.make_request_file(tmp / "source.jsonl", n=args.requests, seed=args.seed,
                                  prompt_words=(1200, 3000), output_tokens=(32, 160))
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
                                               args.seed))]
    for run in (peers.run_vllm_bench, peers.run_guidellm):
        clients.append((run.__name__, lambda url, run=run: run(
            url, "m", exported, args.rate, args.requests, args.seed, cpus="1")))
    for name, client in clients:
        # a fresh server per client: the sim caches prefixes as vLLM does, so a client sent
        # after another meets the same prompts' blocks still cached (guidellm, third, read
        # 20 ms TTFTs at 2/s and 0.5/s, where 120 and 40 prompts fit in the KV pool)
        with sim_server(tmp, time_scale=1.0, cpus="0") as srv:
            try:
                row = client(srv["url"])
            except (FileNotFoundError, RuntimeError, subprocess.SubprocessError) as err:
                row = {"tool": name, "error": str(err)[:300]}
            row["prefix_cache_hits"] = _prefix_hits(srv["url"])
            rows.append(row)
    base = rows[0]
    for r in rows:
        if r.get("output_tok_s") and r.get("achieved_rps"):
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
                       ("prefix_cache_hits", "cached tokens", ".0f")]))
    return {"rate": args.rate, "requests": args.requests, "seed": args.seed, "rows": rows}


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
