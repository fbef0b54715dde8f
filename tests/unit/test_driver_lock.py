"""One driver per sweep: the lock is held for a process's life and released by its death."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from orchestrator.results.lock import DriverLock, SweepBusy


def test_a_second_driver_is_refused_naming_the_first(tmp_path):
    first = DriverLock(tmp_path).acquire("run")
    with pytest.raises(SweepBusy, match=r"being run by `servesweep run` \(pid \d+ on "):
        DriverLock(tmp_path).acquire("resume")
    assert DriverLock(tmp_path).holder()["command"] == "run"
    first.release()
    assert DriverLock(tmp_path).holder() is None
    with DriverLock(tmp_path).acquire("resume"):
        assert DriverLock(tmp_path).holder()["command"] == "resume"


def test_the_lock_dies_with_its_process_however_it_ends(tmp_path):
    code = ("import sys, time; sys.path.insert(0, '.');"
            "from orchestrator.results.lock import DriverLock;"
            f"DriverLock(__import__('pathlib').Path({str(tmp_path)!r})).acquire();"
            "print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        holder = DriverLock(tmp_path).holder()
        assert holder and holder["pid"] == proc.pid
        with pytest.raises(SweepBusy):
            DriverLock(tmp_path).acquire()
        proc.kill()  # SIGKILL: no chance to clean up
        proc.wait(10)
        deadline = time.monotonic() + 5
        while DriverLock(tmp_path).holder() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert DriverLock(tmp_path).holder() is None
        DriverLock(tmp_path).acquire().release()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_children_of_the_driver_do_not_inherit_the_lock(tmp_path):
    lock = DriverLock(tmp_path).acquire()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lock.release()
        assert DriverLock(tmp_path).holder() is None  # the child does not hold it
    finally:
        child.kill()
        child.wait()
