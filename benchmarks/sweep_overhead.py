#!/usr/bin/env python3
"""Where a small sim sweep's wall time goes: Ray's start and shutdown, the report, the trial.

    .venv/bin/python benchmarks/sweep_overhead.py [--state DIR]

Runs ``servesweep run`` of the test suite's one-trial sim spec (``tests.conftest.
minimal_spec``: 2 levels, sim at 10x) once without and once under cProfile, with
``--no-mlflow``, and prints the plain wall time and, from the profiled run, the cumulative
seconds of ``ray.init``, ``ray.shutdown`` and the report (``write_report``). The suite runs
about a hundred such sweeps, so this is where its fixed cost per sweep is.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.commands.cli import main as cli  # noqa: E402
from tests.conftest import minimal_spec  # noqa: E402

PARTS = {"ray.init": ("worker.py", "init"), "ray.shutdown": ("worker.py", "shutdown"),
         "report": ("report_folder.py", "write_report")}


def _cumulative(stats: pstats.Stats, file: str, func: str) -> float:
    raw = stats.stats  # type: ignore[attr-defined]
    return max((v[3] for (f, _, name), v in raw.items()
                if f.endswith(file) and name == func), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", type=Path, default=None, help="state home (default: a temp dir)")
    a = ap.parse_args()
    home = a.state or Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    os.environ["SERVESWEEP_HOME"] = str(home)
    spec = home / "spec.yaml"
    spec.write_text(yaml.safe_dump(minimal_spec(name="overhead")))
    argv = ["run", str(spec), "--no-mlflow", "--quiet"]
    t0 = time.monotonic()
    assert cli(argv) == 0
    plain = time.monotonic() - t0
    prof = cProfile.Profile()
    t0 = time.monotonic()
    assert prof.runcall(cli, argv) == 0
    profiled = time.monotonic() - t0
    stats = pstats.Stats(prof)
    print(f"one-trial sim sweep: {plain:.1f} s wall; under cProfile {profiled:.1f} s, of which")
    for name, (file, func) in PARTS.items():
        print(f"  {name:13s} {_cumulative(stats, file, func):5.1f} s")


if __name__ == "__main__":
    main()
