"""Several Ray nodes on one machine (ray.cluster_utils.Cluster) with logical GPUs."""

from __future__ import annotations

import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    workers = [c.add_node(num_cpus=1, num_gpus=2) for _ in range(2)]
    c.wait_for_nodes()
    yield c, workers
    ray.shutdown()
    c.shutdown()


def test_trials_run_on_gpu_nodes_with_the_client_beside_the_server(cluster, tmp_path,
                                                                      monkeypatch):
    c, workers = cluster
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    spec = minimal_spec(name="multinode")
    spec["cluster"] = {"address": c.address, "max_concurrent_trials": 2}
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    results = list(Ledger.open("latest").results().values())
    by_tp = {}
    for r in results:
        by_tp.setdefault(r.config.tp, []).append(r)
    assert {r.status.value for r in by_tp[4]} == {"infeasible"}
    assert "exceeds the 2 GPUs of the largest node" in by_tp[4][0].reason
    worker_ids = {w.node_id for w in workers}
    for r in by_tp[1] + by_tp[2]:
        assert r.status.value == "ok", r.message
        assert r.host["node_id"] in worker_ids  # the head has no GPUs
        assert r.host["loadgen_node_id"] == r.host["node_id"]
        assert len(r.host["gpu_ids"]) == r.config.tp


def test_a_lost_nodes_trial_is_retried_on_another_node_and_the_sweep_goes_on(tmp_path,
                                                                             monkeypatch):
    import json
    import threading
    import time

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    workers = {}
    for _ in range(2):
        n = c.add_node(num_cpus=1, num_gpus=1)
        workers[n.node_id] = n
    c.wait_for_nodes()
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    spec = minimal_spec(name="nodelost")
    spec["cluster"] = {"address": c.address, "max_concurrent_trials": 1}
    spec["sim"] = {"time_scale": 1.0}
    spec["workload"]["output_tokens"] = 64
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    killed = []

    def kill_first_trials_node():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for ledger in tmp_path.glob("sweeps/*/ledger.jsonl"):
                for line in ledger.read_text().splitlines():
                    ev = json.loads(line)
                    if ev.get("type") == "started" and ev.get("node_id") in workers:
                        time.sleep(1.0)
                        c.remove_node(workers[ev["node_id"]])
                        killed.append(ev["key"])
                        return
            time.sleep(0.2)

    t = threading.Thread(target=kill_first_trials_node, daemon=True)
    t.start()
    try:
        code = main(["run", str(path), "--quiet", "--no-mlflow"])
    finally:
        t.join(timeout=5)
        ray.shutdown()
        c.shutdown()
    assert code == 0 and killed
    ledger = Ledger.open("latest")
    results = ledger.results()
    (attempt,) = [e for e in ledger.events() if e.type == "attempt"]
    assert (attempt.key, attempt.attempt, attempt.reason) == (killed[0], 1, "node_lost")
    retried = results[killed[0]]  # failure.retries defaults to 1: a second attempt
    assert (retried.status.value, retried.attempt) == ("ok", 2), retried.message
    assert retried.host["node_id"] != attempt.host["node_id"]  # on the node still alive
    assert [r.status.value for r in results.values()] == ["ok", "ok"]
    assert [e.type for e in ledger.events()].count("trial") == 2  # one result per key
