"""How far the performance model is off, for the model at hand, from committed data.

``model_error(shape)`` reads cross-validation results (``benchmarks/crossval.py`` writes
each point's model shape beside its errors): the user's own runs
(``benchmarks/results/crossval*.json``, git-ignored) first, else the ones committed under
``benchmarks/measured/crossval-*/`` (so a clean clone gets the same figure). For a model
whose shape has measured points, the error is the mean |error| of output tok/s when those
points were held out of the fit (leave one configuration out); for a shape with none
("not profiled for this model"), it is the leave-one-model-out error (each shape predicted
by a fit on the others; before that fold existed, the default profile's error on the shapes
it was not fitted on), not the figure of the shape it was fitted on. A model with a short
profile (``sim.model_profile``) gets the larger of the profile's own fit error and the
cross-validated error after such a profile (the ``profiled`` fold), widened by
``MISMATCH_WIDENING`` when the profile was measured on another GPU. Without any such file:
``DEFAULT_MODEL_ERROR`` and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.contracts.model_profile import MISMATCH_WIDENING, ModelProfile, shape_key
from actors.contracts.shapes import ModelShape, load_shape

__all__ = ["DEFAULT_MODEL_ERROR", "ModelError", "model_error", "shape_key", "FITTED_SHAPE"]

#: the error assumed with no cross-validation data at all
DEFAULT_MODEL_ERROR = 0.10
#: the shape the default profiles were fitted on (the H200 runbook's 8B model)
FITTED_SHAPE = "llama-3.1-8b"
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ModelError:
    value: float  # relative error of output tok/s
    source: str  # where the figure comes from, in words
    profiled: bool  # measured points of this model's shape back it
    points: int = 0

    def band(self) -> str:
        return f"±{100 * self.value:.0f}%"


def _files(results_dir: Path | None, measured_dir: Path | None) -> list[Path]:
    own = results_dir or _ROOT / "benchmarks" / "results"
    committed = measured_dir or _ROOT / "benchmarks" / "measured"
    mine = sorted(own.glob("crossval*.json"), key=lambda p: p.stat().st_mtime,
                  reverse=True) if own.is_dir() else []
    ours = sorted(committed.glob("crossval-*/*.json"), reverse=True) \
        if committed.is_dir() else []
    return mine + ours


def _rows(path: Path) -> list[dict[str, Any]] | None:
    try:
        rows = json.loads(path.read_text()).get("rows")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(rows, list) or not rows or not all(
            isinstance(r, dict) and "shape" in r for r in rows):
        return None  # written before shapes were recorded: cannot tell models apart
    return rows


def _mean(rows: list[dict[str, Any]], col: str) -> float | None:
    errs = [abs(e) for r in rows
            if isinstance(e := (r.get(f"err_{col}") or {}).get("output_tok_s"), int | float)]
    return sum(errs) / len(errs) if errs else None


def model_error(shape: ModelShape | None, results_dir: Path | None = None,
                measured_dir: Path | None = None, profile: ModelProfile | None = None,
                gpu: str | None = None) -> ModelError:
    """The model's error for ``shape`` (see the module doc); ``profile``: the spec's short
    profile of it, ``gpu``: the hardware the prediction is for."""
    if profile is not None and (shape is None or shape_key(shape) == profile.shape):
        return _profiled(profile, gpu, _files(results_dir, measured_dir))
    fitted = shape_key(load_shape(FITTED_SHAPE, None))
    for path in _files(results_dir, measured_dir):
        rows = _rows(path)
        if rows is None:
            continue
        where = path.relative_to(_ROOT) if path.is_relative_to(_ROOT) else path
        mine = [r for r in rows if shape is not None and r["shape"] == shape_key(shape)]
        err = _mean(mine, "loco") or _mean(mine, "default")
        if mine and err is not None:
            return ModelError(err, f"cross-validated on {len(mine)} measured points of this "
                              f"model's shape ({where})", True, len(mine))
        err = _mean(rows, "lomo")
        if err is not None:
            return ModelError(err, "not profiled for this model: the model's error on each "
                              "measured shape when that shape was left out of the fit "
                              f"({len(rows)} points, {where})", False, len(rows))
        unseen = [r for r in rows if r["shape"] != fitted]
        err = _mean(unseen, "default")
        if err is not None:
            return ModelError(err, "not profiled for this model: the default profile's error "
                              f"on {len(unseen)} points of model shapes it was not fitted on "
                              f"({where})", False, len(unseen))
    return ModelError(DEFAULT_MODEL_ERROR, "default (no cross-validation data found)", False)


def _profiled(profile: ModelProfile, gpu: str | None, files: list[Path]) -> ModelError:
    # a profile is made on one node: the error after a profile on the point's own node where
    # the file has it, else after a profile pooled over nodes
    held = next((e for p in files if (rows := _rows(p)) is not None
                 and (e := _mean(rows, "onnode") or _mean(rows, "profiled")) is not None),
                None)
    value = max(profile.error_after, held or 0.0) or DEFAULT_MODEL_ERROR
    source = (f"profiled ({profile.sweep_id}: {profile.points} levels, fit error "
              f"{100 * profile.error_after:.0f}%"
              + (f"; {100 * held:.0f}% cross-validated after such a profile" if held else "")
              + ")")
    notes = profile.mismatch(None, gpu) if gpu else []
    if notes:
        value *= MISMATCH_WIDENING
        source += f"; band x{MISMATCH_WIDENING}: " + ", ".join(notes)
    return ModelError(value, source, True, profile.points)
