"""The ledger: an append-only JSONL of trial state changes, the sweep's source of truth.

Layout under the state root (``mlruns/`` by default, ``SERVESWEEP_HOME`` overrides)::

    sweeps/<sweep-id>/spec.yaml      the spec as given
    sweeps/<sweep-id>/ledger.jsonl   one JSON object per line, appended with fsync
    sweeps/<sweep-id>/state.json     a snapshot, replaced atomically (os.replace)
    sweeps/<sweep-id>/trials/<key>/  server log, configs, per-request CSV
    sweeps/LATEST                    the id of the newest sweep

Only the driver writes a sweep's ledger. Every line is one ``LedgerEvent``
(``results.events``: a union discriminated on ``type``). A trial is final once a
``trial`` event with a finished status is written; MLflow and Optuna are views
rebuilt from it. A torn last line (a crash mid-write) is ignored when reading and
ended before the next append, so that append is never glued onto it; a whole line
that is not a known event is an error naming the line.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from actors.contracts.results import TrialResult
from actors.contracts.settings import settings
from orchestrator.errors import ServesweepError, UsageError
from orchestrator.results.events import (
    EventKind,
    LedgerEvent,
    Started,
    TrialRecorded,
    parse_event,
)

__all__ = ["Ledger", "state_root", "new_sweep_id", "atomic_write"]


def state_root() -> Path:
    """Where servesweep keeps its state (``SERVESWEEP_HOME``, default ``./mlruns``)."""
    return (settings().home or Path.cwd() / "mlruns").resolve()


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
    def append(self, event: LedgerEvent) -> None:
        line = event.model_dump_json() + "\n"
        with open(self.path, "ab+") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():  # a torn last line (a crash mid-write) is ended, not glued onto
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())

    def record_result(self, result: TrialResult) -> TrialRecorded:
        event = TrialRecorded(key=result.key, status=result.status, result=result)
        self.append(event)
        return event

    def write_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.dir / "state.json", json.dumps(state, indent=1, default=str))

    def trial_dir(self, key: str) -> Path:
        d = self.dir / "trials" / key
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- reading ----------------------------------------------------------------------------
    def events(self) -> list[LedgerEvent]:
        """Every event in order. A torn line (not JSON: a crash mid-write) never counted;
        a JSON line that is no known event raises ``ServesweepError`` naming it."""
        if not self.path.is_file():
            return []
        out = []
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            try:
                json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn write from a crash: the line never counted
            try:
                out.append(parse_event(line))
            except ValidationError as err:
                raise ServesweepError(f"{self.path}:{n}: not a ledger event this servesweep "
                                      f"knows: {err.errors()[0]['msg']} at "
                                      f"{'.'.join(map(str, err.errors()[0]['loc']))}") from None
        return out

    def results(self) -> dict[str, TrialResult]:
        """The latest final result of each trial, in the order trials were first recorded."""
        return {key: ev.result for key, ev in self.recorded().items()}

    def recorded(self) -> dict[str, TrialRecorded]:
        """The latest ``trial`` event of each trial (its result and when it was written)."""
        return {ev.key: ev for ev in self.events() if isinstance(ev, TrialRecorded)}

    def started_groups(self) -> list[Started]:
        """Every process group this sweep started (for reaping after a dead driver)."""
        return [ev for ev in self.events() if isinstance(ev, Started)]

    def open_groups(self) -> list[Started]:
        """The started groups that may still run: those whose trial attempt has no result
        (``trial`` or ``attempt``) after it, and no complete ``reaped`` came since.

        Reads each line's ``type`` first and validates only ``started`` events, so it is
        cheap on a long ledger (``reap_dead_drivers`` reads every sweep's)."""
        if not self.path.is_file():
            return []
        open_: dict[str, list[Started]] = {}
        for line in self.path.read_text().splitlines():
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = raw.get("type") if isinstance(raw, dict) else None
            if kind == EventKind.STARTED:
                ev = parse_event(line)
                assert isinstance(ev, Started)
                open_.setdefault(ev.key, []).append(ev)
            elif kind in (EventKind.TRIAL, EventKind.ATTEMPT):
                open_.pop(str(raw.get("key")), None)
            elif kind == EventKind.REAPED and raw.get("complete"):
                open_.clear()
        return [ev for evs in open_.values() for ev in evs]

    def spec_text(self) -> str:
        return (self.dir / "spec.yaml").read_text()
