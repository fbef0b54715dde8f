"""Several Ray nodes on one machine (ray.cluster_utils.Cluster) with logical GPUs."""

from __future__ import annotations

import os
import signal

import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import TEST_RAY, minimal_spec


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, **TEST_RAY})
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

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, **TEST_RAY})
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


#: started on a node by a task pinned there: a process in its own session whose environment
#: holds nothing but the trial's marker (as ``procs.spawn_group`` sets it), orphaned (its
#: parent exits, as a dead host would), standing for an engine a dead driver left behind;
#: with no marker (an empty environment), for a process that now holds a recorded pid.
#: Orphaned, so that Ray's own clean-up of a worker's children (when an idle worker exits)
#: does not take it first. The reaper signals a leader only when it carries its marker
def _leftover_on_node(marker: str | None) -> dict:
    import socket
    import subprocess
    import sys

    from actors.contracts.settings import MARKER_ENV
    from actors.proctree import start_time

    env = {MARKER_ENV: marker} if marker else {}
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            f"'import time; time.sleep(600)'], env={env!r}, "
            "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL); print(p.pid)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    pid = int(out.stdout.strip())
    return {"pid": pid, "start_time": start_time(pid), "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id()}


def test_each_nodes_leftovers_of_a_dead_driver_are_reaped_by_a_task_on_that_node(cluster,
                                                                                 tmp_path):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors.proctree import alive_same
    from orchestrator.execution.cluster import RayCluster
    from orchestrator.execution.reaping import reap_dead_drivers
    from orchestrator.results.events import DriverStarted, Started

    c, workers = cluster
    ray.init(address=c.address, log_to_driver=False)
    left: list[dict] = []
    try:
        ledger = Ledger.create("name: dead\n", "dead", tmp_path)
        ledger.append(DriverStarted(pid=1, host="gone"))
        spawn = ray.remote(num_cpus=0)(_leftover_on_node)
        for n, w in enumerate(workers):  # two on each worker node; the second one's is stale
            pin = NodeAffinitySchedulingStrategy(w.node_id, soft=False)  # (another process)
            left += ray.get([spawn.options(scheduling_strategy=pin).remote(
                None if j else f"{ledger.sweep_id}/k{2 * n + j}") for j in (0, 1)])
        for i, p in enumerate(left):
            stale = i % 2 == 1  # its pid now names another process: another start time
            ledger.append(Started(key=f"k{i}", pid=p["pid"], pgid=p["pid"], host=p["host"],
                                  node_id=p["node_id"], marker=f"{ledger.sweep_id}/k{i}",
                                  start_time=p["start_time"] + (1 if stale else 0)))
        reaped = reap_dead_drivers(RayCluster(), tmp_path)
        event = reaped[ledger.sweep_id]
        for i, p in enumerate(left):
            if i % 2 == 0:  # stopped by a node's task (the nodes share this machine, so
                # the first node's sweep by marker also finds the other node's leftovers)
                assert not alive_same(p["pid"], p["start_time"]), event
            else:
                assert p["pid"] in event.reused and alive_same(p["pid"], p["start_time"])
        assert event.unreached == [] and event.complete  # a task ran on every node
        assert {pid for pids in event.killed.values() for pid in pids} == {
            p["pid"] for p in left[::2]}  # the marked ones, never the foreign ones
        assert ledger.open_groups() == []  # a later driver has nothing left to do here
        assert reap_dead_drivers(RayCluster(), tmp_path) == {}
    finally:
        for p in left:
            if alive_same(p["pid"], p["start_time"]):
                os.kill(p["pid"], signal.SIGKILL)
        ray.shutdown()
