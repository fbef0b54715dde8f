"""engine: external: servesweep measures an endpoint it did not start (here, a sim server)."""

from __future__ import annotations

import yaml

from actors.procs import marked_processes
from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec
from tests.simserver import sim_config, sim_server


def test_sweep_against_an_external_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("MY_KEY", "s3cret")
    with sim_server(sim_config(time_scale=0.1), tmp_path) as (url, proc, _):
        spec = minimal_spec(name="ext")
        spec["model"] = {"path": "/nowhere/model", "served_name": "sim-model"}
        spec["space"] = [{"engine": "external", "extras": {"label": "staging"},
                          "launch": {"base_url": url, "api_key_env": "MY_KEY"}}]
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
        assert proc.poll() is None  # servesweep neither started nor stopped it
    (r,) = Ledger.open("latest").results().values()
    assert r.status.value == "ok", r.message
    assert [lv.status for lv in r.levels] == ["valid", "valid"]
    assert r.levels[1].server.running_max is not None  # its /metrics were read
    assert r.host["pid"] is None
    ledger_text = next((tmp_path / "state" / "sweeps").glob("*/ledger.jsonl")).read_text()
    assert "s3cret" not in ledger_text
    assert marked_processes(Ledger.open("latest").sweep_id + "/") == []
