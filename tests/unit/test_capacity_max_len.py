"""A request longer than the server's max model length is rejected, not "fitted".

The capacity prediction (``predict_level``) and a trial's Capacity record (read from
the server's own log, as the sweep does) say when the server refuses every request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.contracts.applied import AppliedConfig
from actors.engines import get_adapter
from orchestrator.execution.cluster import RayCluster
from orchestrator.execution.trial import TrialExecution
from orchestrator.planning.capacity import check_observation, length_rejection, predict_level
from orchestrator.planning.plan import plan_sweep
from orchestrator.spec import SweepSpec
from tests.conftest import FIXTURES, minimal_spec

H200_DEFAULT = FIXTURES / "vllm" / "vllm-0.26.0-h200-default.log"  # max_model_len 2048
TRT_GRAPH = FIXTURES / "trtllm" / "trtllm-1.x-cudagraph.log"  # max_seq_len 86720 (last)


def test_predict_level_rejects_a_request_longer_than_max_model_len():
    pred = predict_level("preempt_recompute", 58_350, 16, 3000, 256, 64, 128, max_model_len=2048)
    assert pred.rejects_requests and (pred.running, pred.waiting) == (0, 0)
    assert not pred.preemption_expected
    assert "every request rejected: 3256 tokens exceed the max model length 2048" in \
        pred.describe()
    # nothing admitted: no queueing claim to check against the server's gauges
    assert check_observation(pred, 0, 0, 0, 0) is None


@pytest.mark.parametrize("policy", ["preempt_recompute", "guaranteed_no_evict"])
def test_predict_level_fits_at_exactly_max_model_len_and_when_unknown(policy):
    fits = predict_level(policy, 1000, 16, 1792, 256, 4, max_model_len=2048)
    unknown = predict_level(policy, 1000, 16, 3000, 256, 4)
    for pred in (fits, unknown):
        assert not pred.rejects_requests and pred.running == 4


def test_length_rejection_sentence():
    assert length_rejection(1792, 256, 2048) is None
    assert length_rejection(3000, 256, None) is None
    text = length_rejection(3000, 256, 2048)
    assert "3000 + 256 = 3,256 tokens exceed its max model length of 2,048" in text


def trial(engine: str, prompt: int, output: int, **axes) -> TrialExecution:
    data = minimal_spec()
    data["model"] = {"path": "/models/x"}
    data["hardware"] = "h200"
    data["workload"] = {"prompt_tokens": prompt, "output_tokens": output, "concurrency": [1]}
    data["space"] = [{"engine": engine, **axes}]
    spec = SweepSpec.model_validate(data)
    return TrialExecution(plan_sweep(spec)[0], spec, "sweep", Path("/nonexistent"), None, False,
                          RayCluster())


def applied_from_log(engine: str, log: Path) -> dict:
    return ready_from_log(engine, log)[0]


def ready_from_log(engine: str, log: Path) -> tuple[dict, list[dict]]:
    """What the host's ``Readiness`` carries for a server that wrote ``log``: the applied
    settings and the events as the host summarises them (``{"kind": ..., **data}``)."""
    adapter = get_adapter(engine)
    events = [ev for line in log.read_text().splitlines() for ev in adapter.parse_log_line(line)]
    return adapter.applied(events), [{"kind": ev.kind, **ev.data} for ev in events]


def test_trial_capacity_says_a_vllm_server_rejects_every_request():
    cap = trial("vllm", 3000, 256)._capacity(*ready_from_log("vllm", H200_DEFAULT))
    assert (cap.max_model_len, cap.rejects_requests) == (2048, True)
    assert "rejects every request" in cap.note and "max model length of 2,048" in cap.note
    assert "log: max model length" in cap.sources
    assert cap.pool_blocks == 58_351  # the pool is still reported
    assert cap.usable_blocks == 58_350  # less vLLM's null block


def test_trial_capacity_fits_when_the_request_does():
    cap = trial("vllm", 1000, 256)._capacity(applied_from_log("vllm", H200_DEFAULT), [])
    assert (cap.max_model_len, cap.rejects_requests, cap.note) == (2048, False, "")


def test_trial_capacity_reads_trtllm_max_seq_len():
    ready = ready_from_log("trtllm", TRT_GRAPH)
    assert not trial("trtllm", 8000, 1000)._capacity(*ready).rejects_requests
    cap = trial("trtllm", 86_000, 1000)._capacity(*ready)
    assert (cap.max_model_len, cap.rejects_requests) == (86_720, True)


def test_trial_capacity_falls_back_to_the_trial_config():
    cap = trial("vllm", 3000, 256, max_model_len=4096)._capacity(AppliedConfig(), [])
    assert (cap.max_model_len, cap.rejects_requests) == (4096, False)
    assert "trial config: max_model_len" in cap.sources
    cap = trial("vllm", 3000, 256)._capacity(AppliedConfig(), [])
    assert (cap.max_model_len, cap.rejects_requests) == (None, False)


def test_sim_reports_its_max_model_len():
    t = trial("sim", 64, 16)
    sim = get_adapter("sim")
    line = ("(EngineCore pid=1) INFO 11-30 12:00:00 [core.py:1] Initializing a V1 LLM engine "
            "(v0.26.0-sim) with config: model='llama', dtype=torch.bfloat16, max_seq_len=80, "
            "tensor_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto")
    assert sim.applied(sim.parse_log_line(line)).max_model_len == 80
    trt = "[TRT-LLM] [I] max_seq_len=80, max_num_requests=8, max_num_tokens=8192, max_batch_size=8"
    assert sim.applied(sim.parse_log_line(trt)).max_model_len == 80
    assert not t._capacity(AppliedConfig(max_model_len=80), []).rejects_requests
