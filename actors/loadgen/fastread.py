"""The lean transport's native read pass (``fastread.c``): built on first use, optional.

Why: at one token per read the client's cost is per read, and in Python even a bare
``epoll`` + ``recvmsg`` loop spends about 15 us of a small VM core per token before
any parsing (benchmarks/README.md), so 51.2k tokens/s (5 ms x 256 streams) took a
whole core. The C pass does the system calls and the hot-path scan of a whole drain
pass in one call; Python keeps every decision and all HTTP/SSE state
(``pool.ConnectionPool._pass_native``), so both paths count the same tokens.

Contract: ``reader()`` returns a ``NativeReader`` or None (then the pure-Python drain
runs; ``why_not()`` says why). None where: not Linux, ``SERVESWEEP_NATIVE_READ=0``,
no C compiler, or the build or load failed. The library is compiled once per source
version into ``_build/`` next to this file (atomic rename, so concurrent first uses
are safe), or into the user cache directory where the package is read-only.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["NativeReader", "reader", "why_not", "FIELDS"]

FIELDS = 5  # per read: fd, offset, length, kernel stamp ns (0: none), scan (-1: none)
_SOURCE = Path(__file__).with_name("fastread.c")
_state: dict[str, object] = {}


def _build_dirs() -> list[Path]:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [_SOURCE.parent / "_build", cache / "servesweep"]


def _compile(out: Path) -> str | None:
    """Build the shared library at ``out``; None, or why it could not."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler (cc/gcc) on PATH"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
    except OSError as err:
        return f"cannot write {out.parent}: {err}"
    try:
        proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(_SOURCE)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            return f"{cc} failed: {proc.stderr.strip()[:300]}"
        os.replace(tmp, out)
        return None
    except (OSError, subprocess.SubprocessError) as err:
        return f"{cc} failed: {err}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load() -> ctypes.CDLL | str:
    if sys.platform != "linux":
        return f"native reads are Linux-only (this is {sys.platform})"
    if os.environ.get("SERVESWEEP_NATIVE_READ", "1") == "0":
        return "disabled by SERVESWEEP_NATIVE_READ=0"
    tag = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:12]
    name = f"fastread-{tag}-{platform.machine()}.so"
    errors = []
    for d in _build_dirs():
        path = d / name
        if not path.exists():
            err = _compile(path)
            if err is not None:
                errors.append(err)
                continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as err:
            errors.append(f"cannot load {path}: {err}")
            continue
        lib.ss_drain.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_long,
                                 ctypes.c_long, ctypes.c_void_p]
        lib.ss_drain.restype = ctypes.c_long
        lib.ss_scan.argtypes = [ctypes.c_char_p, ctypes.c_long]
        lib.ss_scan.restype = ctypes.c_longlong
        return lib
    return "; ".join(errors)


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


class NativeReader:
    """Buffers for one pool's passes: ``drain(epfd)`` reads up to ``pass_size`` ready
    sockets and returns their records (``FIELDS`` ints per read, flat) and the bytes
    buffer they index into, valid until the next ``drain``."""

    def __init__(self, lib: ctypes.CDLL, pass_size: int, per_read: int):
        self._fn = lib.ss_drain
        self.pass_size, self.per_read = pass_size, per_read
        size = pass_size * per_read
        self._buf = bytearray(size)
        self._out = bytearray(8 * FIELDS * pass_size)
        self._cbuf = (ctypes.c_char * size).from_buffer(self._buf)
        self._cout = (ctypes.c_char * len(self._out)).from_buffer(self._out)
        self._buf_addr = ctypes.addressof(self._cbuf)
        self._out_addr = ctypes.addressof(self._cout)
        self.view = memoryview(self._buf)
        self._records = memoryview(self._out).cast("q")

    def drain(self, epfd: int) -> list[int]:
        """Flat records of this pass's reads; raises OSError if ``epoll_wait`` failed."""
        n = self._fn(epfd, self.pass_size, self._buf_addr, len(self._buf), self.per_read,
                     self._out_addr)
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return self._records[:n * FIELDS].tolist()


def reader(pass_size: int, per_read: int) -> NativeReader | None:
    """A native reader for one pool, or None (see ``why_not``)."""
    lib = _library()
    return NativeReader(lib, pass_size, per_read) if lib is not None else None
