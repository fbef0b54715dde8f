"""``servesweep plan SPEC [--predict] [--json]``: the trials, the infeasible ones with
their reasons, and with ``--predict`` the performance model's numbers; starts nothing."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.commands.output import document
from orchestrator.errors import EXIT_OK

if TYPE_CHECKING:
    from orchestrator.planning.forecast import TrialPrediction

__all__ = ["add_parser", "cmd_plan"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="list trials and infeasible ones (starts nothing)")
    p.add_argument("spec", help="the sweep spec (YAML): search_spaces/ has examples")
    p.add_argument("--predict", action="store_true",
                   help="add the performance model's predictions and the sweep's duration")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--export-requests", metavar="FILE",
                   help="write the request list as JSONL {prompt, output_tokens} (what "
                        "vllm bench serve's custom dataset and guidellm read)")
    p.set_defaults(func=cmd_plan)
    return p


def _print(text: str = "") -> None:
    print(text, flush=True)


def _search_lines(spec: Any, planned: list[Any]) -> list[str]:
    """How the space is searched: sampler, objective, regimes, budget, then one line per
    parameter that varies (its domain, the engines it exists for, its conditions, ties)."""
    from orchestrator.planning.space import Space

    s = spec.search
    lines = []
    if s.kind == "optuna":
        regimes = ", ".join(f"{n} {c}" for n, c in s.regime_levels(spec.workload.levels())
                            .items())
        slo = ", ".join(f"{k} <= {v:g}" for k, v in spec.slo.model_dump(exclude_none=True)
                        .items()) or "none"
        lines.append(f"  sampler {s.sampler.value}, objective {s.objective.value}, SLO {slo}, "
                     f"budget {s.budget.describe() if s.budget else 'none'}; regimes: {regimes}")
    params = Space(planned, spec).describe()
    ties = [f"{n} = {p.same_as}" + "".join(f" when {k}={v}" for k, v in p.when.items())
            for n, p in s.params.items() if p.same_as is not None]
    if params or ties:
        lines.append("  parameters:")
        lines += [f"    {x}" for x in params + ties]
    return lines


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.planning.plan import plan_sweep, spec_shape
    from orchestrator.spec import load_spec

    spec = load_spec(args.spec)
    if getattr(args, "export_requests", None):
        from pathlib import Path

        from orchestrator.errors import UsageError
        from orchestrator.spec.traffic_plan import export_requests

        plan = spec.request_plan()
        if plan is None:
            raise UsageError("--export-requests: the spec has no workload.requests (the fixed "
                             "shape needs no file)")
        n = export_requests(plan, Path(args.export_requests))
        print(f"wrote {n} requests to {args.export_requests}", file=sys.stderr)
    planned = plan_sweep(spec)
    feasible = [p for p in planned if p.feasible]
    ref = None
    if spec.quality is not None:  # a reference that cannot run is the spec's error
        from orchestrator.planning.quality import reference_trial

        ref = reference_trial(spec.quality, planned)
    preds: dict[str, TrialPrediction] = {}
    total_s = None
    err = None
    if args.predict:
        from orchestrator.planning.forecast import predict_sweep
        from orchestrator.planning.overheads import learned
        from orchestrator.results.ledger import state_root

        overheads = learned(state_root())
        plist, total_s = predict_sweep(planned, spec, spec_shape(spec), overheads)
        preds = {p.key: p for p in plist}
        if preds:
            from orchestrator.planning.model_error import model_error

            err = model_error(spec_shape(spec), profile=spec.model_profile,
                              gpu=spec.hardware)
    pace = _host_pace(spec, planned, preds)
    from orchestrator.spec.traffic_plan import mix_summary

    mix = mix_summary(spec.workload, spec.request_plan())
    if args.json:
        out = {"spec": spec.name, "host_pace": pace, "traffic": mix, "trials": [
            {"key": p.config.key(), "label": p.config.label(), "feasible": p.feasible,
             "reason": p.reason, "config": p.config.model_dump(mode="json"),
             "prediction": (preds[p.config.key()].levels if p.config.key() in preds else None),
             "predicted_capacity": (preds[p.config.key()].capacity
                                    if p.config.key() in preds else None)}
            for p in planned], "estimated_sweep_s": total_s,
            "model_error": None if err is None else {
                "relative": err.value, "source": err.source, "profiled": err.profiled},
            "overheads": overheads.model_dump() if args.predict else None}
        _print(document("plan", out))
        return EXIT_OK
    _print(f"{spec.name}: {len(planned)} trials, {len(feasible)} to run, "
           f"{len(planned) - len(feasible)} infeasible; levels {', '.join(mix['levels'])}; "
           f"search {spec.search.kind}")
    _print(_traffic_line(mix))
    if err is not None:
        _print(f"predicted throughput {err.band()} ({'' if err.profiled else 'NOT PROFILED: '}"
               f"{err.source})")
        if not err.profiled and spec.model_profile is None:
            _print(f"  a short profile of this model narrows it: servesweep profile-model "
                   f"{args.spec}, then sim: {{model_profile: PATH}} in the spec")
    for line in _search_lines(spec, planned):
        _print(line)
    for i, p in enumerate(planned, 1):
        mark = "run " if p.feasible else "skip"
        line = f"  {i:3d}. {mark} {p.config.label()}  [{p.config.key()}]"
        if not p.feasible:
            line += f"\n          infeasible: {p.reason}"
        _print(line)
        pred = preds.get(p.config.key())
        if pred is not None:
            for lv in pred.levels:
                wait = f" wait<={lv['max_waiting']}" if lv["max_waiting"] else ""
                pre = f" preempt={lv['preemptions']}" if lv["preemptions"] else ""
                band = f" {err.band():>5}" if err is not None else ""
                _print(f"          {lv.get('level', lv['concurrency']):<10} "
                       f"{lv['output_tok_s']:9.1f} tok/s{band}  "
                       f"TTFT p50 {lv['ttft_p50_ms']:7.1f} ms  ITL p50 {lv['itl_p50_ms']:6.2f} ms"
                       f"  run<={lv['max_running']}{wait}{pre}")
            if pred.capacity is not None:
                _print(f"          {_capacity_line(pred.capacity)}")
    if args.predict and not preds:
        _print("\nno prediction: the model's shape is unknown here (model.path needs a local "
               "config.json, or use model.preset)")
    elif total_s is not None:
        m, s = divmod(int(total_s), 60)
        scale = spec.sim.time_scale
        note = f", sim time scale {scale}" if scale != 1 else ""
        o = overheads
        learnt = (f"measured by the last {o.sweeps} sweep(s) here" if o.sweeps else
                  "defaults: no sweep here has measured them yet")
        _print(f"\nEstimated sweep time: {m} min {s:02d} s (server starts + levels{note}; "
               f"plus driver start {o.driver_start_s:.1f} s, Ray {o.ray_start_s:.1f} s, "
               f"{o.per_trial_s:.1f} s per trial, report {o.report_s:.1f} s: {learnt})")
    elif not args.predict:
        _print("\n(add --predict for the performance model's numbers and the sweep's duration)")
    if spec.quality is not None:
        from orchestrator.planning.forecast import quality_run_s

        assert ref is not None
        _print(f"Quality reference: {ref.config.label()} [{ref.config.key()}]")
        runs = [quality_run_s(spec, p.config) for p in feasible]
        n = sum(1 for x in runs if x > 0)
        _print(f"Quality runs: {n} trial(s), about {max(runs, default=0):.0f} s each "
               f"(included in the estimate above with --predict); the reference runs first")
    if pace and pace["problems"]:
        _print(_pace_line(pace, spec.sim.time_scale))
    return EXIT_OK


def _capacity_line(cap: dict[str, Any]) -> str:
    """The capacity at SLO the model finds, as the search would step to it."""
    if cap["rps"] is None:
        return f"capacity at SLO: none found in {cap['probes']} probes ({cap['note']})"
    price = (f", ${cap['usd_per_million_tokens']:.2f} per M output tokens"
             if cap.get("usd_per_million_tokens") is not None else "")
    return (f"capacity at SLO: {cap['rps']:.2f} req/s, {cap['output_tok_s']:.1f} tok/s"
            f"{price} (model, {cap['probes']} probes)")


def _traffic_line(mix: dict[str, Any]) -> str:
    """The request mix in a line or two: source, lengths, prefix reuse, fingerprint."""
    line = f"  traffic: {mix['source']}"
    if mix.get("requests"):
        p, o = mix["prompt_tokens"], mix["output_tokens"]
        line += (f"\n    {mix['requests']} requests per round; prompt tokens p50 {p['p50']} "
                 f"p90 {p['p90']} max {p['max']}; output p50 {o['p50']} p90 {o['p90']} "
                 f"max {o['max']}; prefix hits the list implies {mix['implied_prefix_hits']:.0%}")
        if mix.get("trace_span_s") is not None:
            line += f"; trace spans {mix['trace_span_s']:.1f} s"
    return line + f"\n    workload fingerprint {mix['fingerprint']}"


def _host_pace(spec: Any, planned: list[Any], preds: dict[str, TrialPrediction]
               ) -> dict[str, Any] | None:
    """Whether this host keeps the sim's time scale at every sim level (None: no sim
    trial, or the model's shape is unknown); see ``planning.host_pace``."""
    from dataclasses import asdict

    from actors.engines import get_adapter
    from orchestrator.planning.host_pace import calibrate, check
    from orchestrator.planning.plan import spec_shape

    sims = [p for p in planned if p.feasible and get_adapter(p.config.engine).time_scaled]
    shape = spec_shape(spec)
    if not sims or shape is None or spec.sim.time_scale == 0 or spec.sim.hold_s:
        return None
    if not preds:
        from orchestrator.planning.forecast import predict_trial

        preds = {p.config.key(): predict_trial(p.config, spec, shape) for p in sims}
    # the streams the model runs at once set the sim's work per step: an open-loop level's
    # ``concurrency`` is only its in-flight cap (1024 when uncapped)
    levels = [(p.config.label(), int(lv.get("max_running") or lv["concurrency"]),
               float(lv["itl_p50_ms"] or 0))
              for p in sims if p.config.key() in preds
              for lv in preds[p.config.key()].levels]
    host = calibrate(shape, spec.hardware)
    problems = check(host, spec.sim.time_scale, levels)
    return {"host": asdict(host), "levels": len(levels),
            "problems": [asdict(x) for x in problems],
            "needed_time_scale": max((x.needed_scale for x in problems), default=None)}


def _pace_line(pace: dict[str, Any], scale: float) -> str:
    h, worst = pace["host"], max(pace["problems"], key=lambda x: x["needed_scale"])
    need = pace["needed_time_scale"]
    fix = (f"set sim.time_scale: {need:g} (or more), or run on an idle host" if need < 1 else
           "even time_scale 1 is too fast here: run on an idle host")
    return (f"\nwarning: this host may not keep sim.time_scale {scale:g} at "
            f"{len(pace['problems'])} of {pace['levels']} level(s) ({h['cpus']} CPUs, load "
            f"{h['load_1m']:.1f}, timers {h['timer_late_ms']:.2f} ms late): worst "
            f"{worst['concurrency']} running in {worst['label']}, a {worst['step_ms']:.2f} ms step "
            f"needs {worst['cost_ms']:.2f} ms here; {fix}. Levels that lag are flagged "
            "sim_behind and cannot win.")
