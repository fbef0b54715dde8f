"""The user's traffic: where requests come from, the list every config is measured on, and
the identity of a load level.

- ``LengthDist``: a length in tokens, fixed or drawn (uniform, normal, lognormal) within
  ``[min, max]``.
- ``SyntheticSource`` / ``FileSource``: the spec's ``workload.requests`` (``RequestSource``).
  A file is JSONL in AIPerf's Mooncake trace fields (``timestamp`` ms, ``input_length``,
  ``output_length``, ``hash_ids``), JSONL with ``prompt`` text and ``output_tokens``, or a
  ShareGPT JSON; rows with ``conversation_id`` and ``turn`` are multi-turn chats.
- ``PlannedRequest`` / ``RequestPlan``: the request list built from a source (by
  ``orchestrator.traffic``), the same for every config of a sweep: each request's prompt as
  segments (equal keys build equal tokens within a round: shared prefixes, chat history), its
  exact output length, its trace offset. ``RequestPlan.fingerprint`` names it.
- ``Level`` / ``LevelKind``: a load level's one identity (``c=32``, ``rate=4/s``,
  ``trace x2``), used by results, regimes, analysis, compare, export and MLflow alike.

This module imports nothing else of the project (it sits below ``config``).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["LengthDist", "SyntheticSource", "FileSource", "RequestSource", "Segment",
           "PlannedRequest", "RequestPlan", "LevelKind", "Level", "FILE_FORMATS",
           "arrival_offsets", "CapacitySpec"]

FILE_FORMATS = ("auto", "mooncake", "prompts", "sharegpt")
_Pos = Annotated[int, Field(gt=0)]


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LengthDist(_F):
    """A length in tokens. ``fixed``: ``value``. ``uniform``: an integer in ``[min, max]``.
    ``normal`` / ``lognormal``: ``mean`` and ``stdev`` of the length itself (not of its
    log), rounded and clipped to ``[min, max]`` (min defaults to 1). A bare integer in a
    spec is a fixed length."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    value: _Pos | None = None
    mean: float | None = Field(default=None, gt=0)
    stdev: float | None = Field(default=None, gt=0)
    min: _Pos | None = None
    max: _Pos | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_int(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return {"kind": "fixed", "value": v}
        return v

    @model_validator(mode="after")
    def _complete(self) -> LengthDist:
        need = {"fixed": ("value",), "uniform": ("min", "max"),
                "normal": ("mean", "stdev", "max"), "lognormal": ("mean", "stdev", "max")}
        missing = [f for f in need[self.kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} length needs {' and '.join(missing)}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        if self.mean is not None and self.max is not None and self.mean > self.max:
            raise ValueError(f"mean ({self.mean}) is above max ({self.max})")
        return self

    @property
    def longest(self) -> int:
        return self.value if self.kind == "fixed" else self.max  # type: ignore[return-value]

    def draw(self, rng: random.Random) -> int:
        """One length (``rng`` decides; the same rng state gives the same length)."""
        if self.kind == "fixed":
            return self.value  # type: ignore[return-value]
        lo, hi = self.min or 1, self.max or 1
        if self.kind == "uniform":
            return rng.randint(lo, hi)
        mean, sd = self.mean or 1.0, self.stdev or 1.0
        if self.kind == "normal":
            x = rng.gauss(mean, sd)
        else:  # the lognormal whose own mean and stdev are these
            s2 = math.log(1 + (sd / mean) ** 2)
            x = rng.lognormvariate(math.log(mean) - s2 / 2, math.sqrt(s2))
        return min(hi, max(lo, round(x)))


class SyntheticSource(_F):
    """``count`` requests with lengths drawn from ``prompt`` and ``output`` (seeded). With
    ``prefix_groups`` > 0, request ``i`` starts with group ``i % prefix_groups``'s
    ``prefix_tokens`` (a shared system prompt per group), inside its drawn prompt length."""

    kind: Literal["synthetic"]
    prompt: LengthDist
    output: LengthDist
    count: _Pos = 64
    seed: int = 0
    prefix_groups: int = Field(default=0, ge=0)
    prefix_tokens: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _prefix_fits(self) -> SyntheticSource:
        if bool(self.prefix_groups) != bool(self.prefix_tokens):
            raise ValueError("give prefix_groups and prefix_tokens together")
        shortest = (self.prompt.value or 1) if self.prompt.kind == "fixed" else \
            (self.prompt.min or 1)
        if self.prefix_tokens and self.prefix_tokens >= shortest:
            raise ValueError(f"prefix_tokens ({self.prefix_tokens}) must be below the shortest "
                             f"prompt ({shortest}): raise prompt.min")
        return self


class FileSource(_F):
    """Requests read from ``path`` (relative: to the spec's folder; a sweep keeps a copy).
    ``format`` ``auto`` tells by the first record. ``block_tokens``: tokens per Mooncake
    ``hash_ids`` entry. ``limit``: the first N requests only."""

    kind: Literal["file"]
    path: str = Field(min_length=1)
    format: Literal["auto", "mooncake", "prompts", "sharegpt"] = "auto"
    block_tokens: _Pos = 512
    limit: _Pos | None = None


RequestSource = Annotated[SyntheticSource | FileSource, Field(discriminator="kind")]


class CapacitySpec(_F):
    """Capacity at SLO: per config, the highest request rate (open loop, Poisson at the
    workload's burstiness) at which ``share`` of requests meet every limit of the spec's
    ``slo`` on their own, found on the warm server: from ``low``, doubling until a rate
    misses (never above ``high``), then bisecting until the bracket is within
    ``tolerance`` (relative); the rate found is measured ``repeats`` times more for its
    noise band. With ``gpu_hour_usd`` the cost per million output tokens at that rate."""

    share: float = Field(default=0.99, gt=0, le=1)
    low: float = Field(default=1.0, gt=0)
    high: float = Field(default=256.0, gt=0)
    tolerance: float = Field(default=0.05, gt=0, lt=1)
    repeats: int = Field(default=2, ge=1, le=10)
    max_probes: int = Field(default=16, ge=2, le=64)
    gpu_hour_usd: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _bracket(self) -> CapacitySpec:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


class Segment(_F):
    """A piece of a prompt: ``tokens`` tokens built from ``key`` (token ids), or ``text`` as
    given (``tokens`` is then its counted length). Equal keys in one round build equal
    tokens: shared prefixes and a chat's history hit the prefix cache as in production."""

    key: str
    tokens: _Pos
    text: str | None = None
    role: Literal["user", "assistant"] = "user"


class PlannedRequest(_F):
    """One request of the list: its prompt, its exact output length, its trace offset."""

    segments: tuple[Segment, ...] = Field(min_length=1)
    output_tokens: _Pos
    at_s: float | None = Field(default=None, ge=0)  # trace replay: seconds after the first
    conversation: str | None = None
    turn: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(s.tokens for s in self.segments)

    @property
    def text(self) -> bool:
        """A text prompt (its token count is the server's to state)."""
        return any(s.text is not None for s in self.segments)


class RequestPlan(_F):
    """The request list every config of a sweep is measured on, in order."""

    requests: tuple[PlannedRequest, ...] = Field(min_length=1)
    source: str  # what it was built from, for people: "lognormal 512±200 ...", "file x.jsonl"
    block_tokens: int = 512
    file_sha256: str | None = None  # the request file's bytes, when there is one

    @property
    def fingerprint(self) -> str:
        """sha256 (16 hex) of what a config is measured on: every request's segment keys
        and lengths, text, output length, offset and turn (not the source's wording)."""
        rows = [[[[s.key, s.tokens, s.text, s.role] for s in r.segments], r.output_tokens,
                 r.at_s, r.conversation, r.turn] for r in self.requests]
        return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()[:16]

    @property
    def timed(self) -> bool:
        """Every request has a trace offset (a trace level can replay it)."""
        return all(r.at_s is not None for r in self.requests)

    def implied_hit_share(self) -> float:
        """Share of prompt tokens an ideal prefix cache (whole segments, one round, no
        eviction) would serve from the cache: what the file implies, beside the rate the
        server reports."""
        seen: set[tuple[str, ...]] = set()
        hit = total = 0
        for r in self.requests:
            path: tuple[str, ...] = ()
            hitting = True
            for s in r.segments:
                path += (s.key,)
                total += s.tokens
                if hitting and path in seen:
                    hit += s.tokens
                else:
                    hitting = False
                    seen.add(path)
        return hit / total if total else 0.0


class LevelKind(enum.StrEnum):
    """What a load level holds fixed."""

    CONCURRENCY = "c"  # closed loop: this many requests in flight
    RATE = "rate"  # open loop: requests per second (engine time), Poisson or gamma
    TRACE = "trace"  # the request file's timestamps, sped up by the value


_LEVEL = re.compile(r"^\s*(?:(c)\s*=\s*(\d+)|(rate)\s*=\s*([0-9.]+)\s*(?:/s)?|"
                    r"(trace)(?:\s*x\s*([0-9.]+))?)\s*$")


class Level(_F):
    """A load level's identity: ``key`` (``c=32``, ``rate=4/s``, ``trace x2``) names it
    everywhere; ``Level.parse`` reads a key back (a bare integer is a concurrency)."""

    kind: LevelKind
    value: float = Field(gt=0)

    @model_validator(mode="after")
    def _integral(self) -> Level:
        if self.kind is LevelKind.CONCURRENCY and self.value != int(self.value):
            raise ValueError(f"a concurrency is a whole number, not {self.value}")
        return self

    @property
    def key(self) -> str:
        v = f"{self.value:g}"
        if self.kind is LevelKind.CONCURRENCY:
            return f"c={int(self.value)}"
        if self.kind is LevelKind.RATE:
            return f"rate={v}/s"
        return "trace" if self.value == 1 else f"trace x{v}"

    @property
    def concurrency(self) -> int | None:
        return int(self.value) if self.kind is LevelKind.CONCURRENCY else None

    @property
    def order(self) -> tuple[int, float]:
        return (list(LevelKind).index(self.kind), self.value)

    @classmethod
    def of(cls, concurrency: int) -> Level:
        return cls(kind=LevelKind.CONCURRENCY, value=concurrency)

    @classmethod
    def parse(cls, text: int | float | str) -> Level:
        """``8`` / ``"c=8"`` / ``"rate=4/s"`` / ``"rate=4"`` / ``"trace"`` / ``"trace x2"``;
        ``ValueError`` naming the accepted forms otherwise."""
        if isinstance(text, bool):
            raise ValueError(f"not a level: {text!r}")
        if isinstance(text, int):
            return cls.of(text)
        m = _LEVEL.match(str(text))
        if not m:
            raise ValueError(f"not a level: {text!r}; write c=N, rate=R/s or trace xS")
        if m.group(1):
            return cls.of(int(m.group(2)))
        if m.group(3):
            return cls(kind=LevelKind.RATE, value=float(m.group(4)))
        return cls(kind=LevelKind.TRACE, value=float(m.group(6) or 1))

    def __str__(self) -> str:
        return self.key


def arrival_offsets(level: Level, n: int, rnd: int, seed: int, burstiness: float,
                    plan: RequestPlan | None) -> list[float] | None:
    """Send offsets (engine seconds from a round's start) of requests 0..n-1 at an
    open-loop ``level``; None for a closed loop. A rate draws gamma gaps of shape
    ``burstiness`` (1: Poisson; below 1 burstier, as ``vllm bench serve --burstiness``)
    seeded by ``seed``, the level and the round, so every config gets the same times; a
    trace replays the plan's offsets divided by its speed-up."""
    if level.kind is LevelKind.CONCURRENCY:
        return None
    if level.kind is LevelKind.TRACE:
        if plan is None or not plan.timed:
            raise ValueError("a trace level needs a request list with timestamps")
        return [(plan.requests[i].at_s or 0.0) / level.value for i in range(n)]
    rng = random.Random(f"{seed}-{level.key}-{rnd}")
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, 1.0 / (level.value * burstiness))
    return out

