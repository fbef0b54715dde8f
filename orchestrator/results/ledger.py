"""The ledger: an append-only JSONL of trial state changes, the sweep's source of truth.

Layout under the state root (``mlruns/`` by default, ``SERVESWEEP_HOME`` overrides)::

    sweeps/<sweep-id>/spec.yaml      the spec as given
    sweeps/<sweep-id>/ledger.jsonl   one JSON object per line, appended with fsync
    sweeps/<sweep-id>/state.json     a snapshot, replaced atomically (os.replace)
    sweeps/<sweep-id>/trials/<key>/  server log, configs, per-request CSV
    sweeps/LATEST                    the id of the newest sweep

Only the driver writes a sweep's ledger. A trial is final once a ``trial``
event with a finished status is written; MLflow and Optuna are views rebuilt
from it. A torn last line (a crash mid-write) is ignored when reading.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.results import TrialResult

__all__ = ["Ledger", "state_root", "new_sweep_id", "atomic_write"]


def state_root() -> Path:
    return Path(os.environ.get("SERVESWEEP_HOME") or Path.cwd() / "mlruns").resolve()


def new_sweep_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Ledger:
    def __init__(self, sweep_dir: Path):
        self.dir = sweep_dir
        self.sweep_id = sweep_dir.name
        self.path = sweep_dir / "ledger.jsonl"

    # -- creation and lookup ----------------------------------------------------------------
    @classmethod
    def create(cls, spec_text: str, name: str, root: Path | None = None) -> Ledger:
        root = root or state_root()
        sweeps = root / "sweeps"
        sweep_dir = sweeps / new_sweep_id(name)
        (sweep_dir / "trials").mkdir(parents=True)
        (sweep_dir / "spec.yaml").write_text(spec_text)
        atomic_write(sweeps / "LATEST", sweep_dir.name + "\n")
        return cls(sweep_dir)

    @classmethod
    def open(cls, ref: str, root: Path | None = None) -> Ledger:
        """A sweep by id, unique id prefix, or ``latest``."""
        sweeps = (root or state_root()) / "sweeps"
        if ref == "latest":
            latest = sweeps / "LATEST"
            if not latest.is_file():
                raise UsageError(f"no sweeps under {sweeps} yet; run `servesweep run SPEC` first")
            ref = latest.read_text().strip()
        if (sweeps / ref / "ledger.jsonl").is_file() or (sweeps / ref / "spec.yaml").is_file():
            return cls(sweeps / ref)
        matches = sorted(p.name for p in sweeps.glob(f"{ref}*") if p.is_dir()) \
            if sweeps.is_dir() else []
        if len(matches) == 1:
            return cls(sweeps / matches[0])
        known = ", ".join(sorted(p.name for p in sweeps.iterdir() if p.is_dir())[-5:]) \
            if sweeps.is_dir() else ""
        hint = f" (ambiguous: {', '.join(matches)})" if matches else \
            (f"; recent: {known}" if known else "")
        raise UsageError(f"no sweep {ref!r} under {sweeps}{hint}")

    # -- writing ----------------------------------------------------------------------------
    def append(self, event: dict[str, Any]) -> None:
        line = json.dumps({"ts": time.time(), **event}, default=str) + "\n"
        with open(self.path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def record_result(self, result: TrialResult) -> None:
        self.append({"type": "trial", "key": result.key, "status": result.status.value,
                     "result": result.model_dump(mode="json")})

    def write_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.dir / "state.json", json.dumps(state, indent=1, default=str))

    def trial_dir(self, key: str) -> Path:
        d = self.dir / "trials" / key
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- reading ----------------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn write from a crash: the line never counted
        return out

    def results(self) -> dict[str, TrialResult]:
        """The latest final result of each trial, in the order trials were first recorded."""
        out: dict[str, TrialResult] = {}
        for ev in self.events():
            if ev.get("type") == "trial":
                out[ev["key"]] = TrialResult.model_validate(ev["result"])
        return out

    def started_groups(self) -> list[dict[str, Any]]:
        """Every process group this sweep started (for reaping after a dead driver)."""
        return [ev for ev in self.events() if ev.get("type") == "started"]

    def spec_text(self) -> str:
        return (self.dir / "spec.yaml").read_text()
