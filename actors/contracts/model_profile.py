"""A short profile of the user's model: the performance model's factors fitted to it.

``servesweep profile-model SPEC`` measures a few levels of the user's model on its engine
and GPU and fits the sim profile's software factors (host time per step, GEMM efficiency
by precision, attention cost by KV dtype; never a physical constant) to them. The result is
one ``ModelProfile`` file, keyed by the model's shape, the engine and its version, and the
GPU; a spec names it as ``sim.model_profile`` and every prediction of that spec (``plan
--predict``, ``guided``, ``seed_from_model``) then uses its factors and its band.

Contract: a profile applies to the shape it was measured on and nothing else (a spec whose
model has another shape is refused); one measured on another engine version or GPU still
applies, with a band widened by ``MISMATCH_WIDENING`` and a note saying why.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, ValidationError

from actors.contracts.config import Frozen
from actors.contracts.shapes import ModelShape

__all__ = ["MISMATCH_WIDENING", "ModelProfile", "read_model_profile", "shape_key"]

#: the band's factor for a profile measured on another engine version or GPU
MISMATCH_WIDENING = 1.5


def shape_key(shape: ModelShape) -> str:
    """A model's architecture as a short key: two models of one key run alike. The
    vocabulary is left out (it sizes only the LM head: the runbook's random 8B model, with a
    32k vocabulary, stands for Llama-3.1-8B and its 128k one)."""
    moe = f"-e{shape.experts}x{shape.experts_per_token}" if shape.experts else ""
    return (f"l{shape.layers}-h{shape.hidden}-a{shape.heads}/{shape.kv_heads}"
            f"-d{shape.head_dim}-i{shape.intermediate}{moe}")


class ModelProfile(Frozen):
    """What a short profile measured and fitted (one file, JSON)."""

    format: int = 1
    shape: str  # shape_key of the model profiled
    model: str  # its path or preset, as the profiling spec named it
    engine: str  # the adapter (vllm, trtllm, sim)
    engine_version: str | None = None  # as the server reported it
    gpu: str  # the hardware catalog's name (h200, ...)
    gpu_model: str | None = None  # as the node reported it (NVIDIA H200)
    profile: str  # the sim profile fitted (vllm, trtllm)
    factors: dict[str, float]  # every fitted factor's value (sim.profiles form)
    varied: list[str] = Field(default_factory=list)  # the factors the points constrained
    points: int = Field(ge=1)  # measured levels fitted
    error_before: float = Field(ge=0)  # mean |error| of the shipped profile on them
    error_after: float = Field(ge=0)  # and of the fit (in sample)
    sweep_id: str  # the profiling sweep (its ledger holds every level)
    created: str  # UTC, ISO 8601
    gpu_seconds: float = Field(ge=0)  # the trials' wall time, what the profile cost

    def mismatch(self, engine_version: str | None, gpu: str) -> list[str]:
        """Why this profile is not an exact fit for a run on ``gpu`` with ``engine_version``
        (None: not known yet); empty when it is."""
        out = []
        if gpu != self.gpu:
            out.append(f"measured on {self.gpu}, not {gpu}")
        if engine_version and self.engine_version and engine_version != self.engine_version:
            out.append(f"measured with {self.engine} {self.engine_version}, not "
                       f"{engine_version}")
        return out


def read_model_profile(path: Path) -> ModelProfile:
    """The profile in ``path``; ``ValueError`` saying what is wrong with the file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such model profile (make one with `servesweep "
                         "profile-model SPEC`)") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a model profile ({err})") from None
    try:
        return ModelProfile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"{path}: not a model profile ({where}: {first['msg']})") from None
