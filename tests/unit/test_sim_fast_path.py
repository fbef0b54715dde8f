"""Prediction's run of unchanging decode iterations gives what stepping one by one gives."""

from __future__ import annotations

import pytest

from actors.contracts.hardware import get_hardware
from actors.contracts.shapes import get_preset
from actors.sim.perf import SimConfig
from actors.sim.predict import _weighted_median, build_engine, simulate_closed_loop

LLAMA8 = get_preset("llama-3.1-8b")


@pytest.mark.parametrize(("profile", "cfg", "c", "n", "prompt", "out", "jitter"), [
    ("vllm", SimConfig(), 1, 6, 512, 64, 0.0),
    ("vllm", SimConfig(), 64, 200, 512, 128, 0.02),  # jitter: the same draws in order
    ("trtllm", SimConfig(), 32, 100, 1024, 64, 0.0),
    ("vllm", SimConfig(cuda_graphs=False, tp=2), 16, 40, 128, 256, 0.01),
    ("vllm", SimConfig(gpu_memory_fraction=0.135), 128, 300, 2048, 256, 0.0),  # preempts
    ("trtllm", SimConfig(gpu_memory_fraction=0.135), 128, 300, 2048, 256, 0.0),
])
def test_fast_and_step_by_step_agree(profile, cfg, c, n, prompt, out, jitter):
    got = []
    for fast in (False, True):
        engine, _ = build_engine(LLAMA8, get_hardware("h200"), profile, cfg, seed=1,
                                 jitter=jitter)
        got.append(simulate_closed_loop(engine, c, n, prompt, out, fast=fast))
    slow, fast_ = got
    for k in slow.__dataclass_fields__:
        assert getattr(fast_, k) == pytest.approx(getattr(slow, k), rel=1e-9), k


def test_weighted_median_is_the_median_of_the_repeated_values():
    import statistics

    pairs = [(3.0, 2), (1.0, 1), (2.0, 4), (5.0, 1)]
    flat = [v for v, w in pairs for _ in range(w)]
    assert _weighted_median(pairs) == statistics.median(flat)
    assert _weighted_median(pairs[:3]) == statistics.median(flat[:7])
    assert _weighted_median([]) == 0.0
