"""``servesweep import PATH``: take in a sweep brought back from another machine.

PATH is a sweep folder (``<sweep-id>/`` holding ``spec.yaml`` and ``ledger.jsonl``) or a
tarball holding exactly one (what ``deploy/h200/node.sh poll`` and ``fetch`` bring back from
a GPU node). The sweep lands in ``<state root>/sweeps/<sweep-id>/`` (``sweeps/`` is created
if missing), ``latest`` then names it, and its ledger is logged into MLflow through ``sync``
(``--no-mlflow``: not now; ``servesweep sync`` later).

The same sweep can come back more than once: a poll's partial copy, then the whole folder,
or the folder of a sweep resumed on a fresh node. A copy that extends the one here (same
spec; the ledger here is a prefix of its ledger and every file here is in it) replaces it; a
copy that the one here already extends changes nothing; anything else under an id already
here is refused, saying how to keep or replace the one here. Nothing is written under
``sweeps/`` until the copy is checked: it is unpacked into a temporary folder beside
``sweeps/`` (links, absolute paths and ``..`` refused), its spec validated and every ledger
line parsed, and then moved into place with one rename.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tarfile
import tempfile
from enum import Enum
from pathlib import Path
from typing import Any

from orchestrator.commands.output import json_result, sweep_document
from orchestrator.commands.sync import sync_sweep
from orchestrator.errors import EXIT_OK, ServesweepError, UsageError
from orchestrator.results.ledger import Ledger, atomic_write, state_root
from orchestrator.results.lock import LOCK_FILE, DriverLock

__all__ = ["add_parser", "cmd_import", "import_sweep", "Outcome"]

SWEEP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
HOW_TO_MAKE = ("a sweep folder, or a tarball of one made as `tar -C mlruns/sweeps -czf "
               "SWEEP.tar.gz <sweep-id>` (what `deploy/h200/node.sh poll` and `fetch` bring back)")


class Outcome(Enum):
    """What an import did to ``sweeps/<id>/``."""

    NEW = "imported"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("import", help="take in a sweep folder or tarball brought back "
                                             "from another machine; sets latest, syncs MLflow")
    p.add_argument("path", help="a sweep folder or a .tar.gz/.tgz/.tar of one")
    p.add_argument("--no-mlflow", action="store_true",
                   help="do not log it to MLflow now (`servesweep sync SWEEP` later)")
    p.add_argument("--json", action="store_true",
                   help="print the imported sweep as one JSON document (id, what the import "
                        "did, trials, report, winners)")
    p.set_defaults(func=cmd_import)
    return p


def _say(text: str) -> None:
    print(text, flush=True)


def cmd_import(args: argparse.Namespace) -> int:
    with json_result(getattr(args, "json", False), "import") as doc:
        ledger, outcome = _import(args)
        doc.update(sweep_document(ledger, EXIT_OK), outcome=outcome.value)
    return EXIT_OK


def _import(args: argparse.Namespace) -> tuple[Ledger, Outcome]:
    path = Path(args.path)
    ledger, outcome, before = import_sweep(path)
    results = ledger.results()
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none yet"
    where = ledger.dir.parent
    if outcome is Outcome.NEW:
        _say(f"imported sweep {ledger.sweep_id} from {path} into {where}: "
             f"{len(results)} trial(s) final ({summary})")
    elif outcome is Outcome.UPDATED:
        _say(f"updated sweep {ledger.sweep_id} from {path}: {before} -> {len(results)} trial(s) "
             f"final ({summary})")
    else:
        _say(f"sweep {ledger.sweep_id} is already in {where} with everything {path} holds: "
             f"nothing unpacked ({len(results)} trial(s) final: {summary})")
    _say(f"latest is now {ledger.sweep_id}")
    if args.no_mlflow:
        _say(f"not logged to MLflow (--no-mlflow): `servesweep sync {ledger.sweep_id}` does it")
    else:
        try:
            _say(sync_sweep(ledger))
        except ServesweepError as err:
            raise ServesweepError(f"sweep {ledger.sweep_id} is imported and latest, but its "
                                  f"MLflow runs are not: {err}") from None
    _say(f"see it: servesweep report {ledger.sweep_id}")
    return ledger, outcome


def import_sweep(path: Path) -> tuple[Ledger, Outcome, int]:
    """Place the sweep at ``path`` under ``sweeps/`` and make it ``latest``. Returns its
    ledger, what was done, and how many trials were final here before (0 if new)."""
    if not path.exists():
        raise UsageError(f"no such file or folder: {path}")
    root = state_root()
    sweeps = root / "sweeps"
    sweeps.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and path.resolve().parent == sweeps.resolve():
        _check(path, path)  # already in place: only latest (and MLflow) to do
        atomic_write(sweeps / "LATEST", path.name + "\n")
        return Ledger(path), Outcome.UNCHANGED, len(Ledger(path).results())
    tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=root))
    try:
        folder = _copy_in(path, tmp)
        _check(folder, path)
        dest = sweeps / folder.name
        outcome, before = Outcome.NEW, 0
        if dest.exists():
            outcome = _relation(dest, folder, path)
            before = len(Ledger(dest).results())
        if outcome is not Outcome.UNCHANGED:
            _place(folder, dest, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    atomic_write(sweeps / "LATEST", dest.name + "\n")
    return Ledger(dest), outcome, before


# -- unpacking ----------------------------------------------------------------------------------
def _copy_in(path: Path, tmp: Path) -> Path:
    """``path``'s sweep folder copied or unpacked under ``tmp``; returns that folder."""
    if path.is_dir():
        dest = tmp / path.resolve().name
        shutil.copytree(path, dest, symlinks=True, ignore=shutil.ignore_patterns(LOCK_FILE))
        if any(p.is_symlink() for p in dest.rglob("*")):
            raise UsageError(f"{path} holds symbolic links; a sweep folder holds only files")
        return dest
    unpacked = tmp / "unpacked"
    unpacked.mkdir()
    _untar(path, unpacked)
    entries = sorted(unpacked.iterdir())
    if len(entries) != 1 or not entries[0].is_dir():
        names = ", ".join(p.name + ("/" if p.is_dir() else "") for p in entries[:6]) or "nothing"
        raise UsageError(f"{path} is not a sweep folder: its top holds {names}, where one folder "
                         f"named after the sweep id is expected. Import {HOW_TO_MAKE}")
    (entries[0] / LOCK_FILE).unlink(missing_ok=True)
    return entries[0]


def _untar(path: Path, dest: Path) -> None:
    try:
        tar = tarfile.open(path)
    except (tarfile.TarError, OSError) as err:
        raise UsageError(f"{path} is neither a folder nor a tarball ({err}). Import "
                         f"{HOW_TO_MAKE}") from None
    with tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts:
                raise UsageError(f"{path} holds {m.name!r}, a path outside its folder: refused. "
                                 f"Import {HOW_TO_MAKE}")
            if not (m.isfile() or m.isdir()):
                raise UsageError(f"{path} holds {m.name!r}, a link or device: refused (a sweep "
                                 f"folder holds only files and folders). Import {HOW_TO_MAKE}")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python 3.11.0-3.11.3; members were checked above
            tar.extractall(dest)


# -- checking -----------------------------------------------------------------------------------
def _check(folder: Path, origin: Path) -> None:
    """A sweep folder: a valid id, a spec this servesweep accepts, a ledger it can read."""
    from orchestrator.spec import load_spec

    missing = [n for n in ("spec.yaml", "ledger.jsonl") if not (folder / n).is_file()]
    if missing:
        raise UsageError(f"{origin} is not a sweep folder: {folder.name}/ has no "
                         f"{' and no '.join(missing)}. Import {HOW_TO_MAKE}")
    if not SWEEP_ID.fullmatch(folder.name) or folder.name == "LATEST":
        raise UsageError(f"{origin}: {folder.name!r} is not a sweep id (letters, digits, '.', "
                         "'_' and '-'); rename the folder to its sweep id")
    try:
        load_spec(folder / "spec.yaml")
        Ledger(folder).events()
    except ServesweepError as err:
        raise UsageError(f"{origin}: sweep {folder.name} cannot be read by this servesweep: "
                         f"{err}") from None


#: what no copy is judged by: the driver's lock, and what is derived from the ledger again
#: whenever needed (a trial's config and command files by ``sync``, ``report/`` by the end of
#: a sweep and by ``report``)
NOT_COMPARED = frozenset({LOCK_FILE, "trial_config.json", "command.json"})
DERIVED_DIR = "report"


def _files(folder: Path) -> dict[str, bytes]:
    """Relative path -> content, for every file but the derived ones (``NOT_COMPARED``)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and p.name not in NOT_COMPARED and rel.parts[0] != DERIVED_DIR:
            out[str(rel)] = p.read_bytes()
    return out


def _relation(here: Path, incoming: Path, origin: Path) -> Outcome:
    """UPDATED: ``incoming`` extends ``here`` (the ledger here is a prefix of its ledger and
    every file here is in it); UNCHANGED: ``here`` already extends ``incoming``. Two snapshots
    with the same ledger and files: the larger is the later. Anything else is a different
    sweep under the same id: refused."""
    a, b = _files(here), _files(incoming)
    la, lb = a.get("ledger.jsonl", b""), b.get("ledger.jsonl", b"")
    if a.get("spec.yaml") == b.get("spec.yaml"):
        extends = lb.startswith(la) and a.keys() <= b.keys()
        extended = la.startswith(lb) and b.keys() <= a.keys()
        if extends and extended:
            extended = sum(map(len, a.values())) >= sum(map(len, b.values()))
        if extended:
            return Outcome.UNCHANGED
        if extends:
            holder = DriverLock(here).holder()
            if holder is not None:
                raise UsageError(f"sweep {here.name} is being run here by "
                                 f"{DriverLock.describe(holder)}; import again once it has "
                                 "stopped")
            return Outcome.UPDATED
    what = "spec.yaml" if a.get("spec.yaml") != b.get("spec.yaml") else "ledger and files"
    raise UsageError(
        f"sweep {here.name} is already in {here.parent} with different content ({what} differ "
        f"from {origin}'s, and neither copy extends the other). To keep both, move the one "
        f"here away first (`mv {here} {here}.old`); to replace it, delete it first "
        f"(`rm -r {here}`); then import again")


def _place(folder: Path, dest: Path, tmp: Path) -> None:
    """Move ``folder`` to ``dest`` (an older copy there goes aside first, then away)."""
    old = tmp / "replaced"
    if dest.exists():
        dest.rename(old)
    try:
        folder.rename(dest)
    except OSError:
        if old.exists():
            old.rename(dest)
        raise
