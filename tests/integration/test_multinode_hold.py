"""Sim hold-mode trials (``sim.hold_s``) on three Ray nodes of 4 logical GPUs each: they run
concurrently, never two on one GPU; a node removed mid-trial has its trial retried on a node
still alive; the driver SIGKILLed mid-sweep is resumed to completion, with one final result
per trial key in the ledger; every hold-mode level says it measured nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT, TEST_RAY, minimal_spec

pytestmark = pytest.mark.integration

HOLD_S = 6.0


def _events(home: Path) -> list[Any]:
    latest = home / "sweeps" / "LATEST"
    if not latest.exists():
        return []
    try:
        return Ledger.open(latest.read_text().strip(), home).events()
    except (OSError, ValueError):  # a line being written
        return []


def _wait_for(pred: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_hold_trials_survive_a_lost_node_and_a_killed_driver(tmp_path, monkeypatch):
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, **TEST_RAY})
    workers = {n.node_id: n for n in (c.add_node(num_cpus=1, num_gpus=4) for _ in range(3))}
    c.wait_for_nodes()
    home = tmp_path / "state"
    spec = minimal_spec(name="hold")
    spec["cluster"] = {"address": c.address}
    spec["sim"] = {"hold_s": HOLD_S}
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [1],
                        "rounds": 1, "warmup_requests": 0}
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"], "tp": [1, 2, 4]},
                     {"engine": "sim", "profile": ["vllm"], "tp": [1, 2], "cuda_graphs": False}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, SERVESWEEP_HOME=str(home),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.commands.cli", "run", str(path),
                             "--no-mlflow", "--quiet"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    removed: list[str] = []
    try:
        # a node goes while its trial's level holds: that trial is retried elsewhere
        def started_on_worker() -> bool:
            for e in _events(home):
                if e.type == "started" and e.node_id in workers:
                    time.sleep(1.0)
                    c.remove_node(workers[e.node_id])
                    removed.append(e.node_id)
                    return True
            return False

        assert _wait_for(started_on_worker, 120), "no trial started"
        # then the driver dies outright once the lost trial's failed attempt is recorded
        # and some trial has its final result, while others are still in flight
        assert _wait_for(lambda: {"attempt", "trial"} <= {e.type for e in _events(home)}, 120)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        monkeypatch.setenv("SERVESWEEP_HOME", str(home))
        sweep_id = (home / "sweeps" / "LATEST").read_text().strip()
        before = Ledger.open(sweep_id).results()
        assert 0 < len(before) < 8, "the kill was meant to land mid-sweep"
        assert main(["resume", sweep_id, "--quiet", "--no-mlflow"]) == 0
        # which nodes died, as Ray's control store says (the ids the trials recorded come
        # from Ray too); not from the test's own handle on the node it removed
        ray.init(address=c.address, log_to_driver=False, logging_level="WARNING")
        states = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        ray.shutdown()
        c.shutdown()

    ledger = Ledger.open(sweep_id)
    results, events = ledger.results(), ledger.events()
    assert len(results) == 8
    finals = [e.key for e in events if e.type == "trial"]
    assert sorted(finals) == sorted(results)  # one final result per trial key
    dead = {n for n, up in states.items() if not up}
    alive = {n for n, up in states.items() if up} & set(workers)
    assert len(dead) == 1 and len(alive) == 2, (states, removed)  # the one node removed
    lost = [e for e in events if e.type == "attempt" and e.reason == "node_lost"]
    assert lost and all(e.host["node_id"] in dead for e in lost), (lost, dead, removed)
    for r in results.values():
        # hold mode is honest: nothing measured, nothing winnable
        assert r.status.value == "invalid" and r.levels, r.message
        assert all(lv.flags == ["held"] and lv.metrics is None for lv in r.levels)
        assert "hold mode" in r.message
        assert r.host["node_id"] in alive
        assert len(r.host["gpu_ids"]) == r.config.tp
    for e in lost:  # retried: a later attempt, on a node still alive (checked above)
        assert results[e.key].attempt > e.attempt
    # each final run used its GPUs from its last `started` event (its engine launched on
    # them) to its `trial` event. Not from `scheduled`: right after the resume the killed
    # driver's placement groups linger until Ray removes them, so a trial scheduled then
    # may wait in placement for a GPU that another trial still holds, and only gets it
    # when that one ends
    span: dict[str, list[float]] = {}
    for e in events:
        if e.type == "started":
            span[e.key] = [e.ts, float("inf")]
        elif e.type == "trial":
            span[e.key][1] = e.ts
    rs = list(results.values())
    for i, a in enumerate(rs):  # never two trials on one GPU at once
        for b in rs[i + 1:]:
            sa, sb = span[a.key], span[b.key]
            if a.host["node_id"] == b.host["node_id"] and sa[0] < sb[1] and sb[0] < sa[1]:
                assert not set(a.host["gpu_ids"]) & set(b.host["gpu_ids"]), (a.key, b.key)
    most = max(sum(1 for s in span.values() if s[0] <= t < s[1]) for t, _ in span.values())
    assert most >= 3  # trials ran concurrently
