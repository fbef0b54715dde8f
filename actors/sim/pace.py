"""How well the sim kept its time scale: per step, how late its tokens went out.

The engine loop schedules each iteration to end at ``duration * time_scale`` of wall time
after the last; on a busy host the loop wakes late and the step's tokens are written after
that time. ``Pace`` counts, over the server's life, the tokens written, those written
*late*, the token-weighted lag and the worst lag, as Prometheus counters the load generator
differences over a level (``servesweep_sim_*`` in ``actors.sim.metrics_text``).

A token is late when it was written more than ``late_after(step)`` after its step was due:
its step's own wall duration (a token that late reaches the client bunched with the next
one, so the measured inter-token gaps no longer follow the model) or ``LATE_FLOOR_S``,
whichever is longer (below that the event loop's timer resolution decides, not the host's
load). First tokens are counted apart too: at low concurrency they are few among the
tokens but they are the TTFT. The driver flags a level ``sim_behind`` when either late
share passes the spec's bound (``orchestrator.execution.verdicts.flag_sim_pace``).
"""

from __future__ import annotations

__all__ = ["LATE_FLOOR_S", "Pace", "late_after"]

#: lateness the event loop's timers cause on an idle host (epoll waits in whole ms)
LATE_FLOOR_S = 0.002


def late_after(step_wall_s: float) -> float:
    """Seconds past its due time after which a token of a step this long is late."""
    return max(LATE_FLOOR_S, step_wall_s)


class Pace:
    """Counters of the engine loop's punctuality (monotonic; never reset)."""

    __slots__ = ("tokens", "late_tokens", "lag_token_s", "steps", "late_steps",
                 "first_tokens", "late_first_tokens")

    def __init__(self) -> None:
        self.tokens = 0  # tokens written by paced steps
        self.late_tokens = 0  # of those, written late
        self.lag_token_s = 0.0  # sum over tokens of how late (s) each went out
        self.steps = 0
        self.late_steps = 0
        self.first_tokens = 0  # requests' first tokens among ``tokens`` (their TTFT)
        self.late_first_tokens = 0

    def step(self, tokens: int, lag_s: float, step_wall_s: float, first: int = 0) -> None:
        """One paced step wrote ``tokens`` tokens, ``first`` of them a request's first,
        ``lag_s`` after it was due."""
        self.steps += 1
        lag = max(0.0, lag_s)
        self.lag_token_s += lag * tokens
        self.tokens += tokens
        self.first_tokens += first
        if lag > late_after(step_wall_s):
            self.late_steps += 1
            self.late_tokens += tokens
            self.late_first_tokens += first
