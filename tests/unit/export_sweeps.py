"""Sweeps to export in tests: the committed H200 sweeps (real vLLM) copied into a state
root, and sweeps rebuilt from their real numbers under another engine (TensorRT-LLM, the
sim with either profile, an external endpoint) to exercise every adapter's export."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import yaml

from actors.contracts.results import TrialResult
from orchestrator.commands import export as export_cmd
from orchestrator.results.ledger import Ledger
from tests.conftest import FIXTURES

H200 = FIXTURES / "h200-sweeps"
H200_TP = "h200x2-vllm-tp"


def copy_h200(home: Path) -> None:
    for d in H200.iterdir():
        if d.is_dir():
            shutil.copytree(d, home / "sweeps" / d.name)


def run_export(*argv: str) -> int:
    """``servesweep export ...`` through the command module's own parser."""
    ap = argparse.ArgumentParser(prog="servesweep")
    export_cmd.add_parser(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(["export", *argv])
    return int(args.func(args))


def rebuilt_sweep(home: Path, name: str, space: list[dict], model: dict,
                  regimes: dict[str, list[int]] | None = None) -> Ledger:
    """A sweep whose trials are the TP sweep's real results under ``space[0]``'s engine
    (and profile): same numbers, another engine's config."""
    src = Ledger(next(H200.glob(f"{H200_TP}-*")))
    spec = yaml.safe_load((src.dir / "spec.yaml").read_text())
    spec.update(name=name, model=model, space=space)
    if regimes:
        spec["search"] = {"kind": "grid", "regimes": regimes}
    ledger = Ledger.create(yaml.safe_dump(spec), name, root=home)
    entry = space[0]
    for r in src.results().values():
        cfg = r.config.model_copy(update={"engine": entry["engine"],
                                          "profile": entry.get("profile"),
                                          "extras": dict(entry.get("extras", {}))})
        host = dict(r.host)
        host.pop("argv", None)  # another engine's command: not recorded for the rebuild
        ledger.record_result(TrialResult.model_validate(
            {**r.model_dump(), "key": cfg.key(), "config": cfg.model_dump(), "host": host}))
    return ledger
