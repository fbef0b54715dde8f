"""``sim.model_profile``: a spec's short profile of its model, read when the spec loads.

The profile's fitted factors join ``sim.profiles`` under the profile they were fitted for
(a factor the spec sets itself wins), so every consumer of ``sim.profiles`` (the sim,
``plan --predict``, ``guided``, ``seed_from_model``, ``calibrate``'s start) uses them with
no change. A profile of another model shape is refused, naming both shapes; the file a
sweep keeps (``SWEEP_COPY``) stands in when the spec is read from its sweep folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.contracts.model_profile import ModelProfile, read_model_profile, shape_key
from actors.contracts.shapes import load_shape
from orchestrator.errors import SpecError

__all__ = ["SPENT_FILE", "SWEEP_COPY", "apply_model_profile", "profile_path",
           "profile_spent_s"]

#: the copy of the spec's model profile a sweep folder keeps (resume reads it)
SWEEP_COPY = "model-profile.json"
#: in a sweep folder: the GPU seconds the sweep spent making its profile first
SPENT_FILE = "model-profile-spent.txt"


def profile_spent_s(base_dir: Path | None) -> float:
    """The seconds a sweep (its folder: ``base_dir``) spent profiling its model first."""
    path = base_dir / SPENT_FILE if base_dir is not None else None
    try:
        return float(path.read_text()) if path is not None and path.is_file() else 0.0
    except (OSError, ValueError):
        return 0.0


def profile_path(name: str, base_dir: Path | None) -> Path:
    """Where ``sim.model_profile: name`` points: relative to the spec's folder, else the
    sweep's own copy when the spec is a sweep's ``spec.yaml``."""
    path = Path(name).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file() and base_dir is not None and (base_dir / SWEEP_COPY).is_file():
        return base_dir / SWEEP_COPY
    return path


def apply_model_profile(data: dict[str, Any], base_dir: Path | None,
                        source: str) -> tuple[dict[str, Any], ModelProfile | None]:
    """``data`` with the named profile's factors in ``sim.profiles``, and the profile."""
    sim = data.get("sim")
    name = sim.get("model_profile") if isinstance(sim, dict) else None
    if (not isinstance(name, str) or not name) and base_dir is not None \
            and (base_dir / SWEEP_COPY).is_file():
        # a sweep's own spec.yaml: the profile the sweep started with (``profile_first``)
        sim, name = dict(sim if isinstance(sim, dict) else {}), SWEEP_COPY
    if not isinstance(name, str) or not name:
        return data, None
    assert isinstance(sim, dict)
    try:
        profile = read_model_profile(profile_path(name, base_dir))
    except ValueError as err:
        raise SpecError(f"{source}: sim.model_profile: {err}") from None
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    assert isinstance(model, dict)
    try:
        shape = load_shape(model.get("preset"), model.get("path"))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        shape = None  # not on this machine: the profile is taken at its word
    if shape is not None and shape_key(shape) != profile.shape:
        raise SpecError(f"{source}: sim.model_profile: {name} profiles a model of shape "
                        f"{profile.shape}, this spec's model is {shape_key(shape)}: profile "
                        "this model (`servesweep profile-model SPEC`) or drop the field")
    profiles = dict(sim.get("profiles") or {})
    own = profiles.get(profile.profile)
    profiles[profile.profile] = {**profile.factors, **(own if isinstance(own, dict) else {})}
    return {**data, "sim": {**sim, "profiles": profiles}}, profile
