"""The real measurements the cross-validation scores the sim on, found by walking folders.

Two kinds of data count, both from real engines on real GPUs (never the sim):

- **sweeps**: any folder under the roots with a ``ledger.jsonl`` and a ``spec.yaml`` (what
  ``servesweep run`` writes, e.g. the H200 runbook's (``deploy/h200/``) output copied under
  ``benchmarks/results/``). Every valid level of a trial of a real engine (vLLM or
  TensorRT-LLM) is a point; a level's figures are the median over its rounds. Sweeps with an
  open-loop request rate are skipped (the benchmark predicts closed loops).
- **agreement runs**: ``loadgen_agreement*.json`` in a folder that also holds the real vLLM
  server's log (``vllm-server.log*``): one closed-loop level of vLLM 0.26 with its defaults
  (CUDA graphs, BF16, ``--max-num-seqs 256``) measured by four clients in turn; the point's
  figures are the median over those four runs. They add prompt lengths (128, 4096) the sweeps
  lack. Open-loop runs (``--rate``) are skipped.

The model's shape: the sweep's own ``model-config/config.json`` (or ``config.json``) when it
ships one, else the spec's model (a preset or a local directory), else, for the H200 runbook's
``/tmp/model``, ``deploy/h200/model-8b`` (what ``make_random_model.py`` builds by default).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from actors.contracts.config import TrialConfig
from actors.contracts.results import LevelMetrics, LevelResult, TrialResult
from actors.contracts.shapes import ModelShape, load_shape
from actors.contracts.states import TrialStatus
from actors.engines.vllm import OUTPUT_CHUNK_ENV
from orchestrator.planning.feasibility import family_of
from orchestrator.planning.plan import spec_shape
from orchestrator.results.calibrate import Point, collect_points
from orchestrator.results.ledger import Ledger
from orchestrator.spec import SweepSpec, load_spec, parse_spec

__all__ = ["ROOT", "DEFAULT_ROOTS", "Dataset", "discover", "point_label", "config_group",
           "sweep_shape"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOTS = (ROOT / "tests" / "fixtures" / "h200-sweeps", ROOT / "benchmarks" / "results",
                 ROOT / "benchmarks" / "measured")
RUNBOOK_MODEL = ROOT / "deploy" / "h200" / "model-8b"
REAL_ENGINES = ("vllm", "trtllm")


@dataclass
class Dataset:
    points: list[Point]
    sources: dict[int, str]  # id(point) -> the folder/file it came from, relative to ROOT
    skipped: list[str]  # what was found and left out, with why


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


#: smaller models are left out: their steps are host time alone (the quality sweeps' 9.6 M
#: arithmetic model ran at 2-4 ms a token whatever its precision), which the model's GEMM
#: and memory terms do not describe, and pooled into a fit they drag every factor
MIN_PARAMS = 100_000_000


def sweep_shape(folder: Path, spec: SweepSpec) -> ModelShape | None:
    for cand in (folder / "model-config", folder):
        if (cand / "config.json").is_file():
            return load_shape(path=str(cand))
    shape = spec_shape(spec)
    if shape is None and spec.model.path == "/tmp/model":
        shape = load_shape(path=str(RUNBOOK_MODEL))
    return shape


def _with_output_chunk(r: TrialResult, chunk: int) -> TrialResult:
    """A trial whose space entry set vLLM's output chunk through ``launch.env`` (the sweeps
    of 2026-12-07 15:53 and 15:57, before the ``output_proc_chunk`` extra existed), as the
    extra it now is: the performance model reads extras, not a launch's environment."""
    cfg = r.config.model_copy(update={"extras": {**r.config.extras,
                                                 "output_proc_chunk": chunk}})
    return r.model_copy(update={"config": cfg})


def _load_sweep(folder: Path, data: Dataset) -> None:
    try:
        spec = load_spec(folder / "spec.yaml")
    except Exception as err:  # a spec this servesweep cannot read: say so, go on
        data.skipped.append(f"{_rel(folder)}: spec unreadable ({type(err).__name__})")
        return
    if spec.workload.request_rate is not None:
        data.skipped.append(f"{_rel(folder)}: open loop (request_rate), not predicted")
        return
    results = [r for r in Ledger(folder).results().values() if r.config.engine in REAL_ENGINES]
    if not results:
        data.skipped.append(f"{_rel(folder)}: no trial of a real engine")
        return
    chunks = {e.launch.env.get(OUTPUT_CHUNK_ENV) for e in spec.space}
    if chunks != {None}:
        if len(chunks) > 1:
            data.skipped.append(f"{_rel(folder)}: {OUTPUT_CHUNK_ENV} set on some space "
                                "entries only")
            return
        results = [_with_output_chunk(r, int(chunks.pop() or 0)) for r in results]
    shape = sweep_shape(folder, spec)
    if shape is None:
        data.skipped.append(f"{_rel(folder)}: model shape unknown (add model-config/)")
        return
    if shape.params() < MIN_PARAMS:
        data.skipped.append(f"{_rel(folder)}: a {shape.params() / 1e6:.1f} M-parameter model, "
                            "host-bound whatever the config: outside what the performance "
                            "model models")
        return
    for pts in collect_points(results, spec).values():
        for p in pts:
            q = Point(p.trial, p.concurrency, p.measured, spec, shape)
            data.points.append(q)
            data.sources[id(q)] = _rel(folder)


def _agreement_point(path: Path) -> Point | str:
    d = json.loads(path.read_text())
    a = d.get("args", {})
    if a.get("rate") is not None:
        return "open loop (--rate), not predicted"
    rows = [r for r in d.get("rows", []) if r.get("tok_s") and r.get("ttft")]
    if not rows:
        return "no rows"
    med = {"output_tok_s": statistics.median(r["tok_s"] for r in rows),
           "ttft_p50_ms": statistics.median(r["ttft"] for r in rows),
           "tpot_p50_ms": statistics.median(r["tpot"] for r in rows if r.get("tpot"))}
    prompt, out, c = int(a["prompt_tokens"]), int(a["output_tokens"]), int(a["streams"])
    max_len = 2048 if prompt + out <= 2048 else 8192  # deploy/h200/agreement.sh's MAX_MODEL_LEN
    spec = parse_spec({
        "name": "agreement", "model": {"path": "/tmp/model"}, "hardware": "h200",
        "workload": {"prompt_tokens": prompt, "output_tokens": out, "concurrency": [c],
                     "requests_per_round": int(a.get("requests") or 2 * c)},
        "space": [{"engine": "vllm"}]})
    cfg = TrialConfig(engine="vllm", max_num_seqs=256, max_model_len=max_len)
    level = LevelResult(concurrency=c, status="valid", metrics=LevelMetrics(
        output_tok_s=med["output_tok_s"], total_tok_s=med["output_tok_s"] * (prompt + out) / out,
        requests_s=med["output_tok_s"] / out, ttft_p50_ms=med["ttft_p50_ms"],
        tpot_p50_ms=med["tpot_p50_ms"]))
    trial = TrialResult(key=cfg.key(), config=cfg, status=TrialStatus.OK, levels=[level])
    return Point(trial, c, med, spec, load_shape(path=str(RUNBOOK_MODEL)))


def _load_agreement(path: Path, data: Dataset) -> None:
    if not any(path.parent.glob("vllm-server.log*")):
        data.skipped.append(f"{_rel(path)}: no real server's log beside it (a sim run)")
        return
    got = _agreement_point(path)
    if isinstance(got, str):
        data.skipped.append(f"{_rel(path)}: {got}")
        return
    data.points.append(got)
    data.sources[id(got)] = _rel(path)


def discover(roots: tuple[Path, ...] | list[Path] = DEFAULT_ROOTS) -> Dataset:
    """Every real measured point under ``roots`` (sweeps and agreement runs), in path order."""
    data = Dataset([], {}, [])
    seen: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            continue
        for ledger in sorted(root.rglob("ledger.jsonl")):
            folder = ledger.parent.resolve()
            if folder not in seen and (folder / "spec.yaml").is_file():
                seen.add(folder)
                _load_sweep(folder, data)
        for path in sorted(root.rglob("loadgen_agreement*.json")):
            if path.resolve() not in seen:
                seen.add(path.resolve())
                _load_agreement(path, data)
    data.points = [p for p in data.points if family_of(p.trial.config) is not None]
    return data


#: Sweeps measured on one machine before the boot id was recorded (`host.boot_id`): a
#: deploy/h200 session holds one node (at most 30 minutes) and these ran back to back in one.
#: A host-bound model's speed is the node's (benchmarks/measured/h200-1b-same-node-20261204)
SAME_NODE = {
    "h200-vllm-h-20261203-075439-cfab": "node of 2026-12-03 07:54",
    "h200-vllm-i-20261203-080025-706d": "node of 2026-12-03 07:54",
    "h200-vllm-j-20261203-080832-9b6f": "node of 2026-12-03 07:54",
    "h200-vllm-m-20261204-050524-805e": "node of 2026-12-04 05:05",
    "h200-vllm-h-profile-20261204-051102-034b": "node of 2026-12-04 05:05",
    "h200-vllm-i-profile-20261204-051728-13a1": "node of 2026-12-04 05:05",
}


def parse_factors(text: str) -> dict[str, float]:
    """``K=V,...`` (a command's ``--set``) as profile factors."""
    return {k: float(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}


def node_of(p: Point, source: str) -> str:
    """The machine a point was measured on: its boot id where recorded, else SAME_NODE's
    name for its sweep, else its sweep (a sweep runs on one node)."""
    boot = p.trial.host.get("boot_id")
    if boot:
        return f"boot {boot[:8]}"
    name = Path(source).name
    return SAME_NODE.get(name, name)


def config_group(p: Point) -> str:
    """A configuration's identity across sweeps: the engine settings, not the launch or the
    model length (the same settings measured twice are one configuration)."""
    c = p.trial.config
    return c.model_copy(update={"max_model_len": None}).label()


def point_label(p: Point) -> str:
    c = p.trial.config
    w = p.spec.workload if p.spec else None
    parts = [f"tp{c.tp}", c.weights, f"kv={c.kv_dtype}", "graphs" if c.cuda_graphs else "eager"]
    if c.max_num_seqs not in (None, 256):
        parts.append(f"seqs={c.max_num_seqs}")
    if c.gpu_memory_fraction != 0.9:
        parts.append(f"mem={c.gpu_memory_fraction}")
    if "output_proc_chunk" in c.extras:
        parts.append(f"chunk={c.extras['output_proc_chunk']}")
    if w is not None:
        parts.append(f"{w.prompt_tokens}/{w.output_tokens}")
    return " ".join(parts) + f" c={p.concurrency}"
