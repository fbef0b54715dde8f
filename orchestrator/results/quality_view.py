"""Quality beside speed, for people and tools: the text and page tables, JSON, MLflow.

Every figure comes from a trial's stored ``QualityVerdict`` (decided when it finished,
against the reference: ``planning.quality``): score with its standard error, the drop
against the reference with its 95% paired interval, McNemar's p where scores are 0/1,
and the gate. The sim's trials say "not measured (sim)".
"""

from __future__ import annotations

from typing import Any

from actors.contracts.quality import Gate, QualityStatus, QualityVerdict
from actors.contracts.results import TrialResult
from orchestrator.results.page_blocks import Section, Table
from orchestrator.spec import SweepSpec

__all__ = ["QUALITY_HEADERS", "quality_rows", "quality_cell", "quality_section",
           "quality_metrics", "quality_json", "gate_text"]

QUALITY_HEADERS = ["config", "score", "drop vs reference [95% CI]", "p", "n", "gate", "note"]


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    x = round(x, 1 if unit == "points" else 3) + 0.0  # no "-0.0"
    return f"{x:.1f}" if unit == "points" else f"{x:.1%}"


def gate_text(v: QualityVerdict) -> str:
    """The gate in words, with what it does to winning."""
    if v.gate is Gate.UNPROVEN or v.gate is Gate.NOT_MEASURED:
        return f"{v.gate.value} ({'may win' if not v.blocks else 'cannot win'})"
    return v.gate.value


def quality_cell(r: TrialResult) -> str:
    """A short accuracy cell: ``87.0 (-1.0 [-3.0, 1.0])``, ``ref 88.0``, ``not measured``."""
    v = r.quality_verdict
    if v is None:
        return "-"
    if v.gate is Gate.REFERENCE:
        return f"ref {_num(v.score, v.unit)}"
    if v.score is None:
        sim = r.quality is not None and r.quality.status is QualityStatus.NOT_MEASURED_SIM
        return "not measured (sim)" if sim else "not measured"
    if v.drop is None:
        return _num(v.score, v.unit)
    return (f"{_num(v.score, v.unit)} (drop {_num(v.drop, v.unit)} "
            f"[{_num(v.drop_lo, v.unit)}, {_num(v.drop_hi, v.unit)}])")


def quality_rows(results: list[TrialResult]) -> list[list[str]]:
    rows = []
    for r in results:
        v = r.quality_verdict
        if v is None:
            continue
        se = f" ± {_num(v.stderr, v.unit)}" if v.stderr is not None else ""
        drop = "-" if v.drop is None or v.gate is Gate.REFERENCE else (
            f"{_num(v.drop, v.unit)} [{_num(v.drop_lo, v.unit)}, {_num(v.drop_hi, v.unit)}]")
        rows.append([r.config.label(), f"{_num(v.score, v.unit)}{se}", drop,
                     "-" if v.p_value is None else f"{v.p_value:.3g}", str(v.n or "-"),
                     gate_text(v), v.note])
    return rows


def _what(spec: SweepSpec) -> str:
    q = spec.quality
    assert q is not None
    gate = (f"max_drop {q.max_drop:g} {'points' if q.gate.value == 'task' else '(share)'}"
            if q.max_drop is not None else "no gate (quality.max_drop unset)")
    task = q.task
    what = (f"task {task.name} ({task.metric}, {task.filter}) through lm-evaluation-harness"
            if task is not None else "agreement with the reference's greedy continuations")
    return (f"Quality: {what}; gate on {q.gate.value}, {gate}. Drops are the reference's "
            "score minus the config's over the same questions, with a 95% paired-bootstrap "
            "interval and McNemar's exact p; a drop whose interval lies wholly above "
            "max_drop is rejected, one whose interval straddles it is unproven"
            + (" (and may win: quality.allow_unproven)." if q.allow_unproven else
               " (and cannot win)."))


def quality_section(spec: SweepSpec, results: list[TrialResult]) -> Section | None:
    if spec.quality is None:
        return None
    s = Section("Quality beside speed", "quality").add(_what(spec))
    rows = quality_rows(results)
    s.add(Table(QUALITY_HEADERS, rows) if rows else "No trial has a quality result yet.")
    return s


def quality_metrics(r: TrialResult) -> dict[str, float]:
    """A trial's MLflow metrics (``quality.*``)."""
    v = r.quality_verdict
    if v is None:
        return {}
    out = {f"quality.{k}": float(x) for k, x in (
        ("score", v.score), ("stderr", v.stderr), ("drop", v.drop), ("drop_lo", v.drop_lo),
        ("drop_hi", v.drop_hi), ("p_value", v.p_value)) if x is not None}
    if v.n:
        out["quality.n"] = float(v.n)
    a = r.quality.agreement if r.quality is not None else None
    if a is not None and a.identical_share is not None:
        out["quality.identical_share"] = a.identical_share
        out["quality.first_divergence"] = float(a.mean_first_divergence or 0.0)
        if a.logprob_mad is not None:
            out["quality.logprob_mad"] = a.logprob_mad
    if r.quality is not None and r.quality.task is not None:
        out["quality.wall_s"] = r.quality.task.wall_s
    return out


def quality_json(r: TrialResult) -> dict[str, Any] | None:
    """``report --json``'s quality of a trial (per-question lists left out)."""
    v = r.quality_verdict
    if v is None:
        return None
    doc: dict[str, Any] = v.model_dump(mode="json")
    doc["significant"], doc["blocks_winning"] = v.significant, v.blocks
    if r.quality is not None:
        doc["status"], doc["message"] = r.quality.status.value, r.quality.message
        if r.quality.task is not None:
            doc["task_wall_s"] = r.quality.task.wall_s
        a = r.quality.agreement
        if a is not None:
            doc["agreement"] = {"identical_share": a.identical_share,
                                "mean_first_divergence": a.mean_first_divergence,
                                "logprob_mad": a.logprob_mad, "n": a.n}
    return doc
