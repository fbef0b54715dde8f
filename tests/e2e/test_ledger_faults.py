"""A real sim sweep's ledger damaged and its spec edited, as a user's weekend would: the
damage is reported by ``report`` and ``sync`` with the line and the trial it held, ``resume``
moves it aside and runs that trial again; an edited spec.yaml is refused (exit 2) by
``resume``, ``report`` and ``sync`` with the fields that changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.results.ledger import QUARANTINE, Ledger
from tests.conftest import minimal_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished sim sweep's state home, run once; each test damages a copy of it."""
    tmp = tmp_path_factory.mktemp("faults")
    home = tmp / "state"
    spec = minimal_spec(name="faults")
    spec["workload"] = {"prompt_tokens": 32, "output_tokens": 8, "concurrency": [1, 4],
                        "rounds": 1, "warmup_requests": 0}
    spec["space"] = [{"engine": "sim", "profile": "vllm", "max_num_seqs": [8, 16, 32]}]
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVESWEEP_HOME", str(home))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
    return home


@pytest.fixture
def sweep(finished, tmp_path, monkeypatch):
    home = tmp_path / "state"
    shutil.copytree(finished, home)
    monkeypatch.setenv("SERVESWEEP_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return Ledger.open("latest", root=home)


def test_a_damaged_record_is_reported_and_its_trial_runs_again(sweep, capsys):
    before = sweep.results()
    assert len(before) == 3
    lines = sweep.path.read_bytes().split(b"\n")
    n = next(i for i, x in enumerate(lines) if b'"type":"trial"' in x) + 1  # the first result
    row = bytearray(lines[n - 1])
    row[200:220] = b"#" * 20
    lines[n - 1] = bytes(row)
    sweep.path.write_bytes(b"\n".join(lines))
    capsys.readouterr()

    assert main(["report", sweep.sweep_id, "--no-mlflow"]) == 0
    out = capsys.readouterr()
    lost = next(k for k in before if k not in Ledger(sweep.dir).results())
    assert f"line {n}: its checksum does not match its text" in out.err
    assert f"trial {lost}" in out.err and "2 trials (2 ok)" in out.out

    assert main(["resume", sweep.sweep_id, "--quiet", "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    assert f"trial {lost}'s result was lost: it runs again" in out
    assert "2 trial(s) final, 1 to run" in out
    after = Ledger(sweep.dir)
    assert set(after.results()) == set(before) and after.events() and after.damage == []
    assert lost in (sweep.dir / QUARANTINE).read_text()


def test_an_edited_spec_is_refused_by_resume_report_and_sync(sweep, capsys):
    path = sweep.dir / "spec.yaml"
    data = yaml.safe_load(path.read_text())
    data["workload"]["concurrency"] = [1, 8]
    data["space"][0]["kv_dtype"] = ["auto", "fp8"]
    path.write_text(yaml.safe_dump(data))
    events = sweep.path.read_bytes()
    for cmd in (["resume", sweep.sweep_id, "--no-mlflow"], ["report", sweep.sweep_id,
                                                            "--no-mlflow"],
                ["sync", sweep.sweep_id]):
        capsys.readouterr()
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "workload.concurrency" in err and "space[0].kv_dtype (added)" in err, err
        assert f"servesweep run {path}" in err
    assert sweep.path.read_bytes() == events  # nothing ran, nothing was written


def test_the_next_run_leaves_alone_what_a_planted_started_line_names(sweep, tmp_path, capsys):
    """A ``started`` line appended to a finished sweep's ledger names a user's process (its
    real pid and start time) and a user's cgroup: the next ``servesweep run`` reaps that
    sweep (its driver is gone, a group is open) and signals neither, and says so."""
    import socket
    import subprocess
    import sys

    from actors.cgroups import EngineCgroup
    from actors.proctree import read_stat
    from orchestrator.results.events import Started

    user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True, env={})
    cg = EngineCgroup.create(f"probe-{user.pid % 0xFFFFFF:06x}")
    foreign = None
    if cg is not None:  # a user's cgroup beside where servesweep makes its own
        foreign = EngineCgroup(cg.path.with_name(f"user-{user.pid}"))
        foreign.path.mkdir()
        cg.remove()
    try:
        st = read_stat(user.pid)
        assert st is not None
        sweep.append(Started(key=next(iter(sweep.results())), pid=user.pid, pgid=user.pid,
                             start_time=st.start_time, marker=f"{sweep.sweep_id}/x",
                             host=socket.gethostname(), cgroup=None if foreign is None
                             else str(foreign.path)))
        spec = yaml.safe_load((sweep.dir / "spec.yaml").read_text())
        spec["name"] = "next"
        spec["space"][0]["max_num_seqs"] = [8]
        path = tmp_path / "next.yaml"
        path.write_text(yaml.safe_dump(spec))
        capsys.readouterr()
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
        out = capsys.readouterr().out
        assert user.poll() is None, "the user's process was signalled"
        assert f"left alone 1 process(es) or cgroup(s) the ledger of sweep {sweep.sweep_id}" \
            in out or f"left alone 2 process(es) or cgroup(s) the ledger of sweep " \
            f"{sweep.sweep_id}" in out, out
        assert f"pid {user.pid}: carries no marker" in out
        if foreign is not None:
            assert foreign.path.is_dir()
        reaped = [e for e in Ledger(sweep.dir).events() if e.type == "reaped"][-1]
        assert reaped.killed == {} and reaped.refused
    finally:
        user.kill()
        user.wait(timeout=10)
        if foreign is not None:
            foreign.remove()
