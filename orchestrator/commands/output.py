"""What a command prints for a program: one JSON document with a ``schema`` version.

``--json`` on every command that ends in a result prints exactly one document on standard
output, ``{"schema": "servesweep.<command>/<version>", ...}``; the lines a person reads
(progress, warnings) go to standard error meanwhile, so the output parses whole. The
version grows when a field changes meaning or goes; new fields do not change it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.results.ledger import Ledger

__all__ = ["SCHEMA_VERSION", "document", "json_result", "sweep_document"]

SCHEMA_VERSION = 1


def document(kind: str, data: Any) -> str:
    """``data`` (a mapping, or anything else under ``items``) as a ``kind`` document."""
    body = data if isinstance(data, dict) else {"items": data}
    return json.dumps({"schema": f"servesweep.{kind}/{SCHEMA_VERSION}", **body}, indent=1,
                      default=str)


@contextlib.contextmanager
def json_result(enabled: bool, kind: str) -> Iterator[dict[str, Any]]:
    """With ``enabled``: what the block prints goes to standard error, and the mapping it
    fills is printed as one ``kind`` document on standard output when it ends normally."""
    doc: dict[str, Any] = {}
    if not enabled:
        yield doc
        return
    real = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        yield doc
    print(document(kind, doc), file=real, flush=True)


def sweep_document(ledger: Ledger, exit_code: int) -> dict[str, Any]:
    """A sweep after ``run``, ``resume`` or ``import``: its id, the exit code, the trials
    by status, where its report is, and its winners (``report/winners.json``)."""
    counts: dict[str, int] = {}
    for r in ledger.results().values():
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    report = ledger.dir / "report"
    winners = report / "winners.json"
    return {"sweep_id": ledger.sweep_id, "exit_code": exit_code, "state": str(ledger.dir),
            "trials": counts,
            "report": {name: str(report / name) for name in
                       ("index.html", "report.md", "report.json") if (report / name).is_file()},
            "winners": json.loads(winners.read_text()) if winners.is_file() else None}
