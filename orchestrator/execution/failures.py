"""Classify what Ray raised for a trial's in-flight call by its cause, not by its wrapper.

Ray reports two different things through ``RayError``: an ordinary Python exception
raised by our own code inside an actor (an adapter, the load generator: a
``RayTaskError`` whose ``cause`` is the exception, or, when the actor's constructor
raised, an ``ActorDiedError`` with ``actor_init_failed`` whose ``args[0]`` is that
constructor's ``RayTaskError``), and the loss of a node or an actor process
(``ActorDiedError`` from a crash or a dead node, ``ActorUnavailableError``,
``NodeDiedError``, ``OwnerDiedError``/``ObjectLostError``, ``WorkerCrashedError``).
Only the second is ``node_lost``; the first is classified by where it was raised
(``classify_ray_error``) and its message keeps the original type and text.
"""

from __future__ import annotations

import re

from ray.exceptions import RayActorError, RayError, RayTaskError

__all__ = ["classify_ray_error", "raised_class", "PHASE_CALLS"]

#: The actor method in flight in each phase of ``TrialExecution`` (None: no actor call).
PHASE_CALLS: dict[str, tuple[str, str] | None] = {
    "place": None, "launch": ("EngineHost", "launch"), "ready": ("EngineHost", "wait_ready"),
    "level": ("LoadGenerator", "run_level"), "check": ("EngineHost", "observe"),
    "observe": ("EngineHost", "observe"), "stop": ("EngineHost", "stop")}

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:\([\w.]+\))?): (?P<msg>.*)$")
_MAX_MESSAGE = 400


def raised_class(phase: str) -> str:
    """The failure class of an exception raised by our code in ``phase``: the load
    generator's (its constructor or ``run_level``) is ``client_error``; the engine host's
    during launch and health wait is ``startup_crash``; the host's later calls
    (``observe``, ``stop``) are ``crash_mid_run``."""
    if phase == "level":
        return "client_error"
    if phase in ("place", "launch", "ready"):
        return "startup_crash"
    return "crash_mid_run"


def classify_ray_error(err: RayError, phase: str) -> tuple[str, str]:
    """(failure class, message) for ``err``, raised by ``ray.get`` of ``phase``'s call.

    An exception raised in an actor method or constructor gets ``raised_class(phase)``
    and a message naming where it was raised, its type and its text (and the innermost
    frame of the traceback); a node or an actor process gone is ``node_lost``.
    """
    task_error = _creation_error(err) if isinstance(err, RayActorError) else None
    if task_error is not None:
        return raised_class(phase), _describe(task_error, phase, constructor=True)
    if isinstance(err, RayActorError) and err.actor_init_failed:  # no error object: its text
        return raised_class(phase), _from_text(str(err), phase)
    if isinstance(err, RayTaskError):
        return raised_class(phase), _describe(err, phase, constructor=False)
    if isinstance(err, RayActorError):
        return "node_lost", _clip(f"actor died: {_died_summary(str(err))}")
    return "node_lost", f"{type(err).__name__}: {_first_line(str(err))}"


def _creation_error(err: RayActorError) -> RayTaskError | None:
    """The constructor's ``RayTaskError`` an ``ActorDiedError`` was built from, if any."""
    if not err.actor_init_failed:
        return None
    return next((a for a in err.args if isinstance(a, RayTaskError)), None)


def _where(phase: str, constructor: bool) -> str:
    call = PHASE_CALLS.get(phase)
    if call is None:
        return "the actor constructor" if constructor else f"the {phase} call"
    actor, method = call
    return f"{actor} constructor" if constructor else f"{actor}.{method}"


def _describe(err: RayTaskError, phase: str, constructor: bool) -> str:
    cause = getattr(err, "cause", None)
    if cause is None:
        return _from_text(str(err), phase, constructor)
    text = " ".join(str(cause).split()) or "(no message)"
    return _clip(f"{_where(phase, constructor)} raised {type(cause).__name__}: {text}"
                 f"{_location(str(err))}")


def _from_text(text: str, phase: str, constructor: bool = True) -> str:
    """The same message read from a traceback's text (its last ``Type: message`` line)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    last = next((m for ln in reversed(lines) if (m := _EXC_LINE.match(ln))), None)
    what = f"{last['type']}: {last['msg']}" if last else _first_line(text)
    return _clip(f"{_where(phase, constructor)} raised {what}{_location(text)}")


def _location(traceback_text: str) -> str:
    frames = _FRAME.findall(traceback_text)
    if not frames:
        return ""
    file, line, fn = frames[-1]
    return f" (at {_short_path(file)}:{line} in {fn})"


def _short_path(path: str) -> str:
    """``actors/loadgen/prompts.py`` rather than the absolute path of one machine."""
    for marker in ("/site-packages/", "/actors/", "/orchestrator/"):
        i = path.find(marker)
        if i >= 0:
            return path[i + len(marker):] if marker == "/site-packages/" else path[i + 1:]
    return path


def _died_summary(text: str) -> str:
    """Ray's first line, the actor's class and its last line (the cause, e.g. the node
    died, or the worker's exit detail)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    parts = [lines[0]]
    parts += [ln for ln in lines[1:-1] if ln.startswith("class_name:")]
    if len(lines) > 1:
        parts.append(lines[-1])
    return " ".join(parts)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE - 3] + "..."
