"""Quality against a reference: which config it is, paired statistics, the gate.

- ``reference_trial``: the config every delta is paired against: the planned trial matching
  ``quality.reference`` (default: 16-bit weights, auto KV cache, the spec's model, on an
  engine that measures quality), the one with the most engine defaults among several
  (the plan's first of equals). A reference that matches nothing, or only infeasible
  trials, is the spec's error (exit 2 before anything starts).
- ``paired_drop``: the reference's score minus a config's, over the questions both
  answered, with a 95% paired-bootstrap interval (2,000 resamples, seeded: the same inputs
  give the same interval) and McNemar's exact two-sided p-value where every score is right
  or wrong (0, or one value: 1, or 100 in points).
- ``verdict``: a finished trial's ``QualityVerdict`` (``actors.contracts.quality``): the
  gate compares the drop's interval with ``quality.max_drop`` (wholly above: rejected;
  straddling: unproven; wholly at or below: passed). A config served from the
  reference's model path whose weights' fingerprint differs from the reference's (the
  folder was made again mid-sweep) is not paired: not measured, and the note says why.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from actors.contracts.config import TrialConfig
from actors.contracts.quality import (
    Gate,
    GateOn,
    QualityResult,
    QualitySpec,
    QualityStatus,
    QualityVerdict,
)
from actors.contracts.results import TrialResult
from actors.engines import adapter_names, get_adapter
from orchestrator.errors import SpecError
from orchestrator.planning.plan import PlannedTrial

__all__ = ["reference_trial", "PairedDrop", "paired_drop", "mcnemar_p", "verdict",
           "measures_quality"]

_RESAMPLES = 2000
_SIXTEEN_BIT = ("bf16", "fp16")


def measures_quality(cfg: TrialConfig) -> bool:
    """Whether a config's engine can be asked for accuracy (the sim cannot)."""
    return cfg.engine in adapter_names() and not get_adapter(cfg.engine).time_scaled


def _matches(cfg: TrialConfig, want: Mapping[str, object]) -> bool:
    return all(str(getattr(cfg, k)) == str(v) for k, v in want.items())


def _defaults(cfg: TrialConfig) -> int:
    """How many fields keep the engine's default (more: closer to a plain server)."""
    base = TrialConfig(engine=cfg.engine)
    return sum(getattr(cfg, f) == getattr(base, f) for f in TrialConfig.model_fields)


def reference_trial(q: QualitySpec, planned: list[PlannedTrial]) -> PlannedTrial:
    """The reference among ``planned``; ``SpecError`` when there is none to run."""
    real = [p for p in planned if measures_quality(p.config)]
    if q.reference:
        matching = [p for p in real if _matches(p.config, q.reference)]
        what = f"quality.reference {q.reference}"
    else:
        matching = [p for p in real if p.config.weights in _SIXTEEN_BIT
                    and p.config.kv_dtype == "auto" and p.config.model is None]
        what = "the default reference (16-bit weights, kv_dtype auto, the spec's model)"
    if not matching:
        raise SpecError(f"quality: {what} matches no config of the space that measures "
                        "quality (the sim has none): add it to the space, or set "
                        "quality.reference to one that is there")
    feasible = [p for p in matching if p.feasible]
    if not feasible:
        raise SpecError(f"quality: {what} is infeasible ({matching[0].reason}); every delta "
                        "is paired against it, so it must run: pick another reference")
    best = max(_defaults(p.config) for p in feasible)
    return next(p for p in feasible if _defaults(p.config) == best)


@dataclass(frozen=True)
class PairedDrop:
    n: int
    drop: float
    lo: float
    hi: float
    p_value: float | None


def mcnemar_p(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value from the discordant pairs ``b`` and ``c``."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@functools.lru_cache(maxsize=256)
def _bootstrap(diffs: tuple[float, ...]) -> tuple[float, float]:
    n = len(diffs)
    if len(set(diffs)) <= 1:
        return diffs[0], diffs[0]
    rng = random.Random(0)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(_RESAMPLES))
    return means[int(0.025 * _RESAMPLES)], means[int(0.975 * _RESAMPLES) - 1]


def paired_drop(ref: dict[int, float], cfg: dict[int, float]) -> PairedDrop | None:
    """Reference minus config over the questions both have; None when none are shared."""
    common = sorted(set(ref) & set(cfg))
    if not common:
        return None
    diffs = tuple(ref[i] - cfg[i] for i in common)
    lo, hi = _bootstrap(diffs)
    values = {ref[i] for i in common} | {cfg[i] for i in common}
    right = max(values)  # right/wrong scores: 0 and one value (1, or 100 in points)
    p = None
    if values <= {0.0, right}:
        b = sum(1 for i in common if ref[i] == right and cfg[i] == 0.0)
        c = sum(1 for i in common if ref[i] == 0.0 and cfg[i] == right)
        p = mcnemar_p(b, c)
    return PairedDrop(len(common), sum(diffs) / len(diffs), lo, hi, p)


def _scores(q: QualitySpec, res: QualityResult | None) -> tuple[dict[int, float], float, float]:
    """Per-question scores on the gate's scale (points or share), the score, its stderr."""
    assert res is not None
    if q.gate is GateOn.TASK:
        t = res.task
        if t is None:
            return {}, math.nan, math.nan
        per = {i: 100.0 * s for i, s in zip(t.doc_ids, t.per_question)}
        return per, 100.0 * t.score, 100.0 * t.stderr
    a = res.agreement
    if a is None:
        return {}, math.nan, math.nan
    same = a.identical if a.identical is not None else [True] * a.n
    per = {i: (1.0 if s else 0.0) for i, s in enumerate(same)}
    share = sum(per.values()) / max(len(per), 1)
    return per, share, math.sqrt(share * (1 - share) / max(len(per), 1))


def _weights_changed(result: TrialResult, reference: TrialResult) -> str:
    """Why the pairing is void ("" when it holds): the same model path (no per-entry model
    override, or the same one) measured with other weights than the reference's."""
    a = result.quality.model_fingerprint if result.quality else None
    b = reference.quality.model_fingerprint if reference.quality else None
    if a is None or b is None or a == b or result.config.model != reference.config.model:
        return ""
    return (f"not paired: the model's weights changed since the reference was measured "
            f"(fingerprint {a}, the reference's {b}): start a new sweep so both run on the "
            "same weights")


def verdict(q: QualitySpec, result: TrialResult, reference: TrialResult | None,
            reference_key: str) -> QualityVerdict:
    """``result``'s standing against the reference's result (``reference`` None: the
    reference has no result yet, or failed)."""
    unit = "points" if q.gate is GateOn.TASK else "share"
    base = QualityVerdict(gate=Gate.NOT_MEASURED, measure=q.gate, unit=unit,
                          reference_key=reference_key, max_drop=q.max_drop,
                          allow_unproven=q.allow_unproven)
    res = result.quality
    if res is None or res.status is not QualityStatus.MEASURED:
        why = ("not measured (sim)" if res is not None
               and res.status is QualityStatus.NOT_MEASURED_SIM
               else f"not measured: {res.message[:300]}" if res is not None
               else "not measured: the trial ended before its quality run")
        return base.model_copy(update={"note": why})
    per, score, se = _scores(q, res)
    if not per:
        return base.model_copy(update={"note": f"no {q.gate.value} score"})
    if result.key == reference_key:
        return base.model_copy(update={
            "gate": Gate.REFERENCE, "score": score, "stderr": se, "reference_score": score,
            "drop": 0.0, "n": len(per), "note": "the reference"})
    if reference is None or reference.quality is None \
            or reference.quality.status is not QualityStatus.MEASURED:
        return base.model_copy(update={
            "score": score, "stderr": se, "n": len(per),
            "note": "the reference's quality was not measured"})
    changed = _weights_changed(result, reference)
    if changed:
        return base.model_copy(update={"score": score, "stderr": se, "n": len(per),
                                       "note": changed})
    ref_per, ref_score, _ = _scores(q, reference.quality)
    d = paired_drop(ref_per, per)
    if d is None:
        return base.model_copy(update={
            "score": score, "stderr": se, "note": "no question in common with the reference"})
    if q.max_drop is None:
        gate = Gate.UNGATED
    elif d.lo > q.max_drop:
        gate = Gate.REJECTED
    elif d.hi <= q.max_drop:
        gate = Gate.PASSED
    else:
        gate = Gate.UNPROVEN
    sig = "significant" if (d.lo > 0 or d.hi < 0) else "not significant"
    return base.model_copy(update={
        "gate": gate, "score": score, "stderr": se, "reference_score": ref_score,
        "drop": d.drop, "drop_lo": d.lo, "drop_hi": d.hi, "p_value": d.p_value, "n": d.n,
        "note": sig})
