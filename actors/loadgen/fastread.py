"""The lean transport's native read pass (``fastread.c``): built at install time, optional.

Why: at one token per read the client's cost is per read, and in Python even a bare
``epoll`` + ``recvmsg`` loop spends about 15 us of a small VM core per token before
any parsing (benchmarks/README.md), so 51.2k tokens/s (5 ms x 256 streams) took a
whole core. The C pass does the system calls and the hot-path scan of a whole drain
pass in one call; Python keeps every decision and all HTTP/SSE state
(``pool.ConnectionPool._pass_native``), so both paths count the same tokens.

Kept reads: once a stream is between token events and its first token is counted, the
pool arms its socket (``NativeReader.arm``); C then keeps each read that is all whole
token chunks of that stream's kind (bytes, arrival time, tokens) instead of handing it
over, and hands over, flagged, only the first read that is not (the stream's end, a cut
chunk, EOF), before which the pool records what was kept (``NativeReader.take``,
``pool.ConnectionPool._take_kept``). At one token per read no Python runs per token.

Contract: ``reader()`` returns a ``NativeReader`` or None (then the pure-Python drain
runs; ``why_not()`` says why). None where: not Linux, ``SERVESWEEP_NATIVE_READ=0``, the
library was not built at install time (no C compiler then), or it does not load.

The library is built once, when the package is installed (``setup.py``: an optional
extension, so a missing compiler does not fail the install), as ``_fastread<EXT_SUFFIX>``
next to this file; an editable install (``pip install -e .``) builds it in place. This
module only loads it with ctypes: it compiles nothing and writes nothing at run time.
After changing ``fastread.c``, rebuild it: ``pip install -e .`` or ``make`` (or
``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import ctypes
import os
import sys
from array import array
from collections.abc import Callable
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import NamedTuple

from actors.contracts.settings import settings

__all__ = ["NativeReader", "Kept", "reader", "why_not", "FIELDS", "USAGE", "IDS", "TEXT", "scan",
           "scan_prefix", "prefix_scanner"]

FIELDS = 7  # per read: fd, offset, length, kernel stamp ns (0: none), scan (-1: none),
#            the bytes the scan took from the read's start (``http1._scan_prefix``), and
#            1 when the socket's kept reads precede this one (``NativeReader.take``)
_NAME = "_fastread"  # setup.py's Extension("actors.loadgen._fastread", ...)
_DIR = Path(__file__).parent  # where the install put it
_state: dict[str, object] = {}

NOT_BUILT = ("the native read pass was not built at install time: no C compiler was found "
             "(or it failed: pip's log has the warning; no {name}*.so in {dir}); reinstall "
             "with one (apt-get install gcc, then pip install -e . again)")


def _find(directory: Path) -> Path | None:
    """The installed library in ``directory`` (this interpreter's suffix first), or None."""
    for suffix in EXTENSION_SUFFIXES:
        path = directory / (_NAME + suffix)
        if path.is_file():
            return path
    return None


def _load() -> ctypes.CDLL | str:
    if sys.platform != "linux":
        return f"native reads are Linux-only (this is {sys.platform})"
    if not settings().native_read:
        return "disabled by SERVESWEEP_NATIVE_READ=0"
    path = _find(_DIR)
    if path is None:
        return NOT_BUILT.format(name=_NAME, dir=_DIR)
    try:
        lib = ctypes.CDLL(str(path))
        lib.ss_drain.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                 ctypes.c_long,
                                 ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p, ctypes.c_void_p]
        lib.ss_drain.restype = ctypes.c_long
        lib.ss_arm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
        lib.ss_arm.restype = ctypes.c_int
        lib.ss_forget.argtypes = [ctypes.c_int]
        lib.ss_forget.restype = None
        lib.ss_kept.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.ss_kept.restype = None
        lib.ss_take.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_double]
        lib.ss_take.restype = None
        lib.ss_scan.argtypes = [ctypes.c_char_p, ctypes.c_long]
        lib.ss_scan.restype = ctypes.c_longlong
        lib.ss_scan_prefix.argtypes = [ctypes.c_char_p, ctypes.c_long,
                                       ctypes.POINTER(ctypes.c_long)]
        lib.ss_scan_prefix.restype = ctypes.c_longlong
    except (OSError, AttributeError) as err:
        return f"cannot load {path}: {err}; reinstall to rebuild it (pip install -e .)"
    return lib


def _library() -> ctypes.CDLL | None:
    if "lib" not in _state:
        got = _load()
        _state["lib"], _state["why"] = (None, got) if isinstance(got, str) else (got, "")
    return _state["lib"]  # type: ignore[return-value]


def why_not() -> str:
    """Why ``reader()`` returns None ("" when it does not)."""
    _library()
    return str(_state["why"])


def scan(data: bytes) -> int:
    """The C hot-path scan of ``data`` (for tests: it must agree with ``http1._scan``)."""
    lib = _library()
    if lib is None:
        raise RuntimeError(why_not())
    return int(lib.ss_scan(data, len(data)))


def scan_prefix(data: bytes) -> tuple[int, int]:
    """The C ``ss_scan_prefix`` of ``data``: (code, bytes taken), as ``http1._scan_prefix``."""
    lib = _library()
    if lib is None:
        raise RuntimeError(why_not())
    used = ctypes.c_long(0)
    code = int(lib.ss_scan_prefix(data, len(data), ctypes.byref(used)))
    return code, used.value


def prefix_scanner() -> Callable[[bytes], tuple[int, int]] | None:
    """``scan_prefix`` where the library loads, else None (use ``http1._scan_prefix``)."""
    return scan_prefix if _library() is not None else None


class Kept(NamedTuple):
    """A socket's kept reads (``NativeReader.take``): their bytes (whole token chunks, in
    order), one arrival time (on the caller's clock) and token count per arrival, the
    events among the bytes, the tokens, the last ``completion_tokens`` (per-chunk usage)
    and the last read's arrival (ns of CLOCK_REALTIME)."""

    data: bytes
    times: list[float]
    counts: list[int]
    events: int
    tokens: int
    last: int
    last_ns: int


#: a socket's kept reads are of one kind (``NativeReader.arm``)
USAGE, IDS, TEXT = 1, 2, 3


class NativeReader:
    """Buffers for one pool's passes: ``drain(epfd)`` reads up to ``reads`` ready sockets
    (default ``pass_size``), hands at most ``pass_size`` of the reads over, and returns
    their records (``FIELDS`` ints per read, flat), indexing into the bytes buffer ``view``,
    valid until the next ``drain``;
    ``kept_reads``: the reads of that pass that armed sockets kept (``arm``, ``take``);
    ``more``: sockets were left ready after it (the drain goes on);
    ``gap``: the running mean gap between a stream's tokens given to ``drain``, moved by
    each kept read as the pool moves it per read in Python (``http1.Connection._counted``)."""

    def __init__(self, lib: ctypes.CDLL, pass_size: int, per_read: int,
                 reads: int | None = None):
        self._lib = lib
        self._fn = lib.ss_drain
        self.pass_size, self.per_read = pass_size, per_read
        self.reads = max(reads or pass_size, pass_size)
        size = pass_size * per_read
        self._buf = bytearray(size)
        self._out = bytearray(8 * FIELDS * pass_size)
        self._cbuf = (ctypes.c_char * size).from_buffer(self._buf)
        self._cout = (ctypes.c_char * len(self._out)).from_buffer(self._out)
        self._buf_addr = ctypes.addressof(self._cbuf)
        self._out_addr = ctypes.addressof(self._cout)
        self._kept = ctypes.c_long(0)
        self._kept_addr = ctypes.addressof(self._kept)
        self._gap = ctypes.c_double(0.0)
        self._gap_addr = ctypes.addressof(self._gap)
        self.gap = 0.0
        self._more = ctypes.c_int(0)
        self._more_addr = ctypes.addressof(self._more)
        self.more = False
        self._info = (ctypes.c_longlong * 8)()
        self.kept_reads = 0
        self.view = memoryview(self._buf)
        self._records = memoryview(self._out).cast("q")

    def drain(self, epfd: int, gap: float = 0.0) -> list[int]:
        """Flat records of this pass's reads; raises OSError if ``epoll_wait`` failed.
        ``gap`` (seconds) is the running mean token gap so far; ``self.gap`` is it after."""
        self._gap.value = gap
        n = self._fn(epfd, self.reads, self.pass_size, self._buf_addr, len(self._buf),
                     self.per_read,
                     self._out_addr, self._kept_addr, self._gap_addr, self._more_addr)
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        self.kept_reads, self.gap, self.more = self._kept.value, self._gap.value, \
            bool(self._more.value)
        return self._records[:n * FIELDS].tolist()

    def arm(self, fd: int, kind: int, last: int = 0, prev_ns: int = 0) -> bool:
        """Keep ``fd``'s reads that are all whole token chunks of ``kind`` (``USAGE``, with
        ``last`` the count so far; ``IDS``; ``TEXT``) until one is not; False: no memory.
        ``prev_ns``: the stream's last read's arrival (ns of CLOCK_REALTIME; 0: none), from
        which the first kept read's token gap is measured."""
        return self._lib.ss_arm(fd, kind, last, prev_ns) == 0

    def forget(self, fd: int) -> None:
        """``fd`` is closing: drop its state (take what it kept first)."""
        self._lib.ss_forget(fd)

    def armed(self, fd: int) -> tuple[bool, int]:
        """(armed, the last read's arrival in ns of CLOCK_REALTIME: kept, else the one
        given to ``arm``; 0: none)."""
        self._lib.ss_kept(fd, self._info)
        return bool(self._info[0]), self._info[6]

    def take(self, fd: int, offset: float = 0.0) -> Kept | None:
        """What ``fd`` kept since it was armed or last taken (None: nothing); forgets it.
        Arrival times are ``ns * 1e-9 - offset`` (the pool's clock), as the pool computes
        a handed-over read's."""
        info = self._info
        self._lib.ss_kept(fd, info)
        nbytes, narr = info[1], info[2]
        if not nbytes:
            return None
        data = ctypes.string_at(info[7], nbytes)  # one copy, straight into the bytes object
        times, counts = array("d", bytes(8 * narr)), array("q", bytes(8 * narr))
        self._lib.ss_take(fd, None, times.buffer_info()[0], counts.buffer_info()[0], offset)
        return Kept(data, times.tolist(), counts.tolist(), info[3], info[4], info[5], info[6])


def reader(pass_size: int, per_read: int, reads: int | None = None) -> NativeReader | None:
    """A native reader for one pool, or None (see ``why_not``)."""
    lib = _library()
    return NativeReader(lib, pass_size, per_read, reads) if lib is not None else None
