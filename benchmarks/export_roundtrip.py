"""The hardware round trip of ``servesweep export``: the exported command, measured again.

``servesweep export`` writes a winner's ``vllm-serve.sh`` with the benchmark-only settings
left out (host, port, the nonce alias, the workload's max model length, offline switches).
On a GPU node, ``deploy/h200/roundtrip.sh`` starts that script unchanged, as a user would,
and measures the running server with servesweep's ``external`` engine and the sweep's own
workload. This script compares the two, level by level:

- the sweep's trial (the exported winner: ``deployment.json``'s key) against the round trip's
  one ``external`` trial: output tok/s, TTFT p50 and p99, ITL p50 and their ratios;
- a level agrees when its throughput ratio is within the noise the sweep itself measured
  there (the larger of the workload's ``noise_band`` and either side's spread between
  rounds); latencies are shown, not judged (their spread is not measured per round);
- with ``--server-log``: the applied config the exported server stated in its own log
  (``vllm_log``: KV dtype, CUDA graphs or eager, max-num-seqs, version), beside the trial's.

    .venv/bin/python benchmarks/export_roundtrip.py \\
        --sweep benchmarks/measured/h200-runbook-20261201 \\
        --export benchmarks/measured/h200-export-roundtrip/export-c-128 \\
        --roundtrip benchmarks/measured/h200-export-roundtrip/sweep \\
        --server-log benchmarks/measured/h200-export-roundtrip/exported-server.log

Writes ``benchmarks/results/export_roundtrip.json``; exit 1 when a level disagrees.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.contracts.results import LevelResult, TrialResult  # noqa: E402
from actors.engines import get_adapter  # noqa: E402
from orchestrator.results.ledger import Ledger  # noqa: E402
from orchestrator.spec import load_spec  # noqa: E402

METRICS = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms")


def _levels(r: TrialResult) -> dict[int, LevelResult]:
    return {lv.concurrency: lv for lv in r.levels if lv.status == "valid" and lv.metrics}


def compare(sweep: Path, export: Path, roundtrip: Path) -> dict:
    spec, rt_spec = load_spec(sweep / "spec.yaml"), load_spec(roundtrip / "spec.yaml")
    if spec.workload.model_dump(exclude={"stall_timeout_s"}) != \
            rt_spec.workload.model_dump(exclude={"stall_timeout_s"}):
        raise SystemExit("the round trip's workload differs from the sweep's: not comparable")
    key = json.loads((export / "deployment.json").read_text())["regime"]["key"]
    original = Ledger(sweep).results()[key]
    (measured,) = [r for r in Ledger(roundtrip).results().values()
                   if r.config.engine == "external"]
    band = spec.workload.noise_band
    rows = []
    a, b = _levels(original), _levels(measured)
    for c in sorted(set(a) | set(b)):
        row: dict = {"concurrency": c}
        if c not in a or c not in b:
            row["verdict"] = "missing on one side"
            rows.append(row)
            continue
        ma, mb = a[c].metrics, b[c].metrics
        assert ma is not None and mb is not None
        for m in METRICS:
            va, vb = getattr(ma, m), getattr(mb, m)
            row[m] = {"sweep": va, "roundtrip": vb,
                      "ratio": None if not va or vb is None else vb / va}
        noise = max(band, ma.round_spread, mb.round_spread)
        ratio = row["output_tok_s"]["ratio"]
        row["noise"] = noise
        row["verdict"] = "agrees" if ratio is not None and abs(ratio - 1) <= noise else \
            "differs"
        rows.append(row)
    return {"sweep": spec.name, "trial": key, "label": original.config.label(),
            "roundtrip": measured.key, "levels": rows,
            "sweep_applied": original.applied.model_dump(mode="json") if original.applied
            else None}


def server_applied(log: Path) -> dict:
    """What the exported server's log says it ran with, read as the sweep reads its own."""
    vllm = get_adapter("vllm")
    events = [e for line in log.read_text(errors="replace").splitlines()
              for e in vllm.parse_log_line(line)]
    return vllm.applied(events).model_dump(mode="json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", type=Path, required=True, help="the sweep folder (ledger, spec)")
    ap.add_argument("--export", type=Path, required=True, help="the exported regime's folder")
    ap.add_argument("--roundtrip", type=Path, required=True,
                    help="the round trip's sweep folder (one external trial)")
    ap.add_argument("--server-log", type=Path, help="the exported server's own log")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                    "export_roundtrip.json")
    args = ap.parse_args(argv)
    out = compare(args.sweep, args.export, args.roundtrip)
    if args.server_log:
        out["server_applied"] = server_applied(args.server_log)
    print(f"{out['label']} (trial {out['trial']} of {out['sweep']}), exported and measured "
          f"again (trial {out['roundtrip']}):")
    print("| c | output tok/s: sweep -> round trip (ratio) | TTFT p50 ms | TTFT p99 ms "
          "| ITL p50 ms | noise | verdict |")
    print("|---|---|---|---|---|---|---|")
    for row in out["levels"]:
        if "output_tok_s" not in row:
            print(f"| {row['concurrency']} | - | - | - | - | - | {row['verdict']} |")
            continue
        cells = []
        for m in METRICS:
            v = row[m]
            ratio = f" ({v['ratio']:.3f})" if v["ratio"] is not None else ""
            cells.append(f"{v['sweep']:,.1f} -> {v['roundtrip']:,.1f}{ratio}")
        print(f"| {row['concurrency']} | " + " | ".join(cells) +
              f" | {row['noise']:.1%} | {row['verdict']} |")
    if "server_applied" in out:
        sa, sw = out["server_applied"], out["sweep_applied"] or {}
        print("applied config, from each server's own log (sweep -> exported server):")
        for k in sorted((set(sa) | set(sw)) - {"facts"}):
            if sa.get(k) is not None or sw.get(k) is not None:
                print(f"  {k}: {sw.get(k)} -> {sa.get(k)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0 if all(r["verdict"] == "agrees" for r in out["levels"]) else 1


if __name__ == "__main__":
    sys.exit(main())
