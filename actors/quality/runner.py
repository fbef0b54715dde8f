"""``run_quality``: a trial's quality run, task and agreement, on its warm server."""

from __future__ import annotations

import time

from actors.contracts.quality import QualityRequest, QualityResult, QualityStatus
from actors.quality.agreement import measure_agreement
from actors.quality.fingerprint import model_fingerprint
from actors.quality.lmeval import LmEvalError, run_task

__all__ = ["run_quality"]


def run_quality(req: QualityRequest) -> QualityResult:
    """Measure what ``req`` asks; a failure is the result's status and message (the
    trial's speed stays measured, its quality unproven)."""
    t0 = time.monotonic()
    fingerprint = model_fingerprint(req.model_dir)
    task = agreement = None
    try:
        if req.task is not None:
            task = run_task(req, req.task)
        if req.agreement is not None:
            agreement = measure_agreement(req, req.agreement)
    except LmEvalError as err:
        return QualityResult(status=QualityStatus.FAILED, message=str(err)[-2000:],
                             agreement=agreement, wall_s=time.monotonic() - t0,
                             model_fingerprint=fingerprint)
    except (OSError, ValueError, KeyError, IndexError, RuntimeError) as err:
        return QualityResult(status=QualityStatus.FAILED, task=task,
                             message=f"agreement probe failed: {type(err).__name__}: {err}",
                             wall_s=time.monotonic() - t0, model_fingerprint=fingerprint)
    return QualityResult(status=QualityStatus.MEASURED, task=task, agreement=agreement,
                         wall_s=time.monotonic() - t0, model_fingerprint=fingerprint)
