"""The shipped traffic examples run as a user runs them (``servesweep run`` on the spec in
search_spaces/, the request file beside it): a multi-turn chat file and a shared-prefix trace
replayed at x2 and x4. Every config gets the same request list (one fingerprint), each
request decodes exactly its own target, and the levels are the spec's."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

EXAMPLES = ROOT / "search_spaces"


def _run(name: str) -> Ledger:
    assert main(["run", str(EXAMPLES / f"{name}.yaml"), "--quiet", "--no-mlflow"]) == 0
    return Ledger.open("latest")


def _targets(path: Path) -> list[int]:
    return [int(json.loads(x)["output_tokens" if "output_tokens" in x else "output_length"])
            for x in path.read_text().splitlines() if x.strip()]


def _matched(ledger: Ledger, key: str, wanted: list[int]) -> None:
    """Every measured request of the trial decoded exactly its own target, and the
    targets are the file's (a round replays the whole list)."""
    with open(ledger.trial_dir(key) / "requests.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["round"]) >= 0]
    assert rows
    assert all(r["target_output_tokens"] == r["completion_tokens"] for r in rows), \
        [r for r in rows if r["target_output_tokens"] != r["completion_tokens"]][:3]
    assert {int(r["target_output_tokens"]) for r in rows} <= set(wanted)


@pytest.mark.parametrize("name,levels,source", [
    ("traffic-chat", ["c=4", "c=16"], "chat.jsonl"),
    ("traffic-trace", ["trace x2", "trace x4"], "trace-prefix.jsonl"),
])
def test_a_shipped_traffic_example_measures_every_config_on_one_request_list(
        state_home: Path, name: str, levels: list[str], source: str):
    ledger = _run(name)
    results = list(ledger.results().values())
    assert len(results) == 2 and all(r.status.value == "ok" for r in results), \
        [(r.status, r.reason) for r in results]
    prints = {r.workload_fingerprint for r in results}
    assert len(prints) == 1 and prints != {""}
    kept = ledger.dir / "requests" / source
    assert kept.read_bytes() == (EXAMPLES / "requests" / source).read_bytes()
    wanted = _targets(kept)
    for r in results:
        assert [lv.key for lv in r.levels] == levels
        _matched(ledger, r.key, wanted)
