"""A lean HTTP/1.1 streaming client on non-blocking sockets (the load generator's fast path).

Why: at one token per read, aiohttp's per-read machinery (stream reader, payload
parser, iterator, task wake-up) costs more than the token itself. Here each
connection is a non-blocking socket; on Linux the pool keeps them all in one
``epoll`` set whose descriptor is the only thing the event loop watches, so one
loop callback drains every ready socket (one ``recvmsg`` each) instead of one
callback per socket. A read that is whole chunks of whole one-line token events
(the common case: one token per read) is counted in one tight scan (no copy, no
SSE parse, no JSON); anything else goes through the general parser and
``StreamCounter``. No task wakes up per token.

Native read pass: where ``fastread`` can build its C pass (Linux with a C compiler),
one call per loop callback does the ``epoll_wait``, the ``recvmsg`` of every ready
socket and the hot-path scan; Python then only records what it found
(``_drain_native``). At one token per read that halves the client's CPU per token
(benchmarks/README.md). Without it the same pass runs in Python (``_drain``).

Coalescing: with kernel timestamps a read's arrival time does not depend on when
it is read, so when the client is busy (its last drain read many sockets)
the pool waits a moment after a wake-up before draining: sockets that become ready
meanwhile are read in the same pass, one ``epoll_wait`` and one loop turn for many
reads. The wait is ``coalesce_s`` (default 1 ms), and only where a stream's tokens
come at least 2 x that apart on average (measured on the hot path; no wait until
measured), so that they are still read one per read. Not shorter: the loop's
selector sleeps whole milliseconds, so a 0.25 ms wait is a 1 ms one. A quiet client
drains at once (no delay before the next request is sent); without kernel
timestamps there is no coalescing.

Timestamps: on Linux each read carries the kernel's receive time
(``SO_TIMESTAMPNS``), converted to the ``perf_counter`` clock. A token's arrival
time is then when it reached this host, not when a busy event loop got round to
it: 256 streams whose tokens land together are not smeared over the time the
client takes to read them. Elsewhere (or if the option is refused) the read's
``perf_counter`` is used.

Scope: plain ``http://`` (the load generator runs on the server's node),
keep-alive connections reused across requests, ``Transfer-Encoding: chunked``,
``Content-Length`` or read-to-close bodies. Errors are classified exactly as the
aiohttp path does: ``connect``, ``stall`` (no byte for the stall timeout),
``disconnect`` (closed mid-response), ``http_<status>``, ``protocol``,
``server_error`` and ``truncated``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import socket
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from actors.loadgen import fastread
from actors.loadgen.client import _CHOICE, _PROMPT, StreamCounter
from actors.loadgen.results import RequestRecord

__all__ = ["ConnectionPool", "PASS_SIZE", "stream_request_lean"]

_perf = time.perf_counter
_HEAD, _BODY, _DONE = 0, 1, 2
_READ = 65536
# Linux (64-bit time_t arches): SO_TIMESTAMPNS = SCM_TIMESTAMPNS = 35 (Python has no name)
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
_TS_SPACE = socket.CMSG_SPACE(16)
_timespec = struct.Struct("qq").unpack_from
_EPOLL = getattr(select, "epoll", None)
_COMPLETION_KEY = b'"completion_tokens":'
_DIGITS = re.compile(rb"\d+").match
_BUSY = 8  # a drain (its passes together) that read this many sockets: busy, so coalesce
#: sockets read per loop callback at most: 16 reads (~0.3 ms) keep a timer or a request start
#: from waiting behind a whole step of reads (256 at once kept loop lag p99 at 5-25 ms at
#: 256 streams even a third loaded); smaller costs more per token (benchmarks/README.md)
PASS_SIZE = 16


def _clock_offset() -> float:
    """CLOCK_REALTIME - perf_counter (CLOCK_MONOTONIC), from the tightest of a few reads."""
    best = None
    for _ in range(5):
        a = _perf()
        r = time.time()
        b = _perf()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) / 2)
    return best[1]  # type: ignore[index]


def _scan(data: bytes) -> int:
    """The hot path. If the read is whole chunks, each one whole one-line ``data: {``
    event with a non-empty ``choices`` list and per-chunk usage (one token per read, or
    several when the client fell behind), the last event's ``completion_tokens``;
    otherwise -1, having changed nothing (the general parser then takes the read)."""
    find, starts = data.find, data.startswith
    pos, n, last = 0, len(data), -1
    while pos < n:
        nl = find(b"\r\n", pos, pos + 10)
        if nl <= pos:
            return -1
        try:  # (int() also takes "+", "_" and spaces: harmless in a size, and the
            size = int(data[pos:nl], 16)  # general parser reads sizes the same way)
        except ValueError:
            return -1
        start = nl + 2
        end = start + size
        # one line: "data: {...}\n\n", then the chunk's CRLF
        if (size < 10 or end + 2 > n or not starts(b"data: {", start)
                or find(b"\n", start, end) != end - 2 or not starts(b"\n\r\n", end - 1)):
            return -1
        # the count: the digits after the last '"completion_tokens":' (a key: a quote inside
        # a JSON string is escaped) after a non-empty choices list
        i = find(_CHOICE, start, end)
        j = data.rfind(_COMPLETION_KEY, i, end) if i >= 0 else -1
        if j < 0:
            return -1
        m = _DIGITS(data, j + len(_COMPLETION_KEY), end)
        if m is None:
            return -1
        last = int(m.group())
        pos = end + 2
    return last


class _HTTPError(Exception):
    """A malformed response: classified as ``protocol``."""


class _Conn:
    """One keep-alive connection carrying one request at a time (a non-blocking socket)."""

    def __init__(self, pool: ConnectionPool, sock: socket.socket | None = None,
                 loop: asyncio.AbstractEventLoop | None = None):
        self.pool, self.sock, self.loop = pool, sock, loop
        self.closed = False
        self.last_read = 0.0
        self.stamps = False  # the socket delivers kernel receive times
        self._reset(None, None)

    def _reset(self, counter: StreamCounter | None, fut: asyncio.Future | None) -> None:
        self.counter, self.fut = counter, fut
        self.state = _HEAD
        self.buf = b""
        self.status = 0
        self.chunked = False
        self.remaining = -1  # bytes left in the current chunk / the content-length body
        self.need_crlf = False
        self.keep_alive = True
        self.error_body: list[bytes] | None = None
        self.got_bytes = False
        self.fast = False  # between chunks and events of a 200 chunked body: try _scan first

    # -- socket events ----------------------------------------------------------------------
    def start(self) -> None:
        assert self.sock is not None and self.loop is not None
        if _SO_TIMESTAMPNS is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.stamps = True
            except OSError:
                self.stamps = False
        self.pool._register(self)

    def _readable(self) -> None:
        """The socket has data (or was closed): one read, stamped, then parsed."""
        try:
            data, anc, _, _ = self.sock.recvmsg(_READ, _TS_SPACE)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            self._lost(-(err.errno or 0), err)
            return
        if not data:
            self._lost(0)
            return
        now = _perf()
        if anc:  # the one control message we asked for: SCM_TIMESTAMPNS
            raw = anc[0][2]
            if len(raw) >= 16:
                sec, nsec = _timespec(raw)
                t = sec + nsec * 1e-9 - self.pool.clock_offset
                if now - 1.0 < t <= now:  # sane: the kernel got it before we read it
                    now = t
        self.data_received(data, now)

    def _lost(self, code: int, err: OSError | None = None) -> None:
        """A read found the peer gone (``code`` 0) or failed (``code`` = -errno)."""
        self.close()
        if code < 0 and err is None:
            err = OSError(-code, os.strerror(-code))
        self.connection_lost(err)

    def _counted(self, last: int, data: bytes | memoryview, now: float) -> None:
        """``data`` was whole token events; the last said ``completion_tokens: last``."""
        prev, self.last_read = self.last_read, now
        counter = self.counter
        got = last - counter.last_usage  # type: ignore[union-attr]
        counter.last_usage = last  # type: ignore[union-attr]
        rec = counter.rec  # type: ignore[union-attr]
        rec.completion_tokens = last
        if got > 0:
            if rec.first_token is not None:  # the pool's running mean gap between a
                pool = self.pool  # stream's tokens (it decides coalescing)
                pool.token_gap += 0.01 * ((now - prev) / got - pool.token_gap)
            counter._arrived(got, now)  # type: ignore[union-attr]
        if rec.prompt_tokens is None:
            m = _PROMPT.search(data)
            rec.prompt_tokens = int(m.group(1)) if m else None

    def close(self) -> None:
        """Close the socket now (an abort: nothing more is read or written)."""
        if self.sock is not None and not self.closed:
            self.closed = True
            self.pool._unregister(self)
            self.sock.close()
            self.pool._forget(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.fut is not None and not self.fut.done():
            if self.state == _BODY and not self.chunked and self.remaining < 0:
                self._finish()  # body delimited by the close
            else:
                detail = str(exc) if exc else "server closed the connection mid-response"
                self.fut.set_result(("disconnect", detail, self.got_bytes))

    def data_received(self, data: bytes, now: float | None = None) -> None:
        """One read's bytes, all of which reached this host at ``now``."""
        if now is None:
            now = _perf()
        if self.fast:
            last = _scan(data)
            if last >= 0:  # whole token events with per-chunk usage: count, done
                self._counted(last, data, now)
                return
        self.last_read = now
        try:
            if self.state == _BODY:
                self._body(data, now)
            elif self.state == _HEAD:
                self._head(data, now)
            # bytes after the end of a response (none expected) are ignored
        except (_HTTPError, ValueError, UnicodeDecodeError) as err:
            self._fail("protocol", f"{type(err).__name__}: {err}")
            return
        self.fast = (self.state == _BODY and self.chunked and self.error_body is None
                     and self.remaining == 0 and not self.need_crlf and not self.buf
                     and self.counter is not None and self.counter.between_events)

    # -- parsing ----------------------------------------------------------------------------
    def _head(self, data: bytes, now: float) -> None:
        self.got_bytes = True
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                raise _HTTPError("response headers too long")
            self.buf = buf
            return
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise _HTTPError(f"bad status line {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.keep_alive = parts[0] != "HTTP/1.0"
        length = -1
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "transfer-encoding":
                self.chunked = "chunked" in value.lower()
            elif name == "content-length":
                length = int(value)
            elif name == "connection":
                self.keep_alive = value.strip().lower() != "close"
        self.remaining = -1 if self.chunked else length
        if not self.chunked and length < 0:
            self.keep_alive = False  # delimited by the close
        self.buf = b""
        self.state = _BODY
        if self.status != 200:
            self.error_body = []
        rest = buf[end + 4:]
        if rest or (not self.chunked and self.remaining == 0):
            self._body(rest, now)

    def _payload(self, payload: bytes, now: float) -> None:
        if self.error_body is not None:
            self.error_body.append(payload)
        elif payload:
            self.counter.feed(payload, now)  # type: ignore[union-attr]

    def _body(self, data: bytes, now: float) -> None:
        if not self.chunked:
            if self.remaining >= 0:
                data = data[:self.remaining]
                self.remaining -= len(data)
            self._payload(data, now)
            if self.remaining == 0:
                self._finish()
            return
        buf = self.buf + data if self.buf else data
        pos, n = 0, len(buf)
        out: list[bytes] = []
        while pos < n:
            if self.remaining > 0:  # inside a chunk
                end = pos + self.remaining
                if end > n:
                    out.append(buf[pos:])
                    self.remaining -= n - pos
                    pos = n
                    break
                out.append(buf[pos:end])
                pos = end
                self.remaining = 0
                self.need_crlf = True
            if self.need_crlf:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise _HTTPError("chunk not followed by CRLF")
                pos += 2
                self.need_crlf = False
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            size = int(buf[pos:nl].split(b";", 1)[0], 16)
            pos = nl + 2
            if size == 0:  # last chunk; trailers (none expected) end with an empty line
                self.buf = b""
                self._payload(b"".join(out), now)
                self._finish()
                return
            self.remaining = size
        self.buf = buf[pos:] if pos < n else b""
        if out:
            self._payload(out[0] if len(out) == 1 else b"".join(out), now)

    # -- completion -------------------------------------------------------------------------
    def _finish(self) -> None:
        self.state = _DONE
        fut = self.fut
        if fut is not None and not fut.done():
            if self.error_body is not None:
                text = b"".join(self.error_body).decode("utf-8", "replace")
                fut.set_result((f"http_{self.status}", text[:300], True))
            else:
                fut.set_result(None)

    def _fail(self, kind: str, detail: str) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_result((kind, detail, True))
        self.keep_alive = False
        self.close()

    def abort_stalled(self, timeout: float) -> None:
        self._fail("stall", f"no data within the stall timeout ({timeout:g} s)")


class ConnectionPool:
    """Keep-alive connections to one ``http://host:port``; one request per connection."""

    def __init__(self, base_url: str, connect_timeout: float = 10.0,
                 stall_timeout: float = 60.0, coalesce_s: float = 0.001,
                 pass_size: int = PASS_SIZE, native_read: bool = True):
        u = urlsplit(base_url)
        if u.scheme != "http":
            raise ValueError(f"the lean client speaks plain http only, not {u.scheme!r}")
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.host_header = f"{self.host}:{self.port}"
        self.connect_timeout, self.stall_timeout = connect_timeout, stall_timeout
        self._idle: list[_Conn] = []
        self._busy: set[_Conn] = set()
        self._watch: asyncio.Task | None = None
        self._addr: tuple | None = None
        self.clock_offset = _clock_offset()
        self.coalesce_s = coalesce_s
        #: running mean of the time between two tokens of one stream (0 until measured):
        #: coalescing only where it is at least 2 x coalesce_s, so that a socket is read
        #: before its next token lands (else reads bunch at fast steps, e.g. 1 ms x 64)
        self.token_gap = 0.0
        self.pass_size = pass_size
        self._burst = 0  # sockets read so far by the drain in progress (passes chained)
        self._last_burst = 0  # sockets read by the last whole drain
        self._ep = _EPOLL() if _EPOLL is not None else None
        self._fds: dict[int, _Conn] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed = False  # the loop watches the epoll descriptor
        self._stamps = True  # every connection has kernel timestamps (coalescing is safe)
        #: the native read pass (fastread.c), or None: the Python one
        self.native = (fastread.reader(pass_size, _READ)
                       if self._ep is not None and native_read else None)

    # -- readiness --------------------------------------------------------------------------
    def _register(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()  # type: ignore[union-attr]
        if self._ep is None:  # no epoll (not Linux): one loop reader per socket
            conn.loop.add_reader(fd, conn._readable)  # type: ignore[union-attr]
            return
        self._stamps = self._stamps and conn.stamps
        self._fds[fd] = conn
        self._ep.register(fd, select.EPOLLIN)
        if self._loop is None:
            self._loop = conn.loop
        self._arm()

    def _unregister(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()  # type: ignore[union-attr]
        if self._ep is None:
            try:
                conn.loop.remove_reader(fd)  # type: ignore[union-attr]
            except (ValueError, OSError):
                pass
            return
        if self._fds.pop(fd, None) is not None:
            try:
                self._ep.unregister(fd)
            except (ValueError, OSError):
                pass

    def _arm(self) -> None:
        if not self._armed and self._ep is not None and self._loop is not None \
                and not self._loop.is_closed():
            self._loop.add_reader(self._ep.fileno(), self._wake)
            self._armed = True

    def coalescing(self) -> bool:
        """Whether a wake-up waits ``coalesce_s`` before draining: kernel timestamps, not in
        the middle of a drain, the last drain was busy, and a stream's tokens come at
        least 2 x ``coalesce_s`` apart (a shorter gap would make reads bunch)."""
        return (self.coalesce_s > 0 and self._stamps and self._burst == 0
                and self._last_burst >= _BUSY and self.token_gap >= 2 * self.coalesce_s)

    def _wake(self) -> None:
        """Some socket is ready: drain now, or (``coalescing``) a moment later, so that one
        pass reads every socket that became ready meanwhile."""
        if self.coalescing():
            self._loop.remove_reader(self._ep.fileno())  # type: ignore[union-attr]
            self._armed = False
            self._loop.call_later(self.coalesce_s, self._drain)  # type: ignore[union-attr]
        else:
            self._drain()

    def _drain(self) -> None:
        """Read up to ``pass_size`` ready sockets once each. Both epoll sets are
        level-triggered: a longer backlog leaves the pool's descriptor readable, so the
        loop calls ``_wake`` again on its next turn (after any due timers and request
        starts: one burst of reads does not hold them up), which drains on at once."""
        if self._ep is None or self._ep.closed:
            return
        if self.native is not None:
            self._drain_native()
            return
        fds = self._fds
        more = False
        try:
            ready = self._ep.poll(0, self.pass_size)
            self._burst += len(ready)
            more = len(ready) == self.pass_size
            for fd, _ in ready:
                conn = fds.get(fd)
                if conn is not None:
                    conn._readable()
        finally:
            if not more:
                self._last_burst, self._burst = self._burst, 0
            self._arm()

    def _drain_native(self) -> None:
        """``_drain`` with the system calls and the hot-path scan in C (``fastread``): the
        same reads, stamps and decisions; what ``_scan`` would count is counted here."""
        more = False
        try:
            recs = self.native.drain(self._ep.fileno())  # type: ignore[union-attr]
            reads = len(recs) // fastread.FIELDS
            self._burst += reads
            more = reads == self.pass_size
            if not reads:
                return
            fds, view, offset = self._fds, self.native.view, self.clock_offset  # type: ignore
            now = _perf()
            it = iter(recs)
            for fd, off, length, ns, last in zip(it, it, it, it, it):
                conn = fds.get(fd)
                if conn is None:
                    continue
                if length <= 0:
                    conn._lost(length)
                    continue
                t = now
                if ns:
                    t = ns * 1e-9 - offset
                    if not now - 1.0 < t <= now:  # insane: use the pass's clock
                        t = now
                if last >= 0 and conn.fast:
                    conn._counted(last, view[off:off + length], t)
                else:
                    conn.data_received(bytes(view[off:off + length]), t)
        finally:
            if not more:
                self._last_burst, self._burst = self._burst, 0
            self._arm()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if self._addr is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._addr = infos[0]
        family, type_, proto, _, addr = self._addr
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.wait_for(loop.sock_connect(sock, addr), self.connect_timeout)
        except BaseException:
            sock.close()
            raise
        conn = _Conn(self, sock, loop)
        conn.start()
        return conn

    async def acquire(self) -> tuple[_Conn, bool]:
        """A connection and whether it was reused (a reused one may have been closed)."""
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watchdog())
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                self._busy.add(conn)
                return conn, True
        conn = await self._connect()
        self._busy.add(conn)
        return conn, False

    def release(self, conn: _Conn) -> None:
        self._busy.discard(conn)
        if conn.closed:
            return
        if conn.state == _DONE and conn.keep_alive:
            conn._reset(None, None)
            self._idle.append(conn)
        else:
            conn.close()

    def _forget(self, conn: _Conn) -> None:
        self._busy.discard(conn)

    async def _watchdog(self) -> None:
        """Aborts requests that received nothing for the stall timeout (one timer for all)."""
        period = min(max(self.stall_timeout / 8, 0.05), 1.0)
        while True:
            await asyncio.sleep(period)
            limit = _perf() - self.stall_timeout
            for conn in list(self._busy):
                if conn.fut is not None and conn.last_read < limit:
                    conn.abort_stalled(self.stall_timeout)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for conn in self._idle + list(self._busy):
            conn.close()
        self._idle.clear()
        self._busy.clear()
        if self._ep is not None:
            if self._armed and self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._ep.fileno())
            self._armed = False
            self._ep.close()

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def request_bytes(self, path: str, body: dict[str, Any],
                      headers: dict[str, str] | None) -> bytes:
        payload = json.dumps(body, separators=(",", ":")).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(payload)}\r\n{extra}\r\n")
        return head.encode("latin-1") + payload


async def stream_request_lean(pool: ConnectionPool, path: str, body: dict[str, Any] | bytes,
                              rec: RequestRecord, headers: dict[str, str] | None = None) -> None:
    """Send ``body`` to ``path`` and fill ``rec``, like ``client.stream_request``. ``body``
    may be the whole request already (``pool.request_bytes``), built ahead of the clock."""
    data = body if isinstance(body, bytes) else pool.request_bytes(path, body, headers)
    counter = StreamCounter(rec)
    loop = asyncio.get_running_loop()
    rec.start = _perf()
    try:
        for attempt in range(2):
            try:
                conn, reused = await pool.acquire()
            except (OSError, asyncio.TimeoutError) as err:
                rec.error = "connect"
                rec.error_detail = f"{type(err).__name__}: {err}"[:300]
                return
            fut = loop.create_future()
            conn._reset(counter, fut)
            conn.last_read = _perf()
            try:
                await loop.sock_sendall(conn.sock, data)
            except OSError as err:
                conn.close()
                conn.connection_lost(err)
            try:
                outcome = await fut
            finally:
                pool.release(conn)
            if outcome is None:  # ended when its last bytes arrived (kernel time), not
                rec.end = conn.last_read  # when a busy loop got round to it
                counter.finish(rec.end)
                return
            kind, detail, got_bytes = outcome
            if kind == "disconnect" and reused and not got_bytes and attempt == 0:
                continue  # the server had closed the idle keep-alive connection: retry once
            rec.error, rec.error_detail = kind, detail[:300]
            return
    finally:
        if not rec.end:
            rec.end = _perf()
