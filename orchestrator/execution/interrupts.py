"""A driver's Ctrl-C and SIGTERM, never lost: held from the sweep's creation to its end.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be. Where
that is code Python cannot raise from (an at-fork hook such as ``logging``'s
``_releaseLock`` while Ray starts its processes, a finaliser), it prints "Exception ignored
in ..." and goes on: once in 13 tries a Ctrl-C during Ray's start was lost that way and the
sweep ran to its end. ``InterruptGuard`` therefore records every SIGINT and SIGTERM before
raising it, and ``check()`` raises it again at the driver's next step until the driver has
handled it (``handled()``). The controller calls ``check()`` every tick; ``execute`` after
each phase of its start. Ray's start runs ``deferred()``: a signal then is raised when Ray
is up, so that ``ray.shutdown()`` stops all of it.

Contract: while a guard is active (``with InterruptGuard():``, main thread only), a SIGINT
or SIGTERM is never swallowed: it surfaces as ``KeyboardInterrupt`` at the signal or at the
next ``check()``, and the driver records an ``interrupted`` event (``record_interrupt``)
before it exits 130.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

from orchestrator.results.events import EventKind, Interrupted
from orchestrator.results.ledger import Ledger

__all__ = ["InterruptGuard", "check", "deferred", "kept", "handled", "record_interrupt"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_active: InterruptGuard | None = None


class InterruptGuard:
    """Hold SIGINT and SIGTERM for the ``with`` block (see the module's contract)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received, until handled
        self._previous: dict[int, Any] = {}
        self._outer: InterruptGuard | None = None
        self.defer = False  # inside ``deferred()``: record, raise when it ends

    def __enter__(self) -> InterruptGuard:
        """Guards nest: an inner one hands a signal it did not see handled to the outer."""
        global _active
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
            self._outer, _active = _active, self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        global _active
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._previous and _active is self:
            _active = self._outer
            if self._outer is not None and self.signum is not None:
                self._outer.signum = self._outer.signum or self.signum
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        if not self.defer:
            raise KeyboardInterrupt(f"signal {signum}")

    def reinstall(self) -> None:
        """Take SIGINT and SIGTERM back from a library that set its own handlers."""
        for sig in self._previous:
            signal.signal(sig, self._on_signal)

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` again if a signal came and was not handled yet."""
        if self.signum is not None:
            raise KeyboardInterrupt(f"signal {self.signum} (raised again)")

    def handled(self) -> None:
        """The driver is stopping for the signal: ``check()`` stops raising it."""
        self.signum = None


@contextmanager
def deferred() -> Iterator[None]:
    """Signals during the block are recorded, not raised, and raised as it ends: for a call
    that an interrupt would leave half done (``ray.init`` starts Ray's servers as this
    process's children; stopped midway, some outlive the driver). A block that fails after a
    signal came fails as the interrupt (the signal is the likely cause: a terminal's Ctrl-C
    reaches Ray's servers too). Without an active guard, nothing changes."""
    guard = _active
    if guard is None:
        yield
        return
    guard.defer = True
    try:
        yield
    except Exception:
        if guard.signum is None:
            raise
        raise KeyboardInterrupt(f"signal {guard.signum} (during a deferred call)") from None
    finally:
        guard.defer = False
        guard.reinstall()
    guard.check()


class _SigAction(ctypes.Structure):
    """glibc's ``struct sigaction`` (Linux): handler, mask, flags, restorer."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


@contextmanager
def kept() -> Iterator[None]:
    """For a call that resets SIGINT or SIGTERM to the default below Python, where
    ``signal.getsignal`` does not see it (``ray.shutdown``: Ray's core does, about 0.3 s
    into its 1.5 s, so a SIGTERM then killed the driver unrecorded): a watcher thread puts
    the process's own action back within a millisecond of each reset (``sigaction``
    through ctypes; without glibc nothing is watched), and the guard's handlers are
    reinstalled after the call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        saved = {sig: _SigAction() for sig in _SIGNALS}
        for sig, act in saved.items():
            if libc.sigaction(int(sig), None, ctypes.byref(act)) != 0:
                raise OSError(ctypes.get_errno(), "sigaction")
    except (OSError, AttributeError):
        yield
        return
    done = threading.Event()

    def watch() -> None:
        now = _SigAction()
        while not done.wait(0.001):
            for sig, act in saved.items():
                libc.sigaction(int(sig), None, ctypes.byref(now))
                if now.handler != act.handler:
                    libc.sigaction(int(sig), ctypes.byref(act), None)

    watcher = threading.Thread(target=watch, name="servesweep-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        if _active is not None:
            _active.reinstall()


def check() -> None:
    """``check()`` of the active guard; nothing without one (a controller driven by a test).
    It also takes the signals back: Ray's C++ core installs its own SIGTERM handler below
    Python's (a stack trace, then death by the signal), which ``signal.getsignal`` does not
    show."""
    if _active is not None:
        _active.reinstall()
        _active.check()


def handled() -> None:
    """``handled()`` of the active guard (and of those it nests in)."""
    guard = _active
    while guard is not None:
        guard.handled()
        guard = guard._outer


def record_interrupt(ledger: Ledger, reason: str, reaped: list[int] | None = None) -> None:
    """Append an ``interrupted`` event unless the ledger's last event already is one (the
    controller's own, when it stopped the trials): ``sync`` then ends the parent run
    KILLED, and ``resume`` goes on."""
    last = None
    for ev in ledger.events():
        last = ev
    if last is not None and last.type == EventKind.INTERRUPTED:
        return
    ledger.append(Interrupted(reason=reason, reaped=reaped or []))
