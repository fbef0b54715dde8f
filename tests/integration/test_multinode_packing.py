"""Mixed-TP trials on Ray nodes of 8 and 4 logical GPUs of two GPU types: each trial on
one node, largest tp first, never two on one GPU, the engine seeing exactly the GPUs Ray
assigned (its CUDA_VISIBLE_DEVICES), every result recording its GPU model; a spec's
``gpu_type`` keeps trials on nodes of that type."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import TEST_RAY, minimal_spec


@pytest.fixture(scope="module")
def gpu_cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, **TEST_RAY})
    big = c.add_node(num_cpus=1, num_gpus=8, labels={"ray.io/accelerator-type": "H100"})
    small = c.add_node(num_cpus=1, num_gpus=4, resources={"accelerator_type:A100": 1})
    c.wait_for_nodes()
    yield c, big, small
    ray.shutdown()
    c.shutdown()


def _spec(tmp_path: Path, address: str, name: str, space: dict, **cluster) -> Path:
    spec = minimal_spec(name=name)
    spec["cluster"] = {"address": address, **cluster}
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 16, "concurrency": [1],
                        "rounds": 1, "warmup_requests": 0}
    spec["space"] = [{"engine": "sim", **space}]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


class EngineEnvWatch:
    """Reads each started engine's CUDA_VISIBLE_DEVICES from /proc while the sweep runs
    (every node of this test cluster is this machine)."""

    def __init__(self, home: Path):
        self.home, self.seen, self.done = home, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            for ledger in self.home.glob("sweeps/*/ledger.jsonl"):
                for line in ledger.read_text().splitlines():
                    ev = json.loads(line) if line.startswith("{") else {}
                    if ev.get("type") == "started" and ev["key"] not in self.seen:
                        try:
                            raw = Path(f"/proc/{ev['pid']}/environ").read_bytes()
                        except OSError:
                            continue
                        if not raw:  # an engine caught as it exits reads as empty: not seen
                            continue
                        env = raw.split(b"\0")
                        cvd = [v.split(b"=", 1)[1].decode() for v in env
                               if v.startswith(b"CUDA_VISIBLE_DEVICES=")]
                        self.seen[ev["key"]] = cvd[0] if cvd else None
            time.sleep(0.1)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_mixed_tp_packs_onto_nodes_of_8_and_4_gpus(gpu_cluster, tmp_path, monkeypatch):
    c, big, small = gpu_cluster
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    path = _spec(tmp_path, c.address, "packing", {"profile": ["vllm", "trtllm"],
                                                  "tp": [1, 2, 4, 8]})
    watch = EngineEnvWatch(tmp_path)
    watch.thread.start()
    try:
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    finally:
        watch.done.set()
        watch.thread.join(timeout=5)
    ledger = Ledger.open("latest")
    results = ledger.results()
    events = ledger.events()
    scheduled = [e for e in events if e.type == "scheduled"]
    assert scheduled[0].config["tp"] == 8  # largest first
    span = {}
    for e in events:
        if e.type == "scheduled":
            span[e.key] = [e.ts, None]
        elif e.type == "trial":
            span[e.key][1] = e.ts
    for r in results.values():
        assert r.status.value == "ok", r.message
        assert len(r.host["gpu_ids"]) == r.config.tp
        assert r.host["loadgen_node_id"] == r.host["node_id"]
        if r.config.tp == 8:
            assert r.host["node_id"] == big.node_id
        if not shutil.which("nvidia-smi"):  # logical GPUs: Ray's accelerator type
            want = "H100" if r.host["node_id"] == big.node_id else "A100"
            assert r.host["gpu_model"] == want
        if r.key in watch.seen:  # the engine saw exactly the GPUs Ray assigned its trial
            assert watch.seen[r.key] == ",".join(r.host["gpu_ids"])
    assert len(watch.seen) >= len(results) // 2  # most engines were caught running
    rs = list(results.values())
    for i, a in enumerate(rs):  # never two trials on one GPU at once
        for b in rs[i + 1:]:
            if a.host["node_id"] == b.host["node_id"] and _overlap(span[a.key], span[b.key]):
                assert not set(a.host["gpu_ids"]) & set(b.host["gpu_ids"]), (a.key, b.key)
    started = [e for e in events if e.type == "started"]
    assert len(started) == len(results)
    assert all(e.start_time and e.node_id and e.pgid == e.pid for e in started)


def test_a_gpu_type_keeps_trials_on_its_nodes(gpu_cluster, tmp_path, monkeypatch):
    c, big, small = gpu_cluster
    monkeypatch.setenv("SERVESWEEP_HOME", str(tmp_path))
    path = _spec(tmp_path, c.address, "pinned", {"profile": ["vllm"], "tp": [1, 2, 8]},
                 gpu_type="A100")
    assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    results = {r.config.tp: r for r in Ledger.open("latest").results().values()}
    assert results[8].status.value == "infeasible"  # the A100 node has 4 GPUs
    assert "exceeds the 4 GPUs" in results[8].reason
    for tp in (1, 2):
        assert results[tp].status.value == "ok", results[tp].message
        assert results[tp].host["node_id"] == small.node_id
