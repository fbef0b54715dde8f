"""The GPU node's runner (deploy/h200/node.py) on this machine, with the sim engine.

`start` returns at once with the sweep running detached; `poll` returns within seconds with
the finished trials brought back; then the node is lost (every process of the sweep killed
at once, no Ctrl-C); the folder brought back resumes on a fresh node without rerunning the
finished trial; `fetch` brings the whole sweep back and `servesweep import` takes it in here,
into MLflow. The node's Python has no MLflow: a stub that refuses to import stands in for it,
so a sweep that imported MLflow on the node would fail here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from actors.procs import marked_processes
from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT, minimal_spec

NODE_PY = ROOT / "deploy" / "h200" / "node.py"


def _node(node: Path, out: Path, stub: Path, *args: str,
          timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, H200_NODE_DIR=str(node), H200_NODE_SITE="none",
               OUT=str(out), PYTHONPATH=str(stub))
    env.pop("SERVESWEEP_HOME", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(NODE_PY), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant of it, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _lose_node(node: Path, sweep_id: str) -> None:
    """What a lost node does to a sweep: every process of it gone at once, no signal handled.

    A node vanishes in an instant; killing its processes one by one does not, and a host
    actor could start an engine between a snapshot of the processes and the kill (CI saw
    one survive). So every process is frozen first (SIGSTOP: a stopped process starts
    nothing), the snapshot retaken until it holds no new one, and only then all killed."""
    job = int((node / "job" / "job.pid").read_text())
    victims: set[int] = set()
    for _ in range(50):
        now = set(_tree(job)) | {pid for pid, _, _ in marked_processes(f"{sweep_id}/")}
        new = now - victims
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        victims |= new
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and
                                              "Z" not in _state(p) for p in victims):
        time.sleep(0.2)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_start_poll_node_lost_resume_on_a_fresh_node_fetch_and_import(tmp_path, monkeypatch,
                                                                       capsys):
    stub = tmp_path / "no-mlflow"
    (stub / "mlflow").mkdir(parents=True)
    (stub / "mlflow" / "__init__.py").write_text(
        "raise ImportError('mlflow is not on the GPU node')\n")
    spec = minimal_spec(name="nodetest")
    spec["workload"] = {"prompt_tokens": 64, "output_tokens": 200, "concurrency": [2],
                        "rounds": 2, "warmup_requests": 0}
    spec["sim"] = {"time_scale": 0.5}
    spec["space"] = [{"engine": "sim", "profile": ["vllm", "trtllm"]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    node_a, node_b, out_a, out_b = (tmp_path / n for n in ("node-a", "node-b", "out-a",
                                                           "out-b"))
    sweep_id = ""
    try:
        started, took = _node(node_a, out_a, stub, "start", str(path))
        assert started.returncode == 0, started.stderr + started.stdout
        assert "runs in the background" in started.stdout and took < 15
        deadline = time.monotonic() + 300
        polled = None
        while time.monotonic() < deadline:
            polled, took = _node(node_a, out_a, stub, "poll")
            assert polled.returncode == 0 and took < 10, polled.stderr
            if "trials final: 1" in polled.stdout:
                break
            assert "ended" not in polled.stdout.splitlines()[0], polled.stdout
            time.sleep(1)
        assert polled is not None and "trials final: 1 of 2 to run" in polled.stdout
        sweep_id = polled.stdout.split()[1].rstrip(":")
        partial = out_a / f"{sweep_id}.partial.tar.gz"
        assert partial.is_file() and (out_a / "console.txt").is_file()
        _lose_node(node_a, sweep_id)
        assert marked_processes(f"{sweep_id}/") == []

        resumed, took = _node(node_b, out_b, stub, "resume", str(partial))
        assert resumed.returncode == 0, resumed.stderr + resumed.stdout
        assert took < 15
        waited, _ = _node(node_b, out_b, stub, "wait", "300", timeout=330)
        assert "the sweep ended" in waited.stdout, waited.stdout
        assert "servesweep exited 0" in waited.stdout and "trials final: 2" in waited.stdout
        fetched, took = _node(node_b, out_b, stub, "fetch")
        assert fetched.returncode == 0 and took < 10
        whole = out_b / f"{sweep_id}.tar.gz"
        assert whole.is_file()
    finally:
        for node in (node_a, node_b):
            if (node / "job" / "job.pid").is_file():
                _lose_node(node, sweep_id or "nodetest-")

    home = tmp_path / "workstation"
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["import", str(whole)]) == 0
    out = capsys.readouterr().out
    assert f"imported sweep {sweep_id}" in out and "2 trial(s) final (2 ok)" in out
    assert "2 created" in out  # logged into MLflow through sync
    ledger = Ledger.open("latest")
    assert ledger.sweep_id == sweep_id
    trial_events = [e for e in ledger.events() if e.type == "trial"]
    assert len(trial_events) == 2  # the trial finished on the lost node was not run again
    assert [e.type for e in ledger.events()].count("driver") == 2  # one driver per node
    assert main(["report", "latest"]) == 0
    assert "2 trials (2 ok)" in capsys.readouterr().out
