"""The request list a sweep measures every config on, built once from the spec's source.

- ``request_file(source, base_dir)``: where a ``FileSource`` lives (relative paths: the
  spec's folder; a sweep folder's own copy, ``requests/<name>``, first).
- ``build_plan(workload, base_dir, tokenizer_dir)``: the ``RequestPlan`` (synthetic lengths
  drawn with the source's seed; a file read by ``traffic_files``), or None for the fixed
  shape. Text is counted with the model's tokenizer where there is one, else in words (what
  the sim counts).
- ``fill_lengths(workload_data, base_dir, tokenizer_dir)``: the spec's ``workload`` (and a file
  source's request list, kept by the spec so the file is read once) with
  ``prompt_tokens`` / ``output_tokens`` set to the source's longest (they size servers).
- ``workload_fingerprint(workload, plan)``: what two trials must share to be compared: the
  request list and everything that schedules it (levels, seed, burstiness, rounds, api).
- ``mix_summary(plan)``: length percentiles, implied prefix hits, offered rates.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.contracts.config import Workload
from actors.contracts.traffic import (
    FileSource,
    PlannedRequest,
    RequestPlan,
    Segment,
    SyntheticSource,
)
from orchestrator.errors import SpecError
from orchestrator.spec.traffic_files import read_requests

__all__ = ["request_file", "build_plan", "fill_lengths", "workload_fingerprint",
           "mix_summary", "text_counter", "REQUESTS_DIR", "file_sha256", "export_requests"]

REQUESTS_DIR = "requests"  # a sweep folder's copy of its request file


def request_file(source: FileSource, base_dir: Path | None) -> Path:
    """The file a source names: a sweep folder's copy when ``base_dir`` is one that has
    it, else ``path`` (relative to ``base_dir``, the spec's folder)."""
    p = Path(source.path).expanduser()
    if base_dir is not None:
        copy = base_dir / REQUESTS_DIR / p.name
        if copy.is_file() and (base_dir / "spec.yaml").is_file():
            return copy
        if not p.is_absolute():
            return base_dir / p
    return p


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def text_counter(tokenizer_dir: str | None) -> Callable[[str], int]:
    """Tokens of a text: the model's tokenizer (``tokenizer.json``), else whitespace words."""
    if tokenizer_dir and (Path(tokenizer_dir) / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            pass
        else:
            tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
            return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    return lambda text: len(text.split())


def _synthetic(src: SyntheticSource) -> RequestPlan:
    rng = random.Random(f"servesweep-synthetic-{src.seed}")
    out = []
    for i in range(src.count):
        n_in, n_out = src.prompt.draw(rng), src.output.draw(rng)
        segs = [Segment(key=f"u{i}", tokens=n_in)]
        if src.prefix_groups:
            segs = [Segment(key=f"g{i % src.prefix_groups}", tokens=src.prefix_tokens),
                    Segment(key=f"u{i}", tokens=n_in - src.prefix_tokens)]
        out.append(PlannedRequest(segments=tuple(segs), output_tokens=n_out))
    p, o = src.prompt, src.output

    def say(d: Any) -> str:
        return (str(d.value) if d.kind == "fixed" else f"{d.kind} {d.min}-{d.max}"
                if d.kind == "uniform" else f"{d.kind} {d.mean:g}±{d.stdev:g} "
                f"[{d.min or 1}, {d.max}]")
    groups = f", {src.prefix_groups} prefix groups of {src.prefix_tokens}" \
        if src.prefix_groups else ""
    return RequestPlan(requests=tuple(out), source=f"synthetic: {src.count} requests, "
                       f"prompt {say(p)}, output {say(o)}, seed {src.seed}{groups}")


def build_plan(w: Workload, base_dir: Path | None, tokenizer_dir: str | None = None
               ) -> RequestPlan | None:
    """The workload's request list (None: the fixed shape, built by the load generator)."""
    src = w.requests
    if src is None:
        return None
    if isinstance(src, SyntheticSource):
        return _synthetic(src)
    path = request_file(src, base_dir)
    reqs, skipped = read_requests(path, src, text_counter(tokenizer_dir))
    if reqs[0].at_s is not None:  # offsets from the first request
        t0 = min(r.at_s or 0.0 for r in reqs)
        reqs = [r.model_copy(update={"at_s": (r.at_s or 0.0) - t0}) for r in reqs]
    note = f", {skipped} records skipped" if skipped else ""
    return RequestPlan(requests=tuple(reqs), source=f"file {Path(src.path).name}{note}",
                       block_tokens=src.block_tokens, file_sha256=file_sha256(path))


def fill_lengths(data: dict[str, Any], base_dir: Path | None, tokenizer_dir: str | None
                 ) -> tuple[dict[str, Any], RequestPlan | None]:
    """``data`` (a spec's ``workload`` mapping) with ``prompt_tokens`` and
    ``output_tokens`` set to the source's longest (unchanged without a source), and the
    request list a file source was read into to learn them (None otherwise: the spec keeps
    it, so a file is read once). A value the user gave that differs is refused
    (``SpecError``): the source decides the lengths."""
    raw = data.get("requests")
    if not isinstance(raw, dict):
        return data, None
    from pydantic import TypeAdapter, ValidationError

    from actors.contracts.traffic import RequestSource

    try:
        src = TypeAdapter(RequestSource).validate_python(raw)
    except ValidationError:
        return data, None  # the workload's own validation names the bad field
    plan = None
    if isinstance(src, SyntheticSource):
        longest = (src.prompt.longest, src.output.longest)
    else:
        probe = Workload(prompt_tokens=1, output_tokens=1, concurrency=[1], requests=src)
        plan = build_plan(probe, base_dir, tokenizer_dir)
        assert plan is not None
        longest = (max(r.prompt_tokens for r in plan.requests),
                   max(r.output_tokens for r in plan.requests))
    out = dict(data)
    for field, value in zip(("prompt_tokens", "output_tokens"), longest, strict=True):
        given = data.get(field)
        if given is not None and given != value:
            raise SpecError(f"workload.{field}: the request source sets it (its longest is "
                            f"{value}, given {given!r}); remove workload.{field}")
        out[field] = value
    return out, plan


def workload_fingerprint(w: Workload, plan: RequestPlan | None) -> str:
    """sha256 (16 hex) of the requests and their schedule: equal for two trials measured
    on the same work. Timeouts, client shards and transport do not enter it."""
    keep = ("prompt_tokens", "output_tokens", "rates", "burstiness", "max_in_flight",
            "trace_speedups", "steady_trim", "rounds", "requests_per_round",
            "warmup_requests", "api", "shared_prefix_tokens", "request_rate", "seed",
            "concurrency")
    fields = {k: v for k, v in w.model_dump(mode="json").items() if k in keep}
    fields["plan"] = plan.fingerprint if plan else None
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def export_requests(plan: RequestPlan, path: Path) -> int:
    """Write ``plan`` as the JSONL peers read (``vllm bench serve``'s custom dataset,
    guidellm's JSON file): ``{"prompt": text, "output_tokens": n}`` per request, in order.
    Text segments are written as they are; a token segment as one word per token (``t<k>``:
    exact for the sim and word-level tokenizers, not for a model's BPE). Returns the count."""
    with path.open("w") as f:
        for i, r in enumerate(plan.requests):
            parts = [s.text if s.text is not None else
                     " ".join(f"t{i}x{j}" for j in range(s.tokens)) for s in r.segments]
            f.write(json.dumps({"prompt": "\n\n".join(parts),
                                "output_tokens": r.output_tokens}) + "\n")
    return len(plan.requests)


def _pcts(xs: list[int]) -> dict[str, int]:
    s = sorted(xs)
    return {f"p{q}": s[min(len(s) - 1, int(q / 100 * len(s)))] for q in (10, 50, 90, 99)} \
        | {"max": s[-1]}


def mix_summary(w: Workload, plan: RequestPlan | None) -> dict[str, Any]:
    """What ``plan`` prints of the traffic: source, requests, length percentiles, implied
    prefix-cache hits, the levels, the fingerprint."""
    if plan is None:
        return {"source": f"fixed: {w.prompt_tokens} prompt + {w.output_tokens} output tokens",
                "requests": None, "levels": [lv.key for lv in w.levels()],
                "fingerprint": workload_fingerprint(w, None)}
    span = None
    if plan.timed:
        span = max(r.at_s or 0.0 for r in plan.requests)
    return {"source": plan.source, "requests": len(plan.requests),
            "prompt_tokens": _pcts([r.prompt_tokens for r in plan.requests]),
            "output_tokens": _pcts([r.output_tokens for r in plan.requests]),
            "implied_prefix_hits": round(plan.implied_hit_share(), 4),
            "trace_span_s": span, "levels": [lv.key for lv in w.levels()],
            "fingerprint": workload_fingerprint(w, plan)}
