"""deploy/h200/stacks.py folds py-spy's raw stacks into where each thread spends its
samples (issue 30: the c=256 cliff's profile comes back from the node as that summary)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("stacks", ROOT / "deploy" / "h200" / "stacks.py")
assert _spec is not None and _spec.loader is not None
stacks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stacks)

#: what py-spy 0.4.3 wrote (``record --format raw --idle --threads``) for a process whose
#: main thread spun in ``busy`` while a second thread slept (2026-12-04, this machine)
RAW = "".join(line + "\n" for line in (
    "thread (11064): Thread-1 (idle);Thread._bootstrap (threading.py:1002);"
    "Thread._bootstrap_inner (threading.py:1045);Thread.run (threading.py:982);"
    "idle (<string>:4) 399",
    "thread (11022): MainThread;<module> (<string>:9);busy (<string>:7) 300",
    "thread (11022): MainThread;<module> (<string>:9);step (engine.py:12);sync (cuda.py:3) 100"))


def test_fold_counts_each_threads_self_and_inclusive_samples(tmp_path):
    raw = tmp_path / "api1-r256-0-core.txt"
    raw.write_text(RAW)
    threads = stacks.fold(raw)
    total, own, incl = threads["thread (11022): MainThread"]
    assert total == 400 and own["busy (<string>)"] == 300 and own["sync (cuda.py)"] == 100
    assert incl["step (engine.py)"] == 100 and incl["<module> (<string>)"] == 400
    assert threads["thread (11064): Thread-1 (idle)"][0] == 399


def test_summary_names_the_load_and_each_threads_top_functions(tmp_path, capsys):
    (tmp_path / "api1-r256-0-core.txt").write_text(RAW)
    (tmp_path / "api1-r256-0-api.txt.err").write_text("Permission denied")
    (tmp_path / "api1-r256-0.json").write_text(json.dumps(
        {"running_before": 256, "running_after": 256.0, "seconds": 4, "at": "01:45:46",
         "server": "vllm serve /tmp/model-1b"}))
    stacks.summarise(tmp_path, top=3)
    out = capsys.readouterr().out
    assert "## api1-r256-0: running 256 -> 256.0, 4 s" in out
    assert "### core thread (11022): MainThread: 400 samples" in out
    assert "busy (<string>) 75.0%" in out and "sync (cuda.py) 25.0%" in out
    assert "### api: no stacks (Permission denied)" in out  # py-spy's own words come back
