"""Reaping real processes: an engine grandchild that calls setsid and clears its
environment is still stopped with its engine; a recorded pid now held by another process
is never signalled; a node's reaper stops what the ledger says ran there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.cgroups import EngineCgroup
from actors.contracts.reaping import ReapTarget
from actors.contracts.settings import MARKER_ENV
from actors.proctree import PROCS_FILE, alive_same, read_stat, start_time
from actors.reaper import reap_node
from tests.conftest import ROOT

#: the engine: forks a child that forks the escapee and exits; the escapee calls setsid and
#: becomes a fresh python with an empty environment (no marker), then sleeps
ENGINE = r"""
import os, sys, time
out = sys.argv[1]
child = os.fork()
if child == 0:
    if os.fork() == 0:
        os.setsid()
        code = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                "time.sleep(600)")
        os.execve(sys.executable, [sys.executable, "-c", code, out], {})
    os._exit(0)
os.waitpid(child, 0)
time.sleep(600)
"""

#: a host as the EngineHost actor runs one: subreaper (or not), descendant watch, cgroup
HOST = r"""
import json, os, sys, time
from pathlib import Path
from actors.cgroups import EngineCgroup
from actors.procs import spawn_group, stop_group
from actors.proctree import PROCS_FILE, DescendantWatch, read_stat, set_child_subreaper

mode, work, engine = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
sub = set_child_subreaper() if mode in ("subreaper", "cgroup") else False
cg = EngineCgroup.create(f"test-escape-{os.getpid()}") if mode == "cgroup" else None
watch = DescendantWatch(work / PROCS_FILE, whole_host=sub)
pidfile = work / "escapee.pid"
proc = spawn_group([sys.executable, "-c", engine, str(pidfile)], {}, work / "server.log", work,
                   "escape-test/key", cg)
watch.engine_started(proc.pid)
watch.start()
deadline = time.monotonic() + 30
while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.3)
esc = int(pidfile.read_text())
st = read_stat(esc)
environ = Path(f"/proc/{esc}/environ").read_bytes()
tracked = watch.pids if mode != "marker" else None
result = stop_group(proc, "escape-test/key", 5.0, tracked=tracked, cgroup=cg)
after = read_stat(esc)
if cg is not None:
    cg.remove()
print(json.dumps({"escapee": esc, "start": st.start_time, "sid": st.sid, "leader": proc.pid,
                  "marker_in_env": b"SERVESWEEP_MARKER" in environ, "subreaper": sub,
                  "cgroup": None if cg is None else str(cg.path), "stop": result,
                  "alive_after": after is not None and after.state != "Z"}))
"""


def _host(mode: str, work: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", HOST, mode, str(work), ENGINE], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_grandchild_that_calls_setsid_and_clears_its_env_escapes_the_marker(tmp_path):
    """The control: by marker and process group alone, the escapee survives the stop."""
    info = _host("marker", tmp_path)
    try:
        assert not info["marker_in_env"] and info["sid"] == info["escapee"]  # it escaped
        assert info["alive_after"] and info["stop"]["leftovers"] == []  # nothing saw it
    finally:
        if alive_same(info["escapee"], info["start"]):
            os.kill(info["escapee"], signal.SIGKILL)


def test_the_hosts_subreaper_keeps_the_escapee_in_its_tree_and_stop_kills_it(tmp_path):
    info = _host("subreaper", tmp_path)
    if not info["subreaper"]:
        pytest.skip("no PR_SET_CHILD_SUBREAPER here")
    assert not info["marker_in_env"] and info["sid"] == info["escapee"]
    assert not info["alive_after"], info
    assert info["stop"]["leftovers"] == []
    listed = json.loads((tmp_path / PROCS_FILE).read_text())["procs"]
    assert {"pid": info["escapee"], "start_time": info["start"]} in listed  # for the reaper


def test_a_cgroup_per_engine_holds_the_escapee(tmp_path):
    info = _host("cgroup", tmp_path)
    if info["cgroup"] is None:
        pytest.skip("this machine does not let the host create a cgroup")
    assert not info["alive_after"] and not Path(info["cgroup"]).exists()


def _sleeper(marker: str | None = None, **kw) -> subprocess.Popen:
    """A sleeping process in its own session; with ``marker``, started as servesweep
    starts an engine (``SERVESWEEP_MARKER`` in its environment)."""
    env = {} if marker is None else {MARKER_ENV: marker}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True, env=env, **kw)


def _procs_file(trial_dir: Path, since: int, procs: dict[int, int], host_pid: int = 2**22 + 1
                ) -> None:
    """A process file as a host that is gone wrote it (``proctree.DescendantWatch``)."""
    (trial_dir / PROCS_FILE).write_text(json.dumps(
        {"host_pid": host_pid, "since": since,
         "procs": [{"pid": p, "start_time": s} for p, s in procs.items()]}))


def test_a_recorded_pid_now_held_by_another_process_is_not_killed(tmp_path):
    other = _sleeper("s1/k")
    try:
        real = start_time(other.pid)
        assert real is not None
        reused = ReapTarget(key="k", pid=other.pid, pgid=other.pid, start_time=real - 1,
                            marker="s1/k")
        _procs_file(tmp_path, 0, {other.pid: real - 1}, host_pid=0)
        listed = ReapTarget(key="k", trial_dir=str(tmp_path))
        answer = reap_node([reused, listed], [], timeout_s=1.0)
        assert answer.reused == [other.pid] and answer.killed == []
        assert other.poll() is None  # alive: another start time means another process
        answer = reap_node([reused.model_copy(update={"start_time": real})], [], 5.0)
        assert answer.killed == [other.pid] and other.wait(timeout=10) is not None
    finally:
        if other.poll() is None:
            other.kill()


def test_the_reaper_stops_what_the_host_listed_once_the_host_is_gone(tmp_path):
    escapee = _sleeper()
    try:
        st = read_stat(escapee.pid)
        assert st is not None
        _procs_file(tmp_path, st.start_time, {escapee.pid: st.start_time})
        answer = reap_node([ReapTarget(key="k", trial_dir=str(tmp_path))], [], 5.0)
        assert answer.killed == [escapee.pid] and escapee.wait(timeout=10) is not None
    finally:
        if escapee.poll() is None:
            escapee.kill()


def test_the_reaper_kills_a_recorded_cgroup_and_removes_it(tmp_path):
    cg = EngineCgroup.create(f"s1-k-{os.getpid() % 0xFFFFFF:06x}")
    if cg is None:
        pytest.skip("this machine does not let this process create a cgroup")
    proc = None
    try:
        proc = subprocess.Popen(cg.wrap([sys.executable, "-c", "import time; time.sleep(600)"],
                                        os.environ.get("PATH")), start_new_session=True)
        deadline = time.monotonic() + 10
        while proc.pid not in cg.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = reap_node([ReapTarget(key="k", cgroup=str(cg.path), marker="s1/k")], [],
                           5.0)
        assert proc.pid in answer.killed and answer.cgroups_removed == [str(cg.path)]
        assert proc.wait(timeout=10) is not None and not cg.path.exists()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        cg.remove()
