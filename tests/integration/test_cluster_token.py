"""README "Security", a cluster: the recipe, run as written against a real `ray start` cluster
with Ray's token authentication (a head and a worker, on 127.0.0.1), and a driver the cluster
refuses: one line naming what to set, exit 2, no sweep folder.

Every process gets its own environment and home directory (tests/conftest.py turns token
auth off for the suite's own clusters; the head's home holds the token, the worker and the
driver have only the copy named by RAY_AUTH_TOKEN_PATH). The cluster is stopped by
SIGTERM to each `ray start --block`, which stops what it started."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from orchestrator.results.ledger import Ledger
from tests.conftest import ROOT, minimal_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RAY = Path(sys.executable).with_name("ray")
_MAIN = "import sys; from orchestrator.commands.cli import main; sys.exit(main(sys.argv[1:]))"
_PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
               "--runtime-env-agent-port", "--metrics-export-port", "--node-manager-port",
               "--object-manager-port")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This test's environment without any RAY_* variable, ``home`` as HOME, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def _ray_start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``ray start --block ARGV``; returns once it says the node runs (fails with its log)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(RAY), "start", "--block", "--num-cpus", "1",
                                 "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
                                 *argv], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"ray start {argv[0]} did not start:\n"
                        f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(1)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the ``ray start --block`` (it stops its node), then its session: SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session (start_new_session): ours
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The README's head and one worker (one logical GPU), token auth on."""
    if not RAY.exists():
        pytest.skip(f"no `ray` command next to {sys.executable}")
    base = tmp_path_factory.mktemp("token-cluster")
    homes = {name: base / name for name in ("head", "worker", "driver")}
    for home in homes.values():
        home.mkdir()
    # head: `ray get-auth-token --generate` writes ~/.ray/auth_token; chmod 600 it
    subprocess.run([str(RAY), "get-auth-token", "--generate"], env=_env(homes["head"]),
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=180, check=True)
    token = homes["head"] / ".ray" / "auth_token"
    token.chmod(0o600)
    copy = base / "auth_token"  # the copy a worker and the driver are given
    shutil.copyfile(token, copy)
    copy.chmod(0o600)
    # Ray's socket paths must stay short: its session folder goes under /tmp
    ray_tmp = tempfile.mkdtemp(prefix="sstok-", dir="/tmp")
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, ray_tmp, True)
        port, *ports = _free_ports(1 + 4 + 2 * len(_PORT_FLAGS))
        head_ports = [x for f, p in zip(_PORT_FLAGS, ports[4:]) for x in (f, str(p))]
        worker_ports = [x for f, p in zip(_PORT_FLAGS, ports[4 + len(_PORT_FLAGS):])
                        for x in (f, str(p))]
        head = _ray_start(["--head", "--port", str(port), "--num-gpus", "0",
                           "--include-dashboard", "false", "--dashboard-port", str(ports[0]),
                           "--ray-client-server-port", str(ports[1]), "--temp-dir", ray_tmp,
                           *head_ports],
                          _env(homes["head"], RAY_AUTH_MODE="token", RAY_worker_niceness="0"),
                          base / "head.log")
        stack.callback(_stop, head)
        address = f"127.0.0.1:{port}"
        worker = _ray_start(["--address", address, "--num-gpus", "1", "--temp-dir", ray_tmp,
                             *worker_ports],
                            _env(homes["worker"], RAY_AUTH_MODE="token",
                                 RAY_AUTH_TOKEN_PATH=str(copy), RAY_worker_niceness="0"),
                            base / "worker.log")
        stack.callback(_stop, worker)
        yield {"address": address, "token": copy, "driver_home": homes["driver"],
               "base": base}


def _spec(cluster, tmp_path: Path) -> Path:
    spec = minimal_spec(name="token")
    spec["cluster"] = {"address": cluster["address"], "max_concurrent_trials": 1}
    spec["space"] = [{"engine": "sim", "profile": ["vllm"]}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _driver(cluster, spec: Path, state: Path, **auth: str) -> subprocess.CompletedProcess:
    """``servesweep run SPEC --quiet --no-mlflow`` with ``auth`` as its only RAY_AUTH_*."""
    env = _env(cluster["driver_home"], SERVESWEEP_HOME=str(state), **auth)
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-c", _MAIN, "run", str(spec), "--quiet",
                           "--no-mlflow"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)


def test_the_readme_recipe_runs_a_sweep_on_the_cluster(cluster, tmp_path):
    state = tmp_path / "state"
    out = _driver(cluster, _spec(cluster, tmp_path), state, RAY_AUTH_MODE="token",
                  RAY_AUTH_TOKEN_PATH=str(cluster["token"]))
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    ledger = Ledger.open("latest", root=state)
    results = list(ledger.results().values())
    assert [r.status.value for r in results] == ["ok"], [r.message for r in results]
    assert len(results[0].host["gpu_ids"]) == 1  # on the worker, the only node with a GPU
    # the recipe's RAY_worker_niceness=0 reached the engine: no more than the nodes' own
    # niceness (this test's, 0 in CI), without Ray's 15
    assert results[0].host["nice"] == os.nice(0)
    assert ledger.open_groups() == []


@pytest.mark.parametrize("case", ["nothing", "path-only", "wrong-token", "mode-only"])
def test_a_refused_driver_says_what_to_set_and_creates_nothing(cluster, tmp_path, case):
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 32)
    wrong.chmod(0o600)
    auth = {"nothing": {},
            # the README's recipe before: a token path, no mode
            "path-only": {"RAY_AUTH_TOKEN_PATH": str(cluster["token"])},
            "wrong-token": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)},
            "mode-only": {"RAY_AUTH_MODE": "token"}}[case]
    expect = {"nothing": "sent no token (RAY_AUTH_MODE is not set)",
              "path-only": "sent no token (RAY_AUTH_MODE is not set)",
              "wrong-token": f"refused this driver's token (from RAY_AUTH_TOKEN_PATH={wrong})",
              "mode-only": "this driver has no token to send"}[case]
    state = tmp_path / "state"
    out = _driver(cluster, _spec(cluster, tmp_path), state, **auth)
    assert out.returncode == 2, (out.stdout[-3000:], out.stderr[-3000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-3000:]  # no traceback, no Ray retries
    line = lines[0]
    assert line.startswith(f"servesweep: cannot join the Ray cluster at {cluster['address']}")
    assert expect in line
    assert "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=" in line
    assert "internal error" not in out.stdout + out.stderr
    assert not (state / "sweeps").exists() or not any((state / "sweeps").iterdir())
    for secret in ("0" * 32, cluster["token"].read_text().strip()):
        assert secret not in out.stdout + out.stderr
