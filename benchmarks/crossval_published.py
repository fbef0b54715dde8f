#!/usr/bin/env python3
"""The sim's profiles against published serving numbers: a held-out check, never a fit.

    .venv/bin/python benchmarks/crossval_published.py              # every fixture, ~5-15 min
    .venv/bin/python benchmarks/crossval_published.py --max-requests 600   # quicker, rougher

TensorRT-LLM cannot run here, so its only ground truth is published: the fixtures in
tests/fixtures/published/ (each with its source pinned: repository, commit, path, and the setup
the numbers were measured with; README.md there). Each published level is predicted by the
profile of its engine (``trtllm`` or ``vllm``) with its default factors, nothing fitted:

- ``closed_loop`` rows (the seed article's harness): ``concurrency`` streams, the source's
  request count, HTTP serving (the profile's front-end delays apply);
- ``offline`` rows (NVIDIA's ``trtllm-bench throughput``): every request queued at once, in
  process (no front end), at most ``--max-requests`` of the source's count simulated.

Settings a source does not state take the profile's defaults (listed per row in the JSON).
Writes benchmarks/results/crossval-published.json and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

import yaml  # noqa: E402

from actors.contracts.hardware import get_hardware  # noqa: E402
from actors.contracts.shapes import get_preset  # noqa: E402
from actors.sim.perf import SimConfig  # noqa: E402
from actors.sim.predict import build_engine, simulate_closed_loop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "published"
METRICS = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms")
NO_FRONT_END = {"frontend_us": 0.0, "admit_us_per_running": 0.0, "frontend_tok_us": 0.0,
                "frontend_stream_us": 0.0}


def load_rows(fixtures: Path = FIXTURES) -> list[dict]:
    """Every published level as one flat row: source, setup, measured metrics."""
    rows = []
    for path in sorted(fixtures.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        src, setup = doc["source"], doc["setup"]
        for cfg in doc["configs"]:
            base = {"fixture": path.name, "repository": src["repository"],
                    "commit": src["commit"], "tag": cfg["tag"], "shape": cfg["shape"],
                    "weights": cfg["weights"], "tp": cfg["tp"],
                    "engine": cfg.get("engine", setup.get("engine")),
                    "hardware": cfg.get("hardware", setup.get("hardware")),
                    "mode": setup["mode"]}
            if setup["mode"] == "offline":
                for lengths, tok_s in cfg["rows"].items():
                    isl, osl = (int(x) for x in lengths.split("/"))
                    n = setup["num_requests"][lengths]
                    rows.append({**base, "prompt_tokens": isl, "output_tokens": osl,
                                 "requests": n, "concurrency": n,
                                 "measured": {"output_tok_s": float(tok_s)}})
            else:
                for lv in cfg["levels"]:
                    rows.append({**base, "prompt_tokens": setup["prompt_tokens"],
                                 "output_tokens": setup["output_tokens"],
                                 "requests": lv["requests"], "concurrency": lv["concurrency"],
                                 "settings": setup["engines"][base["engine"]]["settings"],
                                 "measured": {k: float(lv[k]) for k in METRICS if k in lv},
                                 "file": lv.get("file")})
    return rows


def sim_config(row: dict, kv_dtype: str = "auto") -> tuple[SimConfig, list[str]]:
    """The row's server settings as the model sees them, and which were not stated
    (``kv_dtype``: what to assume for a KV cache dtype the source does not state)."""
    s = row.get("settings")
    defaulted = []
    kw: dict = {"tp": row["tp"], "weights": row["weights"], "cuda_graphs": True}
    if isinstance(s, dict):  # the seed's TensorRT-LLM serve command
        kw.update(graph_max_batch=s["graph_max_batch"], max_num_seqs=s["max_num_seqs"],
                  max_num_tokens=s["max_num_tokens"],
                  gpu_memory_fraction=s["kv_cache_free_gpu_memory_fraction"])
    else:
        defaulted += ["max_num_seqs", "max_num_tokens", "gpu_memory_fraction"]
    if row["mode"] == "offline":
        kw["graph_max_batch"] = 8192  # stated: cuda_graph_config batch_sizes up to 8192
        # not stated: without chunked prefill a prompt must fit one iteration beside the
        # running decodes, or long prompts could only start once every decode ended
        kw["max_num_tokens"] = max(8192, row["prompt_tokens"] + 2048)
        defaulted.append("max_num_tokens = max(8192, ISL + 2048)")
    defaulted.append(f"kv_dtype = {kv_dtype}")
    kw["kv_dtype"] = kv_dtype
    kw["max_model_len"] = row["prompt_tokens"] + row["output_tokens"]
    return SimConfig(**kw), defaulted


def predict(row: dict, max_requests: int, kv_dtype: str = "auto") -> dict[str, float]:
    cfg, _ = sim_config(row, kv_dtype)
    offline = row["mode"] == "offline"
    engine, _ = build_engine(get_preset(row["shape"]), get_hardware(row["hardware"]),
                             row["engine"], cfg, jitter=0.0,
                             overrides=NO_FRONT_END if offline else None)
    n = min(row["requests"], max_requests) if offline else row["requests"]
    c = n if offline else row["concurrency"]
    p = simulate_closed_loop(engine, c, n, row["prompt_tokens"], row["output_tokens"])
    return {"output_tok_s": p.output_tok_s, "ttft_p50_ms": p.ttft_p50_ms,
            "ttft_p99_ms": p.ttft_p99_ms, "tpot_p50_ms": p.tpot_p50_ms,
            "simulated_requests": n}


def summary(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["fixture"], r["engine"], r["mode"]), []).append(r)
    out = []
    for (fixture, engine, mode), rs in groups.items():
        for m in METRICS:
            errs = [(r["err"][m], r) for r in rs if m in r.get("err", {})]
            if not errs:
                continue
            worst = max(errs, key=lambda e: abs(e[0]))
            out.append({"fixture": fixture, "engine": engine, "mode": mode, "metric": m,
                        "n": len(errs), "mean_abs": statistics.mean(abs(e) for e, _ in errs),
                        "mean_signed": statistics.mean(e for e, _ in errs),
                        "worst": worst[0], "worst_row": label(worst[1])})
    return out


def label(r: dict) -> str:
    if r["mode"] == "offline":
        return f"{r['tag']} {r['prompt_tokens']}/{r['output_tokens']}"
    return f"{r['tag']} c={r['concurrency']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-requests", type=int, default=3000,
                    help="offline rows: simulate at most this many of the source's requests")
    ap.add_argument("--only", default="", help="substring of a config tag to keep")
    ap.add_argument("--kv-dtype", default="auto", choices=("auto", "fp8"),
                    help="the KV cache dtype to assume where a source does not state it "
                         "(every fixture here: an assumption, reported as such)")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "crossval-published.json")
    a = ap.parse_args()
    rows = [r for r in load_rows() if a.only in r["tag"]]
    t0 = time.monotonic()
    for r in rows:
        r["predicted"] = predict(r, a.max_requests, a.kv_dtype)
        r["defaulted"] = sim_config(r, a.kv_dtype)[1]
        r["err"] = {k: r["predicted"][k] / v - 1 for k, v in r["measured"].items()
                    if r["predicted"].get(k)}
    summ = summary(rows)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "wall_s": round(time.monotonic() - t0, 1),
                                 "max_requests": a.max_requests, "kv_dtype": a.kv_dtype,
                                 "summary": summ,
                                 "rows": rows}, indent=1, default=str))
    print("| source | engine | mode | metric | rows | mean abs error | mean signed | worst |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summ:
        print(f"| {s['fixture']} | {s['engine']} | {s['mode']} | {s['metric']} | {s['n']} | "
              f"{s['mean_abs']:.1%} | {s['mean_signed']:+.1%} | {s['worst']:+.1%} "
              f"({s['worst_row']}) |")
    print("\n| row | measured tok/s | predicted | error | TTFT p50 error | TPOT p50 error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r['err'][k]:+.0%}" if k in r["err"] else "-"
                 for k in ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms")]
        print(f"| {r['engine']} {label(r)} | {r['measured']['output_tok_s']:,.0f} | "
              f"{r['predicted']['output_tok_s']:,.0f} | " + " | ".join(cells) + " |")
    print(f"\nwrote {a.out} ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
