#!/usr/bin/env python3
"""The performance model's KV pool against the pool real vLLM logged, trial by trial.

    .venv/bin/python benchmarks/kv_pool.py [--root DIR ...] [--out FILE]

For every GPU sweep the repository holds (``crossval_data.DEFAULT_ROOTS``), every trial whose
``server.log`` has vLLM's ``GPU KV cache size: N tokens``: the model's pool for that trial's
settings (``plan_memory`` through ``build_engine``, the sweep's own shape and hardware)
against N, and the memory split vLLM logged beside it (``Actual usage is ... for weight,
... for peak activation, ... for non-torch memory, and ... for CUDAGraph memory``). Prints a
table and the mean / worst relative error; writes benchmarks/results/kv_pool.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from crossval_data import DEFAULT_ROOTS, ROOT, sweep_shape  # noqa: E402

from actors.contracts.config import TrialConfig  # noqa: E402
from actors.contracts.hardware import get_hardware  # noqa: E402
from actors.engines.sim import sim_settings  # noqa: E402
from actors.sim.predict import build_engine  # noqa: E402
from orchestrator.spec import load_spec  # noqa: E402

POOL = re.compile(r"GPU KV cache size: (?P<tokens>[\d,]+) tokens")
USAGE = re.compile(r"Desired GPU memory utilization is \((?P<f>[\d.]+), (?P<req>[\d.]+) GiB\)\. "
                   r"Actual usage is (?P<w>[\d.]+) GiB for weight, (?P<a>[\d.]+) GiB for peak "
                   r"activation, (?P<n>[\d.]+) GiB for non-torch memory, and (?P<g>[\d.]+) GiB "
                   r"for CUDAGraph memory")
AVAILABLE = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")


def trials(roots: list[Path]) -> list[dict[str, Any]]:
    out = []
    for root in roots:
        for log in sorted(root.rglob("trials/*/server.log")):
            trial_dir, sweep = log.parent, log.parent.parent.parent
            text = log.read_text(errors="replace")
            pool = POOL.search(text)
            cfg_file = trial_dir / "trial_config.json"
            if pool is None or not cfg_file.is_file() or not (sweep / "spec.yaml").is_file():
                continue
            spec = load_spec(sweep / "spec.yaml")
            shape = sweep_shape(sweep, spec)
            if shape is None:
                continue
            cfg = TrialConfig.model_validate_json(cfg_file.read_text())
            _, mem = build_engine(shape, get_hardware(spec.hardware), "vllm", sim_settings(cfg),
                                  jitter=0.0)
            row: dict[str, Any] = {"trial": str(trial_dir.relative_to(ROOT)), "config": cfg.label(),
                   "logged_tokens": int(pool["tokens"].replace(",", "")),
                   "model_tokens": mem.kv_tokens, "model_kv_gib": round(mem.kv_gib, 2),
                   "model_graph_gib": mem.graph_gib, "model_activation_gib": mem.activation_gib}
            if (u := USAGE.search(text)) is not None:
                row["logged"] = {k: float(u[k]) for k in ("f", "req", "w", "a", "n", "g")}
            if (a := AVAILABLE.search(text)) is not None:
                row["logged_kv_gib"] = float(a["gib"])
            row["error"] = mem.kv_tokens / int(pool["tokens"].replace(",", "")) - 1
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", action="append", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "kv_pool.json")
    a = ap.parse_args()
    rows = trials(a.root or list(DEFAULT_ROOTS))
    if not rows:
        raise SystemExit("no trial with a logged KV pool under the roots")
    print("| trial | config | logged tokens | model tokens | error | logged KV GiB | model KV GiB |"
          " logged graphs GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r.get("logged", {}).get("g")
        print(f"| {r['trial'][-40:]} | {r['config']} | {r['logged_tokens']:,} | "
              f"{r['model_tokens']:,} | {r['error']:+.1%} | {r.get('logged_kv_gib', '-')} | "
              f"{r['model_kv_gib']} | {'-' if g is None else g} |")
    errs = [abs(r["error"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    print(f"\n{len(rows)} trials: mean |error| {statistics.mean(errs):.2%}, worst "
          f"{worst['error']:+.2%} ({worst['config']}, {worst['trial']})")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"rows": rows, "mean_abs_error": statistics.mean(errs),
                                 "worst": worst["error"]}, indent=1))


if __name__ == "__main__":
    main()
