"""The vocabularies of states: every one an enum, so an unknown value is rejected where a
result is built and where it is read back. ``StrEnum``: a member is its value in
f-strings, joins and JSON.

Members added beyond DESIGN.md's lists say so in their comments.
"""

from __future__ import annotations

import enum

__all__ = ["FailureClass", "LevelFlag", "LevelStatus", "TrialStatus", "INVALID_LEVEL"]


class FailureClass(enum.StrEnum):
    """Why a trial failed (``TrialResult.reason`` of a ``failed`` trial)."""

    STARTUP_OOM = "startup_oom"  # the server ran out of GPU memory while starting
    STARTUP_CRASH = "startup_crash"  # it exited (or could not be started) before healthy
    STARTUP_TIMEOUT = "startup_timeout"  # not healthy in time (or never placed on a node)
    UNHEALTHY = "unhealthy"  # up, but its health check never answered 200
    CRASH_MID_RUN = "crash_mid_run"  # exited while being measured
    HANG = "hang"  # alive, but stopped streaming (or a phase never answered)
    NODE_LOST = "node_lost"  # Ray reported the node or the actor's process gone
    CONFIG_MISMATCH = "config_mismatch"  # runs another config than the one asked for
    PORT_IN_USE = "port_in_use"  # its port was taken (retried on another before failing)
    #: added with issue 12: an exception of servesweep's own client or adapter code,
    #: classified by what it is (its type and message kept), not as a lost node
    CLIENT_ERROR = "client_error"


class LevelStatus(enum.StrEnum):
    VALID = "valid"
    INVALID = "invalid"  # errors, or token counts not proven to be the ones asked for


class LevelFlag(enum.StrEnum):
    """What a level carries besides its status (DESIGN.md "States, flags, winners")."""

    NOISY = "noisy"  # rounds differ by more than the workload's noise band
    CLIENT_BOUND = "client_bound"  # the client's loop lag or CPU says it could not keep up
    QUEUEING_MISMATCH = "queueing_mismatch"  # /metrics disagree with the capacity prediction
    #: output counted from the server's usage alone (or text beyond the tokenizer's
    #: tolerance): cannot win unless ``workload.trust_usage``
    UNVERIFIED = "unverified"
    #: added with issue 12: per-chunk token counts unknown, ITL spread over the chunks
    ITL_SPREAD = "itl_spread"
    UNPACED = "unpaced"  # sim at time scale 0: latencies are not real
    SIM_BEHIND = "sim_behind"  # the sim could not keep its time scale on this host
    #: sim hold mode (``sim.hold_s``): the level only waited, nothing was measured (the
    #: level is invalid too)
    HELD = "held"
    #: open loop: some request was sent later than ``workload.late_send_ms`` after its
    #: scheduled time (the client or the in-flight cap could not hold the schedule): the
    #: offered load was not the one asked, so the level cannot win
    LATE_SENDS = "late_sends"
    #: read back only: results written before 2026-11-30 (chunk counts reconciled to usage)
    USAGE_RECONCILED = "usage_reconciled"

    @property
    def meaning(self) -> str:
        """What the flag says, for the report's legend."""
        return FLAG_MEANINGS[self]

    @property
    def blocks_winning(self) -> bool:
        """Whether a level with this flag is kept from winning (``planning.eligibility``;
        ``unverified`` unless the spec trusts usage; ``held`` levels are invalid)."""
        return self in (LevelFlag.UNVERIFIED, LevelFlag.SIM_BEHIND, LevelFlag.HELD,
                        LevelFlag.LATE_SENDS)


FLAG_MEANINGS: dict[LevelFlag, str] = {
    LevelFlag.NOISY: "its rounds differ by more than the workload's noise band",
    LevelFlag.CLIENT_BOUND: "the load generator's loop lag or CPU says it could not keep up",
    LevelFlag.QUEUEING_MISMATCH: "what /metrics showed running and waiting disagrees with the "
                                 "KV capacity prediction",
    LevelFlag.UNVERIFIED: "some output count rests on the server's usage alone",
    LevelFlag.ITL_SPREAD: "per-chunk token counts unknown: ITL spread evenly over chunks",
    LevelFlag.UNPACED: "the sim ran at time scale 0: latencies are not real",
    LevelFlag.SIM_BEHIND: "the sim could not keep its time scale on this host",
    LevelFlag.HELD: "the sim's hold mode: nothing was measured",
    LevelFlag.LATE_SENDS: "open loop: some request went out late, the load was not the "
                          "schedule's",
    LevelFlag.USAGE_RECONCILED: "written before 2026-11-30: chunk counts reconciled to usage",
}


class TrialStatus(enum.StrEnum):
    """How a trial ended: every recorded result is final (a trial in flight has none)."""

    OK = "ok"  # ran, every level valid
    INVALID = "invalid"  # ran, some level invalid (valid levels kept)
    FAILED = "failed"  # did not run to the end; ``reason`` holds the failure class
    INFEASIBLE = "infeasible"  # pruned before launch; ``reason`` says why

    def has_measurements(self) -> bool:
        return self in (TrialStatus.OK, TrialStatus.INVALID)


#: ``TrialResult.reason`` of an ``invalid`` trial
INVALID_LEVEL = "invalid_level"
