"""``LoadGenerator``: the Ray actor that measures one server, placed on its node."""

from __future__ import annotations

import csv
import io

import ray

from actors.contracts.loadspec import LoadSpec
from actors.contracts.quality import QualityRequest, QualityResult
from actors.contracts.results import LevelResult
from actors.contracts.traffic import Level
from actors.loadgen.aggregate import request_itls
from actors.loadgen.level import LevelRunner
from actors.loadgen.prompts import PromptFactory, load_tokenizer, usable_token_ids
from actors.loadgen.records import RequestRecord
from actors.loadgen.stats import median

__all__ = ["LoadGeneratorCore", "LoadGenerator", "records_csv"]

CSV_FIELDS = ("level", "round", "index", "target_output_tokens", "target_prompt_tokens",
              "send_lag_ms", "start_s", "ttft_ms", "tpot_ms", "itl_p50_ms",
              "itl_max_ms", "e2e_ms", "chunks", "chunk_tokens", "prompt_tokens",
              "completion_tokens", "ids_tokens", "chunk_usage_tokens", "final_usage_tokens",
              "text_tokens", "error", "error_detail")


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "" if x is None else format(x, fmt)


def records_csv(rows: list[tuple[int, RequestRecord]], t0: float) -> str:
    """Compact per-request artifact: one line per request, client wall-clock milliseconds
    (not converted to engine time), start relative to ``t0``. Arrival times are summarised
    (TTFT, TPOT, per-token ITL p50 and max); measured requests plus any warm-up request that
    failed (round -1; -2 for connection-opening requests). The count proof's sources sit
    side by side: token ids, last per-chunk usage, final usage, the tokenizer's count of
    the text (empty: the server did not send it), beside the request's own targets (empty:
    the workload's fixed shape; ``text``: a text prompt, its length the server's count) and,
    open loop, how late it was sent (ms after its scheduled time)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_FIELDS)
    for level, r in rows:
        p = r.proof
        ttft = tpot = p50 = mx = None
        if r.first_token is not None:
            ttft = 1e3 * (r.first_token - r.start)
            gaps = request_itls(r, r.completion_tokens)
            if gaps:
                p50, mx = 1e3 * median(gaps), 1e3 * max(gaps)  # type: ignore[operator]
            if r.completion_tokens and r.completion_tokens > 1 and r.arrivals:
                tpot = 1e3 * (r.arrivals[-1] - r.first_token) / (r.completion_tokens - 1)
        want_prompt = "text" if r.text_prompt else _f(r.want_prompt, "d")
        lag = None if r.due is None else 1e3 * (r.start - r.due)
        out.writerow([level, r.round, r.index, _f(r.want_output, "d"), want_prompt, _f(lag),
                      f"{r.start - t0:.4f}", _f(ttft), _f(tpot),
                      _f(p50), _f(mx), f"{1e3 * (r.end - r.start):.3f}", len(r.arrivals),
                      r.chunk_tokens, _f(r.prompt_tokens, "d"), _f(r.completion_tokens, "d"),
                      *(_f(getattr(p, k), "d") if p else "" for k in
                        ("token_ids", "chunk_usage", "final_usage", "text_tokens")),
                      r.error or "", r.error_detail[:120].replace("\n", " ")])
    return buf.getvalue()


class LoadGeneratorCore:
    """Runs every level of a workload against the server a ``LoadSpec`` names.

    ``run`` returns one ``LevelResult`` per level and keeps
    the per-request records for ``records_csv``. A level whose requests could
    not even connect ends the run: the remaining levels are reported invalid
    with the same reason instead of hammering a dead server.
    """

    def __init__(self, spec: LoadSpec):
        self.spec = spec
        self.workload = w = spec.workload
        ids = usable_token_ids(spec.vocab_size, spec.tokenizer_dir)
        tokenizer = load_tokenizer(spec.tokenizer_dir)  # sizes chat text; counts streamed text
        prompts = PromptFactory(ids, w.prompt_tokens, w.shared_prefix_tokens, seed=w.seed,
                                tokenizer=tokenizer if w.api == "chat" else None)
        self.runner = LevelRunner(spec.base_url, spec.model, w, prompts, client=spec.client,
                                  time_scale=spec.time_scale, api_key=spec.api_key,
                                  transport=spec.transport or w.client_transport,
                                  shards=spec.shards or w.client_shards, tokenizer=tokenizer,
                                  slo=spec.slo, plan=spec.plan)
        self._rows: list[tuple[int, RequestRecord]] = []
        self._t0: float | None = None

    async def run_level(self, level: str | int, level_index: int) -> LevelResult:
        """Level ``level`` (a key, ``c=8`` / ``rate=4/s`` / ``trace x2``, or a concurrency)."""
        import time

        if self._t0 is None:
            self._t0 = time.perf_counter()
        res = await self.runner.run_level(Level.parse(level), level_index)
        self._rows.extend((level_index, r) for r in self.runner.last_records)
        return res

    async def run(self, levels: list[str | int] | None = None) -> list[LevelResult]:
        out: list[LevelResult] = []
        for i, c in enumerate(levels or [lv.key for lv in self.workload.levels()]):
            res = await self.run_level(c, i)
            out.append(res)
            dead = res.errors and set(res.errors) <= {"connect"}
            if dead:
                break
        return out

    def records_csv(self) -> str:
        return records_csv(self._rows, self._t0 or 0.0)

    async def run_quality(self, request: QualityRequest) -> QualityResult:
        """The trial's quality run on this node (``actors.quality``), off the event loop."""
        import asyncio

        from actors.quality import run_quality

        return await asyncio.to_thread(run_quality, request)


LoadGenerator = ray.remote(num_cpus=0)(LoadGeneratorCore)
