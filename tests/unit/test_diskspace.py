"""A full disk told from a trial's own failure (``actors.contracts.diskspace``), through
Ray's wrappers, and said in one line (``orchestrator.results.diskfull``)."""

from __future__ import annotations

import errno
import os
import pickle

import pytest
from ray.exceptions import ActorDiedError, RayTaskError

from actors.contracts import diskspace
from orchestrator.results.diskfull import (
    DiskFull,
    command_failed,
    report_not_written,
    sweep_stopped,
)

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def task_error(cause: BaseException) -> RayTaskError:
    return RayTaskError("launch", "Traceback ...\nOSError: [Errno 28] No space left on device",
                        cause, proctitle="ray::EngineHost.launch()", pid=7, ip="10.0.0.2")


def as_raised(err: RayTaskError) -> BaseException:
    """What ``ray.get`` raises: the error, sent between processes pickled, made an instance
    of its cause's class on the driver."""
    return pickle.loads(pickle.dumps(err)).as_instanceof_cause()


@pytest.mark.parametrize("n", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_disk_errnos_are_found_plain_and_through_every_wrapper(n):
    err = OSError(n, os.strerror(n), "/state/x")
    assert diskspace.disk_error(err) is err
    found = diskspace.disk_error(as_raised(task_error(err)))
    assert found is not None and found.errno == n and found.filename == "/state/x"
    # an actor whose constructor raised: ActorDiedError(RayTaskError(OSError))
    died = pickle.loads(pickle.dumps(ActorDiedError(task_error(err))))
    found = diskspace.disk_error(died)
    assert found is not None and found.errno == n
    try:  # raised while handling it, or from it
        try:
            raise err
        except OSError as inner:
            raise RuntimeError("writing the result") from inner
    except RuntimeError as outer:
        assert diskspace.disk_error(outer) is err


@pytest.mark.parametrize("err", [
    OSError(errno.ENOENT, "No such file or directory", "/x"), PermissionError("denied"),
    ValueError("No space left on device"), None])
def test_other_errors_are_not_a_full_disk(err):
    assert diskspace.disk_error(err) is None
    if err is not None:
        assert diskspace.disk_error(as_raised(task_error(err))) is None


def test_a_cycle_of_causes_ends():
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert diskspace.disk_error(a) is None


def test_errnos_are_read_from_text():
    assert diskspace.disk_errno_in("OSError: [Errno 28] No space left on device") == 28
    assert diskspace.disk_errno_in("write failed: Disk quota exceeded") == errno.EDQUOT
    assert diskspace.disk_errno_in("[Errno 30] Read-only file system: '/m'") == errno.EROFS
    assert diskspace.disk_errno_in("server exited with code 1 during startup") is None
    assert diskspace.disk_errno_in("[Errno 2] No such file or directory") is None
    # a read-only path in a server's log may be a warning it survives: only when asked
    assert diskspace.disk_errno_in("Read-only file system", (errno.ENOSPC,)) is None


def test_a_failure_of_the_disk_is_told_by_its_text_or_the_room_left(tmp_path, monkeypatch):
    assert diskspace.failure_of_disk("server exited with code 1", "", tmp_path) is None
    got = diskspace.failure_of_disk("cannot start x: [Errno 28] No space left on device", "",
                                    tmp_path)
    assert got is not None and got.errno == errno.ENOSPC and got.filename == str(tmp_path)
    got = diskspace.failure_of_disk("server exited", "OSError: [Errno 122] Disk quota "
                                    "exceeded", tmp_path)
    assert got is not None and got.errno == errno.EDQUOT
    assert diskspace.failure_of_disk("server exited", "Read-only file system", tmp_path) \
        is None
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: 4096)  # its log not written
    got = diskspace.failure_of_disk("server exited with code 1", "", tmp_path)
    assert got is not None and got.errno == errno.ENOSPC
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: diskspace.LOW_SPACE_BYTES)
    assert diskspace.failure_of_disk("server exited with code 1", "", tmp_path) is None


def test_free_space_is_read_from_the_nearest_existing_folder(tmp_path):
    st = os.statvfs(tmp_path)
    free = diskspace.free_bytes(tmp_path / "not" / "yet")
    assert free is not None and abs(free - st.f_bavail * st.f_frsize) < (64 << 20)
    assert diskspace.describe(tmp_path).startswith(f"{tmp_path} (")
    assert diskspace.describe(tmp_path).endswith(" KiB free)")


def test_the_one_line_names_the_path_the_room_and_what_to_run(tmp_path):
    with pytest.raises(DiskFull) as got:
        sweep_stopped(as_raised(task_error(ENOSPC)), tmp_path, "s-1")
    line = str(got.value)
    assert "\n" not in line and got.value.exit_code == 1
    assert line.startswith(f"disk full: {tmp_path} (") and " KiB free): the sweep stopped; " \
        "free space, then `servesweep resume s-1`" in line
    named = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "ledger.jsonl"))
    with pytest.raises(DiskFull, match=r"^read-only file system: .*ledger\.jsonl \(.*make it "
                                       r"writable, then `servesweep resume s-1`$"):
        sweep_stopped(named, tmp_path, "s-1")
    with pytest.raises(DiskFull, match=r"the ledger is intact, the report was not written; "
                                       r"free space, then `servesweep report s-1`$"):
        report_not_written(ENOSPC, tmp_path / "report", "s-1")
    # anything else is left to the caller, which raises it on
    sweep_stopped(OSError(errno.ENOENT, "gone"), tmp_path, "s-1")
    report_not_written(ValueError("x"), tmp_path, "s-1")
    assert command_failed(KeyError("x")) is None
    full = command_failed(ENOSPC)
    assert full is not None and "the command stopped; free space, then run it again" in str(full)
