"""A bad request file stops ``servesweep run`` and ``servesweep plan`` with exit 2 before
anything starts: the message names the file and the line (or the field), and neither a
sweep folder nor an MLflow store is created. The cases: a missing file, a line that is
not JSON, an empty file, a negative output length."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.commands.cli import main
from tests.conftest import ROOT, minimal_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

GOOD = {"input_length": 64, "output_length": 8}


def rows(*extra: dict | str) -> str:
    """A JSONL request file: a good row, then ``extra`` (a dict as JSON, a str as is)."""
    lines = [json.dumps(GOOD)] + [x if isinstance(x, str) else json.dumps(x) for x in extra]
    return "".join(line + "\n" for line in lines)


#: case -> (the request file's text, None: no file; what the message must also say)
CASES = {
    "missing": (None, ["does not exist", "workload.requests.path"]),
    "malformed_line": (rows(GOOD, '{"input_length": 64, "output_length": 8', GOOD),
                       ["line 3", "not JSON"]),
    "empty": ("", ["the request file is empty"]),
    "negative_output": (rows({"input_length": 64, "output_length": -3}),
                        ["line 2", "output_length", "-3"]),
}


def spec_with(folder: Path, text: str | None) -> Path:
    """A sim spec in ``folder`` whose workload reads ``requests.jsonl`` (written from
    ``text`` unless None)."""
    folder.mkdir()
    if text is not None:
        (folder / "requests.jsonl").write_text(text)
    spec = minimal_spec(name="bad-requests")
    spec["workload"] = {"requests": {"kind": "file", "path": "requests.jsonl"},
                        "concurrency": [2], "rounds": 1, "warmup_requests": 0}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("command", ["run", "plan"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_request_file_exits_2_naming_it_and_creates_nothing(
        command: str, case: str, tmp_path: Path, state_home: Path,
        capsys: pytest.CaptureFixture[str]):
    text, says = CASES[case]
    path = spec_with(tmp_path / "spec", text)
    before = sorted(p.name for p in path.parent.iterdir())
    capsys.readouterr()
    assert main([command, str(path)]) == 2
    out, err = capsys.readouterr()
    assert str(path.parent / "requests.jsonl") in err, err  # the file, by its path
    for words in says:
        assert words in err, err
    assert "Traceback" not in err and out == ""
    # nothing was made: no sweep folder, no MLflow store (both live in the state home),
    # nothing beside the spec
    assert list(state_home.iterdir()) == []
    assert sorted(p.name for p in path.parent.iterdir()) == before


def test_the_command_line_itself_exits_2_on_a_malformed_line(tmp_path: Path, state_home: Path):
    """The same through the installed entry point, as a user runs it: the process's exit
    status and its standard error."""
    text, says = CASES["malformed_line"]
    path = spec_with(tmp_path / "spec", text)
    proc = subprocess.run([sys.executable, "-m", "orchestrator.commands.cli", "run",
                           str(path)], cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2, proc.stderr
    assert str(path.parent / "requests.jsonl") in proc.stderr
    assert all(words in proc.stderr for words in says), proc.stderr
    assert list(state_home.iterdir()) == []
