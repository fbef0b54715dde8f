"""What MLflow should hold for a sweep, built from its ledger and trial folders.

``trial_record`` builds a trial's whole MLflow record (params, metrics, tags, artifacts) from
its ``TrialResult`` and trial folder; ``sweep_record`` the parent run's. The live path
(``results.outbox``) and ``servesweep sync`` both use them (through ``tracking.Tracker``),
so a sweep logged afterwards equals one tracked live. Nothing here talks to MLflow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from actors.contracts.config import Workload
from actors.contracts.results import TrialResult
from actors.contracts.states import TrialStatus
from actors.contracts.traffic import Level, LevelKind

if TYPE_CHECKING:
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import SweepSpec

__all__ = ["TrialRecord", "SweepRecord", "trial_record", "sweep_record", "sweep_params",
           "sweep_summary", "write_trial_files", "report_files", "LEVEL_METRICS",
           "SWEEP_ID_TAG", "TRIAL_KEY_TAG", "KIND_TAG", "RECORDED_TAG", "SEARCH_PARAMS_FILE",
           "CURVE", "trial_run_name"]

LEVEL_METRICS = ("output_tok_s", "total_tok_s", "requests_s", "ttft_p50_ms", "ttft_p90_ms",
                 "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms", "e2e_p50_ms",
                 "e2e_p99_ms", "decode_tok_s_per_req_p50", "chunk_gap_p50_ms",
                 "chunk_gap_p99_ms", "round_spread", "goodput_tok_s", "slo_met")

SWEEP_ID_TAG = "servesweep.sweep_id"
TRIAL_KEY_TAG = "servesweep.trial_key"
KIND_TAG = "servesweep.kind"
#: the ledger time of the result a trial's run holds: a run of the same key with another
#: is an earlier result of it (a rerun), which MLflow's metric history cannot forget
RECORDED_TAG = "servesweep.recorded_ms"
#: the prefix of a metric stepped by concurrency (a chart; its last value is the highest
#: level's, so it is never a trial's headline): ``by_concurrency.output_tok_s``
CURVE = "by_concurrency."
#: a trial folder's search params (Optuna study, number, sampler), written by the controller
SEARCH_PARAMS_FILE = "search.json"


# -- the records: what MLflow should hold, built from the ledger -----------------------------
@dataclass(frozen=True)
class TrialRecord:
    """Everything a trial's MLflow run holds (the parent's id is added when written)."""

    key: str
    run_name: str
    status: str  # the run's terminal status: FINISHED, FAILED or KILLED (infeasible)
    tags: dict[str, str]
    params: dict[str, str]
    metrics: list[tuple[str, float, int]]  # (key, value, step)
    timestamp_ms: int  # every metric's timestamp: the ledger event's time
    artifacts: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class SweepRecord:
    experiment: str
    sweep_id: str
    params: dict[str, str]
    spec_path: Path


def write_trial_files(result: TrialResult, trial_dir: Path) -> None:
    """The trial folder's derived files (its config and command), written if they differ."""
    import json

    files = {"trial_config.json": result.config.model_dump_json(indent=1),
             "command.json": json.dumps({"argv": result.host.get("argv"),
                                         "host": result.host.get("host")},
                                        indent=1, default=str)}
    for name, text in files.items():
        path = trial_dir / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)


def trial_record(result: TrialResult, sweep_id: str, trial_dir: Path | None,
                 recorded_ts: float, workload: Workload | None = None) -> TrialRecord:
    """A trial's full MLflow record from its ledger entry and its folder (live and sync):
    its config, the sweep's ``workload`` (params ``workload.*``), engine version and GPU
    model (tags), its search params, metrics per level and files."""
    tags = {SWEEP_ID_TAG: sweep_id, KIND_TAG: "trial", TRIAL_KEY_TAG: result.key,
            RECORDED_TAG: str(int(recorded_ts * 1000)), "status": result.status.value,
            "failure_reason": result.reason, "label": result.config.label(),
            "hardware": result.hardware}
    if result.message:
        tags["message"] = result.message[:4000]
    readers = sorted({lv.client.reader for lv in result.levels if lv.client is not None})
    if readers:  # how the load generator read (one client per trial: one value)
        tags["client.reader"] = ",".join(readers)
        tags["client.parse"] = ",".join(sorted({lv.client.parse for lv in result.levels
                                                 if lv.client is not None}))
    for k, v in result.versions.items():
        tags[f"version.{k}"] = v
    if result.host.get("gpu_model"):
        tags["gpu_model"] = str(result.host["gpu_model"])
    params = {k: str(v)[:6000] for k, v in result.config.flat_params().items()}
    params["trial_key"] = result.key
    if workload is not None:
        params.update({f"workload.{k}": str(v)[:6000]
                       for k, v in workload.model_dump(mode="json").items()})
    if trial_dir is not None and (trial_dir / SEARCH_PARAMS_FILE).is_file():
        import json

        try:  # the search's params: its Optuna number and sampler
            params.update({str(k): str(v) for k, v in
                           json.loads((trial_dir / SEARCH_PARAMS_FILE).read_text()).items()})
        except (OSError, ValueError, AttributeError):
            pass
    metrics: list[tuple[str, float, int]] = []
    if result.workload_fingerprint:
        tags["workload_fingerprint"] = result.workload_fingerprint
    for lv in result.levels:
        c, curve, step = level_metric_names(lv.identity)
        metrics.append((f"valid_{c}", 1.0 if lv.status == "valid" else 0.0, 0))
        for flag in lv.flags:
            tags[f"flag.c{c}.{flag}"] = "true"
        if lv.metrics is None:
            continue
        for name in LEVEL_METRICS:
            value = getattr(lv.metrics, name)
            if value is None:
                continue
            metrics.append((f"{curve}{name}", float(value), step))  # a chart over levels
            metrics.append((f"{name}_{c}", float(value), 0))  # a figure, named by its level
        # every round's throughput (the level's figure is their median): step = round
        metrics += [(f"round_output_tok_s_{c}", rr.output_tok_s, rr.round)
                    for rr in lv.rounds]
        if lv.open_loop is not None:  # did the client hold the schedule
            ol = lv.open_loop
            metrics += [(f"offered_rps_{c}", ol.offered_rps, 0),
                        (f"achieved_rps_{c}", ol.achieved_rps, 0),
                        (f"late_sends_{c}", float(ol.late_sends), 0)]
        if lv.prefix_hit_rate is not None:
            metrics.append((f"prefix_hit_rate_{c}", lv.prefix_hit_rate, 0))
        if lv.client is not None:  # the client's self-check: can the level be trusted
            metrics += [(f"{curve}client_cpu_frac", lv.client.cpu_frac, step),
                        (f"{curve}client_loop_lag_p99_ms", lv.client.loop_lag_p99_ms, step),
                        (f"{curve}client_reads_kept", float(lv.client.reads_kept), step)]
    verdict = result.quality_verdict
    if verdict is not None:  # accuracy beside speed, against the reference
        from orchestrator.results.quality_view import quality_metrics

        metrics += [(k, x, 0) for k, x in quality_metrics(result).items()]
        tags["quality.gate"] = verdict.gate.value
        tags["quality.note"] = verdict.note[:500]
    if result.startup_s is not None:
        metrics.append(("startup_s", result.startup_s, 0))
    compile_s = result.applied.facts.get("compile_s")  # torch.compile, from the server's log
    if isinstance(compile_s, int | float) and not isinstance(compile_s, bool):
        metrics.append(("compile_s", float(compile_s), 0))
    artifacts: list[Path] = []
    if trial_dir is not None and trial_dir.is_dir() \
            and result.status is not TrialStatus.INFEASIBLE:
        write_trial_files(result, trial_dir)
        artifacts = sorted(p for p in trial_dir.iterdir() if p.is_file())
    status = "FINISHED" if result.status.has_measurements() else "FAILED"
    if result.status is TrialStatus.INFEASIBLE:
        status = "KILLED"
    return TrialRecord(key=result.key, run_name=trial_run_name(result, sweep_id), status=status,
                       tags=tags, params=params, metrics=metrics,
                       timestamp_ms=int(recorded_ts * 1000), artifacts=artifacts)


def level_metric_names(lv: Level) -> tuple[str, str, int]:
    """A level's MLflow names: the suffix of its figures (``c8``, ``rate4``,
    ``trace_x2``), its charts' prefix and its step there (concurrency: ``by_concurrency.``
    at step C; rate: ``by_rate_mrps.`` at step = millirequests/s, MLflow steps being
    integers; trace: ``by_trace_speedup_x1000.``)."""
    if lv.kind is LevelKind.CONCURRENCY:
        return f"c{int(lv.value)}", CURVE, int(lv.value)
    if lv.kind is LevelKind.RATE:
        return f"rate{lv.value:g}", "by_rate_mrps.", round(lv.value * 1000)
    return f"trace_x{lv.value:g}", "by_trace_speedup_x1000.", round(lv.value * 1000)


def trial_run_name(result: TrialResult, sweep_id: str) -> str:
    """A trial run's name, unique across sweeps: its label and its sweep."""
    return f"{result.config.label()} [{sweep_id}]"


def sweep_params(spec: SweepSpec) -> dict[str, str]:
    return {"spec": spec.name, "hardware": spec.hardware, "model": spec.model.display_name,
            "search": spec.search.kind, "prompt_tokens": str(spec.workload.prompt_tokens),
            "output_tokens": str(spec.workload.output_tokens),
            "levels": ", ".join(lv.key for lv in spec.workload.levels()),
            "time_scale": str(spec.sim.time_scale)}


def sweep_record(spec: SweepSpec, ledger: Ledger) -> SweepRecord:
    params = sweep_params(spec)
    if spec.search.kind == "optuna":  # where the study is (optuna-dashboard STORAGE)
        from orchestrator.planning.search import study_storage

        params["search.sampler"] = spec.search.sampler.value
        params["search.objective"] = spec.search.objective.value
        params["optuna.storage"] = study_storage(spec, ledger.dir)
        params["optuna.study_prefix"] = f"{ledger.sweep_id}."
    return SweepRecord(experiment=spec.name, sweep_id=ledger.sweep_id,
                       params=params, spec_path=ledger.dir / "spec.yaml")


def sweep_summary(results: Iterable[TrialResult],
                  spec: SweepSpec | None = None) -> dict[str, float | str]:
    """The parent run's summary: trials in all and by status (metrics) and, with the
    ``spec``, each load regime's winner (tags ``winner.<regime>``, ``winner_key.<regime>``,
    ``winner_within_noise.<regime>``; metrics ``winner_output_tok_s.<regime>`` and
    ``winner_margin.<regime>``, the lead over the runner-up). A regime's name in a key is
    its folder name (``c=8`` -> ``c-8``)."""
    results = list(results)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    out: dict[str, float | str] = {"trials": float(sum(counts.values())),
                                   **{f"trials_{k}": float(v) for k, v in sorted(counts.items())}}
    if spec is None:
        return out
    from orchestrator.results.export import regime_dir, regime_winners

    for w in regime_winners(spec, results):
        name = regime_dir(w.regime)
        if w.key is None or w.label is None:
            out[f"winner.{name}"] = f"none: {w.note}"[:500]
            continue
        out[f"winner.{name}"] = w.label
        out[f"winner_key.{name}"] = w.key
        out[f"winner_within_noise.{name}"] = str(w.within_noise).lower()
        if w.output_tok_s is not None:
            out[f"winner_output_tok_s.{name}"] = float(w.output_tok_s)
        if w.margin is not None:
            out[f"winner_margin.{name}"] = float(w.margin)
    return out


def report_files(report_dir: Path) -> list[Path]:
    """The parent run's artifacts: the report folder's files (plots, report, winners), and
    the model profiles the sweep folder holds beside it (the one a sweep predicted with,
    ``model-profile.json``; the one ``profile-model`` fitted, ``model-profile-<family>.json``)."""
    files = sorted(p for p in report_dir.iterdir() if p.is_file()) if report_dir.is_dir() else []
    return files + sorted(report_dir.parent.glob("model-profile*.json"))
