"""The ledger: an append-only JSONL of trial state changes, the sweep's source of truth.

Layout under the state root (``mlruns/`` by default, ``SERVESWEEP_HOME`` overrides)::

    sweeps/<sweep-id>/spec.yaml      the spec as given
    sweeps/<sweep-id>/ledger.jsonl   one JSON object per line, appended with fsync
    sweeps/<sweep-id>/state.json     a snapshot, replaced atomically (os.replace)
    sweeps/<sweep-id>/trials/<key>/  server log, configs, per-request CSV
    sweeps/LATEST                    the id of the newest sweep

Only the driver writes a sweep's ledger. Every line is one ``LedgerEvent``
(``results.events``: a union discriminated on ``type``), sealed with a checksum of itself
(``results.ledger_lines``). A trial is final once a ``trial`` event with a finished status
is written; MLflow and Optuna are views rebuilt from it. A torn last line (a crash
mid-write) is ignored when reading and ended before the next append, so that append is
never glued onto it; a damaged line (bad JSON, a checksum that does not match) is
reported on every read that meets it and moved to ``ledger.quarantine.jsonl`` by the next
``resume``; a sealed line that is not a known event is an error naming the line.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from actors.contracts.results import TrialResult
from actors.contracts.settings import settings
from orchestrator.errors import ServesweepError, UsageError
from orchestrator.results.events import (
    EventKind,
    LedgerEvent,
    Started,
    SweepCreated,
    TrialRecorded,
    parse_event,
)
from orchestrator.results.ledger_lines import Damage, scan, seal
from orchestrator.spec.traffic_plan import REQUESTS_DIR

__all__ = ["Ledger", "state_root", "new_sweep_id", "atomic_write", "QUARANTINE", "SpecChanged",
           "spec_diff"]

#: where ``Ledger.quarantine`` moves damaged lines, beside the ledger
QUARANTINE = "ledger.quarantine.jsonl"
_said: set[tuple[str, str]] = set()


def _warn(text: str) -> None:
    """Say it on stderr, once per process (a command reads a ledger several times)."""
    key = (text, "")
    if key not in _said:
        _said.add(key)
        print(text, file=sys.stderr, flush=True)


def state_root() -> Path:
    """Where servesweep keeps its state (``SERVESWEEP_HOME``, default ``./mlruns``)."""
    return (settings().home or Path.cwd() / "mlruns").resolve()


def new_sweep_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


class SpecChanged(UsageError):
    """The sweep folder's spec.yaml no longer matches the spec the sweep ran with."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _as_dict(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {"<unparsable>": text[:200]}
    return data if isinstance(data, dict) else {"<not a mapping>": str(data)[:200]}


def spec_diff(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths (``workload.concurrency``, ``space[0].tp``) where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in b:
                out.append(f"{sub} (removed)")
            elif k not in a:
                out.append(f"{sub} (added)")
            else:
                out += spec_diff(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and \
            all(isinstance(x, dict) for x in a + b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in spec_diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "(the whole spec)"]


def atomic_write(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` whole or not at all (a failed write, e.g. a full disk,
    leaves the old file and no temporary one)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class Ledger:
    def __init__(self, sweep_dir: Path):
        self.damage: list[Damage] = []  # the damaged lines the last read met
        self.dir = sweep_dir
        self.sweep_id = sweep_dir.name
        self.path = sweep_dir / "ledger.jsonl"

    # -- creation and lookup ----------------------------------------------------------------
    @classmethod
    def create(cls, spec_text: str, name: str, root: Path | None = None,
               requests: Path | None = None) -> Ledger:
        """A new sweep folder holding the spec as given and a copy of its request file
        (``requests/<name>``, so resume, report and export rebuild the same list)."""
        root = root or state_root()
        sweeps = root / "sweeps"
        sweep_dir = sweeps / new_sweep_id(name)
        (sweep_dir / "trials").mkdir(parents=True)
        (sweep_dir / "spec.yaml").write_text(spec_text)
        req_sha = None
        if requests is not None:
            (sweep_dir / REQUESTS_DIR).mkdir()
            data = requests.read_bytes()
            atomic_write(sweep_dir / REQUESTS_DIR / requests.name, data)
            req_sha = _sha256(data)
        ledger = cls(sweep_dir)
        ledger.append(SweepCreated(spec_sha256=_sha256(spec_text.encode()),
                                   spec=_as_dict(spec_text),
                                   requests_path=str(requests.resolve()) if requests else None,
                                   requests_sha256=req_sha))
        atomic_write(sweeps / "LATEST", sweep_dir.name + "\n")
        return ledger

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
        """Append one sealed line, fsync'd. A write that fails (a full disk: ENOSPC) is cut
        back off, so the ledger is left as it was, never with half a line."""
        line = memoryview((seal(event.model_dump_json()) + "\n").encode())
        with open(self.path, "ab+", buffering=0) as f:  # unbuffered: a failed write is ours
            end = f.seek(0, os.SEEK_END)
            if end:  # a torn last line (a crash mid-write) is moved aside, not glued onto
                f.seek(0)
                data = f.readall()
                if not data.endswith(b"\n"):
                    start = data.rfind(b"\n") + 1
                    self._set_aside(data[start:].decode(errors="replace"),
                                    data.count(b"\n") + 1)
                    f.truncate(start)
                end = f.seek(0, os.SEEK_END)
            try:
                while line:  # a raw write may be short; the next one then says why
                    written = f.write(line)
                    if not written:
                        raise OSError(errno.EIO, f"nothing written to {self.path}")
                    line = line[written:]
                os.fsync(f.fileno())
            except OSError:
                with contextlib.suppress(OSError):
                    f.truncate(end)
                    os.fsync(f.fileno())
                raise

    def _set_aside(self, torn: str, line: int) -> None:
        """Keep a torn last line's bytes in the quarantine file before the ledger drops
        them (they never counted: a write a crash cut short)."""
        with open(self.dir / QUARANTINE, "a") as q:
            q.write(json.dumps({"line": line, "why": "torn by a crash mid-write",
                                "kind": None, "key": None, "text": torn[:4000],
                                "moved_at": time.time()}) + "\n")
            q.flush()
            os.fsync(q.fileno())

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
        """Every good event in order. A torn last line (a crash mid-write) never counted; a
        damaged line (``ledger_lines``) is left out and reported on stderr, with what it
        held, every time a read meets it (``damage`` lists them); a sealed JSON line that
        is no known event raises ``ServesweepError`` naming it (a newer servesweep's)."""
        if not self.path.is_file():
            return []
        out = []
        self.damage = []
        for n, body, damage, _torn in scan(self.path.read_text()):
            if damage is not None:
                self.damage.append(damage)
                continue
            if body is None:
                continue
            try:
                out.append(parse_event(body))
            except ValidationError as err:
                raise ServesweepError(f"{self.path}:{n}: not a ledger event this servesweep "
                                      f"knows: {err.errors()[0]['msg']} at "
                                      f"{'.'.join(map(str, err.errors()[0]['loc']))}") from None
        self._say_damage()
        return out

    def _say_damage(self) -> None:
        for d in self.damage:
            _warn(f"warning: {self.path}: {d.describe()}; left out of this read"
                  + (f" (trial {d.lost_trial} has no final result: `resume` runs it again)"
                     if d.lost_trial else "")
                  + f"; `servesweep resume {self.sweep_id}` moves it to {QUARANTINE}")
        q = self.dir / QUARANTINE
        if q.is_file() and q.stat().st_size:
            n = sum(1 for _ in q.open())
            _warn(f"warning: {self.path}: {n} damaged line(s) were moved to {q} earlier")

    def quarantine(self) -> list[Damage]:
        """Move every damaged line to ``ledger.quarantine.jsonl`` (with its number and why)
        and rewrite the ledger without them, atomically. Only the sweep's driver (holding
        its lock) calls this. Returns what was moved."""
        self.events()
        moved = list(self.damage)
        if not moved:
            return []
        bad = {d.line for d in moved}
        text = self.path.read_text()
        keep = [line for n, line in enumerate(text.split("\n"), 1) if n not in bad]
        with open(self.dir / QUARANTINE, "a") as f:
            for d in moved:
                f.write(json.dumps({"line": d.line, "why": d.why, "kind": d.kind, "key": d.key,
                                    "text": d.text, "moved_at": time.time()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        atomic_write(self.path, "\n".join(keep))
        self.damage = []
        return moved

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
        for _n, line, _damage, _torn in scan(self.path.read_text()):
            if line is None:  # damaged lines are reported by events(), not trusted here
                continue
            raw = json.loads(line)
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

    def check_requests(self) -> None:
        """Refuse (``SpecChanged``, exit 2) a sweep whose request file changed: the file the
        spec named (where it still exists) or the sweep's own copy, against the sha256
        recorded when the sweep was created."""
        created = next((ev for ev in self.events() if isinstance(ev, SweepCreated)), None)
        if created is None or created.requests_path is None:
            return
        original = Path(created.requests_path)
        copy = self.dir / REQUESTS_DIR / original.name
        for path in (original, copy):
            if path.is_file() and _sha256(path.read_bytes()) != created.requests_sha256:
                raise SpecChanged(
                    f"{path} changed after sweep {self.sweep_id} started from it (sha256 "
                    f"{created.requests_sha256[:12] if created.requests_sha256 else '?'}...): "
                    "its trials ran on the old requests. Put the file back to resume, or "
                    f"start a new sweep on the new file: `servesweep run <spec>`")

    def check_spec(self) -> None:
        """Refuse (``SpecChanged``, exit 2) a sweep whose ``spec.yaml`` is not the spec it
        was created from, naming the fields that changed. Sweeps written before the
        spec's record (no ``sweep`` event) are not checked."""
        created = next((ev for ev in self.events() if isinstance(ev, SweepCreated)), None)
        if created is None:
            return
        now = (self.dir / "spec.yaml").read_bytes()
        if _sha256(now) == created.spec_sha256:
            return
        changed = spec_diff(created.spec, _as_dict(now.decode(errors="replace")))
        raise SpecChanged(
            f"{self.dir / 'spec.yaml'} was edited after sweep {self.sweep_id} started from "
            f"it (changed: {', '.join(changed[:12]) or 'formatting only'}"
            f"{', ...' if len(changed) > 12 else ''}); a sweep's results belong to the spec "
            f"they ran with. To keep them, put the original back; to run the edited spec, "
            f"start a new sweep from it: `servesweep run {self.dir / 'spec.yaml'}`")
