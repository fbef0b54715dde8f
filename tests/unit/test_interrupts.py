"""The driver's signal guard (``orchestrator.execution.interrupts``), one signal at a time."""

from __future__ import annotations

import os
import signal

import pytest

from orchestrator.execution.interrupts import (
    InterruptGuard,
    check,
    deferred,
    handled,
    kept,
    record_interrupt,
)
from orchestrator.results.ledger import Ledger

pytestmark = pytest.mark.unit


def test_a_signal_raised_where_python_swallowed_it_is_raised_again_at_the_next_check():
    with InterruptGuard():
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here ...
        except KeyboardInterrupt:
            pass  # ... and something swallows it, as an at-fork hook's "Exception ignored"
        with pytest.raises(KeyboardInterrupt):
            check()
        with pytest.raises(KeyboardInterrupt):
            check()  # until the driver says it is stopping for it
        handled()
        check()
    check()  # no guard: nothing


def test_a_signal_in_a_deferred_block_is_raised_when_the_block_ends():
    reached = []
    with InterruptGuard():
        with pytest.raises(KeyboardInterrupt):
            with deferred():
                os.kill(os.getpid(), signal.SIGINT)
                reached.append("after the signal")
        assert reached == ["after the signal"]


def test_a_deferred_block_that_fails_after_a_signal_fails_as_the_interrupt():
    with InterruptGuard():
        with pytest.raises(KeyboardInterrupt):
            with deferred():
                os.kill(os.getpid(), signal.SIGINT)
                raise ConnectionError("Ray's servers got the terminal's Ctrl-C too")


def test_the_guard_puts_back_the_handlers_it_found():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with InterruptGuard():
        with InterruptGuard():  # nested: the controller's inside the driver's
            pass
        assert signal.getsignal(signal.SIGTERM) not in before
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_an_interrupt_is_recorded_once(tmp_path):
    ledger = Ledger.create("name: x\n", "x", tmp_path)
    record_interrupt(ledger, "interrupted by the user")
    record_interrupt(ledger, "interrupted by the user")  # the controller's, then execute's
    assert [e.type for e in ledger.events()].count("interrupted") == 1


def test_a_signal_after_a_call_reset_its_action_below_python_still_reaches_the_guard():
    """``ray.shutdown`` sets SIGTERM's action to the default in C, which
    ``signal.getsignal`` never shows; ``kept`` puts the process's own action back."""
    import ctypes
    import time

    libc = ctypes.CDLL(None)
    with InterruptGuard():
        with pytest.raises(KeyboardInterrupt):
            with deferred(), kept():
                libc.signal(signal.SIGTERM, ctypes.c_void_p(0))  # SIG_DFL, below Python
                time.sleep(0.05)  # the watcher's millisecond, many times over
                os.kill(os.getpid(), signal.SIGTERM)  # recorded, not fatal
