"""``refit_profile``: a sim profile fitted to measured trials, for the guided search.

The guided searcher (``orchestrator.planning.search.guided``) recalibrates the performance model
after every measured trial; planning does not import results, so the controller hands it
this function. It is ``calibrate.calibrate`` over the newest measured levels of one profile
(a bounded number of points and evaluations keeps a refit to seconds), started from the
spec's current ``sim.profiles`` (the previous fit).
"""

from __future__ import annotations

from actors.contracts.results import TrialResult
from actors.contracts.shapes import ModelShape
from orchestrator.results.calibrate import calibrate, collect_points
from orchestrator.spec import SweepSpec

__all__ = ["refit_profile"]


def refit_profile(results: list[TrialResult], spec: SweepSpec, shape: ModelShape,
                  profile: str, max_evals: int = 24, max_points: int = 12,
                  ) -> dict[str, float] | None:
    """The profile's fitted fields, or None when no measured level calibrates it."""
    points = collect_points(results, spec).get(profile, [])[-max_points:]
    if not points:
        return None
    try:
        fit = calibrate(points, spec, shape, profile, max_evals=max_evals)
    except TypeError:  # a calibrate that chooses its own evaluation count
        fit = calibrate(points, spec, shape, profile)
    return {k: float(v) for k, v in fit.fitted.items()}
