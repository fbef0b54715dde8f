"""One HTTP/1.1 streaming response on a non-blocking socket: the lean transport's parser.

Why: at one token per read, aiohttp's per-read machinery (stream reader, payload
parser, iterator, task wake-up) costs more than the token itself. Here a connection
(``Connection``) is a non-blocking socket that ``pool.ConnectionPool`` reads for it; each
read goes to ``data_received``. A read's leading whole chunks of whole one-line token
events (the common case: one token per read, or all of a read) are counted in one tight
scan (``_scan_prefix``: no copy, no SSE parse, no JSON); a chunk cut off by the read's end
waits for the next read; only the headers and the stream's end go through the general
parser and ``StreamCounter``. No task wakes up per token.

Timestamps: on Linux each read carries the kernel's receive time
(``SO_TIMESTAMPNS``), converted to the ``perf_counter`` clock. A token's arrival
time is then when it reached this host, not when a busy event loop got round to
it: 256 streams whose tokens land together are not smeared over the time the
client takes to read them. Elsewhere (or if the option is refused, or for a read that
landed before the kernel switched stamping on: it does so a moment after the first
socket asks) the read's ``perf_counter`` is used.

Scope: plain ``http://`` (the load generator runs on the server's node),
keep-alive connections reused across requests, ``Transfer-Encoding: chunked``,
``Content-Length`` or read-to-close bodies. Errors are classified exactly as the
aiohttp path does: ``connect``, ``stall`` (no byte for the stall timeout),
``disconnect`` (closed mid-response), ``http_<status>``, ``protocol``,
``server_error`` and ``truncated``.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import sys
import time
from typing import Protocol

from actors.loadgen.client import (
    _CHOICE,
    _CONTENT_KEY,
    _FINISH,
    _IDS,
    _TEXT_KEY,
    _USAGE,
    StreamCounter,
)

__all__ = ["Connection", "READ_SIZE", "arrival", "tally", "untally"]

_perf = time.perf_counter
_HEAD, _BODY, _DONE = 0, 1, 2
#: the most bytes one read takes from a socket
READ_SIZE = 65536
# Linux (64-bit time_t arches): SO_TIMESTAMPNS = SCM_TIMESTAMPNS = 35 (Python has no name)
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
_TS_SPACE = socket.CMSG_SPACE(16)
_timespec = struct.Struct("qq").unpack_from
_COMPLETION_KEY = b'"completion_tokens":'
_TEXT, _CONTENT = _TEXT_KEY, _CONTENT_KEY
_DIGITS = re.compile(rb"\d+").match


def arrival(stamp: float, now: float) -> float:
    """A read's arrival time: the kernel's ``stamp`` (on the ``perf_counter`` clock) where it
    is sane (before ``now``, when the read was done, and by less than a second), else ``now``."""
    return stamp if now - 1.0 < stamp <= now else now


def tally(k: int, exact: bool) -> int:
    """``_scan``'s code for a read of token events without per-chunk usage: ``k`` tokens,
    ``exact`` when every event listed its token ids (else one per event with text)."""
    return -(2 + (k << 1 | exact))


def untally(code: int) -> tuple[int, bool]:
    """(tokens, exact) of a ``tally`` code (code <= -2)."""
    c = -code - 2
    return c >> 1, bool(c & 1)


def _scan(data: bytes) -> int:
    """The hot path. If the read is whole chunks, each one whole one-line ``data: {``
    event with a non-empty ``choices`` list, all of one of three kinds, then:

    - per-chunk usage (``completion_tokens``): the last event's count (>= 0);
    - token ids and no usage: ``tally(ids listed, exact=True)``;
    - non-empty text (``"text":"`` or chat's ``"content":"``) and neither: ``tally(events,
      exact=False)`` (one token per event, as the general parser counts them).

    Otherwise -1, having changed nothing (the general parser then takes the read). An
    event with a finish reason or a usage object goes to the general parser."""
    code, used = _scan_prefix(data)
    return code if used == len(data) else -1


def _scan_prefix(data: bytes) -> tuple[int, int]:
    """``_scan`` of the longest run of leading chunks it accepts: (its code, the bytes they
    span). It stops before the first chunk that is cut off by the read's end, is not a token
    event (the response's end: a finish reason, a usage object, ``[DONE]``, the zero chunk),
    is malformed, or is of another kind than those before it; (-1, 0) when the first one is.
    A read that brings a response's headers, or a stream's last tokens with its end, or ends
    in a partial chunk (unpaced and bunched streams), is so counted without a parse up to
    there, and only the rest goes to the general parser."""
    find, starts = data.find, data.startswith
    pos, n, last, tallied, mode = 0, len(data), -1, 0, 0  # mode: 1 usage, 2 ids, 3 text
    while pos < n:
        nl = find(b"\r\n", pos, pos + 10)
        if nl <= pos:
            break
        try:  # (int() also takes "+", "_" and spaces: harmless in a size, and the
            size = int(data[pos:nl], 16)  # general parser reads sizes the same way)
        except ValueError:
            break
        start = nl + 2
        end = start + size
        # one line: "data: {...}\n\n", then the chunk's CRLF
        if (size < 10 or end + 2 > n or not starts(b"data: {", start)
                or find(b"\n", start, end) != end - 2 or not starts(b"\n\r\n", end - 1)):
            break
        i = find(_CHOICE, start, end)
        if i < 0:
            break
        # the count: the digits after the last '"completion_tokens":' (a key: a quote inside
        # a JSON string is escaped) after a non-empty choices list
        j = data.rfind(_COMPLETION_KEY, i, end)
        if j >= 0:
            m = _DIGITS(data, j + len(_COMPLETION_KEY), end)
            if m is None or mode > 1:
                break
            mode, last = 1, int(m.group())
        elif mode == 1 or find(_FINISH, i, end) >= 0 or find(_USAGE, i, end) >= 0:
            break
        else:
            j = find(_IDS, i, end)
            if j >= 0:
                close = find(b"]", j, end)
                if close < 0 or close == j + len(_IDS) or mode == 3:
                    break
                mode = 2
                tallied += data.count(b",", j, close) + 1
            else:
                t = find(_TEXT, i, end)
                if t < 0:
                    t = find(_CONTENT, i, end)
                    t = t + len(_CONTENT) if t >= 0 else -1
                else:
                    t += len(_TEXT)
                if t < 0 or t >= end or data[t] == 34 or mode == 2:  # 34: '"', empty text
                    break
                mode = 3
                tallied += 1
        pos = end + 2
    if mode == 1:
        return last, pos
    return (tally(tallied, mode == 2), pos) if tallied else (-1, 0)


def _cut_off(data: bytes) -> bool:
    """``data`` is the start of one HTTP chunk that the read's end cut off (its size line,
    or fewer bytes than the size says, or its closing CRLF missing)."""
    nl = data.find(b"\r\n", 0, 10)
    if nl < 0:
        return len(data) < 10
    try:
        size = int(data[:nl], 16)
    except ValueError:
        return False
    return nl + 2 + size + 2 > len(data)


class PoolView(Protocol):
    """What a ``Connection`` needs of the pool that reads for it (``pool.ConnectionPool``)."""

    clock_offset: float  # CLOCK_REALTIME - perf_counter, for kernel receive stamps
    token_gap: float  # running mean gap between a stream's tokens (coalescing)

    def _register(self, conn: Connection) -> None: ...

    def scan_prefix(self, data: bytes) -> tuple[int, int]: ...  # ``_scan_prefix`` (or in C)

    def _unregister(self, conn: Connection) -> None: ...

    def _forget(self, conn: Connection) -> None: ...


class _HTTPError(Exception):
    """A malformed response: classified as ``protocol``."""


class Connection:
    """One keep-alive connection carrying one request at a time (a non-blocking socket).

    Its ``ConnectionPool`` does the reading: ``_readable`` (one read, Python pass), or
    with the native pass ``_counted`` / ``_tallied`` (a read the C scan found to be whole
    token events while ``fast``, with or without per-chunk usage), ``data_received`` (any
    other read) and ``_lost`` (closed, failed).
    A request's outcome lands in ``fut``: None, or (kind, detail, got_bytes)."""

    def __init__(self, pool: PoolView, sock: socket.socket | None = None,
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
        self.pending = b""  # while fast: the start of a chunk the last read cut off
        self.kept = 0  # the pool's native pass keeps this stream's token reads (their kind)

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
            data, anc, _, _ = self.sock.recvmsg(READ_SIZE, _TS_SPACE)  # type: ignore[union-attr]
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
                now = arrival(sec + nsec * 1e-9 - self.pool.clock_offset, now)
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
        started = counter.rec.first_token is not None  # type: ignore[union-attr]
        got = counter.framed(last, data, now)  # type: ignore[union-attr]
        if got and started:
            pool = self.pool  # the running mean gap between a stream's tokens (coalescing)
            pool.token_gap += 0.01 * ((now - prev) / got - pool.token_gap)

    def _tallied(self, code: int, data: bytes | memoryview, now: float) -> None:
        """``data`` was whole token events without per-chunk usage (``tally`` code)."""
        prev, self.last_read = self.last_read, now
        counter = self.counter
        started = counter.rec.first_token is not None  # type: ignore[union-attr]
        got = counter.tallied(*untally(code), data, now)  # type: ignore[union-attr]
        if started:
            pool = self.pool
            pool.token_gap += 0.01 * ((now - prev) / got - pool.token_gap)

    @property
    def reusable(self) -> bool:
        """The response ended cleanly on a keep-alive connection: it can take the next."""
        return self.state == _DONE and self.keep_alive and not self.closed

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
        """One read's bytes, all of which reached this host at ``now``.

        Between token events (``fast``) the read's leading whole token chunks are counted by
        the scan (``pool.scan_prefix``); a chunk the read's end cut off waits in ``pending``
        for the next read, which is scanned with it; anything else that follows (the
        stream's end) goes to the general parser. A read that brings the headers gives the
        general parser just the headers, then is scanned on."""
        if now is None:
            now = _perf()
        try:
            if self.state == _HEAD:
                self.last_read = now
                data = self._head(data)
                if self.state != _BODY:
                    return
                if not self.chunked:
                    if data or self.remaining == 0:
                        self._body(data, now)
                    return
                self._refresh_fast()
            if self.fast and data:
                if self.pending:
                    data, self.pending = self.pending + data, b""
                code, used = self.pool.scan_prefix(data)
                if used:
                    whole = used == len(data)
                    part = data if whole else data[:used]
                    if code >= 0:
                        self._counted(code, part, now)
                    else:
                        self._tallied(code, part, now)
                    if whole:
                        return
                    data = data[used:]
                if _cut_off(data):
                    self.pending, self.last_read = data, now
                    return
            self.last_read = now
            if self.state == _BODY and data:
                self._body(data, now)
            # bytes after the end of a response (none expected) are ignored
        except (_HTTPError, ValueError, UnicodeDecodeError) as err:
            self._fail("protocol", f"{type(err).__name__}: {err}")
            return
        self._refresh_fast()

    def _refresh_fast(self) -> None:
        self.fast = (self.state == _BODY and self.chunked and self.error_body is None
                     and self.remaining <= 0 and not self.need_crlf and not self.buf
                     and self.counter is not None and self.counter.between_events)

    # -- parsing ----------------------------------------------------------------------------
    def _head(self, data: bytes) -> bytes:
        """Parse the status line and headers; returns the bytes after them (b"" while they
        are incomplete: they wait in ``buf``)."""
        self.got_bytes = True
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                raise _HTTPError("response headers too long")
            self.buf = buf
            return b""
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
        return buf[end + 4:]

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

