"""Human progress lines for a running sweep (stderr), with elapsed time and an ETA."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from actors.contracts.quality import QualityResult, QualityStatus
from actors.contracts.results import LevelResult, TrialResult

__all__ = ["Progress", "level_line"]


def _fmt(x: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


def level_line(level: LevelResult) -> str:
    m = level.metrics
    head = f"{level.key:<9} {level.status:<7}"
    if m is None:
        return f"{head} {level.reason}"
    flags = f"  [{', '.join(level.flags)}]" if level.flags else ""
    srv = level.server
    queue = ""
    if srv.running_max is not None:
        queue = f"  run<={srv.running_max:.0f} wait<={srv.waiting_max or 0:.0f}"
        if srv.preemptions:
            queue += f" preempt={srv.preemptions:.0f}"
    return (f"{head} {m.output_tok_s:9.1f} tok/s  TTFT p50 {_fmt(m.ttft_p50_ms, '.1f')} ms "
            f"p99 {_fmt(m.ttft_p99_ms, '.1f')} ms  ITL p50 {_fmt(m.itl_p50_ms, '.2f')} ms"
            f"{queue}{flags}")


class Progress:
    def __init__(self, total: int, out: TextIO | None = None, quiet: bool = False):
        self.total, self.out, self.quiet = total, out or sys.stderr, quiet
        self.t0 = time.monotonic()
        self.done = 0
        self.index: dict[str, int] = {}
        self.labels: dict[str, str] = {}
        #: a search's standing against its budget (``Searcher.progress_line``), shown per trial
        self.note: Callable[[], str] | None = None

    def _note(self) -> str:
        text = self.note() if self.note is not None else ""
        return f" · budget: {text}" if text else ""

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 60:02d}:{s % 60:02d}"

    def _eta(self) -> str:
        if not self.done or self.done >= self.total:
            return ""
        per = (time.monotonic() - self.t0) / self.done
        left = int(per * (self.total - self.done))
        return f", ~{left // 60}m{left % 60:02d}s left"

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.out, flush=True)

    def trial_started(self, key: str, label: str) -> None:
        self.index[key] = len(self.index) + 1
        self.labels[key] = label
        self.say(f"[{self._elapsed()}] trial {self.index[key]}/{self.total} {label} ({key})"
                 f"{self._note()}")

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "ready":
            cap = data.get("capacity")
            pool = ""
            if cap is not None and cap.pool_blocks:
                pool = (f" · KV pool {cap.pool_blocks:,} blocks of {cap.block_size}"
                        f" ({cap.full_length_capacity} full-length requests)")
            self.say(f"         ready in {data.get('startup_s') or 0:.1f} s{pool}")
            if cap is not None and cap.rejects_requests:
                self.say(f"         warning: {cap.note}")
        elif kind == "level":
            self.say(f"         {level_line(data['level'])}")
        elif kind == "probe":
            p = data["probe"]
            met = "-" if p.slo_met is None else f"{p.slo_met:.1%}"
            why = f"{met} met the SLO" if p.held or not p.reason else p.reason
            self.say(f"         capacity probe {p.rate:g}/s: "
                     f"{'held' if p.held else 'missed'} ({why})")
        elif kind == "capacity":
            c = data["capacity"]
            rate = "none" if c.rps is None else f"{c.rps:g} requests/s"
            self.say(f"         capacity at SLO: {rate}"
                     + (f", {c.output_tok_s:,.0f} output tok/s" if c.output_tok_s else "")
                     + (f", band {c.band:.1%}" if c.band is not None else "")
                     + (f" ({c.note})" if c.note else ""))

        elif kind == "quality_started":
            self.say("         quality run (task / agreement) on the warm server ...")
        elif kind == "quality":
            self.say(f"         quality: {quality_line(data['quality'])}")

    def trial_finished(self, result: TrialResult) -> None:
        self.done += 1
        status = result.status.value
        why = f": {result.reason}" if result.reason and status != "ok" else ""
        msg = f" - {result.message[:200]}" if result.message and status == "failed" else ""
        self.say(f"         -> {status}{why}{msg}  ({self.done}/{self.total} done, "
                 f"{self._elapsed()} elapsed{self._eta()}){self._note()}")

    def pruned(self, label: str, reason: str) -> None:
        self.say(f"[{self._elapsed()}] infeasible {label}: {reason}")


def quality_line(q: QualityResult) -> str:
    """One line of a quality run: the task's score, the agreement, or why none."""
    if q.status is not QualityStatus.MEASURED:
        return f"{q.status.value}: {q.message[:160]}"
    parts = []
    if q.task is not None:
        t = q.task
        parts.append(f"{t.task} {t.metric} ({t.filter}) {100 * t.score:.1f} "
                     f"± {100 * t.stderr:.1f} over {t.n} questions in {t.wall_s:.0f} s")
    a = q.agreement
    if a is not None and a.identical_share is not None:
        parts.append(f"agreement {a.identical_share:.1%} identical, first divergence "
                     f"at {a.mean_first_divergence:.1f}")
    elif a is not None:
        parts.append(f"agreement reference: {a.n} continuations")
    return "; ".join(parts) or "measured"

