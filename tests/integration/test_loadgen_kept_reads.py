"""Kept reads (``fastread``: an armed socket's whole token reads stay in C) record what the
Python pass records: against the paced C benchmark server, one token per read, in every
stream format, the same tokens, bytes, events and one arrival per read, and a proof that
agrees; the kept path is the one that read most of them, and a level says so."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import threading
import time

import pytest

from actors.loadgen import fastread
from actors.loadgen.pool import ConnectionPool, stream_request_lean
from actors.loadgen.proof import _payloads, prove
from actors.loadgen.records import RequestRecord
from benchmarks.loadgen_common import FORMATS, sse_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(fastread.reader(1, 1) is None,
                       reason=f"no native read pass here: {fastread.why_not()}"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="the C server needs gcc"),
]

TOKENS, STREAMS = 40, 8


async def _level(url: str, native: bool) -> tuple[list[RequestRecord], int]:
    body = {"model": "m", "prompt": "one two three", "max_tokens": TOKENS, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_token_ids": True, "ignore_eos": True}
    recs = [RequestRecord(index=i, round=0) for i in range(STREAMS)]
    async with ConnectionPool(url, native_read=native) as pool:
        await asyncio.gather(*(stream_request_lean(pool, "/v1/completions", body, r)
                               for r in recs))
        kept = pool.kept_reads
    return recs, kept


_PER_REQUEST = re.compile(rb'"id":"[^"]*"|"created":\d+')  # what differs between runs


def _summary(rec: RequestRecord) -> tuple:
    body = _PER_REQUEST.sub(b"", b"".join(_payloads(rec.body)))  # the SSE bytes
    return (rec.error, rec.chunk_tokens, rec.completion_tokens, sum(rec.counts),
            rec.scanned_events, rec.parsed_events, body, rec.counts_known)


@pytest.mark.parametrize("fmt", FORMATS)
def test_kept_reads_record_what_the_python_pass_records(fmt: str):
    with sse_server(step_ms=3.0, cpus=None, kind="c", fmt=fmt) as srv:
        native, kept = asyncio.run(_level(srv["url"], native=True))
        python, none = asyncio.run(_level(srv["url"], native=False))
    assert none == 0
    assert kept >= STREAMS * TOKENS // 2, kept  # most token reads never reached Python
    for a, b in zip(native, python, strict=True):
        assert a.error is None and a.chunk_tokens == TOKENS
        assert _summary(a) == _summary(b)
        # one arrival per read at one token per read; in time order, after the first token
        assert len(a.arrivals) >= TOKENS - 4 and a.arrivals == sorted(a.arrivals)
        assert a.first_token == a.arrivals[0] and a.start < a.first_token <= a.end
        pa, pb = prove(a), prove(b)
        assert pa == pb and pa.chunks == TOKENS and pa.final_usage == TOKENS, pa


def test_kept_reads_keep_the_token_gap_measured_so_a_busy_pool_coalesces():
    """Each kept read moves the pool's running mean token gap (in C), so at a slow pace with
    many streams the pool still knows the pace and waits a moment per wake-up to read many
    sockets at once, yet reads one token per read. (Before: the gap was measured only on the
    reads Python saw, the first few of each stream, and a pool that read few sockets per wake
    never coalesced: at 12.5 ms x 256 a wake read about 5 sockets, 9 us per token.)"""
    streams, tokens = 48, 120  # 48 streams at 5 ms: about 10 ready per 1 ms wait; 0.6 s

    async def level(url: str) -> tuple[list[RequestRecord], ConnectionPool, float]:
        body = {"model": "m", "prompt": "one two", "max_tokens": tokens, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "ignore_eos": True}
        recs = [RequestRecord(index=i, round=0) for i in range(streams)]
        async with ConnectionPool(url) as pool:
            run = asyncio.gather(*(stream_request_lean(pool, "/v1/completions", body, r)
                                   for r in recs))
            await asyncio.sleep(0.35)  # mid-way: every stream armed, none ended
            gap = pool.token_gap
            await run
        return recs, pool, gap

    with sse_server(step_ms=5.0, cpus=None, kind="c", fmt="asked") as srv:
        recs, pool, gap = asyncio.run(level(srv["url"]))
    assert all(r.error is None and r.chunk_tokens == tokens for r in recs)
    assert pool.kept_reads >= streams * tokens // 2
    assert gap == pytest.approx(0.005, rel=0.3)  # the pace while streaming
    assert pool.coalesced >= tokens * 3 // 4  # about one wait per step (was: a few)
    reads = sum(len(r.arrivals) for r in recs)
    assert streams * tokens / reads <= 1.2  # still about one token per read


def test_a_level_reports_the_reads_it_kept():
    from actors.contracts.config import Workload
    from actors.loadgen.level import LevelRunner
    from actors.loadgen.prompts import PromptFactory

    w = Workload(prompt_tokens=8, output_tokens=TOKENS, concurrency=[STREAMS], rounds=1,
                 requests_per_round=2 * STREAMS, warmup_requests=0)
    with sse_server(step_ms=3.0, cpus=None, kind="c", fmt="asked") as srv:
        runner = LevelRunner(srv["url"], "m", w, PromptFactory(list(range(100, 1000)), 8),
                             time_scale=1.0, transport="lean")
        res = asyncio.run(runner.run_level(STREAMS))
    assert res.client is not None and res.client.reader == "native"
    tokens = sum(r.chunk_tokens for r in runner.last_records)
    assert tokens == 2 * STREAMS * TOKENS and res.client.parse == "scan"
    # most token reads were kept in C: all but each stream's first token and its end
    assert tokens // 2 <= res.client.reads_kept < tokens, res.client


_EVENT = (b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":" a",'
          b'"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":%d,'
          b'"total_tokens":%d}}\n\n')


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _slow_server(tokens: int, gap_s: float, hang: bool) -> tuple[str, threading.Thread]:
    """One response: ``tokens`` token chunks ``gap_s`` apart, then its end, or nothing more
    (``hang``: the connection stays open and silent)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            for i in range(1, tokens + 1):
                conn.sendall(_chunk(_EVENT % (i, i + 3)))
                time.sleep(gap_s)
            if hang:
                time.sleep(3.0)
                return
            end = (b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
                   b'"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}\n\n'
                   % (tokens, tokens + 3))
            conn.sendall(_chunk(end) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            time.sleep(0.5)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", thread


async def _one(url: str, stall_s: float) -> tuple[RequestRecord, int]:
    rec = RequestRecord(index=0, round=0)
    async with ConnectionPool(url, stall_timeout=stall_s) as pool:
        await stream_request_lean(pool, "/v1/completions", {"prompt": "x", "stream": True},
                                  rec)
        return rec, pool.kept_reads


def test_the_stall_clock_sees_kept_reads_and_a_stall_keeps_what_was_read():
    # tokens 0.15 s apart for 1.5 s, the stall timeout 0.5 s: kept reads (no Python per read)
    # still move the stall clock, so the stream is not cut as stalled
    url, thread = _slow_server(10, 0.15, hang=False)
    rec, kept = asyncio.run(_one(url, stall_s=0.5))
    thread.join(5)
    assert rec.error is None and rec.chunk_tokens == 10 and kept >= 6, (rec.error, kept)
    assert len(rec.arrivals) == 10 and rec.completion_tokens == 10
    # a server that goes silent mid-stream: a stall, with the tokens read before it counted
    url, thread = _slow_server(6, 0.05, hang=True)
    rec, kept = asyncio.run(_one(url, stall_s=0.5))
    thread.join(5)
    assert rec.error == "stall" and kept >= 3, (rec.error, kept)
    assert rec.chunk_tokens == 6 and len(rec.arrivals) == 6 and rec.completion_tokens == 6
