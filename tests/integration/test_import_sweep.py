"""`servesweep import`: a sweep brought back from a GPU node lands under sweeps/, becomes
latest and is logged into MLflow (a real sqlite store); what is not a sweep, or another
sweep under the same id, is refused and leaves nothing behind."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.commands.cli import main
from orchestrator.results.ledger import Ledger
from tests.conftest import FIXTURES

SWEEP = FIXTURES / "h200-sweeps" / "h200-vllm-b-20261129-180103-ac67"
SWEEP_ID = SWEEP.name


def _tar(folder: Path, dest: Path, arcname: str | None = None) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder, arcname=arcname if arcname is not None else folder.name)
    return dest


def _partial(tmp_path: Path, trials: int) -> Path:
    """The sweep as a poll brings it back after ``trials`` final trials: the ledger up to
    that trial event, only those trials' folders."""
    dest = tmp_path / "partial" / SWEEP_ID
    dest.mkdir(parents=True)
    shutil.copy(SWEEP / "spec.yaml", dest)
    lines, seen = [], []
    for line in (SWEEP / "ledger.jsonl").read_text().splitlines(keepends=True):
        lines.append(line)
        if '"type": "trial"' in line:
            seen.append(line.split('"key": "')[1].split('"')[0])
            if len(seen) == trials:
                break
    (dest / "ledger.jsonl").write_text("".join(lines))
    for key in seen:
        shutil.copytree(SWEEP / "trials" / key, dest / "trials" / key)
    return _tar(dest, tmp_path / f"{SWEEP_ID}.partial.tar.gz")


def _runs(home: Path, sweep_id: str) -> list[Any]:
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps, filter_string=f"tags.`servesweep.sweep_id` = '{sweep_id}'")


def _trial_runs(home: Path, sweep_id: str) -> list[str]:
    return sorted(r.data.tags["servesweep.trial_key"] for r in _runs(home, sweep_id)
                  if r.data.tags.get("servesweep.kind") == "trial")


def _leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir() if p.name.startswith(".import"))


def test_a_tarball_is_imported_made_latest_and_logged_to_mlflow(state_home, tmp_path, capsys):
    assert not (state_home / "sweeps").exists()  # created by the import
    local = Ledger.create("name: x\n", "local", state_home)  # latest was another sweep
    assert Ledger.open("latest").sweep_id == local.sweep_id
    tarball = _tar(SWEEP, tmp_path / "sweep.tar.gz")
    assert main(["import", str(tarball)]) == 0
    out = capsys.readouterr().out
    assert f"imported sweep {SWEEP_ID}" in out and "2 trial(s) final (2 ok)" in out
    assert f"latest is now {SWEEP_ID}" in out and "synced sweep" in out
    assert Ledger.open("latest").sweep_id == SWEEP_ID
    assert (state_home / "sweeps" / SWEEP_ID / "ledger.jsonl").read_bytes() == \
        (SWEEP / "ledger.jsonl").read_bytes()
    keys = sorted(Ledger.open(SWEEP_ID).results())
    assert _trial_runs(state_home, SWEEP_ID) == keys
    parents = [r for r in _runs(state_home, SWEEP_ID)
               if r.data.tags.get("servesweep.kind") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert main(["report", "latest"]) == 0
    assert f"{SWEEP_ID}" in capsys.readouterr().out
    assert _leftovers(state_home) == []


def test_importing_again_changes_nothing_and_duplicates_no_run(state_home, tmp_path, capsys):
    tarball = _tar(SWEEP, tmp_path / "sweep.tgz")
    assert main(["import", str(tarball)]) == 0
    capsys.readouterr()
    assert main(["import", str(tarball)]) == 0
    out = capsys.readouterr().out
    assert "nothing unpacked" in out and "2 unchanged" in out
    assert len(_trial_runs(state_home, SWEEP_ID)) == 2


def test_a_partial_copy_then_the_whole_sweep_updates_it_and_mlflow_catches_up(
        state_home, tmp_path, capsys):
    assert main(["import", str(_partial(tmp_path, 1))]) == 0
    assert "1 trial(s) final" in capsys.readouterr().out
    assert len(_trial_runs(state_home, SWEEP_ID)) == 1
    report = state_home / "sweeps" / SWEEP_ID / "report"  # derived here, e.g. by `report`
    report.mkdir(exist_ok=True)
    (report / "local-only.txt").write_text("made here from the partial ledger\n")
    assert main(["import", str(SWEEP)]) == 0  # a folder works as well as a tarball
    out = capsys.readouterr().out
    assert f"updated sweep {SWEEP_ID}" in out and "1 -> 2 trial(s) final" in out
    assert "1 created, 0 repaired, 1 unchanged" in out
    assert len(_trial_runs(state_home, SWEEP_ID)) == 2
    # the partial copy brought back again later: the whole one stays
    assert main(["import", str(_partial(tmp_path / "again", 1))]) == 0
    assert "nothing unpacked" in capsys.readouterr().out
    assert len(Ledger.open(SWEEP_ID).results()) == 2


def test_a_different_sweep_under_the_same_id_is_refused_and_the_one_here_kept(
        state_home, tmp_path, capsys):
    assert main(["import", str(SWEEP), "--no-mlflow"]) == 0
    other = tmp_path / SWEEP_ID
    shutil.copytree(SWEEP, other)
    (other / "spec.yaml").write_text((SWEEP / "spec.yaml").read_text() + "# edited\n")
    capsys.readouterr()
    assert main(["import", str(_tar(other, tmp_path / "other.tar.gz"))]) == 2
    err = capsys.readouterr().err
    assert f"sweep {SWEEP_ID} is already in" in err and "spec.yaml differ" in err
    assert "mv " in err and "rm -r " in err  # the fix, both ways
    here = state_home / "sweeps" / SWEEP_ID / "spec.yaml"
    assert here.read_bytes() == (SWEEP / "spec.yaml").read_bytes()
    assert _leftovers(state_home) == []


def _tar_bytes(dest: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest


@pytest.mark.parametrize("members, says", [
    ({"notes/readme.txt": b"hello"}, "notes/ has no spec.yaml and no ledger.jsonl"),
    ({"spec.yaml": b"x", "ledger.jsonl": b""}, "its top holds ledger.jsonl, spec.yaml"),
    ({"a/spec.yaml": b"x", "b/spec.yaml": b"x"}, "its top holds a/, b/"),
    ({"../evil/spec.yaml": b"x"}, "a path outside its folder"),
])
def test_a_tarball_that_is_not_one_sweep_folder_is_refused(state_home, tmp_path, capsys,
                                                           members, says):
    tarball = _tar_bytes(tmp_path / "bad.tar.gz", members)
    assert main(["import", str(tarball)]) == 2
    err = capsys.readouterr().err
    assert says in err and "tar -C mlruns/sweeps -czf" in err  # the problem and the fix
    assert list((state_home / "sweeps").iterdir()) == []
    assert _leftovers(state_home) == [] and not (tmp_path / "evil").exists()


def test_a_sweep_whose_ledger_or_spec_cannot_be_read_is_refused(state_home, tmp_path, capsys):
    bad = tmp_path / SWEEP_ID
    shutil.copytree(SWEEP, bad)
    with open(bad / "ledger.jsonl", "a") as f:
        f.write('{"ts": 1, "type": "no-such-event"}\n')
    assert main(["import", str(_tar(bad, tmp_path / "bad.tar.gz"))]) == 2
    err = capsys.readouterr().err
    assert "cannot be read by this servesweep" in err and "ledger.jsonl" in err
    assert list((state_home / "sweeps").iterdir()) == []


def test_a_file_that_is_no_tarball_and_a_missing_path_are_refused(state_home, tmp_path,
                                                                   capsys):
    junk = tmp_path / "results.txt"
    junk.write_text("not a tarball\n")
    assert main(["import", str(junk)]) == 2
    assert "neither a folder nor a tarball" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "missing.tar.gz")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_a_tarball_with_a_link_is_refused(state_home, tmp_path, capsys):
    tarball = tmp_path / "link.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo(f"{SWEEP_ID}/spec.yaml")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    assert main(["import", str(tarball)]) == 2
    assert "a link or device" in capsys.readouterr().err
