#!/usr/bin/env python3
"""Cross-validated error of the sim's performance model on every real measurement held.

    .venv/bin/python benchmarks/crossval.py                 # ~3-6 min on 2 cores
    .venv/bin/python benchmarks/crossval.py --max-evals 30  # quicker, rougher fits

Data: ``benchmarks/crossval_data.py`` finds it (sweeps under tests/fixtures/h200-sweeps/,
benchmarks/results/, benchmarks/measured/, and the real-vLLM agreement runs); a new GPU sweep
copied under benchmarks/results/ joins the next run. Folds:

- **leave one configuration out** (LOCO): for each configuration (engine settings), fit
  ``calibrate`` on every other configuration's points, predict the held-out one;
- **leave one prompt length out** (LOPO), when the data has two or more prompt lengths;
- **leave one model out** (LOMO), when the data has two or more model shapes: fit on every
  other shape's points, predict this shape's (what a model nobody profiled gets);
- **profiled** (LOMO, then a profile): the LOMO fit, fitted again on this shape's
  ``PROFILE_LEVELS`` points of each configuration alone (what a short profile of the user's
  model measures), predicting this shape's other points (the profiled ones are not scored);
- **profiled on its node**: the same, with the profile and the points it predicts taken from
  one machine (``crossval_data.node_of``: the boot id, else a documented map of node
  sessions). Both profiled folds fit ``host_scale`` alone of the host costs
  (``calibrate(host=True)``, what ``profile-model`` does; ``--profile-each-cost``: each cost);
- beside them the **default** profile (unfitted) and the **in-sample** fit on everything (how
  far the out-of-sample error is from the best the model can do).

Per point and metric (throughput, TTFT p50/p99, ITL p50; TPOT p50 where a run has no ITL) the
relative error; per metric the mean |error|, the worst, and the points outside the goal
(throughput and ITL within 10% per point, TTFT p50 within 20%; means half that). Writes
benchmarks/results/crossval.json (``--out``) and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# this checkout's packages before an installed (editable) copy, then the sibling module
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from crossval_data import (  # noqa: E402
    DEFAULT_ROOTS,
    ROOT,
    config_group,
    discover,
    node_of,
    parse_factors,
    point_label,
)

from orchestrator.planning.model_error import shape_key  # noqa: E402
from orchestrator.results.calibrate import Point, calibrate, predict_points  # noqa: E402

METRICS = ("output_tok_s", "itl_p50_ms", "tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms")
#: goal per point and for the mean |error| (None: reported, no goal)
GOALS: dict[str, tuple[float, float] | None] = {
    "output_tok_s": (0.10, 0.05), "itl_p50_ms": (0.10, 0.05), "tpot_p50_ms": (0.10, 0.05),
    "ttft_p50_ms": (0.20, 0.10), "ttft_p99_ms": None}
PROFILE = "vllm"
#: the concurrencies a short profile of a model measures, per configuration (issue 30)
PROFILE_LEVELS = (1, 32)

_POINTS: list[Point] = []  # set before the workers fork
_HOST = False  # the profiled folds' second stage fits host_scale alone of the host costs


#: (kind, name, train, held, max_evals, method, freeze, base, then-train): a fold fits on
#: ``train``, then (profiled folds) again on ``then-train`` from that fit, and predicts ``held``
Job = tuple[str, str, list[int], list[int], int, str, frozenset[str], dict[str, float],
            list[int]]


def _fit_and_predict(job: Job) -> dict:
    kind, name, train, held, max_evals, method, freeze, base, then = job
    t0 = time.process_time()
    evaluations = 0
    for second, stage in enumerate((train, then)):
        if not stage:
            continue
        pts = [_POINTS[i] for i in stage]
        fit = calibrate(pts, pts[0].spec, pts[0].shape, PROFILE,  # type: ignore[arg-type]
                        max_evals=max_evals, method=method, freeze=freeze, base=base,
                        host=_HOST and bool(second))
        base, evaluations = dict(fit.fitted), evaluations + fit.evaluations
    held_pts = [_POINTS[i] for i in held]
    preds = predict_points(held_pts, held_pts[0].spec, held_pts[0].shape, PROFILE,  # type: ignore
                           fit.fitted)
    return {"kind": kind, "name": name, "train": len(train) + len(then), "held": held,
            "fitted": fit.fitted, "varied": fit.varied, "evaluations": evaluations,
            "train_error_after": fit.error_after, "cpu_s": time.process_time() - t0,
            "preds": preds}


def _folds(points: list[Point], max_evals: int, method: str, freeze: frozenset[str],
           base: dict[str, float] | None = None, nodes: list[str] | None = None) -> list[Job]:
    base = dict(base or {})
    jobs: list[Job] = []
    everyone = list(range(len(points)))
    for kind, key in (("loco", config_group),
                      ("lopo", lambda p: f"prompt={p.spec.workload.prompt_tokens}"),
                      ("lomo", lambda p: shape_key(p.shape))):
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(points):
            groups.setdefault(key(p), []).append(i)
        if len(groups) < 2:
            continue
        for name, held in groups.items():
            others = [i for i in everyone if i not in held]
            jobs.append((kind, name, others, held, max_evals, method, freeze, base, []))
            if kind != "lomo":
                continue
            profile = [i for i in held if points[i].concurrency in PROFILE_LEVELS]
            rest = [i for i in held if i not in profile]
            if profile and rest:
                jobs.append(("profiled", name, others, rest, max_evals, method, freeze, base,
                             profile))
    # profiled on its node: the model left out, then profiled at c=1, 32 on one machine and
    # scored on that machine's other points (what a user who profiles where they serve gets)
    by_node: dict[str, list[int]] = {}
    for i, node in enumerate(nodes or ()):
        by_node.setdefault(f"{shape_key(points[i].shape)} on {node}", []).append(i)
    for name, held in by_node.items():
        shape = shape_key(points[held[0]].shape)
        others = [i for i in everyone if shape_key(points[i].shape) != shape]
        profile = [i for i in held if points[i].concurrency in PROFILE_LEVELS]
        rest = [i for i in held if i not in profile]
        if others and profile and rest:
            jobs.append(("onnode", name, others, rest, max_evals, method, freeze, base,
                         profile))
    jobs.append(("insample", "all", everyone, everyone, max_evals, method, freeze, base, []))
    return jobs


def _err(pred: float | None, meas: float) -> float | None:
    return None if not pred else pred / meas - 1


def run(points: list[Point], max_evals: int, jobs: int, method: str = "trf",
        freeze: frozenset[str] = frozenset(), base: dict[str, float] | None = None,
        host: bool = False, kinds: frozenset[str] = frozenset(),
        nodes: list[str] | None = None) -> dict:
    """Every fold's fit and predictions (``kinds``: only those folds; ``host``: the profiled
    folds fit ``host_scale`` in their second stage, the individual host costs held; ``nodes``:
    each point's machine, for the folds profiled on the point's node)."""
    global _POINTS, _HOST
    _POINTS, _HOST = points, host
    default = predict_points(points, points[0].spec, points[0].shape, PROFILE,  # type: ignore
                             dict(base or {}))
    rows = [{"point": point_label(p), "config": config_group(p), "shape": shape_key(p.shape),
             "prompt_tokens": p.spec.workload.prompt_tokens if p.spec else None,
             "concurrency": p.concurrency, "measured": dict(p.measured),
             "default": {k: default[i][k] for k in p.measured}} for i, p in enumerate(points)]
    folds = []
    work = [j for j in _folds(points, max_evals, method, freeze, base, nodes)
            if not kinds or j[0] in kinds]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for res in pool.map(_fit_and_predict, work):
            for i, pred in zip(res["held"], res.pop("preds")):
                rows[i][res["kind"]] = {k: pred[k] for k in points[i].measured}
                rows[i][res["kind"] + "_fold"] = res["name"]
            res["held"] = len(res["held"])
            folds.append(res)
    for r in rows:
        for col in FOLD_COLUMNS:
            if col in r:
                r["err_" + col] = {k: _err(r[col].get(k), v) for k, v in r["measured"].items()}
    shapes = sorted({r["shape"] for r in rows})
    return {"rows": rows, "folds": folds, "summary": summarise(rows),
            "by_shape": {k: summarise([r for r in rows if r["shape"] == k]) for k in shapes},
            "repeat_spread": repeat_spread(points)}


FOLD_COLUMNS = ("default", "loco", "lopo", "lomo", "profiled", "onnode", "insample")


def precision_signs(rows: list[dict], beyond: float = 0.05) -> dict:
    """Per column, how many measured precision effects (FP8 weights or FP8 KV against the
    same sweep's BF16 / auto KV config of otherwise the same settings, at the same level) beyond
    ``beyond`` the column predicts with the right sign, and which it gets wrong."""
    def base_key(r: dict) -> str:
        return (r["config"].replace(" fp8 ", " bf16 ").replace("kv=fp8", "kv=auto")
                + _where(r))
    bf16 = {base_key(r): r for r in rows if base_key(r) == _own_key(r)}
    out: dict = {}
    for r in rows:
        ref = bf16.get(base_key(r))
        if ref is None or base_key(r) == _own_key(r):
            continue
        effect = r["measured"]["output_tok_s"] / ref["measured"]["output_tok_s"] - 1
        if abs(effect) <= beyond:
            continue
        for col in FOLD_COLUMNS:
            if col not in r or col not in ref:
                continue
            guess = r[col]["output_tok_s"] / ref[col]["output_tok_s"] - 1
            tally = out.setdefault(col, {"right": 0, "wrong": []})
            if (guess > 0) == (effect > 0):
                tally["right"] += 1
            else:
                tally["wrong"].append(f"{r['point']} ({r['shape']}): measured {effect:+.0%}, "
                                      f"predicted {guess:+.0%}")
    return out


def _where(r: dict) -> str:
    """The pair's common ground: one sweep (one node), shape, lengths, level."""
    return f"|{r.get('source', '')}|{r['shape']}|{r['prompt_tokens']}|{r['concurrency']}"


def _own_key(r: dict) -> str:
    return r["config"] + _where(r)


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    for m in METRICS:
        for col in FOLD_COLUMNS:
            errs = [(r["err_" + col][m], r["point"]) for r in rows
                    if "err_" + col in r and r["err_" + col].get(m) is not None]
            if not errs:
                continue
            worst = max(errs, key=lambda e: abs(e[0]))
            goal = GOALS[m]
            out.setdefault(m, {})[col] = {
                "n": len(errs), "mean_abs": sum(abs(e) for e, _ in errs) / len(errs),
                "mean_signed": sum(e for e, _ in errs) / len(errs),
                "worst": worst[0], "worst_point": worst[1],
                "outside_goal": None if goal is None else sum(abs(e) > goal[0] for e, _ in errs)}
    return out


def repeat_spread(points: list[Point]) -> dict:
    """How far repeated measurements of one level (same settings, workload, concurrency;
    another day or machine) sit from their mean: the error no model can beat."""
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        w = p.spec.workload if p.spec else None
        key = (config_group(p), w.prompt_tokens if w else 0, w.output_tokens if w else 0,
               p.concurrency)
        groups.setdefault(key, []).append(p)
    out: dict = {}
    for m in METRICS:
        devs = []
        for pts in groups.values():
            vals = [p.measured[m] for p in pts if m in p.measured]
            if len(vals) > 1:
                mean = sum(vals) / len(vals)
                devs += [abs(v / mean - 1) for v in vals]
        if devs:
            out[m] = {"n": len(devs), "mean_abs": sum(devs) / len(devs), "max": max(devs)}
    return out


NAMES = {"output_tok_s": "throughput", "itl_p50_ms": "ITL p50", "tpot_p50_ms": "TPOT p50",
         "ttft_p50_ms": "TTFT p50", "ttft_p99_ms": "TTFT p99"}
COLS = (("default", "default profile"), ("loco", "leave one config out"),
        ("lopo", "leave one prompt length out"), ("lomo", "leave one model out"),
        ("profiled", "model out, then profiled at c=1, 32"),
        ("onnode", "the same, profiled on the point's node"), ("insample", "in-sample fit"))


def summary_table(summary: dict) -> str:
    cols = [c for c in COLS if any(c[0] in s for s in summary.values())]
    head = "| metric (goal: point / mean) | " + " | ".join(
        f"{t}: mean / worst (outside goal)" for _, t in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for m, by in summary.items():
        g = GOALS[m]
        goal = f"{g[0]:.0%} / {g[1]:.0%}" if g else "none"
        n = next(iter(by.values()))["n"]
        cells = []
        for c, _ in cols:
            s = by.get(c)
            cells.append("-" if s is None else f"{s['mean_abs']:.1%} / {s['worst']:+.1%}"
                         + ("" if s["outside_goal"] is None else f" ({s['outside_goal']}/{n})"))
        lines.append(f"| {NAMES[m]} ({goal}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def point_table(rows: list[dict]) -> str:
    """One row per point: each metric's error, default -> leave-one-config-out (-> LOPO)."""
    lines = ["| point | throughput | ITL p50 (TPOT*) | TTFT p50 | TTFT p99 |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = []
        for m in ("output_tok_s", "itl_p50_ms", "ttft_p50_ms", "ttft_p99_ms"):
            mm = "tpot_p50_ms" if m == "itl_p50_ms" and m not in r["measured"] else m
            if mm not in r["measured"]:
                cells.append("-")
                continue
            errs = [r[f"err_{c}"][mm] for c in ("default", "loco", "lopo", "lomo", "profiled",
                                                "onnode")
                    if f"err_{c}" in r]
            cells.append(" / ".join(f"{e:+.0%}" for e in errs) + ("*" if mm != m else ""))
        lines.append(f"| {r['point']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", type=Path,
                    help="folder to search for measurements (repeatable; default: "
                         + ", ".join(str(p.relative_to(ROOT)) for p in DEFAULT_ROOTS) + ")")
    ap.add_argument("--max-evals", type=int, default=80, help="model evaluations per fit")
    ap.add_argument("--method", default="trf",
                    help="calibrate's scipy method (trf, powell, nelder-mead)")
    ap.add_argument("--freeze", default="",
                    help="comma-separated fitted factors to hold at the profile's value")
    ap.add_argument("--set", default="", metavar="K=V,...",
                    help="fitted factors' starting values instead of the profile's (e.g. to "
                         "score the model as it was before a change: the new factor neutral)")
    ap.add_argument("--profile-each-cost", action="store_true",
                    help="profiled folds: fit each host cost to the profile, not host_scale "
                         "alone (what profile-model did before 2026-12-04)")
    ap.add_argument("--folds", default="",
                    help="comma-separated fold kinds to run (loco, lopo, lomo, profiled, "
                         "onnode, insample); default all")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "crossval.json")
    ap.add_argument("--label", default="", help="a note stored in the JSON (e.g. the change)")
    a = ap.parse_args()
    data = discover(tuple(a.root) if a.root else DEFAULT_ROOTS)
    if not data.points:
        sys.exit("no real measurement found")
    t0 = time.monotonic()
    freeze = frozenset(k for k in a.freeze.split(",") if k)
    base = parse_factors(a.set)
    kinds = frozenset(k for k in a.folds.split(",") if k)
    nodes = [node_of(p, data.sources.get(id(p), "")) for p in data.points]
    result = run(data.points, a.max_evals, a.jobs, a.method, freeze, base,
                 not a.profile_each_cost, kinds, nodes)
    for row, p in zip(result["rows"], data.points):
        row["source"] = data.sources.get(id(p), "")
    result["precision_signs"] = precision_signs(result["rows"])
    result.update(label=a.label, max_evals=a.max_evals, method=a.method, freeze=sorted(freeze),
                  profile_host=not a.profile_each_cost, fold_kinds=sorted(kinds),
                  base=base,
                  skipped=data.skipped,
                  wall_s=round(time.monotonic() - t0, 1),
                  time=time.strftime("%Y-%m-%d %H:%M:%S"),
                  sources=sorted(set(data.sources.values())))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"{len(data.points)} points from {len(result['sources'])} sources; "
          f"{len(result['folds'])} fits in {result['wall_s']} s; skipped: {len(data.skipped)}\n")
    print(summary_table(result["summary"]) + "\n")
    print("Repeated measurements of one level, spread around their mean (the noise floor): "
          + "; ".join(f"{NAMES[m]} {v['mean_abs']:.1%} mean, {v['max']:.1%} max ({v['n']})"
                      for m, v in result["repeat_spread"].items()) + "\n")
    for shape, by in result["by_shape"].items():
        print(f"Model shape {shape}:\n\n{summary_table(by)}\n")
    for col, tally in result["precision_signs"].items():
        print(f"precision effects beyond 5%, {col}: {tally['right']} of "
              f"{tally['right'] + len(tally['wrong'])} with the right sign"
              + "".join(f"\n  wrong: {w}" for w in tally["wrong"]))
    print("\nPer point, relative error: default / leave-one-config-out / leave-one-prompt-length-"
          "out / leave-one-model-out / profiled / profiled on its node, each where the point "
          "was held out (* TPOT p50 where the run has no ITL)\n")
    print(point_table(result["rows"]))
    for f in result["folds"]:
        print(f"\nfold {f['kind']} {f['name']}: {f['train']} points fitted, {f['evaluations']} "
              f"evaluations, train error {f['train_error_after']:.1%}: "
              + ", ".join(f"{k}={v:.4g}" for k, v in f["fitted"].items()
                          if k in f.get("varied", f["fitted"])))
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
