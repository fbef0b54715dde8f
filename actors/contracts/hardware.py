"""Accelerator catalog: memory, bandwidth, compute and interconnect per GPU kind.

The catalog ships as ``hardware.yaml`` next to this module; a user file named by
``SERVESWEEP_HARDWARE_FILE`` adds or overrides entries (same shape).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from actors.contracts.settings import settings

__all__ = ["Hardware", "get_hardware", "hardware_names", "BYTES"]

GIB = 1024**3

#: Bytes per element of each precision servesweep knows.
BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5625}  # fp4 + scales


class Hardware(BaseModel):
    """One accelerator kind, as the performance model and feasibility rules see it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    kind: str = "gpu"
    hbm_gib: float = Field(gt=0)
    hbm_tb_s: float = Field(gt=0)
    tflops: dict[str, float]
    link_gb_s: float = Field(gt=0)
    allreduce_floor_us: float = Field(ge=0)
    compute_capability: str

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def cc(self) -> tuple[int, int]:
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    def supports(self, precision: str) -> bool:
        """Whether the chip computes natively in ``precision`` (FP8 needs 8.9+, NVFP4 10.0+)."""
        if precision in ("auto", "bf16", "fp16", "fp32"):
            return True
        if self.kind != "gpu":
            return False
        need = {"fp8": (8, 9), "nvfp4": (10, 0)}.get(precision)
        return need is not None and self.cc >= need and precision in self.tflops

    def peak_flops(self, precision: str) -> float:
        """Dense FLOP/s for GEMMs in ``precision``, falling back to bf16 when not native."""
        key = precision if precision in self.tflops else "bf16"
        return self.tflops[key] * 1e12


@functools.lru_cache(maxsize=4)
def _catalog(extra: str | None) -> dict[str, Hardware]:
    raw = yaml.safe_load((Path(__file__).with_name("hardware.yaml")).read_text())
    if extra:
        if not Path(extra).is_file():
            raise FileNotFoundError(f"SERVESWEEP_HARDWARE_FILE={extra}: no such file")
        raw.update(yaml.safe_load(Path(extra).read_text()) or {})
    return {name: Hardware(name=name, **fields) for name, fields in raw.items()}


def _user_file() -> str | None:
    path = settings().hardware_file
    return str(path) if path else None


def hardware_names() -> list[str]:
    return sorted(_catalog(_user_file()))


def get_hardware(name: str) -> Hardware:
    cat = _catalog(_user_file())
    if name not in cat:
        raise KeyError(f"unknown hardware {name!r}; known: {', '.join(sorted(cat))}")
    return cat[name]
