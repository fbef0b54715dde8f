"""``classify_ray_error`` over real Ray exception objects (built here, no Ray started).

An exception our code raised inside an actor is classified by where it was raised and
keeps its type and text; only a node or an actor process gone is ``node_lost``.
"""

from __future__ import annotations

import pickle

import pytest
from ray.core.generated.common_pb2 import ActorDiedErrorContext
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    NodeDiedError,
    ObjectLostError,
    OwnerDiedError,
    RayActorError,
    RayTaskError,
    WorkerCrashedError,
)

from actors.contracts.states import FailureClass
from orchestrator.execution.failures import PHASE_CALLS, classify_ray_error, raised_class

TOKEN_IDS = "need at least two usable token ids"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/ray/_private/function_manager.py", line 689,'
    " in actor_method_executor\n"
    '  File "/work/main/actors/loadgen/prompts.py", line 63, in __init__\n'
    '    raise ValueError("need at least two usable token ids")\n'
    f"ValueError: {TOKEN_IDS}\n")


def task_error(cause: Exception, function: str = "__init__",
               traceback: str = TRACEBACK) -> RayTaskError:
    return RayTaskError(function, traceback, cause, proctitle=f"ray::X.{function}()", pid=7,
                        ip="10.0.0.2")


def constructor_failed(cause: Exception) -> ActorDiedError:
    """What ``ray.get`` raises for a call on an actor whose ``__init__`` raised (Ray 2.x:
    ActorDiedError(RayTaskError), sent between processes pickled)."""
    return pickle.loads(pickle.dumps(ActorDiedError(task_error(cause))))


def died(message: str) -> ActorDiedError:
    return ActorDiedError(ActorDiedErrorContext(error_message=message, actor_id=b"\x01" * 16,
                                                class_name="EngineHost", pid=4242))


def test_loadgen_constructor_error_is_client_error_with_the_real_error():
    cls, msg = classify_ray_error(constructor_failed(ValueError(TOKEN_IDS)), "level")
    assert cls == "client_error"
    assert msg.startswith(f"LoadGenerator constructor raised ValueError: {TOKEN_IDS}")
    assert "actors/loadgen/prompts.py:63" in msg


def test_host_constructor_error_during_launch_is_startup_crash():
    cls, msg = classify_ray_error(constructor_failed(KeyError("vllm")), "launch")
    assert (cls, msg.split(" (at")[0]) == ("startup_crash",
                                           "EngineHost constructor raised KeyError: 'vllm'")


@pytest.mark.parametrize("phase, cls, where", [
    ("level", "client_error", "LoadGenerator.run_level"),
    ("launch", "startup_crash", "EngineHost.launch"),
    ("ready", "startup_crash", "EngineHost.wait_ready"),
    ("observe", "crash_mid_run", "EngineHost.observe"),
])
def test_method_errors_keep_type_and_text(phase, cls, where):
    err = task_error(RuntimeError("adapter could not parse\n the line"), "run_level")
    for raised in (err, err.as_instanceof_cause()):  # what ray.get raises is the latter
        got_cls, msg = classify_ray_error(raised, phase)
        assert got_cls == cls
        assert msg.startswith(f"{where} raised RuntimeError: adapter could not parse the line")


def test_constructor_error_known_only_from_its_text():
    err = RayActorError(None, "The actor died because of an error raised in its creation task, "
                              "ray::LoadGenerator.__init__() (pid=1, ip=10.0.0.2)\n" + TRACEBACK,
                        actor_init_failed=True)
    cls, msg = classify_ray_error(err, "level")
    assert cls == "client_error"
    assert msg.startswith(f"LoadGenerator constructor raised ValueError: {TOKEN_IDS}")


@pytest.mark.parametrize("err, needle", [
    (died("The actor is dead because its node has died. Node Id: abc"), "its node has died"),
    (died("Worker unexpectedly exits with a connection error code 2."), "connection error"),
    (ActorDiedError(), "died unexpectedly"),
    (ActorUnavailableError("connection lost", None), "connection lost"),
    (NodeDiedError("node 10.0.0.2 died"), "NodeDiedError: node 10.0.0.2 died"),
    (OwnerDiedError("ab" * 20, None, ""), "OwnerDiedError"),
    (ObjectLostError("ab" * 20, None, ""), "ObjectLostError"),
    (WorkerCrashedError(), "WorkerCrashedError"),
])
@pytest.mark.parametrize("phase", ["launch", "level", "observe"])
def test_node_or_process_gone_is_node_lost(err, needle, phase):
    cls, msg = classify_ray_error(err, phase)
    assert cls == "node_lost"
    assert needle in msg


def test_classes_are_known_failure_classes():
    for phase in PHASE_CALLS:
        assert raised_class(phase) in set(FailureClass)


def test_long_messages_are_clipped():
    _, msg = classify_ray_error(task_error(ValueError("x" * 5000)), "level")
    assert len(msg) <= 400 and msg.endswith("...")
