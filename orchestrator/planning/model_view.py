"""The performance model's view of a config as a measurement would look.

``predicted_levels`` runs the sim's model (``actors.sim.predict``) at every concurrency
level of the workload with given profile overrides (what ``calibrate`` fitted) and returns
``LevelMetrics`` that ``regimes.score_levels`` scores like measured ones. The model gives no
ITL p99 and no E2E p99: ITL p50 and E2E p50 + (TTFT p99 - TTFT p50) stand in for them.
``predicted_result`` wraps them as an ok ``TrialResult`` (tests and the search benchmark
"measure" with it). ``model_error`` is the model's relative error out of sample.
"""

from __future__ import annotations

import json
from pathlib import Path

from actors.contracts.config import TrialConfig
from actors.contracts.hardware import get_hardware
from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.shapes import ModelShape
from actors.contracts.states import LevelStatus, TrialStatus
from actors.engines.sim import sim_settings
from actors.sim.perf import DEFAULT_PROFILE
from actors.sim.predict import build_engine, simulate_closed_loop
from orchestrator.planning.feasibility import family_of
from orchestrator.spec import SweepSpec

__all__ = ["DEFAULT_MODEL_ERROR", "model_error", "predicted_levels", "predicted_result",
           "Overrides"]

Overrides = dict[str, dict[str, float]]  # profile -> fitted fields

#: The model's relative throughput error on configs it was not fitted to, when no
#: cross-validation result is at hand: the default vLLM profile's mean error on the 24
#: H200 levels was 8.7% (README "Measured on real hardware"); 10% leaves a margin.
DEFAULT_MODEL_ERROR = 0.10
_ROOT = Path(__file__).resolve().parents[2]


def model_error(results_dir: Path | None = None) -> tuple[float, str]:
    """(relative error, where it came from): the leave-one-config-out mean |error| of
    output tok/s from the newest ``benchmarks/results/crossval*.json`` (``summary.
    output_tok_s.loco.mean_abs``, written by benchmarks/crossval.py), else the default."""
    folder = results_dir or _ROOT / "benchmarks" / "results"
    files = sorted(folder.glob("crossval*.json"), key=lambda p: p.stat().st_mtime) \
        if folder.is_dir() else []
    for path in reversed(files):
        try:
            err = float(json.loads(path.read_text())["summary"]["output_tok_s"]["loco"]
                        ["mean_abs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if 0 < err < 1:
            return err, f"cross-validated ({path.name})"
    return DEFAULT_MODEL_ERROR, "default"


def predicted_levels(cfg: TrialConfig, spec: SweepSpec, shape: ModelShape,
                     overrides: Overrides | None = None) -> dict[int, LevelMetrics | None]:
    """The model's metrics per level (None where it cannot schedule a request)."""
    hw = get_hardware(spec.hardware)
    profile = family_of(cfg) or DEFAULT_PROFILE
    over = (overrides or {}).get(profile, spec.sim.profiles.get(profile))
    w = spec.workload
    out: dict[int, LevelMetrics | None] = {}
    for c in w.concurrency:
        try:
            engine, _ = build_engine(shape, hw, profile, sim_settings(cfg), jitter=0.0,
                                     overrides=over)
            n = min(w.requests_for(c), 2 * c + 2)
            p = simulate_closed_loop(engine, c, n, w.prompt_tokens, w.output_tokens)
        except (RuntimeError, ValueError):
            out[c] = None
            continue
        out[c] = LevelMetrics(
            output_tok_s=p.output_tok_s, total_tok_s=p.total_tok_s,
            requests_s=p.requests / p.duration_s if p.duration_s else 0.0,
            ttft_p50_ms=p.ttft_p50_ms, ttft_p99_ms=p.ttft_p99_ms, itl_p50_ms=p.itl_p50_ms,
            itl_p99_ms=p.itl_p50_ms, tpot_p50_ms=p.tpot_p50_ms, e2e_p50_ms=p.e2e_p50_ms,
            e2e_p99_ms=p.e2e_p50_ms + max(0.0, p.ttft_p99_ms - p.ttft_p50_ms))
    return out


def predicted_result(cfg: TrialConfig, spec: SweepSpec, shape: ModelShape,
                     overrides: Overrides | None = None) -> TrialResult:
    """An ok trial whose levels are the model's predictions (a level it cannot run is
    invalid)."""
    levels = []
    for c, m in predicted_levels(cfg, spec, shape, overrides).items():
        if m is None:
            levels.append(LevelResult(concurrency=c, status=LevelStatus.INVALID, reason="model"))
        else:
            levels.append(LevelResult(concurrency=c, status=LevelStatus.VALID, metrics=m,
                                      requests=1))
    return TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, levels=levels,
                       hardware=spec.hardware, wall_s=1.0)
