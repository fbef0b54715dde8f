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

if TYPE_CHECKING:
    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import SweepSpec

__all__ = ["TrialRecord", "SweepRecord", "trial_record", "sweep_record", "sweep_params",
           "sweep_summary", "write_trial_files", "report_files", "LEVEL_METRICS",
           "SWEEP_ID_TAG", "TRIAL_KEY_TAG", "KIND_TAG", "RECORDED_TAG", "SEARCH_PARAMS_FILE"]

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
    valid_tputs = []
    for lv in result.levels:
        c = lv.concurrency
        metrics.append((f"valid_c{c}", 1.0 if lv.status == "valid" else 0.0, 0))
        for flag in lv.flags:
            tags[f"flag.c{c}.{flag}"] = "true"
        if lv.metrics is None:
            continue
        for name in LEVEL_METRICS:
            value = getattr(lv.metrics, name)
            if value is None:
                continue
            metrics.append((name, float(value), c))
            metrics.append((f"{name}_c{c}", float(value), 0))
        # every round's throughput (the level's figure is their median): step = round
        metrics += [(f"round_output_tok_s_c{c}", rr.output_tok_s, rr.round)
                    for rr in lv.rounds]
        if lv.client is not None:  # the client's self-check: can the level be trusted
            metrics += [("client_cpu_frac", lv.client.cpu_frac, c),
                        ("client_loop_lag_p99_ms", lv.client.loop_lag_p99_ms, c),
                        ("client_reads_kept", float(lv.client.reads_kept), c)]
        if lv.status == "valid":
            valid_tputs.append(lv.metrics.output_tok_s)
    if valid_tputs:
        metrics.append(("max_output_tok_s", max(valid_tputs), 0))
    if result.startup_s is not None:
        metrics.append(("startup_s", result.startup_s, 0))
    artifacts: list[Path] = []
    if trial_dir is not None and trial_dir.is_dir() \
            and result.status is not TrialStatus.INFEASIBLE:
        write_trial_files(result, trial_dir)
        artifacts = sorted(p for p in trial_dir.iterdir() if p.is_file())
    status = "FINISHED" if result.status.has_measurements() else "FAILED"
    if result.status is TrialStatus.INFEASIBLE:
        status = "KILLED"
    return TrialRecord(key=result.key, run_name=result.config.label(), status=status,
                       tags=tags, params=params, metrics=metrics,
                       timestamp_ms=int(recorded_ts * 1000), artifacts=artifacts)


def sweep_params(spec: SweepSpec) -> dict[str, str]:
    return {"spec": spec.name, "hardware": spec.hardware, "model": spec.model.display_name,
            "search": spec.search.kind, "prompt_tokens": str(spec.workload.prompt_tokens),
            "output_tokens": str(spec.workload.output_tokens),
            "concurrency": str(spec.workload.concurrency),
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


def sweep_summary(results: Iterable[TrialResult]) -> dict[str, float]:
    """The parent run's metrics: trials in all and by status."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    return {"trials": float(sum(counts.values())),
            **{f"trials_{k}": float(v) for k, v in sorted(counts.items())}}


def report_files(report_dir: Path) -> list[Path]:
    """The parent run's artifacts: the report folder's files (plots, report, winners)."""
    return sorted(p for p in report_dir.iterdir() if p.is_file()) if report_dir.is_dir() else []
