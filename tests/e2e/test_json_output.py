"""``--json`` on every command that ends in a result (issue 32 item 5): standard output is
one JSON document carrying its ``schema`` version, whatever the command printed for people
meanwhile (that goes to standard error)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.commands.output import SCHEMA_VERSION
from tests.conftest import FIXTURES, minimal_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _doc(capsys: pytest.CaptureFixture[str], argv: list[str], kind: str) -> dict:
    assert main(argv) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    doc = json.loads(out)  # the whole of stdout parses: nothing else was printed there
    assert doc["schema"] == f"servesweep.{kind}/{SCHEMA_VERSION}"
    return doc


def test_every_command_that_ends_in_a_result_prints_one_versioned_document(
        state_home, tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    spec = minimal_spec(name="jsondoc")
    # real time: a busy host keeps the sim's 7 ms steps, where at 0.1 its 0.7 ms steps fell
    # behind under a load of 7 (every level sim_behind, no winner to print or export)
    spec["sim"]["time_scale"] = 1.0
    path.write_text(yaml.safe_dump(spec))
    run = _doc(capsys, ["run", str(path), "--no-mlflow", "--json"], "run")
    sweep = run["sweep_id"]
    assert run["exit_code"] == 0 and run["trials"] == {"ok": 1}
    assert run["winners"] and run["report"]["index.html"].endswith("index.html")

    assert _doc(capsys, ["resume", sweep, "--no-mlflow", "--json"], "resume")["trials"] == \
        {"ok": 1}
    exported = _doc(capsys, ["export", sweep, "--json"], "export")
    assert exported["regimes"] and all(r["files"] for r in exported["regimes"])
    synced = _doc(capsys, ["sync", sweep, "--json"], "sync")
    assert synced["runs"]["created"] == 1 and synced["parent_status"] == "FINISHED"
    assert _doc(capsys, ["plan", str(path), "--json"], "plan")["trials"]
    assert _doc(capsys, ["report", sweep, "--json", "--no-mlflow"], "report")
    assert _doc(capsys, ["compare", sweep, sweep, "--json"], "compare")["levels"]

    fixture = FIXTURES / "h200-sweeps" / "h200-vllm-b-20261129-180103-ac67"
    copy = tmp_path / fixture.name
    shutil.copytree(fixture, copy)
    imported = _doc(capsys, ["import", str(copy), "--no-mlflow", "--json"], "import")
    assert imported["outcome"] == "imported" and imported["trials"] == {"ok": 2}
    log = fixture / "trials" / sorted(p.name for p in (fixture / "trials").iterdir())[0] / \
        "server.log"
    capacity = _doc(capsys, ["capacity", "--engine", "vllm", "--log", str(log),
                             "--prompt-tokens", "512", "--output-tokens", "256",
                             "--concurrency", "8", "--json"], "capacity")
    assert len(capacity) > 1
