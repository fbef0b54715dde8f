"""A server's metrics as the load generator reads them, with no engine code on its side.

- ``MetricsSample``: one scrape, normalised (None: not reported).
- ``ClientProfile``: what an engine adapter tells the load generator about its server: the
  metrics path and format, a map from the engine's metric names to ``MetricsSample``'s
  fields, and what its streams carry (per-chunk usage, token ids). Data, not callables:
  it crosses the process seam as a typed model.
- ``read_sample(text, t, profile)``: the one parser, for every engine: Prometheus text
  (``parse_prometheus``; a name's label sets summed; ``labels`` read an info metric's
  labels) or JSON iteration stats (a list of objects, the newest by ``iter`` read; dotted
  paths). KV usage is derived from used / total blocks (or total - free) where the engine
  states no share.

Imports nothing else of the project.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MetricsSample", "MetricsFormat", "ClientProfile", "parse_prometheus",
           "read_sample", "SAMPLE_FIELDS"]


@dataclass(frozen=True)
class MetricsSample:
    """One scrape of the server's metrics, normalised across engines (None: not reported)."""

    t: float
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    preemptions_total: float | None = None
    block_size: int | None = None
    num_blocks: int | None = None
    time_scale: float | None = None
    #: the sim's punctuality counters (``actors.sim.pace``); None from a real engine
    sim_paced_tokens: float | None = None
    sim_late_tokens: float | None = None
    sim_lag_token_s: float | None = None
    sim_first_tokens: float | None = None
    sim_late_first_tokens: float | None = None
    sim_behind_s: float | None = None  # wall time lost to stalls past 50 ms (never made up)
    #: prefix cache: prompt tokens looked up, and found cached (counters)
    prefix_queries_total: float | None = None
    prefix_hits_total: float | None = None


#: the fields a profile may map (besides ``t``), and the derived block counts
SAMPLE_FIELDS = tuple(f.name for f in fields(MetricsSample) if f.name != "t")
_DERIVED = ("kv_blocks_used", "kv_blocks_free")
_INTS = ("block_size", "num_blocks")


class MetricsFormat(enum.StrEnum):
    PROMETHEUS = "prometheus"
    JSON_STATS = "json_stats"  # a JSON list of iteration stats (trtllm-serve)
    NONE = "none"  # no metrics endpoint worth reading


class ClientProfile(BaseModel):
    """What the load generator needs to know of the server it measures (see module doc).
    ``names``: field -> the engine's names, the first one present wins (Prometheus: metric
    names; JSON stats: dotted paths). ``labels``: field -> (info metric, label)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics_path: str = "/metrics"
    metrics_format: MetricsFormat = MetricsFormat.PROMETHEUS
    names: dict[str, list[str]] = Field(default_factory=dict)
    labels: dict[str, tuple[str, str]] = Field(default_factory=dict)
    per_chunk_usage: bool = True
    token_ids: bool = True

    def model_post_init(self, _: Any) -> None:
        unknown = sorted((set(self.names) | set(self.labels)) - set(SAMPLE_FIELDS)
                         - set(_DERIVED))
        if unknown:
            raise ValueError(f"unknown MetricsSample fields {unknown}; use "
                             f"{', '.join(SAMPLE_FIELDS + _DERIVED)}")


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text -> {name: [(labels, value), ...]}; comments and junk lines skipped."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float | str):
        return None
    try:
        return float(x)
    except ValueError:
        return None


def _prometheus(text: str, p: ClientProfile) -> dict[str, float | None]:
    m = parse_prometheus(text)
    out: dict[str, float | None] = {}
    for name, candidates in p.names.items():
        out[name] = next((sum(v for _, v in m[c]) for c in candidates if c in m), None)
    for name, (metric, label) in p.labels.items():
        if metric in m and m[metric]:
            out[name] = _num(m[metric][0][0].get(label))
    return out


def _path(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _json_stats(text: str, p: ClientProfile) -> dict[str, float | None]:
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return {}
    if isinstance(data, dict):
        data = [data]
    stats = [s for s in data if isinstance(s, dict)] if isinstance(data, list) else []
    if not stats:
        return {}
    last = max(stats, key=lambda s: _num(s.get("iter")) or 0.0)
    return {name: next((v for c in cands if (v := _num(_path(last, c))) is not None), None)
            for name, cands in p.names.items()}


def read_sample(text: str, t: float, profile: ClientProfile) -> MetricsSample:
    """``text`` (the server's metrics endpoint) as a ``MetricsSample`` per ``profile``."""
    if profile.metrics_format is MetricsFormat.PROMETHEUS:
        got = _prometheus(text, profile)
    elif profile.metrics_format is MetricsFormat.JSON_STATS:
        got = _json_stats(text, profile)
    else:
        got = {}
    total, used, free = got.get("num_blocks"), got.get("kv_blocks_used"), \
        got.get("kv_blocks_free")
    if used is None and total is not None and free is not None:
        used = total - free
    if got.get("kv_usage") is None and used is not None and total:
        got["kv_usage"] = used / total
    values: dict[str, Any] = {}
    for name in SAMPLE_FIELDS:
        v = got.get(name)
        if v is not None and name in _INTS:
            values[name] = int(v) if v else None
        else:
            values[name] = v
    return MetricsSample(t=t, **values)
