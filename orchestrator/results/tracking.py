"""``Tracker``: MLflow as a view of the ledger.

One experiment per spec name, one parent run per sweep, one nested run per
trial with the full ``TrialConfig`` as params, metrics per concurrency both as
steps (x = concurrency) and as named metrics (``output_tok_s_c16``), status and
failure reason as tags, and the command, configs, server log and per-request
records as artifacts. The default store is sqlite under the state root
(``MLFLOW_TRACKING_URI`` overrides).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from actors.contracts.results import TrialResult

__all__ = ["Tracker", "default_tracking_uri", "LEVEL_METRICS"]

LEVEL_METRICS = ("output_tok_s", "total_tok_s", "requests_s", "ttft_p50_ms", "ttft_p90_ms",
                 "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms", "e2e_p50_ms",
                 "e2e_p99_ms", "decode_tok_s_per_req_p50", "chunk_gap_p50_ms",
                 "chunk_gap_p99_ms", "round_spread")


def default_tracking_uri(root: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


class Tracker:
    """Writes a sweep to MLflow through ``MlflowClient`` (explicit run ids, no global state)."""

    def __init__(self, root: Path, uri: str | None = None):
        import logging

        logging.getLogger("alembic").setLevel(logging.WARNING)
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        from mlflow.tracking import MlflowClient

        self.root = root
        self.uri = uri or default_tracking_uri(root)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.parent_id: str | None = None
        self.experiment_id: str | None = None

    def _experiment(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        location = None
        if self.uri.startswith("sqlite:") or self.uri.startswith("file:"):
            art = self.root / "artifacts" / name
            art.mkdir(parents=True, exist_ok=True)
            location = art.as_uri()
        return self.client.create_experiment(name, artifact_location=location)

    def start_sweep(self, spec_name: str, sweep_id: str, params: dict[str, str],
                    spec_path: Path) -> str:
        self.experiment_id = self._experiment(spec_name)
        run = self.client.create_run(self.experiment_id, run_name=sweep_id,
                                     tags={"servesweep.sweep_id": sweep_id,
                                           "servesweep.kind": "sweep"})
        self.parent_id = run.info.run_id
        self._params(self.parent_id, params)
        self.client.log_artifact(self.parent_id, str(spec_path))
        return self.parent_id

    def resume_sweep(self, spec_name: str, sweep_id: str) -> bool:
        """Reuse the sweep's parent run if MLflow already has one (``resume``)."""
        exp = self.client.get_experiment_by_name(spec_name)
        if exp is None:
            return False
        runs = self.client.search_runs(
            [exp.experiment_id], filter_string=f"tags.`servesweep.sweep_id` = '{sweep_id}' "
                                               "and tags.`servesweep.kind` = 'sweep'")
        if not runs:
            return False
        self.experiment_id, self.parent_id = exp.experiment_id, runs[0].info.run_id
        self.client.update_run(self.parent_id, status="RUNNING")
        return True

    def _params(self, run_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def log_trial(self, result: TrialResult, sweep_id: str, artifacts: list[Path]) -> str:
        """One nested run for a finished trial; returns its run id."""
        from mlflow.entities import Metric, RunTag

        assert self.parent_id and self.experiment_id, "start_sweep first"
        tags = {"mlflow.parentRunId": self.parent_id, "servesweep.sweep_id": sweep_id,
                "servesweep.kind": "trial", "servesweep.trial_key": result.key,
                "status": result.status.value, "failure_reason": result.reason,
                "label": result.config.label(), "hardware": result.hardware}
        if result.message:
            tags["message"] = result.message[:4000]
        readers = sorted({lv.client.reader for lv in result.levels if lv.client is not None})
        if readers:  # how the load generator read (one client per trial: one value)
            tags["client.reader"] = ",".join(readers)
        for k, v in result.versions.items():
            tags[f"version.{k}"] = v
        run = self.client.create_run(self.experiment_id, run_name=result.config.label(),
                                     tags=tags)
        rid = run.info.run_id
        params = result.config.flat_params()
        params["trial_key"] = result.key
        self._params(rid, params)
        now = int(time.time() * 1000)
        metrics: list[Metric] = []
        valid_tputs = []
        for lv in result.levels:
            c = lv.concurrency
            metrics.append(Metric(f"valid_c{c}", 1.0 if lv.status == "valid" else 0.0, now, 0))
            if lv.metrics is None:
                continue
            for name in LEVEL_METRICS:
                value = getattr(lv.metrics, name)
                if value is None:
                    continue
                metrics.append(Metric(name, float(value), now, c))
                metrics.append(Metric(f"{name}_c{c}", float(value), now, 0))
            # every round's throughput (the level's figure is their median): step = round
            metrics += [Metric(f"round_output_tok_s_c{c}", rr.output_tok_s, now, rr.round)
                        for rr in lv.rounds]
            if lv.client is not None:  # the client's self-check: can the level be trusted
                metrics += [Metric("client_cpu_frac", lv.client.cpu_frac, now, c),
                            Metric("client_loop_lag_p99_ms", lv.client.loop_lag_p99_ms, now, c)]
            if lv.status == "valid":
                valid_tputs.append(lv.metrics.output_tok_s)
            for tag in lv.flags:
                tags_flag = RunTag(f"flag.c{c}.{tag}", "true")
                self.client.log_batch(rid, tags=[tags_flag])
        if valid_tputs:
            metrics.append(Metric("max_output_tok_s", max(valid_tputs), now, 0))
        if result.startup_s is not None:
            metrics.append(Metric("startup_s", result.startup_s, now, 0))
        for i in range(0, len(metrics), 500):
            self.client.log_batch(rid, metrics=metrics[i:i + 500])
        for path in artifacts:
            if path.is_file():
                self.client.log_artifact(rid, str(path))
        status = "FINISHED" if result.status.has_measurements() else "FAILED"
        if result.status.value == "infeasible":
            status = "KILLED"
        self.client.set_terminated(rid, status=status)
        return rid

    def end_sweep(self, summary: dict[str, Any], artifacts: list[Path], status: str) -> None:
        from mlflow.entities import Metric

        if not self.parent_id:
            return
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, 0) for k, v in summary.items()
                   if isinstance(v, (int, float))]
        if metrics:
            self.client.log_batch(self.parent_id, metrics=metrics)
        for path in artifacts:
            if path.is_file():
                self.client.log_artifact(self.parent_id, str(path))
        self.client.set_terminated(self.parent_id, status=status)
