"""The sweep and ``servesweep capacity`` read the same KV pool from the same log.

Both call the engine adapter's ``kv_pool``: the trial's capacity check
(``TrialExecution._capacity``, given the events as the host summarises them) and the
command (``explain_log``, given the whole log). Over every real server log in
tests/fixtures (vLLM on GPU and CPU, the H200 sweeps' servers, TensorRT-LLM) and the
sim's own startup lines, they agree on the pool, the block size, the usable blocks,
the max model length and what one request needs.

Before ``kv_pool`` the two disagreed on every vLLM log: only the command subtracted
vLLM's null block. The command was right: vLLM reserves block 0 as its null block, so
``num_gpu_blocks - 1`` blocks are usable (the sim keeps none: all of its are).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.contracts.config import ModelSpec, TrialConfig, Workload
from actors.engines import get_adapter
from actors.engines.base import LaunchContext
from actors.engines.sim import SimAdapter
from actors.sim.startup_log import startup_lines
from orchestrator.commands.capacity import explain_log
from orchestrator.errors import UsageError
from tests.conftest import FIXTURES
from tests.unit.test_capacity_max_len import trial

PROMPT, OUTPUT = 200, 56
LOGS = sorted([*FIXTURES.glob("vllm*/*.log"), *FIXTURES.glob("trtllm/*.log"),
               *FIXTURES.glob("h200-sweeps/*/trials/*/server.log")])


def engine_of(log: Path) -> str:
    return "trtllm" if "trtllm" in log.relative_to(FIXTURES).parts[0] else "vllm"


def sim_log(profile: str) -> str:
    sim = get_adapter("sim")
    assert isinstance(sim, SimAdapter)
    ctx = LaunchContext(sweep_id="s", trial_key="k", trial_dir="/nonexistent",
                        model=ModelSpec(preset="llama-3.1-8b"), hardware="h100-sxm",
                        workload=Workload(prompt_tokens=PROMPT, output_tokens=OUTPUT,
                                          concurrency=[1]))
    cfg = sim.server_config(TrialConfig(engine="sim", profile=profile), ctx)
    return "\n".join(startup_lines(cfg, cfg.build()[1]))


CASES = [pytest.param(engine_of(p), p.read_text(errors="replace"), {},
                      id=str(p.relative_to(FIXTURES))) for p in LOGS] + [
    pytest.param("sim", sim_log(profile), {"profile": profile}, id=f"sim-{profile}")
    for profile in ("vllm", "trtllm")]


def both_paths(engine: str, text: str, axes: dict):
    """(the trial's Capacity, the command's report or None when it finds no pool)."""
    adapter = get_adapter(engine)
    events = [ev for line in text.splitlines() for ev in adapter.parse_log_line(line)]
    summaries = [{"kind": ev.kind, **ev.data} for ev in events]  # what the host sends
    cap = trial(engine, PROMPT, OUTPUT, **axes)._capacity(adapter.applied(events), summaries)
    try:
        report = explain_log(engine, text, PROMPT, OUTPUT, [1])
    except UsageError as err:
        assert "no KV pool line" in str(err)
        report = None
    return cap, report


def test_every_fixture_is_covered():
    assert len(LOGS) >= 20
    assert {engine_of(p) for p in LOGS} == {"vllm", "trtllm"}


@pytest.mark.parametrize("engine, text, axes", CASES)
def test_the_sweep_and_the_command_agree(engine, text, axes):
    cap, report = both_paths(engine, text, axes)
    if report is None:  # a server that failed before its pool: neither path invents one
        assert cap.pool_blocks is None and cap.usable_blocks is None
        return
    assert (cap.pool_blocks, cap.block_size, cap.usable_blocks, cap.max_model_len) == (
        report.pool_blocks, report.block_size, report.usable_blocks, report.max_model_len)
    assert (cap.pool_tokens, cap.policy) == (report.pool_tokens, report.policy)
    assert (cap.blocks_per_request, cap.full_length_capacity) == (
        report.blocks_per_request, report.full_length_capacity)
    assert cap.rejects_requests == report.rejects_requests
    if engine == "vllm":  # block 0 is vLLM's null block
        assert cap.usable_blocks == cap.pool_blocks - 1
    else:
        assert cap.usable_blocks == cap.pool_blocks
