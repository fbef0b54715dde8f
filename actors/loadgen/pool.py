"""Keep-alive connections to one server, read from one ``epoll`` set (the lean transport).

On Linux the pool keeps every connection's socket in one ``epoll`` set whose
descriptor is the only thing the event loop watches, so one loop callback reads up
to ``pass_size`` ready sockets (one ``recvmsg`` each, handed to ``http1.Connection``)
instead of one callback per socket. Elsewhere each socket gets its own loop reader.

Native read pass: where ``fastread`` can build its C pass (Linux with a C compiler),
one call per loop callback does the ``epoll_wait``, the ``recvmsg`` of every ready
socket and the hot-path scan; Python then only records what it found
(``_pass_native``). Once a stream's first token is counted, its socket is armed: C keeps
its whole-token reads and hands over only the first other one (``_arm_kept``,
``_take_kept``), so at one token per read no Python runs per token; a native pass reads up
to ``KEPT_PASS`` x ``pass_size`` sockets but hands Python at most ``pass_size`` reads
(benchmarks/README.md). Without it the same pass runs in Python (``_pass_python``).

Coalescing: with kernel timestamps a read's arrival time does not depend on when
it is read, so where many sockets become ready within ``coalesce_s`` (default 1 ms)
the pool waits that long after a wake-up before draining: the sockets that became ready
meanwhile are read in the same pass, one ``epoll_wait`` and one loop turn for many reads.
"Many" is measured, not guessed: the busy connections over the running mean gap between a
stream's tokens (``token_gap``, measured on every read, in C for kept ones) is the rate
at which sockets become ready; the pool waits where that rate brings at least
``_SPREAD`` reads per wait, and only where a stream's tokens come at least 2 x
``coalesce_s`` apart (so that they are still read one per read; no wait until measured).
Not shorter: the loop's selector sleeps whole milliseconds, so a 0.25 ms wait is a 1 ms
one. A quiet client drains at once (no delay before the next request is sent); without
kernel timestamps there is no coalescing.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from actors.loadgen import fastread
from actors.loadgen.client import StreamCounter
from actors.loadgen.http1 import READ_SIZE, Connection, _scan_prefix, arrival, untally
from actors.loadgen.records import RequestRecord

__all__ = ["ConnectionPool", "PASS_SIZE", "stream_request_lean"]

_perf = time.perf_counter
_EPOLL = getattr(select, "epoll", None)
#: coalesce where the sockets expected to become ready within one wait are at least this
#: many (else each wake reads about one socket and the wait only adds delay)
_SPREAD = 4
#: reads handed to Python per loop callback at most: 16 reads (~0.3 ms; more where a read
#: ends a stream and starts the next request) keep a timer or a request start from waiting
#: behind a whole step of reads (256 at once kept loop lag p99 at 5-25 ms at 256 streams even
#: a third loaded); smaller costs more per token (benchmarks/README.md)
PASS_SIZE = 16
#: a native pass reads up to KEPT_PASS x pass_size sockets (256), most of them kept in C
#: (~4-5 us each, the kernel's read mostly): a pass costs ~90 us beyond its reads on a VM
#: (the loop turn, the C call, the loop's own epoll_wait), so one pass takes a 256-stream
#: step whole (loop lag p99 stayed 1-2 ms; 4 x 16 cost ~0.8 us per token more)
KEPT_PASS = 16


def _broken(conn: Connection, err: Exception) -> None:
    """A read its connection could not take (e.g. bytes on an idle connection): that request
    fails as ``protocol`` and the connection closes; the other reads of the pass (already
    taken from their sockets) are still delivered."""
    conn._fail("protocol", f"unexpected {type(err).__name__}: {err}")  # (closes it)


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
        self._idle: list[Connection] = []
        self._busy: set[Connection] = set()
        self._watch: asyncio.Task | None = None
        self._addr: tuple | None = None
        self.clock_offset = _clock_offset()
        self.coalesce_s = coalesce_s
        #: running mean of the time between two tokens of one stream (0 until measured):
        #: coalescing only where it is at least 2 x coalesce_s, so that a socket is read
        #: before its next token lands (else reads bunch at fast steps, e.g. 1 ms x 64)
        self.token_gap = 0.0
        self.pass_size = pass_size
        self._draining = False  # the last pass left sockets ready: the drain goes on
        self._ep = _EPOLL() if _EPOLL is not None else None
        self._fds: dict[int, Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed = False  # the loop watches the epoll descriptor
        self._stamps = True  # every connection has kernel timestamps (coalescing is safe)
        #: the native read pass (fastread.c), or None: the Python one
        self.native = (fastread.reader(pass_size, READ_SIZE, KEPT_PASS * pass_size)
                       if self._ep is not None and native_read else None)
        self.kept_reads = 0  # reads the native pass kept in C (never handed to Python)
        self.coalesced = 0  # wake-ups that waited coalesce_s before draining
        self.passes = 0  # read passes run (one epoll_wait each)
        #: a read's leading whole token chunks (``http1._scan_prefix``; in C with the native
        #: pass): how a connection counts what a drain's scan did not take at once
        self.scan_prefix = ((self.native is not None and fastread.prefix_scanner())
                            or _scan_prefix)

    # -- readiness --------------------------------------------------------------------------
    def _register(self, conn: Connection) -> None:
        fd = conn.sock.fileno()  # type: ignore[union-attr]
        if self._ep is None:  # no epoll (not Linux): one loop reader per socket
            conn.loop.add_reader(fd, conn._readable)  # type: ignore[union-attr]
            return
        self._stamps = self._stamps and conn.stamps
        if self.native is not None:
            self.native.forget(fd)  # a new socket: nothing of an earlier one on this fd
        self._fds[fd] = conn
        self._ep.register(fd, select.EPOLLIN)
        if self._loop is None:
            self._loop = conn.loop
        self._arm()

    def _unregister(self, conn: Connection) -> None:
        fd = conn.sock.fileno()  # type: ignore[union-attr]
        if self._ep is None:
            try:
                conn.loop.remove_reader(fd)  # type: ignore[union-attr]
            except (ValueError, OSError):
                pass
            return
        if conn.kept:
            self._take_kept(conn)  # a stream closed mid-way keeps what it got
        if self.native is not None:
            self.native.forget(fd)
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
        the middle of a drain, a stream's tokens come at least 2 x ``coalesce_s`` apart (a
        shorter gap would make reads bunch), and at the busy streams' rate at least
        ``_SPREAD`` sockets become ready within one wait."""
        gap = self.token_gap
        return (self.coalesce_s > 0 and self._stamps and not self._draining
                and gap >= 2 * self.coalesce_s
                and len(self._busy) * self.coalesce_s >= _SPREAD * gap)

    def _wake(self) -> None:
        """Some socket is ready: drain now, or (``coalescing``) a moment later, so that one
        pass reads every socket that became ready meanwhile."""
        if self.coalescing():
            self.coalesced += 1
            self._loop.remove_reader(self._ep.fileno())  # type: ignore[union-attr]
            self._armed = False
            self._loop.call_later(self.coalesce_s, self._drain)  # type: ignore[union-attr]
        else:
            self._drain()

    def _drain(self) -> None:
        """Read up to ``pass_size`` ready sockets once each (one pass). Both epoll sets are
        level-triggered: a longer backlog leaves the pool's descriptor readable, so the
        loop calls ``_wake`` again on its next turn (after any due timers and request
        starts: one burst of reads does not hold them up), which drains on at once."""
        if self._ep is None or self._ep.closed:
            return
        self._draining = False
        self.passes += 1
        try:
            self._draining = (self._pass_native() if self.native is not None
                              else self._pass_python())
        finally:
            self._arm()

    def _pass_python(self) -> bool:
        """One pass in Python; returns whether sockets were left ready (the drain goes on)."""
        ready = self._ep.poll(0, self.pass_size + 1)  # type: ignore[union-attr]
        more = len(ready) > self.pass_size
        for fd, _ in ready[:self.pass_size]:
            conn = self._fds.get(fd)
            if conn is not None:
                try:
                    conn._readable()
                except Exception as err:  # noqa: BLE001 - see _broken
                    _broken(conn, err)
        return more

    def _pass_native(self) -> bool:
        """One pass with the system calls and the hot-path scan in C (``fastread``): the
        same reads, stamps and decisions as ``_pass_python``, and the same return.
        A connection whose read was all whole token chunks is then armed (``_arm_kept``):
        C keeps its next such reads itself and hands over only the first other one, after
        which ``_take_kept`` records what it kept, in order, before that read."""
        native = self.native
        recs = native.drain(self._ep.fileno(), self.token_gap)  # type: ignore[union-attr]
        self.token_gap = native.gap  # type: ignore[union-attr]
        fds, view, offset = self._fds, native.view, self.clock_offset  # type: ignore
        now = _perf()
        it = iter(recs)
        for fd, off, length, ns, last, used, kept in zip(it, it, it, it, it, it, it):
            conn = fds.get(fd)
            if conn is None:
                if kept:
                    native.forget(fd)  # type: ignore[union-attr]
                continue
            if kept:
                self._take_kept(conn)
            if length <= 0:
                conn._lost(length)
                continue
            t = arrival(ns * 1e-9 - offset, now) if ns else now
            try:
                if used and conn.fast and not conn.pending:  # leading whole token chunks
                    if last >= 0:
                        conn._counted(last, view[off:off + used], t)
                    else:
                        conn._tallied(last, view[off:off + used], t)
                    if used < length:  # then the stream's end, or a chunk cut off
                        conn.data_received(bytes(view[off + used:off + length]), t)
                    elif not kept:
                        self._arm_kept(conn, fd, last)
                else:
                    conn.data_received(bytes(view[off:off + length]), t)
            except Exception as err:  # noqa: BLE001 - see _broken
                _broken(conn, err)
        self.kept_reads += native.kept_reads  # type: ignore[union-attr]
        return native.more  # type: ignore[union-attr]

    def _arm_kept(self, conn: Connection, fd: int, code: int) -> None:
        """After a read of whole token chunks (scan ``code``): let C keep this stream's next
        such reads, once the counter has what it needs from Python (the first token; with
        per-chunk usage, the prompt's count). Not after a read that was kept and handed
        back (the stream changed kind, or a chunk was cut: Python goes on reading it)."""
        counter = conn.counter
        if conn.kept or counter is None or not conn.fast or conn.pending \
                or counter.rec.first_token is None:
            return
        if code >= 0:
            if counter.rec.prompt_tokens is None:
                return
            kind, last = fastread.USAGE, counter.last_usage
        else:
            kind, last = (fastread.IDS if untally(code)[1] else fastread.TEXT), 0
        prev_ns = int((conn.last_read + self.clock_offset) * 1e9)  # for the first kept gap
        if self.native.arm(fd, kind, last, prev_ns):  # type: ignore[union-attr]
            conn.kept = kind

    def _take_kept(self, conn: Connection) -> None:
        """Record what C kept of ``conn``'s stream (``fastread.Kept``) as the Python pass
        would have, read by read: the bytes for the proof, the arrivals merged where they
        share a time, the count and the stall clock (C moved the running mean token gap
        as it kept each read)."""
        kind, conn.kept = conn.kept, 0
        fd = conn.sock.fileno() if conn.sock is not None else -1
        offset = self.clock_offset
        got = self.native.take(fd, offset) if fd >= 0 else None  # type: ignore[union-attr]
        counter = conn.counter
        if got is None or counter is None:
            return
        rec = counter.rec
        rec.body.append((True, got.data))
        rec.scanned_events += got.events
        if kind == fastread.USAGE:
            counter.last_usage = rec.completion_tokens = got.last
        conn.last_read = got.last_ns * 1e-9 - offset
        if not got.counts:
            return
        times, counts = got.times, got.counts
        if rec.arrivals and rec.arrivals[-1] == times[0]:
            rec.counts[-1] += counts[0]
            times, counts = times[1:], counts[1:]
        rec.arrivals.extend(times)
        rec.counts.extend(counts)
        rec.chunk_tokens += got.tokens

    async def _connect(self) -> Connection:
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
        conn = Connection(self, sock, loop)
        conn.start()
        return conn

    async def acquire(self) -> tuple[Connection, bool]:
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

    def release(self, conn: Connection) -> None:
        self._busy.discard(conn)
        if conn.kept:  # (a response ends on a read handed back, so not expected)
            self._take_kept(conn)
        if conn.closed:
            return
        if conn.reusable:
            conn._reset(None, None)
            self._idle.append(conn)
        else:
            conn.close()

    def _forget(self, conn: Connection) -> None:
        self._busy.discard(conn)

    async def _watchdog(self) -> None:
        """Aborts requests that received nothing for the stall timeout (one timer for all)."""
        period = min(max(self.stall_timeout / 8, 0.05), 1.0)
        while True:
            await asyncio.sleep(period)
            limit = _perf() - self.stall_timeout
            for conn in list(self._busy):
                if conn.kept and conn.sock is not None:  # its reads are counted in C
                    last_ns = self.native.armed(conn.sock.fileno())[1]  # type: ignore
                    if last_ns:
                        conn.last_read = max(conn.last_read,
                                             last_ns * 1e-9 - self.clock_offset)
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
            except (TimeoutError, OSError) as err:
                rec.error = "connect"
                rec.error_detail = f"{type(err).__name__}: {err}"[:300]
                return
            sock = conn.sock
            if sock is None:  # the pool opens every connection with its socket
                raise RuntimeError("a pooled connection has no socket")
            fut = loop.create_future()
            conn._reset(counter, fut)
            conn.last_read = _perf()
            try:
                await loop.sock_sendall(sock, data)
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
