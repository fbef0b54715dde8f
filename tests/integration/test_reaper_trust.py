"""The reaper kills only what servesweep started: a ledger whose ``started`` lines (sealed,
as a stray or edited line would be) name foreign processes, groups, cgroups and trial
folders gets none of them signalled or removed, and says each one it left alone; the
same ledger's own engine, marked and in its own cgroup, is still stopped."""

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
from actors.contracts.settings import MARKER_ENV
from actors.proctree import PROCS_FILE, read_stat
from actors.reaper import reap_node
from orchestrator.execution.reaping import target_of
from orchestrator.results.events import Started
from orchestrator.results.ledger import Ledger

pytestmark = pytest.mark.integration

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def _spawn(env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(SLEEP, start_new_session=True, env=env, **kw)


def _in_cgroup(cg: EngineCgroup, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(cg.wrap(SLEEP, os.environ.get("PATH")), start_new_session=True,
                            env=env)
    deadline = time.monotonic() + 10
    while proc.pid not in cg.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _start(proc: subprocess.Popen) -> int:
    st = read_stat(proc.pid)
    assert st is not None
    return st.start_time


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    return Ledger.create("name: trust\n", "trust", root=tmp_path)


def test_foreign_pids_groups_cgroups_and_folders_in_a_ledger_are_left_alone(ledger, tmp_path):
    procs: list[subprocess.Popen] = []
    cgroups: list[EngineCgroup] = []
    try:
        plain = _spawn({})  # a user's process: no marker
        other = _spawn({MARKER_ENV: "another-sweep/k2"})  # another sweep's engine
        procs += [plain, other]
        tag = f"{os.getpid() % 0xFFFFFF:06x}"
        made = EngineCgroup.create(f"another-sweep-k2-{tag}")  # another trial's name
        if made is not None:
            cgroups.append(made)
            user = made.path.with_name(f"user-{tag}")  # a user's own, beside ours
            user.mkdir()
            cgroups.append(EngineCgroup(user))
        in_foreign = [_in_cgroup(cg, {}) for cg in cgroups]
        procs += in_foreign
        # an old process named in the trial folder's process file (before the watch began)
        trial = ledger.trial_dir("k1")
        trial.mkdir(parents=True, exist_ok=True)
        (trial / PROCS_FILE).write_text(json.dumps(
            {"host_pid": 2**22 + 1, "since": _start(plain) + 10_000,
             "procs": [{"pid": plain.pid, "start_time": _start(plain)}]}))
        # a key that walks out of trials/ to a process file of its own
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        (outside / PROCS_FILE).write_text(json.dumps(
            {"host_pid": 2**22 + 1, "since": 0,
             "procs": [{"pid": plain.pid, "start_time": _start(plain)}]}))

        ledger.append(Started(key="k1", pid=plain.pid, pgid=plain.pid,
                              start_time=_start(plain), marker=f"{ledger.sweep_id}/k1"))
        ledger.append(Started(key="k1", pid=other.pid, pgid=plain.pid,
                              start_time=_start(other), marker="another-sweep/k2"))
        for cg in cgroups:
            ledger.append(Started(key="k1", cgroup=str(cg.path)))
        ledger.append(Started(key="../../elsewhere", marker="x"))
        ledger.append(Started(key="k1", cgroup="/etc"))

        targets = [target_of(ledger, ev) for ev in ledger.open_groups()]
        answer = reap_node(targets, [ledger.sweep_id], timeout_s=1.0)

        assert answer.killed == [] and answer.cgroups_removed == [], answer
        for proc in procs:
            assert proc.poll() is None, f"pid {proc.pid} was signalled"
        for cg in cgroups:
            assert cg.path.is_dir()
        said = "\n".join(answer.refused)
        assert f"pid {plain.pid}: carries no marker" in said
        assert f"pid {other.pid}: its marker is 'another-sweep/k2'" in said
        assert f"pid {plain.pid}: started outside its host's watch" in said
        assert "key '../../elsewhere': not a trial key" in said
        for cg in cgroups:
            assert f"cgroup {cg.path}" in said
        assert Path("/etc").is_dir()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for cg in cgroups:
            cg.remove()


def test_the_sweeps_own_engine_and_cgroup_are_still_stopped(ledger):
    """The control: what the same checks accept is stopped, so the test above is not
    passing because the reaper stops nothing."""
    marker = f"{ledger.sweep_id}/k1"
    cg = EngineCgroup.create(f"{marker.replace('/', '-')}-{os.getpid() % 0xFFFFFF:06x}")
    leader = _spawn({MARKER_ENV: marker})
    member = _in_cgroup(cg, {}) if cg is not None else None
    try:
        ledger.append(Started(key="k1", pid=leader.pid, pgid=leader.pid,
                              start_time=_start(leader), marker=marker,
                              cgroup=None if cg is None else str(cg.path)))
        answer = reap_node([target_of(ledger, ev) for ev in ledger.open_groups()], [],
                           timeout_s=5.0)
        assert leader.pid in answer.killed and answer.refused == [], answer
        assert leader.wait(timeout=10) == -signal.SIGTERM
        if member is not None and cg is not None:
            assert member.pid in answer.killed and member.wait(timeout=10) is not None
            assert answer.cgroups_removed == [str(cg.path)] and not cg.path.exists()
    finally:
        for proc in (leader, member):
            if proc is not None and proc.poll() is None:
                proc.kill()
        if cg is not None:
            cg.remove()


def test_a_cgroup_whose_started_line_was_torn_is_found_by_name_and_removed(ledger):
    """Its ``started`` line never reached the ledger whole, so no target names it: the
    sweep's reaper finds it by its name, stops its members and removes it."""
    cg = EngineCgroup.create(f"{ledger.sweep_id}-k9-{os.getpid() % 0xFFFFFF:06x}")
    if cg is None:
        pytest.skip("this machine does not let this process create a cgroup")
    member = _in_cgroup(cg, {})
    try:
        untouched = reap_node([], ["another-sweep"], timeout_s=1.0)
        assert cg.path.is_dir() and member.poll() is None and untouched.killed == []
        answer = reap_node([], [ledger.sweep_id], timeout_s=5.0)
        assert member.pid in answer.killed and answer.cgroups_removed == [str(cg.path)]
        assert member.wait(timeout=10) is not None and not cg.path.exists()
    finally:
        if member.poll() is None:
            member.kill()
        cg.remove()
