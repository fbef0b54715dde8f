"""The report's building blocks: a ``Section`` of paragraphs, ``Table``s and charts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from orchestrator.results.charts import Chart

__all__ = ["Table", "Section", "n_text"]


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    """A titled part of the report: paragraphs, tables and charts, in order."""

    title: str
    anchor: str
    blocks: list[str | Table | Chart] = field(default_factory=list)

    def add(self, *blocks: str | Table | Chart | None) -> Section:
        self.blocks += [b for b in blocks if b is not None]
        return self

    @property
    def charts(self) -> list[Chart]:
        return [b for b in self.blocks if isinstance(b, Chart)]


def n_text(x: object, spec: str = ",.1f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


