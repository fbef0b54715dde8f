"""``Tracker``: MLflow as a view of the ledger, rebuilt from it at any time.

One experiment per spec name, one parent run per sweep, one nested run per trial with the
full ``TrialConfig`` as params, metrics per level named by it (``output_tok_s_c16``) and as
charts stepped by concurrency (``by_concurrency.output_tok_s``: never a headline that mixes
levels), run names unique across sweeps, status and failure reason as tags, and the
command, configs, server log and per-request records as artifacts. The default store is
sqlite under the state root (``MLFLOW_TRACKING_URI`` overrides).

Runs are found, never assumed: a trial's run carries the tags ``servesweep.sweep_id`` and
``servesweep.trial_key`` (the sweep's parent run ``servesweep.sweep_id`` and
``servesweep.kind = sweep``), and writing a trial finds its run by them and creates one only
if there is none (``ensure_trial``). A run found RUNNING, or missing params or artifacts
(a driver killed mid-write), is completed in place; a second run for a key is never made.
What a run holds is built in ``results.records`` (``trial_record``, ``sweep_record``),
the same for the live path and for ``sync``. Metric timestamps are the ledger event's, so
writing the same trial again adds nothing.

The driver's client retries briefly (``mlflow_client_env``): MLflow must never slow a
sweep, and what it misses ``sync`` writes later.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.contracts.config import Workload
from orchestrator.results.records import (
    KIND_TAG,
    LEVEL_METRICS,
    RECORDED_TAG,
    SWEEP_ID_TAG,
    TRIAL_KEY_TAG,
    SweepRecord,
    TrialRecord,
    report_files,
    sweep_record,
    sweep_summary,
    trial_record,
    write_trial_files,
)

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

    from orchestrator.results.ledger import Ledger
    from orchestrator.spec import SweepSpec

__all__ = ["Tracker", "TrialRecord", "SweepRecord", "SyncCounts", "default_tracking_uri",
           "trial_record", "sweep_record", "sweep_summary", "write_trial_files", "report_files",
           "mlflow_client_env", "describe_error", "LEVEL_METRICS", "MLFLOW_CLIENT_ENV",
           "SWEEP_ID_TAG", "TRIAL_KEY_TAG", "KIND_TAG"]

PARENT_TAG = "mlflow.parentRunId"
TERMINAL = ("FINISHED", "FAILED", "KILLED")

#: MLflow's client settings in servesweep's own process. Its HTTP defaults retry a request
#: for about four minutes; here: one retry, backoff factor 1 s, a 10 s timeout per request.
#: It also prints a "View run" link on each run's end; not here (progress lines are). A value
#: already in the environment wins.
MLFLOW_CLIENT_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                     "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                     "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
                     "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


def default_tracking_uri(root: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def mlflow_client_env() -> None:
    """Short retries for MLflow's HTTP client in this process (unless the user set them)."""
    for name, value in MLFLOW_CLIENT_ENV.items():
        os.environ.setdefault(name, value)


def describe_error(err: BaseException) -> str:
    """One short line for what a tracking store raised (MLflow's own are long)."""
    text = " ".join(str(err).split())
    for needle, short in (("Connection refused", "connection refused"),
                          ("timed out", "timed out"), ("database is locked", "database is locked"),
                          ("Connection aborted", "connection aborted"),
                          ("RemoteDisconnected", "connection closed by the server"),
                          ("Max retries exceeded", "no answer")):
        if needle in text:
            return f"{type(err).__name__}: {short}"
    return f"{type(err).__name__}: {text[:160]}"


def _quiet_logs() -> None:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    # servesweep says once what went wrong; MLflow's and urllib3's per-retry lines would
    # repeat it on every attempt
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)


# -- sync bookkeeping ----------------------------------------------------------------------
@dataclass
class SyncCounts:
    created: int = 0
    repaired: int = 0
    unchanged: int = 0
    removed: int = 0  # extra runs of one key (older servesweep's `track --force`), deleted

    def add(self, outcome: str, removed: int) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        self.removed += removed

    def total(self) -> int:
        return self.created + self.repaired + self.unchanged


def _filter(tags: dict[str, str]) -> str:
    """An MLflow filter on tags (a value with a quote is matched afterwards, in Python)."""
    return " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items() if "'" not in v)


class Tracker:
    """Writes a sweep to MLflow through ``MlflowClient`` (explicit run ids, no global state).

    The client is made on first use (in the thread that writes: creating a sqlite store can
    take seconds). Every write is find-or-create, so any of them can be repeated."""

    def __init__(self, root: Path, uri: str | None = None):
        self.root = root
        self.uri = uri or default_tracking_uri(root)
        self._client: MlflowClient | None = None
        self.parent_id: str | None = None
        self.experiment_id: str | None = None

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            mlflow_client_env()
            from mlflow.tracking import MlflowClient

            _quiet_logs()  # after the import: mlflow sets its logger's level when imported
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    # -- lookups ----------------------------------------------------------------------------
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

    def search(self, tags: dict[str, str]) -> list[Run]:
        """Every active run of the experiment with these tags, oldest first."""
        assert self.experiment_id is not None
        out: list[Run] = []
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=_filter(tags),
                                           max_results=1000, page_token=token)
            out += [r for r in page
                    if all(r.data.tags.get(k) == v for k, v in tags.items())]
            token = page.token
            if not token:
                break
        return sorted(out, key=lambda r: (r.info.start_time or 0, r.info.run_id))

    def _keep_one(self, runs: list[Run], good: Any = None) -> tuple[Run, int]:
        """The run to keep of several for one key (the first complete one, else the oldest);
        the others are deleted (MLflow's soft delete: `mlflow runs restore` brings one back)."""
        if len(runs) == 1:
            return runs[0], 0
        keep = next((r for r in runs if good is not None and good(r)), runs[0])
        for r in runs:
            if r.info.run_id != keep.info.run_id:
                self.client.delete_run(r.info.run_id)
        return keep, len(runs) - 1

    # -- writing ----------------------------------------------------------------------------
    def _params(self, run_id: str, params: dict[str, str], have: dict[str, str]) -> None:
        """Log the params not yet on the run (MLflow refuses to change a param's value: one
        that differs is left as it is)."""
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items() if k not in have]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def _tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, tags=items[i:i + 100])

    def _artifact_sizes(self, run_id: str) -> dict[str, int | None]:
        return {Path(f.path).name: f.file_size for f in self.client.list_artifacts(run_id)
                if not f.is_dir}

    def open_sweep(self, record: SweepRecord, running: bool) -> str:
        """Find or create the sweep's parent run; ``running`` marks it RUNNING (a driver has
        the sweep). Returns its run id."""
        self.experiment_id = self._experiment(record.experiment)
        found = self.search({SWEEP_ID_TAG: record.sweep_id, KIND_TAG: "sweep"})
        if found:
            run, _ = self._keep_one(found)
            self.parent_id = run.info.run_id
            have = run.data.params
            if running and run.info.status != "RUNNING":
                self.client.update_run(self.parent_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=record.sweep_id,
                                         tags={SWEEP_ID_TAG: record.sweep_id,
                                               KIND_TAG: "sweep"})
            self.parent_id, have = run.info.run_id, {}
        self._params(self.parent_id, record.params, have)
        if not found or record.spec_path.name not in self._artifact_sizes(self.parent_id):
            self.client.log_artifact(self.parent_id, str(record.spec_path))
        return self.parent_id

    def _drop_earlier_results(self, runs: list[Run],
                              record: TrialRecord) -> tuple[list[Run], int]:
        """Of a key's runs, those that hold an earlier result of it (a trial run again after
        its ledger record was damaged) are deleted: a metric's history keeps every value
        logged at a step, so writing the new result into such a run would leave both. A
        run without the tag (older servesweep) is kept."""
        mine = record.tags.get(RECORDED_TAG)
        earlier = [r for r in runs if r.data.tags.get(RECORDED_TAG, mine) != mine]
        for r in earlier:
            self.client.delete_run(r.info.run_id)  # soft: `mlflow runs restore` undoes it
        return [r for r in runs if r not in earlier], len(earlier)

    def _complete(self, run: Run, record: TrialRecord) -> bool:
        """Whether a found run already holds the whole record (then it is left alone)."""
        if run.info.status != record.status or run.info.run_name != record.run_name:
            return False
        if run.data.tags.get(PARENT_TAG) != self.parent_id:
            return False
        if any(k not in run.data.params for k in record.params):
            return False
        sizes = self._artifact_sizes(run.info.run_id)
        return all(sizes.get(p.name) == p.stat().st_size for p in record.artifacts)

    def ensure_trial(self, record: TrialRecord, found: list[Run] | None = None) -> tuple[str, int]:
        """Make the trial's run hold ``record``: find it by its tags (``found``: the runs
        already looked up), create it only if there is none, complete it if it is RUNNING
        or lacks anything. Returns (``created`` | ``repaired`` | ``unchanged``, runs of
        this key deleted as extras)."""
        from mlflow.entities import Metric

        assert self.parent_id and self.experiment_id, "open_sweep first"
        if found is None:
            found = self.search({SWEEP_ID_TAG: record.tags[SWEEP_ID_TAG], KIND_TAG: "trial",
                                 TRIAL_KEY_TAG: record.key})
        tags = {PARENT_TAG: self.parent_id, **record.tags}
        found, removed = self._drop_earlier_results(found, record)
        if found:
            run, removed = self._keep_one(found, lambda r: self._complete(r, record))
            if self._complete(run, record):
                return "unchanged", removed
            rid, have, outcome = run.info.run_id, dict(run.data.params), "repaired"
            if run.info.status != "RUNNING":  # reopened while it is written again
                self.client.update_run(rid, status="RUNNING")
            if run.info.run_name != record.run_name:  # written under an older name
                self.client.update_run(rid, name=record.run_name)
        else:
            rid = self.client.create_run(self.experiment_id, run_name=record.run_name,
                                         tags=tags).info.run_id
            have, outcome = {}, "created"
        self._tags(rid, tags)
        self._params(rid, record.params, have)
        # the ledger's timestamp makes each point identical on a second write: MLflow's
        # store keeps one of each (key, timestamp, step, value)
        metrics = [Metric(k, v, record.timestamp_ms, step) for k, v, step in record.metrics]
        for i in range(0, len(metrics), 500):
            self.client.log_batch(rid, metrics=metrics[i:i + 500])
        for path in record.artifacts:
            if path.is_file():
                self.client.log_artifact(rid, str(path))
        self.client.set_terminated(rid, status=record.status)  # last: "complete" from here
        return outcome, removed

    def sync_trials(self, ledger: Ledger, keys: Iterable[str] | None = None,
                    workload: Workload | None = None) -> SyncCounts:
        """Every trial of the ledger (or those of ``keys``) into MLflow exactly once."""
        recorded = ledger.recorded()
        wanted = list(recorded) if keys is None else [k for k in keys if k in recorded]
        counts = SyncCounts()
        if not wanted:
            return counts
        by_key: dict[str, list[Run]] = {}
        for run in self.search({SWEEP_ID_TAG: ledger.sweep_id, KIND_TAG: "trial"}):
            by_key.setdefault(run.data.tags.get(TRIAL_KEY_TAG, ""), []).append(run)
        for key in wanted:
            ev = recorded[key]
            rec = trial_record(ev.result, ledger.sweep_id, ledger.dir / "trials" / key, ev.ts,
                               workload)
            counts.add(*self.ensure_trial(rec, by_key.get(key, [])))
        return counts

    def end_sweep(self, summary: dict[str, Any], artifacts: list[Path], status: str,
                  only_changes: bool = False) -> None:
        """Summary metrics (and its text values as tags) and report files on the parent run,
        then its end status.
        ``only_changes`` (sync): skip metrics whose latest value is the same, files of the
        same size already there, and the status if it already is ``status``."""
        from mlflow.entities import Metric

        if not self.parent_id:
            return
        run = self.client.get_run(self.parent_id) if only_changes else None
        latest = run.data.metrics if run is not None else {}
        sizes = self._artifact_sizes(self.parent_id) if only_changes else {}
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, 0) for k, v in summary.items()
                   if isinstance(v, (int, float)) and latest.get(k) != float(v)]
        if metrics:
            self.client.log_batch(self.parent_id, metrics=metrics)
        have = run.data.tags if run is not None else {}
        tags = {k: v for k, v in summary.items() if isinstance(v, str) and have.get(k) != v}
        if tags:  # the winners (``sweep_summary``)
            self._tags(self.parent_id, tags)
        for path in artifacts:
            if path.is_file() and sizes.get(path.name) != path.stat().st_size:
                self.client.log_artifact(self.parent_id, str(path))
        if run is None or run.info.status != status:
            self.client.set_terminated(self.parent_id, status=status)

    def log_report(self, spec: SweepSpec, ledger: Ledger, files: list[Path]) -> int:
        """The report folder's files on the sweep's parent run (found or created; its
        status left as it is); a file already there with the same size is skipped.
        Returns how many files were logged."""
        self.open_sweep(sweep_record(spec, ledger), running=False)
        assert self.parent_id is not None
        sizes = self._artifact_sizes(self.parent_id)
        logged = 0
        for path in files:
            if path.is_file() and sizes.get(path.name) != path.stat().st_size:
                self.client.log_artifact(self.parent_id, str(path))
                logged += 1
        return logged

    def sync(self, spec: SweepSpec, ledger: Ledger) -> tuple[SyncCounts, str]:
        """The whole sweep into MLflow (``servesweep sync``): the parent run, every ledger
        trial exactly once, then the parent ended. Returns the counts and the parent's end
        status: KILLED when the ledger's last driver was interrupted (``resume`` finishes
        the sweep and ends it FINISHED), else FINISHED."""
        from orchestrator.results.events import DriverStarted, Interrupted

        self.open_sweep(sweep_record(spec, ledger), running=False)
        counts = self.sync_trials(ledger, workload=spec.workload)
        last = None
        for ev in ledger.events():
            if isinstance(ev, DriverStarted | Interrupted):
                last = ev
        status = "KILLED" if isinstance(last, Interrupted) else "FINISHED"
        self.end_sweep(sweep_summary(ledger.results().values(), spec),
                       report_files(ledger.dir / "report"), status, only_changes=True)
        return counts, status
