"""``servesweep capacity``: explain the KV pool of a saved server log, running nothing.

Engineers do this arithmetic by hand from startup logs; this does it the way
the sweep does (DESIGN.md measurement rule 6, ``orchestrator.planning.capacity``):
pool in tokens and blocks, blocks per request, and by the engine's admission
policy how many requests run and wait (no-evict) or the full-length capacity
above which preemption is expected (preempting), with the log lines it used.
First of all it checks that one request (prompt + output) fits the server's max model
length (vLLM's ``max_seq_len`` in its engine config line, TensorRT-LLM's ``max_seq_len``
in its executor limits line): when it does not, the server rejects every request, and
the report says so (``rejects_requests``) instead of predicting a queue.

The pool is the engine adapter's ``kv_pool`` (``actors.engines``): the derivation the
sweep's own capacity check uses, so the command and a sweep agree on the same log (the
sim's log reads like the engine its profile imitates, with its exact block count).
vLLM logs its pool in tokens only; the block size comes from ``--block-size``,
a saved ``/metrics`` scrape (``--metrics``, label ``vllm:cache_config_info``),
the log's ``--block-size`` argument, a ``num_gpu_blocks_override`` line, or
vLLM's default (16 on GPU, 128 on CPU), in that order. vLLM keeps one block of
the pool as its null block, so one block fewer is usable. TensorRT-LLM prints
the pool twice (a dry run, then the real one): the last line counts, and the
primary block count is preferred to the token total (hybrid models count
non-attention state slots in the latter).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actors.contracts.kv import KvPool
from actors.engines import EngineAdapter, LogEvent, adapter_names, get_adapter
from orchestrator.commands.output import document
from orchestrator.errors import EXIT_OK, UsageError
from orchestrator.planning.capacity import LevelPrediction, length_rejection, predict_level

__all__ = ["CapacityReport", "add_parser", "cmd_capacity", "explain_log", "render_text"]

ADMISSION_POLICIES = ("guaranteed_no_evict", "preempt_recompute")
#: how the report names a block size the command was given (``KvPool.block_size_source``)
_GIVEN = {"given": "--block-size", "metrics": "--metrics"}


def engines_with_a_pool() -> list[str]:
    """Engines whose server log states a KV pool (their adapter's ``kv_pool_hint``)."""
    return [n for n in adapter_names() if get_adapter(n).kv_pool_hint]


@dataclass
class CapacityReport:
    """What one log says about KV capacity, and the prediction for each concurrency."""

    engine: str
    log: str
    policy: str
    pool_tokens: int | None
    pool_blocks: int
    usable_blocks: int
    block_size: int
    block_size_source: str
    prompt_tokens: int
    output_tokens: int
    blocks_per_request: int
    full_length_capacity: int
    max_num_seqs: int | None
    max_model_len: int | None = None  # the server's longest request (prompt + output)
    max_model_len_source: str | None = None
    rejects_requests: bool = False  # prompt + output > max_model_len: nothing runs
    levels: list[dict[str, Any]] = field(default_factory=list)
    engine_estimate: str | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)  # {"line": n, "text": ...}
    notes: list[str] = field(default_factory=list)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``capacity`` on the CLI's subparsers; its ``func`` returns the exit code."""
    p = subparsers.add_parser(
        "capacity", help="explain a saved server log's KV pool for a workload (runs nothing)",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, choices=engines_with_a_pool(),
                   help="the engine whose log it is")
    p.add_argument("--log", required=True, help="the server's saved startup log")
    p.add_argument("--prompt-tokens", required=True, type=_positive,
                   help="prompt tokens per request")
    p.add_argument("--output-tokens", required=True, type=_positive,
                   help="output tokens per request")
    p.add_argument("--concurrency", required=True, type=_positive, nargs="+",
                   help="one or more concurrency levels")
    p.add_argument("--block-size", type=_positive,
                   help="tokens per KV block, when the log does not state it")
    p.add_argument("--metrics", help="a saved /metrics scrape of the same server (vLLM: "
                                     "block size from vllm:cache_config_info)")
    p.add_argument("--policy", choices=ADMISSION_POLICIES,
                   help="admission policy (default: the engine's: vllm preempts, trtllm "
                        "GUARANTEED_NO_EVICT)")
    p.add_argument("--json", action="store_true", help="print the capacity as JSON")
    p.set_defaults(func=cmd_capacity)
    return p


def _read(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} not found: {p}")
    return p.read_text(errors="replace")


def _adapter(engine: str) -> EngineAdapter:
    if engine not in engines_with_a_pool():
        raise UsageError(f"unknown engine {engine!r}; use one of "
                         f"{', '.join(engines_with_a_pool())}")
    return get_adapter(engine)


def _no_pool(adapter: EngineAdapter, log: str, numbered: list[tuple[int, LogEvent]]) -> UsageError:
    msg = f"{log}: no KV pool line for engine {adapter.name!r}: expected {adapter.kv_pool_hint}"
    fatals = [(n, ev) for n, ev in numbered if ev.kind == "fatal"]
    if fatals:  # the root cause (as the engine ranks it) before the traceback around it
        cause = adapter.classify_exit([ev for _, ev in fatals], None)
        n, ev = next(((n, ev) for n, ev in fatals if ev.data.get("failure") == cause),
                     fatals[0])
        msg += (f"; the server failed first ({ev.data.get('failure')}, line {n}: "
                f"{ev.line.strip()[:160]})")
    else:
        msg += "; is this the whole startup log of a server that became healthy?"
    return UsageError(msg)


def log_pool(engine: str, text: str, block_size: int | None = None,
             metrics: str | None = None, log: str = "log"
             ) -> tuple[KvPool, list[tuple[int, LogEvent]]]:
    """The engine adapter's ``kv_pool`` of a whole log, and its events with line numbers;
    ``UsageError`` when the log states no pool."""
    adapter = _adapter(engine)
    numbered = [(n, ev) for n, line in enumerate(text.splitlines(), 1)
                for ev in adapter.parse_log_line(line)]
    sample = adapter.parse_metrics(metrics, 0.0) if metrics else None
    pool = adapter.kv_pool([ev for _, ev in numbered], sample, block_size=block_size)
    if pool is None:
        raise _no_pool(adapter, log, numbered)
    return pool, numbered


def explain_log(engine: str, text: str, prompt_tokens: int, output_tokens: int,
                concurrency: list[int], block_size: int | None = None,
                metrics: str | None = None, policy: str | None = None,
                log: str = "log") -> CapacityReport:
    """The capacity report for ``text`` (a whole server log); ``UsageError`` without a pool."""
    pool, numbered = log_pool(engine, text, block_size, metrics, log)
    used = {numbered[i][0]: numbered[i][1].line for i in pool.evidence}
    notes = list(pool.notes)
    if pool.max_num_seqs is None:
        notes.append("the log does not state max_num_seqs / max_batch_size: no limit applied")
    usable, bs, max_len = pool.usable_blocks, pool.block_size, pool.max_model_len
    pol = policy or pool.admission
    rejection = length_rejection(prompt_tokens, output_tokens, max_len)
    if rejection:
        notes.insert(0, rejection)
    elif max_len is None:
        notes.append("the log does not state the max model length: not checked that a "
                     "request fits it")
    preds: list[LevelPrediction] = [
        predict_level(pol, usable, bs, prompt_tokens, output_tokens, c, pool.max_num_seqs,
                      max_len) for c in concurrency]
    first = preds[0]
    if first.full_length_capacity == 0:
        notes.append(f"one {prompt_tokens + output_tokens}-token request needs "
                     f"{first.blocks_per_request} blocks, more than the {usable} usable: it "
                     "cannot run at full length on this server")
    return CapacityReport(
        engine=engine, log=log, policy=pol, pool_tokens=pool.tokens, pool_blocks=pool.blocks,
        usable_blocks=usable, block_size=bs,
        block_size_source=_GIVEN.get(pool.block_size_source, pool.block_size_source),
        prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        blocks_per_request=first.blocks_per_request,
        full_length_capacity=first.full_length_capacity,
        max_num_seqs=pool.max_num_seqs,
        max_model_len=max_len, max_model_len_source=pool.max_model_len_source,
        rejects_requests=first.rejects_requests,
        levels=[_level(p, usable, bs, prompt_tokens) for p in preds],
        engine_estimate=pool.engine_estimate,
        lines=[{"line": n, "text": used[n].strip()} for n in sorted(used)], notes=notes)


def _level(p: LevelPrediction, usable: int, block_size: int, prompt_tokens: int) -> dict:
    """One level as data plus a sentence. Preempting: running/waiting are at admission."""
    if p.rejects_requests:
        return {"concurrency": p.concurrency, "running": 0, "waiting": 0,
                "preemption_expected": False, "rejected": True,
                "summary": f"every request rejected ({p.request_tokens:,} tokens exceed the max "
                           f"model length of {p.max_model_len:,}): nothing runs"}
    if p.policy == "guaranteed_no_evict":
        return {"concurrency": p.concurrency, "running": p.running, "waiting": p.waiting,
                "preemption_expected": False, "rejected": False,
                "summary": f"{p.running} run at once, {p.waiting} wait (a request is admitted "
                           "only when its whole length fits)"}
    prompt_blocks = max(1, math.ceil(prompt_tokens / block_size))
    running = min(p.running, usable // prompt_blocks)
    head = (f"{running} admitted at once on their prompt blocks ({prompt_blocks} each), "
            f"{p.concurrency - running} wait")
    if p.preemption_expected:
        tail = (f"; above the full-length capacity of {p.full_length_capacity}: expect "
                "preemptions (and more waiting) as outputs grow")
    else:
        tail = f"; within the full-length capacity of {p.full_length_capacity}: no preemption"
    return {"concurrency": p.concurrency, "running": running,
            "waiting": p.concurrency - running, "preemption_expected": p.preemption_expected,
            "rejected": False, "summary": head + tail}


def render_text(r: CapacityReport) -> str:
    kind = ("preempting: admits on the prompt, grows blocks on demand"
            if r.policy == "preempt_recompute" else
            "no-evict: admits only what fits at full length")
    tokens = f"{r.pool_tokens:,} tokens = " if r.pool_tokens is not None else ""
    out = [f"KV capacity from {r.log} ({r.engine}, {kind})",
           f"  pool:         {tokens}{r.pool_blocks:,} blocks x {r.block_size} tokens "
           f"(block size: {r.block_size_source})"]
    if r.usable_blocks != r.pool_blocks:
        out.append(f"                {r.usable_blocks:,} blocks usable")
    out += [f"  per request:  {r.prompt_tokens} + {r.output_tokens} = "
            f"{r.prompt_tokens + r.output_tokens} tokens -> {r.blocks_per_request} blocks",
            f"  max length:   {_max_len_text(r)}",
            f"  full length:  {r.full_length_capacity:,} request(s) fit at once",
            f"  max_num_seqs: {r.max_num_seqs if r.max_num_seqs is not None else 'not in the log'}"]
    for lv in r.levels:
        out.append(f"  concurrency {lv['concurrency']}: {lv['summary']}")
    if r.engine_estimate:
        out.append(f"  engine's own estimate: {r.engine_estimate}")
    out += [f"  note: {n}" for n in r.notes]
    out.append("log lines used:")
    out += [f"  {ln['line']:>6}: {ln['text'][:200]}" for ln in r.lines]
    return "\n".join(out)


def _max_len_text(r: CapacityReport) -> str:
    if r.max_model_len is None:
        return "not in the log (not checked)"
    total = r.prompt_tokens + r.output_tokens
    verdict = (f"a {total:,}-token request is longer: REJECTED" if r.rejects_requests else
               f"a {total:,}-token request fits")
    return f"{r.max_model_len:,} tokens ({r.max_model_len_source}): {verdict}"


def cmd_capacity(args: argparse.Namespace) -> int:
    text = _read(args.log, "log file")
    metrics = _read(args.metrics, "metrics file") if args.metrics else None
    report = explain_log(args.engine, text, args.prompt_tokens, args.output_tokens,
                         list(args.concurrency), args.block_size, metrics, args.policy,
                         log=args.log)
    print(document("capacity", asdict(report)) if args.json else render_text(report), flush=True)
    return EXIT_OK
