"""``servesweep export``: per load regime, the winning config as deployed.

For each regime (``page.regimes_of``: the spec's ``search.regimes``, else one per level)
the winner is the one the report names: at a single level ``analysis.winners`` (SLO,
valid levels, the noise band); over several levels the config valid at all of them with
the highest geometric-mean throughput, its margin judged against the largest band of
those levels. Its trial's adapter renders the ``Deployment`` (``EngineAdapter.deployment``:
engine CLI form, benchmark-only settings set apart), and ``<out>/<regime>/`` gets:

- ``<engine>-serve.sh`` (``vllm-serve.sh`` / ``trtllm-serve.sh``) with its environment,
  and the files it reads (``extra_llm_api_options.yaml``);
- ``ray-serve.yaml`` and ``rayservice.yaml`` where Ray Serve LLM runs the engine;
- other forms the adapter gives (``triton/``: a Triton ensemble repository);
- ``deployment.json`` (the Deployment, for scripts) and ``README.md``.

``<out>/export.json`` indexes the regimes. Nothing here knows an engine by name.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from actors.contracts.config import LaunchOptions
from actors.contracts.hardware import get_hardware
from actors.contracts.results import TrialResult
from actors.engines import get_adapter
from actors.engines.base import LaunchContext
from actors.engines.deploy import NOT_MEASURED, Deployment
from orchestrator.errors import UsageError
from orchestrator.planning.plan import plan_sweep
from orchestrator.planning.regimes import trial_scores
from orchestrator.results.analysis import levels_frame, winners
from orchestrator.results.export_ray import dump_yaml, rayservice, serve_config
from orchestrator.results.export_render import RegimeWinner, render_readme, render_script
from orchestrator.results.ledger import Ledger
from orchestrator.results.page import regime_frame, regimes_of
from orchestrator.results.quality_view import gate_text, quality_cell, quality_json
from orchestrator.spec import SweepSpec
from orchestrator.spec.search import Objective

__all__ = ["RegimeWinner", "RegimeExport", "regime_winners", "export_sweep", "regime_dir"]

_METRICS = ("output_tok_s", "ttft_p99_ms", "itl_p50_ms")


@dataclass(frozen=True)
class RegimeExport:
    """What was written for one regime."""

    winner: RegimeWinner
    dir: Path
    files: dict[str, str] = field(default_factory=dict)  # name -> what it is
    deployment: Deployment | None = None


def regime_dir(name: str) -> str:
    """A folder name for a regime (``c=8`` -> ``c-8``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "regime"


def _eligible(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that may win (``levels_frame``'s ``why_not`` empty: planning.eligibility)."""
    return df[(df["why_not"] == "") & df["output_tok_s"].notna()]


def _per_level(df: pd.DataFrame, key: str, levels: list[str]) -> dict[str, dict[str, Any]]:
    rows = df[(df["key"] == key) & df["level"].isin(levels)].sort_values("level_order")
    return {str(r["level"]): {m: None if pd.isna(r[m]) else float(r[m]) for m in _METRICS}
            for _, r in rows.iterrows()}


def regime_winners(spec: SweepSpec, results: list[TrialResult]) -> list[RegimeWinner]:
    if spec.search.objective is Objective.SLO_CAPACITY:
        return _capacity_winners(spec, results)
    band = spec.workload.noise_band
    ws = {w.name: w for w in winners(results, spec.slo, band, spec.workload.trust_usage,
                                            spec.search.objective)}
    df = levels_frame(results, spec.search.objective, spec.slo, spec.workload.trust_usage)
    out = []
    for name, levels in regimes_of(spec).items():
        if len(levels) == 1:
            w = ws.get(levels[0])
            if w is None or w.key is None:
                out.append(RegimeWinner(name, levels, None, None, None,
                                        note=w.note if w else "no level measured"))
                continue
            out.append(RegimeWinner(name, levels, w.key, w.label, w.output_tok_s,
                                    _per_level(df, w.key, levels), w.runner_up, w.margin,
                                    w.within_noise, w.noise_band, w.note))
            continue
        rf = regime_frame(_eligible(df), levels).sort_values("output_tok_s",
                                                                    ascending=False)
        if rf.empty:
            out.append(RegimeWinner(name, levels, None, None, None,
                                    note="no config valid at every level of the regime"))
            continue
        best, runner = rf.iloc[0], (rf.iloc[1] if len(rf) > 1 else None)
        margin = (float(best["output_tok_s"] / runner["output_tok_s"] - 1)
                  if runner is not None else None)
        noise = max([band] + [ws[c].noise_band for c in levels if c in ws])
        out.append(RegimeWinner(
            name, levels, str(best["key"]), str(best["label"]), float(best["output_tok_s"]),
            _per_level(df, str(best["key"]), levels),
            None if runner is None else str(runner["label"]), margin,
            bool(margin is not None and margin < noise), noise))
    return out


def _capacity_winners(spec: SweepSpec, results: list[TrialResult]) -> list[RegimeWinner]:
    """Under ``objective: slo_capacity`` each regime's winner is the config holding the most
    requests/s per GPU at the SLO (``planning.regimes``); its margin is over the runner-up,
    within noise under the larger of the spec's band and the capacities' own spread."""
    out = []
    for name, levels in regimes_of(spec).items():
        ranked = sorted(((s.value, r) for r in results
                         if (s := trial_scores(r, spec).get(name)) is not None
                         and s.feasible and s.value), key=lambda x: -x[0])
        if not ranked:
            out.append(RegimeWinner(name, levels, None, None, None,
                                    note="no config held the SLO at any rate"))
            continue
        (best, r), runner = ranked[0], (ranked[1] if len(ranked) > 1 else None)
        cap = r.slo_capacity
        assert cap is not None  # a capacity value comes from it
        margin = best / runner[0] - 1 if runner is not None else None
        noise = max([spec.workload.noise_band] + [
            x.slo_capacity.band for _, x in ranked[:2]
            if x.slo_capacity is not None and x.slo_capacity.band is not None])
        out.append(RegimeWinner(
            name, levels, r.key, r.config.label(), cap.output_tok_s, {},
            None if runner is None else runner[1].config.label(), margin,
            bool(margin is not None and margin < noise), noise,
            note=f"{cap.rps:g} req/s at the SLO ({cap.rps_per_gpu:g} per GPU)"))
    return out


def _launches(spec: SweepSpec) -> dict[str, LaunchOptions]:
    """Trial key -> the launch options of the space entry that produced it."""
    return {p.config.key(): spec.space[p.entry_index].launch for p in plan_sweep(spec)}


def _launch(spec: SweepSpec, launches: dict[str, LaunchOptions], r: TrialResult) -> LaunchOptions:
    if r.key in launches:
        return launches[r.key]
    same = [e.launch for e in spec.space if e.engine == r.config.engine]
    return same[0] if same else LaunchOptions()


def _facts(spec: SweepSpec, ledger: Ledger, r: TrialResult) -> dict[str, str]:
    w = spec.workload
    hw = get_hardware(spec.hardware)
    gpu = str(r.host.get("gpu_model") or hw.description or hw.name)
    quality = {}
    v = r.quality_verdict
    if v is not None:  # what the winner costs in accuracy, against the reference
        ref = ledger.results().get(v.reference_key)
        quality["quality"] = (f"{quality_cell(r)} ({v.unit}; drop vs the reference "
                              f"{ref.config.label() if ref else v.reference_key} with its 95% "
                              f"interval), gate {gate_text(v)}, {v.note}"
                              + (f", McNemar p {v.p_value:.3g}" if v.p_value is not None
                                 else ""))
    return {**quality, "sweep": ledger.sweep_id, "engine measured": r.config.engine,
            "engine version": r.versions.get("engine") or r.applied.version or "unknown",
            "GPU model": gpu, "hardware (spec)": spec.hardware,
            "tensor parallelism": str(r.config.tp),
            "workload": (f"{w.prompt_tokens} prompt + {w.output_tokens} output tokens per "
                         "request" if w.requests is None else
                         f"requests from {_source(spec)}")
                        + f", levels {', '.join(lv.key for lv in w.levels())}; fingerprint "
                        f"{r.workload_fingerprint or 'not recorded'}",
            "measured command (redacted)": " ".join(r.host.get("argv") or []) or "not recorded"}


def _source(spec: SweepSpec) -> str:
    plan = spec.request_plan()
    return plan.source if plan is not None else "the fixed shape"


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _export_one(spec: SweepSpec, ledger: Ledger, win: RegimeWinner, r: TrialResult,
                launch: LaunchOptions, folder: Path) -> RegimeExport:
    adapter = get_adapter(r.config.engine)
    ctx = LaunchContext(sweep_id=ledger.sweep_id, trial_key=r.key,
                        trial_dir=str(ledger.trial_dir(r.key)), model=spec.model,
                        hardware=spec.hardware, workload=spec.workload, sim=spec.sim,
                        launch=launch)
    dep = adapter.deployment(r.config, ctx, r.host.get("argv"))
    facts = _facts(spec, ledger, r)
    dep = dep.model_copy(update={"facts": facts})
    files: dict[str, str] = {}
    measured = "yes" if dep.measured_form else NOT_MEASURED
    title = f"regime {win.regime} of sweep {ledger.sweep_id}: {win.label}"
    if dep.deployable:
        _write(folder / dep.script, render_script(dep, title), 0o755)
        files[dep.script] = f"the server command and its environment | {measured}"
        for name, text in dep.files.items():
            _write(folder / name, text)
            files[name] = f"read by {dep.script} | {measured}"
    if dep.deployable and dep.engine_kwargs is not None:
        serve = serve_config(dep, f"servesweep-{win.regime}", spec.hardware)
        head = f"# servesweep export: {title}\n# {dep.ray_serve_note}\n"
        _write(folder / "ray-serve.yaml", head + dump_yaml(serve))
        files["ray-serve.yaml"] = ("Ray Serve LLM application (`serve deploy ray-serve.yaml`) | "
                                   + NOT_MEASURED)
        manifest = rayservice(dep, f"servesweep-{win.regime}", spec.hardware, serve)
        _write(folder / "rayservice.yaml", head + dump_yaml(manifest))
        files["rayservice.yaml"] = ("KubeRay RayService (`kubectl apply -f rayservice.yaml`) | "
                                    + NOT_MEASURED)
    for form in dep.forms:
        for name, text in form.files.items():
            _write(folder / form.name / name, text)
        files[f"{form.name}/"] = (f"{form.title} | "
                                  + ("yes" if form.measured_form else NOT_MEASURED))
    cap = r.slo_capacity.model_dump(mode="json", exclude={"probes", "repeats"}) \
        if r.slo_capacity else None  # for replica sizing: requests/s one replica holds
    _write(folder / "deployment.json", json.dumps(
        {"regime": asdict(win), "deployment": dep.model_dump(mode="json"),
         "slo_capacity": cap, "workload_fingerprint": r.workload_fingerprint or None,
         "quality": quality_json(r)},
        indent=1) + "\n")
    files["deployment.json"] = "the winner and the deployment, for scripts | -"
    _write(folder / "README.md", render_readme(win, dep, {**files, "README.md": "this file | -"},
                                               facts))
    return RegimeExport(win, folder, {**files, "README.md": "this file | -"}, dep)


def export_sweep(spec: SweepSpec, ledger: Ledger, out: Path,
                 regime: str | None = None) -> list[RegimeExport]:
    """Write every regime's export (or only ``regime``'s) under ``out``."""
    results = list(ledger.results().values())
    wins = regime_winners(spec, results)
    if regime is not None:
        wins = [w for w in wins if w.regime == regime]
        if not wins:
            raise UsageError(f"--regime {regime!r}: not a regime of this sweep; use one of "
                             f"{', '.join(regimes_of(spec))}")
    by_key = {r.key: r for r in results}
    launches = _launches(spec)
    exports = []
    for win in wins:
        folder = out / regime_dir(win.regime)
        if folder.exists():
            shutil.rmtree(folder)  # an export is rewritten whole, never merged
        folder.mkdir(parents=True)
        if win.key is None:
            _write(folder / "README.md", render_readme(win, None, {}, {}))
            exports.append(RegimeExport(win, folder, {"README.md": "this file | -"}))
            continue
        r = by_key[win.key]
        exports.append(_export_one(spec, ledger, win, r, _launch(spec, launches, r), folder))
    index = [{"regime": e.winner.regime, "levels": e.winner.levels, "dir": e.dir.name,
              "winner": e.winner.label, "key": e.winner.key,
              "output_tok_s": None if e.winner.output_tok_s is None or
              math.isnan(e.winner.output_tok_s) else e.winner.output_tok_s,
              "measured_form": bool(e.deployment and e.deployment.measured_form),
              "files": sorted(e.files)} for e in exports]
    _write(out / "export.json", json.dumps({"sweep_id": ledger.sweep_id, "regimes": index},
                                           indent=1) + "\n")
    return exports
