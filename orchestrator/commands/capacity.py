"""``servesweep capacity``: explain the KV pool of a saved server log, running nothing.

Engineers do this arithmetic by hand from startup logs; this does it the way
the sweep does (DESIGN.md measurement rule 6, ``orchestrator.capacity``):
pool in tokens and blocks, blocks per request, and by the engine's admission
policy how many requests run and wait (no-evict) or the full-length capacity
above which preemption is expected (preempting), with the log lines it used.
First of all it checks that one request (prompt + output) fits the server's max model
length (vLLM's ``max_seq_len`` in its engine config line, TensorRT-LLM's ``max_seq_len``
in its executor limits line): when it does not, the server rejects every request, and
the report says so (``rejects_requests``) instead of predicting a queue.

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
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from actors.engines.base import LogEvent
from actors.engines.trtllm_log import parse_trtllm_line
from actors.engines.vllm_log import parse_vllm_line, parse_vllm_metrics, pool_blocks
from orchestrator.capacity import LevelPrediction, length_rejection, predict_level
from orchestrator.errors import EXIT_OK, UsageError

__all__ = ["CapacityReport", "add_parser", "cmd_capacity", "explain_log", "render_text"]

POLICIES = {"vllm": "preempt_recompute", "trtllm": "guaranteed_no_evict"}
VLLM_DEFAULT_BLOCK = {"CPU": 128, "GPU": 16}
TRTLLM_DEFAULT_BLOCK = 32


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


class _Pool(NamedTuple):
    tokens: int | None
    blocks: int
    usable: int
    block_size: int
    source: str


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
    p.add_argument("--engine", required=True, choices=sorted(POLICIES))
    p.add_argument("--log", required=True, help="the server's saved startup log")
    p.add_argument("--prompt-tokens", required=True, type=_positive)
    p.add_argument("--output-tokens", required=True, type=_positive)
    p.add_argument("--concurrency", required=True, type=_positive, nargs="+",
                   help="one or more concurrency levels")
    p.add_argument("--block-size", type=_positive,
                   help="tokens per KV block, when the log does not state it")
    p.add_argument("--metrics", help="a saved /metrics scrape of the same server (vLLM: "
                                     "block size from vllm:cache_config_info)")
    p.add_argument("--policy", choices=sorted(set(POLICIES.values())),
                   help="admission policy (default: the engine's: vllm preempts, trtllm "
                        "GUARANTEED_NO_EVICT)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_capacity)
    return p


def _read(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} not found: {p}")
    return p.read_text(errors="replace")


def _events(engine: str, text: str) -> list[tuple[int, LogEvent]]:
    parse = parse_vllm_line if engine == "vllm" else parse_trtllm_line
    return [(n, ev) for n, line in enumerate(text.splitlines(), 1) for ev in parse(line)]


def _last(events: list[tuple[int, LogEvent]], *kinds: str) -> tuple[int, LogEvent] | None:
    found = [(n, ev) for n, ev in events if ev.kind in kinds and not ev.data.get("dry_run")]
    return found[-1] if found else None


def _no_pool(engine: str, log: str, events: list[tuple[int, LogEvent]]) -> UsageError:
    want = ("'GPU KV cache size: N tokens' (or 'CPU KV cache size')" if engine == "vllm" else
            "'[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N)' or "
            "'Max KV cache blocks per sequence ... primary blocks=N'")
    msg = f"{log}: no KV pool line for engine {engine!r}: expected {want}"
    fatals = [e for e in events if e[1].kind == "fatal"]
    rank = {"startup_oom": 0, "port_in_use": 1}  # the root cause before the traceback around it
    fatal = min(fatals, key=lambda e: rank.get(e[1].data.get("failure"), 2)) if fatals else None
    if fatal:
        msg += (f"; the server failed first ({fatal[1].data.get('failure')}, line {fatal[0]}: "
                f"{fatal[1].line.strip()[:160]})")
    else:
        msg += "; is this the whole startup log of a server that became healthy?"
    return UsageError(msg)


def _vllm_pool(events: list[tuple[int, LogEvent]], block_size: int | None,
               metrics: str | None, used: dict[int, str], notes: list[str],
               log: str) -> _Pool:
    pool = _last(events, "kv_pool")
    if pool is None:
        raise _no_pool("vllm", log, events)
    used[pool[0]] = pool[1].line
    tokens = int(pool[1].data["tokens"])
    device = pool[1].data.get("device", "GPU")
    override = _last(events, "blocks_override")
    args = _last(events, "args")
    if override:
        used[override[0]] = override[1].line
    blocks = int(override[1].data["blocks"]) if override else None
    scrape = parse_vllm_metrics(metrics, 0.0) if metrics else None
    if scrape and scrape.num_blocks and blocks is None:
        blocks = scrape.num_blocks  # vllm:cache_config_info num_gpu_blocks: exact
    if block_size:
        source = "--block-size"
    elif scrape and scrape.block_size:
        block_size, source = scrape.block_size, "--metrics"
    elif args and "block_size" in args[1].data:
        block_size, source = int(args[1].data["block_size"]), "the log's --block-size"
        used[args[0]] = args[1].line
    elif blocks:
        block_size, source = tokens // blocks, "pool tokens / num_gpu_blocks_override"
    else:
        block_size = VLLM_DEFAULT_BLOCK.get(device, 16)
        source = f"vLLM default on {device}"
        notes.append(f"block size {block_size} is vLLM's default on {device}: pass "
                     "--block-size or --metrics if the server used another")
    if blocks is None:
        config = _last(events, "engine_config")
        max_len = config[1].data.get("max_seq_len") if config else None
        if max_len is None and _last(events, "max_concurrency"):
            max_len = _last(events, "max_concurrency")[1].data["len"]
        blocks = pool_blocks(tokens, block_size, int(max_len) if max_len else None)
        if max_len and int(max_len) % block_size:
            used[config[0] if config else pool[0]] = (config or pool)[1].line
            notes.append(f"vLLM logs the pool as max concurrency x max_model_len "
                         f"({int(max_len)}, not a multiple of {block_size}): {blocks:,} blocks")
    notes.append("vLLM keeps one block as its null block: one block fewer is usable")
    return _Pool(tokens, blocks, max(blocks - 1, 0), block_size, source)


def _trtllm_pool(events: list[tuple[int, LogEvent]], block_size: int | None,
                 used: dict[int, str], notes: list[str],
                 log: str) -> _Pool:
    pool = _last(events, "kv_pool")
    primary = _last(events, "kv_blocks", "blocks_per_window")
    if pool is None and primary is None:
        raise _no_pool("trtllm", log, events)
    tokens = int(pool[1].data["tokens"]) if pool else None
    if pool:
        used[pool[0]] = pool[1].line
    logged_bs = _last(events, "block_size")
    if block_size:
        source = "--block-size"
    elif primary and "block_size" in primary[1].data:
        block_size, source = int(primary[1].data["block_size"]), "tokens per block in the log"
    elif logged_bs:
        block_size, source = int(logged_bs[1].data["block_size"]), "tokens per block in the log"
        used[logged_bs[0]] = logged_bs[1].line
    else:
        block_size, source = TRTLLM_DEFAULT_BLOCK, "TensorRT-LLM default"
        notes.append(f"block size {block_size} is TensorRT-LLM's default (tokens_per_block): "
                     "pass --block-size if the server used another")
    if primary:
        used[primary[0]] = primary[1].line
        blocks = int(primary[1].data["blocks"])
        if tokens is not None and tokens != blocks * block_size:
            notes.append(f"the token total ({tokens:,}) differs from primary blocks x block size "
                         f"({blocks:,} x {block_size}): using the primary block count")
    else:
        blocks = (tokens or 0) // block_size
    return _Pool(tokens, blocks, blocks, block_size, source)


def _max_model_len(engine: str, events: list[tuple[int, LogEvent]],
                   used: dict[int, str]) -> tuple[int | None, str | None]:
    """The server's max model length and where the log states it, or (None, None).

    vLLM: ``max_seq_len`` of the engine config line (what the engine applied), else the
    non-default ``max_model_len`` argument, else "Maximum concurrency for N tokens per
    request". TensorRT-LLM: ``max_seq_len`` of the last executor limits line (the dry
    run's comes first and is clamped to its small pool)."""
    if engine == "vllm":
        found = [(_last(events, "engine_config"), "max_seq_len",
                  "max_seq_len in the engine config line"),
                 (_last(events, "args"), "max_model_len", "max_model_len in the non-default args"),
                 (_last(events, "max_concurrency"), "len",
                  "'Maximum concurrency for N tokens per request'")]
    else:
        found = [(_last(events, "limits"), "max_seq_len", "max_seq_len in the executor limits")]
    for hit, key, source in found:
        if hit is not None and key in hit[1].data:
            used[hit[0]] = hit[1].line
            return int(hit[1].data[key]), source
    return None, None


def explain_log(engine: str, text: str, prompt_tokens: int, output_tokens: int,
                concurrency: list[int], block_size: int | None = None,
                metrics: str | None = None, policy: str | None = None,
                log: str = "log") -> CapacityReport:
    """The capacity report for ``text`` (a whole server log); ``UsageError`` without a pool."""
    if engine not in POLICIES:
        raise UsageError(f"unknown engine {engine!r}; use one of {', '.join(sorted(POLICIES))}")
    events = _events(engine, text)
    used: dict[int, str] = {}
    notes: list[str] = []
    if engine == "vllm":
        pool = _vllm_pool(events, block_size, metrics, used, notes, log)
        limits = _last(events, "args")
        max_seqs = limits[1].data.get("max_num_seqs") if limits else None
        estimate = _last(events, "max_concurrency")
        est_text = (f"{estimate[1].data['x']:,.2f}x concurrency for "
                    f"{int(estimate[1].data['len']):,}-token requests" if estimate else None)
        if estimate:
            used[estimate[0]] = estimate[1].line
    else:
        pool = _trtllm_pool(events, block_size, used, notes, log)
        limits = _last(events, "limits")
        max_seqs = limits[1].data.get("max_batch_size") if limits else None
        est_text = None
    if limits and max_seqs is not None:
        used[limits[0]] = limits[1].line
    else:
        notes.append("the log does not state max_num_seqs / max_batch_size: no limit applied")
    usable, bs = pool.usable, pool.block_size
    pol = policy or POLICIES[engine]
    max_len, max_len_source = _max_model_len(engine, events, used)
    rejection = length_rejection(prompt_tokens, output_tokens, max_len)
    if rejection:
        notes.insert(0, rejection)
    elif max_len is None:
        notes.append("the log does not state the max model length: not checked that a "
                     "request fits it")
    preds: list[LevelPrediction] = [
        predict_level(pol, usable, bs, prompt_tokens, output_tokens, c,
                      int(max_seqs) if max_seqs else None, max_len) for c in concurrency]
    first = preds[0]
    if first.full_length_capacity == 0:
        notes.append(f"one {prompt_tokens + output_tokens}-token request needs "
                     f"{first.blocks_per_request} blocks, more than the {usable} usable: it "
                     "cannot run at full length on this server")
    return CapacityReport(
        engine=engine, log=log, policy=pol, pool_tokens=pool.tokens, pool_blocks=pool.blocks,
        usable_blocks=usable, block_size=bs, block_size_source=pool.source,
        prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        blocks_per_request=first.blocks_per_request,
        full_length_capacity=first.full_length_capacity,
        max_num_seqs=int(max_seqs) if max_seqs else None,
        max_model_len=max_len, max_model_len_source=max_len_source,
        rejects_requests=first.rejects_requests,
        levels=[_level(p, usable, bs, prompt_tokens) for p in preds],
        engine_estimate=est_text,
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
    print(json.dumps(asdict(report), indent=1) if args.json else render_text(report), flush=True)
    return EXIT_OK
