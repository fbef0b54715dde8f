"""A sweep on the user's own request file: two configs measured on one request list (equal
fingerprints) and ranked per level; the file is kept with the sweep; an edited file stops
``resume`` and ``compare`` (unless ``--force``, and then every figure says so)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.planning.eligibility import may_win
from orchestrator.results.analysis import winners
from orchestrator.results.ledger import Ledger
from orchestrator.spec import load_spec
from tests.conftest import minimal_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def trace(path: Path, out: int) -> Path:
    rows = [{"timestamp": 100 * i, "input_length": 700 + 50 * (i % 4), "output_length": out,
             "hash_ids": [1, 20 + i % 3]} for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sweep(tmp: Path, name: str) -> str:
    spec = minimal_spec(name=name)
    spec["workload"] = {"requests": {"kind": "file", "path": "trace.jsonl"},
                        "concurrency": [4], "rates": [6], "rounds": 1, "warmup_requests": 0}
    spec["sim"] = {"time_scale": 0.5}
    spec["space"] = [{"engine": "sim", "profile": "vllm", "max_num_seqs": [2, 64]}]
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    return Ledger.open("latest").sweep_id


def test_two_configs_on_one_request_list_then_an_edited_file_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path / "state"))
    trace(tmp_path / "trace.jsonl", 24)
    a = sweep(tmp_path, "trace-a")
    ledger = Ledger.open(a)
    results = list(ledger.results().values())
    assert sorted(r.status.value for r in results) == ["ok", "ok"]
    prints = {r.workload_fingerprint for r in results}
    assert len(prints) == 1 and prints != {""}  # both measured on the same work
    assert [lv.key for lv in results[0].levels] == ["c=4", "rate=6/s"]
    kept = ledger.dir / "requests" / "trace.jsonl"
    assert kept.read_bytes() == (tmp_path / "trace.jsonl").read_bytes()
    spec = load_spec(ledger.dir / "spec.yaml")  # rebuilt from the sweep's own copy
    ws = winners(results, spec.slo, spec.workload.noise_band)
    assert [w.name for w in ws] == ["c=4", "rate=6/s"]
    # both configs compete at each level, except a level this run itself flagged (a busy
    # host can make the open loop send late or the sim fall behind: it may not win then)
    for w in ws:
        eligible = sum(may_win(lv, slo=spec.slo) for r in results for lv in r.levels
                       if lv.key == w.name)
        assert w.candidates == eligible and bool(w.key) == (eligible > 0), (w, eligible)
    with open(ledger.trial_dir(results[0].key) / "requests.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["round"]) >= 0]
    assert rows and all(r["target_output_tokens"] == "24" == r["completion_tokens"]
                        for r in rows)

    trace(tmp_path / "trace.jsonl", 25)  # the user edits the file
    capsys.readouterr()
    assert main(["resume", a, "--quiet", "--no-mlflow"]) == 2
    assert "trace.jsonl changed after sweep" in capsys.readouterr().err
    b = sweep(tmp_path, "trace-b")
    capsys.readouterr()
    assert main(["compare", a, b]) == 2
    assert "request list" in capsys.readouterr().err
    assert main(["compare", a, b, "--force"]) == 0
    assert "workloads differ" in capsys.readouterr().out
