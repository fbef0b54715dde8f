"""A small sweep on real (local) Ray with the sim engine, tracked in a real MLflow store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("state")
    spec = minimal_spec(name="skeleton")
    spec["workload"]["client_shards"] = 2  # the client split over 2 processes (inside Ray)
    spec["sim"]["time_scale"] = 1.0  # winners are asserted: real-time steps keep pace when busy
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"], "kv_dtype": ["auto"]},
                     {"engine": "sim", "profile": "vllm", "tp": 4}]  # > 2 GPUs: infeasible
    path = home / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVESWEEP_HOME", str(home))
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    try:
        code = main(["run", str(path), "--quiet"])
        ledger = Ledger.open("latest")
        report = main(["report", "latest", "--json"])
    finally:
        mp.undo()
    return {"code": code, "home": home, "ledger": ledger, "report_code": report}


def test_sweep_completes_with_results_in_the_ledger(sweep):
    assert sweep["code"] == 0
    results = sweep["ledger"].results()
    statuses = sorted(r.status.value for r in results.values())
    assert statuses == ["infeasible", "ok", "ok"]
    infeasible = next(r for r in results.values() if r.status.value == "infeasible")
    assert "exceeds the 2 GPUs" in infeasible.reason
    for r in results.values():
        if r.status.value != "ok":
            continue
        assert [lv.concurrency for lv in r.levels] == [1, 4]
        for lv in r.levels:
            assert lv.status == "valid"
            assert lv.count_mismatches == 0 and not lv.errors
            assert lv.metrics.output_tok_s > 0 and lv.metrics.ttft_p50_ms > 0
            assert lv.client.shards == min(2, lv.concurrency)
        assert r.applied.cuda_graphs is True
        assert r.capacity is not None and r.capacity.pool_blocks > 0
        # both profiles' logs state the max model length: 64 + 16 tokens, which fits
        assert (r.capacity.max_model_len, r.capacity.rejects_requests) == (80, False)
        assert r.host["argv"][1:3] == ["-m", "actors.sim.server"]
        # the machine it ran on, read from the kernel: tells same-node levels apart
        assert r.host["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        # a local Ray's workers (the engine host, so the engine and its client) at the
        # driver's own niceness (0 in CI), without Ray's 15, which starves them beside any
        # busy process
        assert r.host["nice"] == os.nice(0)


def test_mlflow_has_parent_and_nested_runs_with_params_and_metrics(sweep):
    client = MlflowClient(tracking_uri=f"sqlite:///{sweep['home'] / 'mlflow.db'}")
    exp = client.get_experiment_by_name("skeleton")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("servesweep.kind") == "sweep"]
    trials = [r for r in runs if r.data.tags.get("servesweep.kind") == "trial"]
    assert len(parents) == 1 and len(trials) == 3
    parent_id = parents[0].info.run_id
    assert all(r.data.tags["mlflow.parentRunId"] == parent_id for r in trials)
    ok = [r for r in trials if r.data.tags["status"] == "ok"]
    assert sorted(r.data.params["profile"] for r in ok) == ["trtllm", "vllm"]
    for r in ok:
        for name in ("engine", "tp", "weights", "kv_dtype", "cuda_graphs", "trial_key"):
            assert name in r.data.params
        # the child run holds the workload and the engine's version
        assert r.data.params["workload.prompt_tokens"] and r.data.params["workload.concurrency"]
        assert r.data.tags["version.engine"].startswith("sim-")
        assert r.data.tags["client.parse"] == "scan"  # the sim sends per-chunk usage
        assert r.data.metrics["output_tok_s_c4"] > r.data.metrics["output_tok_s_c1"]
        history = client.get_metric_history(r.info.run_id, "by_concurrency.output_tok_s")
        assert sorted(m.step for m in history) == [1, 4]  # x = concurrency
        # every round's throughput is kept (step = round); the level's is their median
        rounds = client.get_metric_history(r.info.run_id, "round_output_tok_s_c4")
        assert sorted(m.step for m in rounds) == [0, 1]
        mid = sum(m.value for m in rounds) / 2
        assert r.data.metrics["output_tok_s_c4"] == pytest.approx(mid)
        # the client's self-check per level, and how it read
        cpu = client.get_metric_history(r.info.run_id, "by_concurrency.client_cpu_frac")
        assert sorted(m.step for m in cpu) == [1, 4] and all(0 < m.value < 1.5 for m in cpu)
        assert r.data.tags["client.reader"] in ("native", "python")
        files = {f.path for f in client.list_artifacts(r.info.run_id)}
        assert {"server.log", "sim_config.json", "requests.csv", "command.json",
                "trial_config.json"} <= files
    bad = next(r for r in trials if r.data.tags["status"] == "infeasible")
    assert "exceeds" in bad.data.tags["failure_reason"]
    assert {f.path for f in client.list_artifacts(parent_id)} >= {
        "report.json", "report.txt", "index.html", "report.md", "chart-throughput.svg"}


def test_report_json_lists_trials_and_winners(sweep, capsys):
    assert sweep["report_code"] == 0
    ledger = sweep["ledger"]
    data = json.loads((ledger.dir / "report" / "report.json").read_text())
    assert {t["status"] for t in data["trials"]} == {"ok", "infeasible"}
    assert [w["concurrency"] for w in data["winners"]] == [1, 4]
    assert all(w["key"] for w in data["winners"])
    assert Path(ledger.dir / "report" / "chart-throughput.svg").stat().st_size > 1000
    assert "<svg" in (ledger.dir / "report" / "index.html").read_text()
    exported = json.loads((ledger.dir / "report" / "winners.json").read_text())
    assert [w["concurrency"] for w in exported] == [1, 4]
    assert all(w["command"][1:3] == ["-m", "actors.sim.server"] for w in exported)
