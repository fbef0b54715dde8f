"""How many trials each sampler needs to find a config within 3% of the grid's optimum.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--out FILE]

On the performance model directly (deterministic: no server, no noise). The space: the sim
with the vLLM and TensorRT-LLM profiles x TP 1/2/4 x BF16/FP8 weights x auto/FP8 KV x CUDA
graphs on/off x max_num_seqs 16..512 (log, 6 values; graph_max_batch tied to it) x, for the
vLLM profile, max_num_tokens 2048/8192: 432 configs; an 8B
model on H100s, 512 + 128 tokens, three load regimes (c = 1, 16, 64), objective output
tok/s, TTFT p99 <= 1 s. "Truth" is the model with every fitted constant of both
profiles perturbed by 25% (``TRUTH``, below), which the guided sampler does not know: it
starts from the unperturbed model and recalibrates after each trial. The script checks that
the unperturbed model's own top pick is more than 3% off in at least one regime.

For each regime and sampler: trials until a measured config is within 3% of the optimum
(and meets the SLO), median and worst over the seeds, and the GPU-hours those trials cost
(the planner's estimate: tp x real duration). Guided is deterministic: one run. Results go
to benchmarks/results/search_efficiency.json and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors.contracts.results import TrialResult  # noqa: E402
from actors.sim.perf import PROFILES  # noqa: E402
from orchestrator.planning.budget import estimate_gpu_hours  # noqa: E402
from orchestrator.planning.model_view import predicted_result  # noqa: E402
from orchestrator.planning.plan import plan_sweep, spec_shape  # noqa: E402
from orchestrator.planning.regimes import trial_scores  # noqa: E402
from orchestrator.planning.search.guided import GuidedSearcher  # noqa: E402
from orchestrator.planning.search.study import StudySearcher  # noqa: E402
from orchestrator.results.refit import refit_profile  # noqa: E402
from orchestrator.spec import SweepSpec, parse_spec  # noqa: E402

WITHIN = 0.03
#: each fitted constant of each profile times 1 +- 0.25 (signs chosen per constant)
PERTURB = {"vllm": {"gemm_eff": 0.75, "mem_eff": 0.75, "eager_us_per_layer": 1.25,
                    "graph_us_per_layer": 0.75, "sched_us_per_seq": 1.25,
                    "fp8_weight_eff": 0.75, "admit_us_per_running": 1.25},
           "trtllm": {"gemm_eff": 1.25, "mem_eff": 1.25, "eager_us_per_layer": 0.75,
                      "graph_us_per_layer": 1.25, "sched_us_per_seq": 0.75,
                      "fp8_weight_eff": 1.25, "admit_us_per_running": 0.75}}
TRUTH = {prof: {k: min(1.0, getattr(PROFILES[prof], k) * f) if k.endswith("_eff")
                else getattr(PROFILES[prof], k) * f for k, f in fs.items()}
         for prof, fs in PERTURB.items()}

SPEC: dict[str, Any] = {
    "name": "search-efficiency",
    "cluster": {"gpus": 8},
    "model": {"preset": "llama-3.1-8b"},
    "hardware": "h100-sxm",
    "workload": {"prompt_tokens": 512, "output_tokens": 128, "concurrency": [1, 16, 64]},
    "slo": {"ttft_p99_ms": 1000},
    "search": {"kind": "optuna", "sampler": "tpe", "objective": "output_tok_s",
               "regimes": {"interactive": [1], "mid": [16], "batch": [64]},
               "params": {"max_num_seqs": {"type": "int", "low": 16, "high": 512, "log": True,
                                           "points": 6},
                          "max_num_tokens": {"type": "int", "low": 2048, "high": 8192,
                                             "step": 6144, "engines": ["sim"],
                                             "when": {"profile": "vllm"}},
                          "graph_max_batch": {"same_as": "max_num_seqs",
                                              "when": {"cuda_graphs": True}}}},
    "space": [{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4],
               "weights": ["bf16", "fp8"], "kv_dtype": ["auto", "fp8"],
               "cuda_graphs": [True, False]}],
}


def _with_sampler(spec: SweepSpec, sampler: str, seed: int) -> SweepSpec:
    data = spec.model_dump(mode="json", exclude_unset=True)
    data["search"].update(sampler=sampler, seed=seed)
    return parse_spec(data)


def _values(results: dict[str, TrialResult], spec: SweepSpec) -> dict[str, dict[str, float]]:
    """regime -> key -> value, for configs meeting the SLO there (others absent)."""
    out: dict[str, dict[str, float]] = {}
    for key, r in results.items():
        for regime, s in trial_scores(r, spec).items():
            if s.feasible and s.value is not None:
                out.setdefault(regime, {})[key] = s.value
    return out


def _run(searcher: StudySearcher, truth: dict[str, TrialResult], good: dict[str, set[str]],
         cap: int) -> tuple[list[str], dict[str, int | None]]:
    """Ask/tell until every regime has a good config (or the searcher stops, or ``cap``)."""
    order: list[str] = []
    reached: dict[str, int | None] = {r: None for r in good}
    while len(order) < cap and any(v is None for v in reached.values()):
        p = searcher.ask()
        if p is None:
            break
        key = p.config.key()
        order.append(key)
        searcher.tell(p, truth[key])
        for r, keys in good.items():
            if reached[r] is None and key in keys:
                reached[r] = len(order)
    return order, reached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "search_efficiency.json")
    a = ap.parse_args()
    t0 = time.time()
    spec = parse_spec(SPEC)
    shape = spec_shape(spec)
    assert shape is not None
    planned = plan_sweep(spec)
    feasible = [p for p in planned if p.feasible]
    print(f"space: {len(planned)} configs, {len(feasible)} feasible", file=sys.stderr)
    truth = {p.config.key(): predicted_result(p.config, spec, shape, TRUTH) for p in feasible}
    model = {p.config.key(): predicted_result(p.config, spec, shape) for p in feasible}
    tv, mv = _values(truth, spec), _values(model, spec)
    regimes = list(spec.search.regime_levels(spec.workload.concurrency))
    opt = {r: max(tv[r].values()) for r in regimes}
    good = {r: {k for k, v in tv[r].items() if v >= (1 - WITHIN) * opt[r]} for r in regimes}
    model_pick = {r: max(mv[r], key=mv[r].__getitem__) for r in regimes}
    pick_off = {r: 1 - tv[r].get(model_pick[r], 0.0) / opt[r] for r in regimes}
    print(f"truth/model ready in {time.time() - t0:.0f} s; the model's own pick is off by "
          + ", ".join(f"{r} {pick_off[r]:.1%}" for r in regimes), file=sys.stderr)
    gpu_h: dict[str, float] = {}

    def cost(keys: list[str]) -> float:
        for k in keys:
            if k not in gpu_h:
                gpu_h[k] = estimate_gpu_hours(truth[k].config, spec, shape)
        return sum(gpu_h[k] for k in keys)

    n = len(feasible)
    rows: dict[str, dict[str, list[tuple[int | None, float]]]] = {}
    runs: dict[str, Any] = {}
    # grid: plan order, deterministic
    order = [p.config.key() for p in planned if p.feasible]
    rows["grid"] = {r: [(next(i + 1 for i, k in enumerate(order) if k in good[r]),
                         cost(order[: next(i + 1 for i, k in enumerate(order)
                                           if k in good[r])]))] for r in regimes}
    for sampler in ("random", "tpe", "guided"):
        seeds = [0] if sampler == "guided" else list(range(a.seeds))
        rows[sampler] = {r: [] for r in regimes}
        for seed in seeds:
            s_spec = _with_sampler(spec, sampler, seed)
            ts = time.time()
            searcher: StudySearcher
            if sampler == "guided":
                searcher = GuidedSearcher(planned, {}, s_spec, None, f"b{seed}", shape,
                                          refit=refit_profile)
            else:
                searcher = StudySearcher(planned, {}, s_spec, None, f"b{seed}", shape)
            seq, reached = _run(searcher, truth, good, n)
            runs[f"{sampler}/{seed}"] = {"trials": len(seq), "stop": searcher.stop_reason,
                                         "reached": reached, "s": round(time.time() - ts, 1)}
            print(f"{sampler} seed {seed}: {reached} ({len(seq)} trials, "
                  f"{time.time() - ts:.0f} s; stop: {searcher.stop_reason})", file=sys.stderr)
            for r in regimes:
                i = reached[r]
                rows[sampler][r].append((i, cost(seq[:i]) if i else cost(seq)))
    table = _table(rows, regimes, n, good, pick_off)
    print(table)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({
        "configs": len(planned), "feasible": n, "within": WITHIN, "truth": TRUTH,
        "optimum": opt, "good_configs": {r: len(good[r]) for r in regimes},
        "model_pick_off": pick_off, "rows": rows, "runs": runs,
        "wall_s": round(time.time() - t0, 1)}, indent=1, default=str))


def _table(rows: dict[str, dict[str, list[tuple[int | None, float]]]], regimes: list[str],
           n: int, good: dict[str, set[str]], pick_off: dict[str, float]) -> str:
    lines = [f"{n} feasible configs; within 3%: " + ", ".join(
        f"{r} {len(good[r])}" for r in regimes) + "; the unperturbed model's top pick is off "
        "by " + ", ".join(f"{r} {pick_off[r]:.1%}" for r in regimes), "",
        "| sampler | regime | trials, median | trials, worst | % of grid (worst) | "
        "GPU-h, median | GPU-h, worst |", "|---|---|---|---|---|---|---|"]
    for sampler, per in rows.items():
        for r in regimes:
            xs = per[r]
            counts = [i if i is not None else n + 1 for i, _ in xs]
            hs = [h for _, h in xs]
            worst = max(counts)
            w = f"{worst}" if worst <= n else "not reached"
            lines.append(f"| {sampler} | {r} | {statistics.median(counts):g} | {w} | "
                         f"{100 * worst / n:.1f}% | {statistics.median(hs):.2f} | "
                         f"{max(hs):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
