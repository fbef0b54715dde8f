"""Damage to a ledger is never silent: a line whose checksum fails, garbage, or an unsealed
line in a sealed ledger is reported with its number and what it held, left out, and moved
to the quarantine file by the driver; an edited spec.yaml is refused naming the fields."""

from __future__ import annotations

import json

import pytest

from actors.contracts.config import TrialConfig
from actors.contracts.results import TrialResult
from actors.contracts.states import TrialStatus
from orchestrator.errors import EXIT_INPUT
from orchestrator.results.events import DriverStarted
from orchestrator.results.ledger import QUARANTINE, Ledger, SpecChanged, spec_diff

pytestmark = pytest.mark.unit

SPEC = "name: t\nworkload: {concurrency: [1, 4]}\nspace:\n  - {engine: sim, profile: vllm}\n"


def _ledger(tmp_path, n: int = 3) -> tuple[Ledger, list[str]]:
    ledger = Ledger.create(SPEC, "t", tmp_path)
    ledger.append(DriverStarted(pid=1, host="h"))
    keys = []
    for i in range(n):
        cfg = TrialConfig(engine="sim", profile="vllm", max_num_seqs=8 + i)
        ledger.record_result(TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK))
        keys.append(cfg.key())
    return ledger, keys


def _overwrite(ledger: Ledger, line: int, at: int, junk: bytes) -> None:
    lines = ledger.path.read_bytes().split(b"\n")
    row = bytearray(lines[line - 1])
    row[at:at + len(junk)] = junk
    lines[line - 1] = bytes(row)
    ledger.path.write_bytes(b"\n".join(lines))


def test_a_corrupted_middle_record_is_reported_left_out_and_quarantined(tmp_path, capsys):
    ledger, keys = _ledger(tmp_path)
    _overwrite(ledger, 4, 120, b"X" * 20)  # line 4: the second trial's result
    assert set(ledger.results()) == {keys[0], keys[2]}
    (d,) = ledger.damage
    assert d.line == 4 and d.lost_trial == keys[1] and "checksum" in d.why
    err = capsys.readouterr().err
    assert f"line 4: its checksum does not match its text; it held a 'trial' event of " \
           f"trial {keys[1]}" in err and "runs it again" in err
    ledger.results()  # every read that meets it says so (once per process and line)
    moved = ledger.quarantine()
    assert [m.line for m in moved] == [4]
    assert ledger.damage == [] and set(ledger.results()) == {keys[0], keys[2]}
    kept = [json.loads(x) for x in (ledger.dir / QUARANTINE).read_text().splitlines()]
    assert kept[0]["line"] == 4 and kept[0]["key"] == keys[1]
    ledger.events()  # later reads name the quarantine file
    assert f"1 damaged line(s) were moved to {ledger.dir / QUARANTINE}" in capsys.readouterr().err


def test_garbage_and_unsealed_lines_in_a_sealed_ledger_are_damage(tmp_path):
    ledger, keys = _ledger(tmp_path, 1)
    with open(ledger.path, "a") as f:
        f.write("garbage \x00 here\n")
        f.write(json.dumps({"type": "driver", "ts": 1.0, "pid": 2, "host": "h"}) + "\n")
    ledger.append(DriverStarted(pid=3, host="h"))
    assert [e.type for e in ledger.events()] == ["sweep", "driver", "trial", "driver"]
    assert [(d.line, d.why) for d in ledger.damage] == [
        (4, "not JSON"), (5, "no checksum in a sealed ledger")]


def test_an_edited_spec_is_refused_naming_every_changed_field(tmp_path):
    ledger, _ = _ledger(tmp_path, 1)
    ledger.check_spec()  # unchanged: fine
    (ledger.dir / "spec.yaml").write_text(
        SPEC.replace("[1, 4]", "[1, 8]").replace("profile: vllm}", "profile: vllm, tp: [1, 2]}"))
    with pytest.raises(SpecChanged) as err:
        ledger.check_spec()
    assert err.value.exit_code == EXIT_INPUT
    msg = str(err.value)
    assert "workload.concurrency" in msg and "space[0].tp (added)" in msg
    assert f"servesweep run {ledger.dir / 'spec.yaml'}" in msg  # the way to fork


def test_spec_diff_names_paths():
    a = {"w": {"c": [1, 4]}, "s": [{"e": "sim"}], "x": 1}
    b = {"w": {"c": [1, 8]}, "s": [{"e": "sim", "tp": 2}], "y": 2}
    assert spec_diff(a, b) == ["w.c", "s[0].tp (added)", "x (removed)", "y (added)"]
