"""A lean HTTP/1.1 streaming client on non-blocking sockets (the load generator's fast path).

Why: at one token per read, aiohttp's per-read machinery (stream reader, payload
parser, iterator, task wake-up) costs more than the token itself. Here each
connection is a non-blocking socket with a reader callback on the event loop:
one ``recvmsg`` per read, the chunked framing stripped in place and the bytes
handed to ``StreamCounter``; no task wakes up per token.

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
import socket
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from actors.loadgen.client import StreamCounter
from actors.loadgen.results import RequestRecord

__all__ = ["ConnectionPool", "stream_request_lean"]

_perf = time.perf_counter
_HEAD, _BODY, _DONE = 0, 1, 2
_READ = 262144
# Linux (64-bit time_t arches): SO_TIMESTAMPNS = SCM_TIMESTAMPNS = 35 (Python has no name)
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
_TS_SPACE = socket.CMSG_SPACE(16)
_timespec = struct.Struct("qq").unpack_from


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

    # -- socket events ----------------------------------------------------------------------
    def start(self) -> None:
        assert self.sock is not None and self.loop is not None
        if _SO_TIMESTAMPNS is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.stamps = True
            except OSError:
                self.stamps = False
        self.loop.add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(_READ, _TS_SPACE)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            self.close()
            self.connection_lost(err)
            return
        if not data:
            self.close()
            self.connection_lost(None)
            return
        now = _perf()
        if anc:
            lvl, typ, raw = anc[0]
            if typ == _SO_TIMESTAMPNS and lvl == socket.SOL_SOCKET and len(raw) >= 16:
                sec, nsec = _timespec(raw)
                t = sec + nsec * 1e-9 - self.pool.clock_offset
                if now - 1.0 < t <= now:  # sane: the kernel got it before we read it
                    now = t
        self.data_received(data, now)

    def close(self) -> None:
        """Close the socket now (an abort: nothing more is read or written)."""
        if self.sock is not None and not self.closed:
            self.closed = True
            try:
                self.loop.remove_reader(self.sock.fileno())  # type: ignore[union-attr]
            except (ValueError, OSError):
                pass
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
        if now is None:
            now = _perf()
        self.last_read = now
        try:
            if self.state == _BODY:
                if (self.remaining == 0 and self.chunked and not self.buf
                        and not self.need_crlf and self.error_body is None
                        and self._whole_chunks(data, now)):
                    return
                self._body(data, now)
            elif self.state == _HEAD:
                self._head(data, now)
            # bytes after the end of a response (none expected) are ignored
        except (_HTTPError, ValueError, UnicodeDecodeError) as err:
            self._fail("protocol", f"{type(err).__name__}: {err}")

    # -- parsing ----------------------------------------------------------------------------
    def _whole_chunks(self, data: bytes, now: float) -> bool:
        """The hot path: the read is whole chunks, each one whole one-line ``data:`` event
        (one token per read, or several when the client fell behind). False, having
        consumed nothing, for anything else (the general parser takes it)."""
        counter = self.counter
        if counter is None or not counter.between_events:
            return False
        pos, n = 0, len(data)
        spans: list[int] = []
        while pos < n:
            nl = data.find(b"\r\n", pos, pos + 10)
            if nl < 0:
                return False
            try:
                size = int(data[pos:nl], 16)
            except ValueError:  # chunk extensions and the like
                return False
            start = nl + 2
            end = start + size
            if (size < 8 or end + 2 > n or not data.startswith(b"\r\n", end)
                    or not data.startswith(b"data: ", start)
                    or not data.endswith(b"\n\n", start, end)
                    or data.find(b"\n", start, end - 2) >= 0):
                return False
            spans.append(start + 6)
            spans.append(end - 2)
            pos = end + 2
        counter.feed_spans(data, spans, now)
        return True

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
                 stall_timeout: float = 60.0):
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
            if outcome is None:
                counter.finish(_perf())
                return
            kind, detail, got_bytes = outcome
            if kind == "disconnect" and reused and not got_bytes and attempt == 0:
                continue  # the server had closed the idle keep-alive connection: retry once
            rec.error, rec.error_detail = kind, detail[:300]
            return
    finally:
        rec.end = _perf()
