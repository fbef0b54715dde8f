"""Agreement: our throughput and TTFT p50 vs the ``vllm bench serve`` CLI, back to back.

Same server (the sim at time scale 1, real time; 8B on an H100, vLLM profile,
no jitter), same workload (128 prompt tokens, 64 output tokens, closed loop at
16 streams, 256 requests), run as: ours, ``vllm bench serve``, ours. Neither
client is near saturation (a few thousand tok/s). The server is pinned to core 0,
both clients to core 1. Target: within 3% on output tok/s and TTFT p50; the two
runs of ours show the run-to-run noise of the server itself.

Against the sim, each client's TTFT p50 is also set against the sim's own (handler entry
to first token written, from ``/sim/trace`` and ``/sim/arrivals``): the difference is the
client's own share of its TTFT. ``--rate R`` runs both open loop (Poisson arrivals).
The vLLM client's TTFT is also split request by request (its saved ``start_times`` and
the sim's clock are both CLOCK_MONOTONIC): its request path (clock start to the sim's
handler entry), the sim, and its response path (first token written to its stamp).
``--reference-trust-env off`` is a diagnostic: the same CLI with aiohttp's per-request
netrc/proxy lookups (``trust_env=True``) turned off, to measure what they cost.

``vllm bench serve`` needs a tokenizer for its random dataset: a word-level one
is built locally (no hub access), so that its text prompts are exactly as many
words (the sim counts words) as our token-id prompts are tokens.

    .venv/bin/python benchmarks/loadgen_agreement.py             # ~60 s (vLLM import)

Against a running server instead of the sim (e.g. real vLLM on a GPU node, where the
model's own tokenizer serves ``vllm bench serve``; see deploy/h200/agreement.sh):

    python3 benchmarks/loadgen_agreement.py --url http://127.0.0.1:8000 --model /tmp/model \
        --tokenizer /tmp/model --vllm-cli "python3 -m vllm.entrypoints.cli.main"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import (  # noqa: E402
    RESULTS,
    ROOT,
    VLLM_PY,
    machine_note,
    pinned,
    run_ours,
    save,
    sim_server,
    table,
)

_MAKE_TOKENIZER = r"""
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
out = sys.argv[1]
vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 5000)}}
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(f"{out}/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
           "model_max_length": 8192}, open(f"{out}/tokenizer_config.json", "w"))
"""


def ensure_tokenizer() -> Path:
    d = RESULTS / "wordlevel-tokenizer"
    if not (d / "tokenizer.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(VLLM_PY), "-c", _MAKE_TOKENIZER, str(d)], check=True)
    return d


# Diagnostic only (``--reference-trust-env off``): ``vllm bench serve`` opens its aiohttp
# session with ``trust_env=True``, which makes every request look up ~/.netrc and the proxy
# variables in a worker thread (two thread hand-offs before the request is written, inside
# its TTFT). This sitecustomize turns that off in its process, to measure what it costs;
# the agreement target is always judged against the unmodified CLI.
_NO_TRUST_ENV = """
import aiohttp
_init = aiohttp.ClientSession.__init__
def _no_trust_env(self, *a, **kw):
    kw["trust_env"] = False
    _init(self, *a, **kw)
aiohttp.ClientSession.__init__ = _no_trust_env
"""


def run_vllm_cli(url: str, tok: Path, streams: int, requests: int, prompt: int, output: int,
                 out_dir: Path, model: str = "m", cli: list[str] | None = None,
                 rate: float | None = None, trust_env: bool = True) -> dict:
    env = None
    if not trust_env:
        site = out_dir / "no-trust-env"
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(_NO_TRUST_ENV)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    # a fresh seed: its random dataset would repeat an earlier run's prompts, which a
    # real server with prefix caching then answers from its cache (ours draws a nonce)
    seed = random.SystemRandom().randrange(1, 2**31)
    vllm = cli or [str(VLLM_PY.parent / "vllm")]
    argv = [*vllm, "bench", "serve", "--backend", "openai", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(tok),
            "--dataset-name", "random", "--random-input-len", str(prompt),
            "--random-output-len", str(output), "--random-range-ratio", "0",
            "--num-prompts", str(requests), "--max-concurrency", str(streams),
            "--request-rate", str(rate) if rate else "inf", "--burstiness", "1.0",
            "--seed", str(seed), "--ignore-eos", "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out_dir),
            "--result-filename", "loadgen_agreement_vllm.json"]
    res = subprocess.run(pinned(argv, "1"), cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env=env)
    if res.returncode:
        raise RuntimeError(f"vllm bench serve failed:\n{res.stdout[-1500:]}\n"
                           f"{res.stderr[-1500:]}")
    return json.loads((out_dir / "loadgen_agreement_vllm.json").read_text())


def sim_first_writes(url: str, since: list[float], output_tokens: int
                     ) -> dict[str, tuple[float, float]]:
    """Per request id, (handler entry, first token written) on the sim's monotonic clock,
    for the requests of ``output_tokens`` tokens that arrived after ``since[0]`` (then moved
    on). Request ids may repeat between runs: only writes after a request's latest arrival
    count."""
    with urllib.request.urlopen(url + "/sim/trace", timeout=30) as resp:
        trace = json.loads(resp.read())
    with urllib.request.urlopen(url + "/sim/arrivals", timeout=30) as resp:
        arrivals = json.loads(resp.read())
    out = {}
    for rid, t in arrivals.items():
        writes = [w for w in trace.get(rid, ()) if w >= t]
        if t > since[0] and len(writes) == output_tokens:
            out[rid] = (t, writes[0])
    since[0] = max(arrivals.values(), default=since[0])
    return out


def reference_split(result: dict, sim: dict[str, tuple[float, float]]) -> dict | None:
    """Where the vLLM client's TTFT goes, request by request (ms, medians): ``request``
    from its clock start (before ``session.post``) to the sim's handler entry, ``server``
    from there to the first token written, ``response`` from that write to the client's
    first-token stamp. Its request ids are ``<prefix><index>`` and ``start_times`` its
    ``time.perf_counter()``, the sim's ``time.monotonic()``: one clock on Linux."""
    by_index = {int(tail): t for rid, t in sim.items()
                if rid.startswith("bench-") and (tail := rid.rsplit("-", 1)[1]).isdigit()}
    parts: dict[str, list[float]] = {"request": [], "server": [], "response": []}
    for i, (start, ttft) in enumerate(zip(result.get("start_times") or (),
                                          result.get("ttfts") or (), strict=False)):
        if i not in by_index or not ttft:
            continue
        arrived, first = by_index[i]
        parts["request"].append(1e3 * (arrived - start))
        parts["server"].append(1e3 * (first - arrived))
        parts["response"].append(1e3 * (start + ttft - first))
    if not parts["server"]:
        return None
    return {k: statistics.median(v) for k, v in parts.items()} | {"n": len(parts["server"])}


def server_ttft_totals(url: str) -> tuple[float, float] | None:
    """(sum of seconds, count) of vLLM's own TTFT histogram (``/metrics``,
    ``vllm:time_to_first_token_seconds``, all label sets); None if it has none."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    total = {"_sum": 0.0, "_count": 0.0}
    found = False
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            suffix = name[len("vllm:time_to_first_token_seconds"):]
            if suffix in total:
                total[suffix] += float(line.rsplit(" ", 1)[1])
                found = True
    return (total["_sum"], total["_count"]) if found else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rate", type=float, help="open loop: Poisson arrivals at this many "
                                               "requests/s (at most --streams in flight)")
    ap.add_argument("--vocab", type=int, default=30000,
                    help="our prompts use token ids 100..VOCAB-1 (the model's vocabulary)")
    ap.add_argument("--url", help="a running server to use instead of starting the sim")
    ap.add_argument("--model", default="m", help="served model name (default m: the sim's)")
    ap.add_argument("--tokenizer", help="tokenizer for vllm bench serve (default: a "
                                        "word-level one built here, matching the sim)")
    ap.add_argument("--vllm-cli", help="command that runs the vllm CLI (default: "
                                       ".venv-vllm/bin/vllm)")
    ap.add_argument("--reference-trust-env", choices=("on", "off"), default="on",
                    help="off: a diagnostic run of vllm bench serve with aiohttp's per-request "
                         "netrc/proxy lookups turned off (never used for the target)")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    tok = Path(args.tokenizer) if args.tokenizer else ensure_tokenizer()
    cli = shlex.split(args.vllm_cli) if args.vllm_cli else None
    ours_cfg = dict(streams=args.streams, requests=args.requests, model=args.model,
                    prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                    rate=args.rate, vocab=args.vocab)
    server_ttft: dict[str, float | None] = {}
    split: list[dict | None] = [None]
    rows = []
    with contextlib.ExitStack() as stack:
        if args.url:
            srv = {"url": args.url}
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            srv = stack.enter_context(sim_server(Path(tmp), time_scale=1.0, cpus="0",
                                                 trace=True))
        since = [0.0]

        last = [server_ttft_totals(srv["url"]) if args.url else None]

        def after(name: str, result: dict | None = None) -> None:
            """The server's own TTFT for the run just done (and, for the vLLM client's
            run against the sim, where its TTFT went)."""
            if not args.url:  # the sim: p50 from its trace
                firsts = sim_first_writes(srv["url"], since, args.output_tokens)
                server_ttft[name] = (statistics.median(1e3 * (w - t) for t, w in
                                                       firsts.values()) if firsts else None)
                if result is not None:
                    split[0] = reference_split(result, firsts)
                return
            now = server_ttft_totals(srv["url"])  # vLLM: the mean from its histogram
            if now is not None and last[0] is not None and now[1] > last[0][1]:
                server_ttft[name] = 1e3 * (now[0] - last[0][0]) / (now[1] - last[0][1])
            last[0] = now

        a = run_ours(srv["url"], cpus="1", **ours_cfg)
        after("ours (before)")
        v = run_vllm_cli(srv["url"], tok, args.streams, args.requests, args.prompt_tokens,
                         args.output_tokens, RESULTS, args.model, cli, args.rate,
                         trust_env=args.reference_trust_env == "on")
        after("vllm bench serve", v)
        b = run_ours(srv["url"], cpus="1", **ours_cfg)
        after("ours (after)")
        # our aiohttp transport stamps like the vLLM client does (in user space, after
        # aiohttp built and sent the request): it shows how much of a TTFT gap is client
        # overhead rather than a different server behaviour
        h = run_ours(srv["url"], cpus="1", transport="aiohttp", **ours_cfg)
        after("ours, aiohttp transport")
    rows.append({"client": "ours, aiohttp transport", "tok_s": h["output_tok_s"],
                 "ttft": h["ttft_p50_ms"], "ttft_mean": h["ttft_mean_ms"],
                 "tpot": h["tpot_p50_ms"], "status": h["status"]})
    for name, r in (("ours (before)", a), ("ours (after)", b)):
        rows.append({"client": name, "tok_s": r["output_tok_s"], "ttft": r["ttft_p50_ms"],
                     "ttft_mean": r["ttft_mean_ms"], "tpot": r["tpot_p50_ms"],
                     "status": r["status"]})
    rows.append({"client": "vllm bench serve", "tok_s": v["output_throughput"],
                 "ttft": v["median_ttft_ms"], "ttft_mean": v.get("mean_ttft_ms"),
                 "tpot": v.get("median_tpot_ms"),
                 "status": f"{v['completed']} ok / {v.get('failed', 0)} failed, "
                           f"{v['total_input_tokens'] / max(v['completed'], 1):.0f} in"})
    for name, r in (("ours (before)", a), ("ours (after)", b)):
        if r["output_tok_s"] is None:
            sys.exit(f"{name}: level {r['status']}: {r['reason']}")
    ours_tok = (a["output_tok_s"] + b["output_tok_s"]) / 2
    ours_ttft = (a["ttft_p50_ms"] + b["ttft_p50_ms"]) / 2
    diff_tok = ours_tok / v["output_throughput"] - 1
    diff_ttft = ours_ttft / v["median_ttft_ms"] - 1
    # the sim gives its TTFT p50; vLLM its mean (a histogram's sum / count): compare like
    # with like
    key, label = ("ttft", "p50") if not args.url else ("ttft_mean", "mean")
    for row in rows:
        srv_ttft = server_ttft.get(row["client"])
        row["server_ttft"] = srv_ttft
        row["client_minus_server"] = (row[key] - srv_ttft if srv_ttft is not None
                                      and row.get(key) is not None else None)
    cols = [("client", "client", "s"), ("tok_s", "output tok/s", ".1f"),
            ("ttft", "TTFT p50 ms", ".2f"), ("ttft_mean", "TTFT mean ms", ".2f"),
            ("tpot", "TPOT p50 ms", ".3f")]
    if server_ttft:
        cols += [("server_ttft", f"server's TTFT {label} ms", ".2f"),
                 ("client_minus_server", f"client - server ({label}) ms", "+.2f")]
    print(table(rows, [*cols, ("status", "status", "s")]))
    print(f"ours (mean of 2) vs vllm: throughput {diff_tok:+.2%}, TTFT p50 {diff_ttft:+.2%}; "
          f"ours run-to-run: {b['output_tok_s'] / a['output_tok_s'] - 1:+.2%} tok/s")
    ok = abs(diff_tok) <= 0.03 and abs(diff_ttft) <= 0.03
    print(f"target within 3%: {'met' if ok else 'NOT met'}; ours with the aiohttp transport vs "
          f"vllm: TTFT p50 {h['ttft_p50_ms'] / v['median_ttft_ms'] - 1:+.2%}")
    if split[0]:
        print("vllm bench serve's TTFT, request by request (medians, {n} requests): "
              "{request:.2f} ms from its clock start to the sim's handler entry, {server:.2f} "
              "ms in the sim, {response:.2f} ms from the first token written to its "
              "stamp".format(**split[0]))
    mode = (f"c{args.streams}" + (f"-p{args.prompt_tokens}" if args.prompt_tokens != 128 else "")
            + (f"-rate{args.rate:g}" if args.rate else ""))
    if args.reference_trust_env == "off":
        print("(diagnostic: vllm bench serve ran with trust_env off; not a test of the target)")
        mode += "-no-trust-env"
    path = save(f"loadgen_agreement-{mode}", {"machine": machine_note(),
                                                        "args": vars(args),
                                      "rows": rows, "throughput_diff": diff_tok,
                                      "ttft_p50_diff_aiohttp": h["ttft_p50_ms"]
                                      / v["median_ttft_ms"] - 1,
                                      "ttft_p50_diff": diff_ttft, "target_met": ok,
                                      "vllm_ttft_split_ms": split[0]})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
