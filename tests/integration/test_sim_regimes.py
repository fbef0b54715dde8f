"""Issue 3's regimes reproduced through a real sweep and the analysis users see.

A 32 GB card and an 8B model leave little KV: with a BF16 KV cache the top level
queues and falls below the level beneath it; FP8 KV removes the queue and lifts it.
For the no-evict profile the capacity check's running count equals what the sim
reports, so no level is flagged ``queueing_mismatch``.
"""

from __future__ import annotations

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.planning.capacity import predict_level
from orchestrator.results.analysis import levels_frame
from orchestrator.results.ledger import Ledger
from tests.conftest import minimal_spec


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    home = tmp_path_factory.mktemp("state")
    spec = minimal_spec(name="regimes", hardware="rtx-5090")
    spec["workload"] = {"prompt_tokens": 128, "output_tokens": 384, "concurrency": [46, 64],
                        "rounds": 2, "warmup_requests": 0}  # 2c requests: whole waves
    spec["sim"] = {"time_scale": 0.1, "seed": 1, "stream_interval": 16}
    # 0.62 of the card leaves room for 46 full-length requests with a BF16 KV cache
    spec["space"] = [{"engine": "sim", "profile": "trtllm", "kv_dtype": ["auto", "fp8"],
                      "gpu_memory_fraction": 0.62}]
    path = home / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVESWEEP_HOME", str(home))
    try:
        assert main(["run", str(path), "--quiet", "--no-mlflow"]) == 0
        results = list(Ledger.open("latest").results().values())
    finally:
        mp.undo()
    return levels_frame(results), results


def _row(df, kv, c):
    sel = df[(df["label"].str.contains(f"kv={kv}")) & (df["concurrency"] == c)]
    assert len(sel) == 1
    return sel.iloc[0]


def test_bf16_kv_collapses_at_the_top_level_and_fp8_kv_fixes_it(frame):
    df, _ = frame
    assert set(df["level_status"]) == {"valid"}
    assert "sim_behind" not in ",".join(df["flags"])  # the host kept the sim's pace
    low, top = _row(df, "auto", 46), _row(df, "auto", 64)
    assert top["waiting_max"] > 0
    assert top["output_tok_s"] < low["output_tok_s"]
    fp8_top = _row(df, "fp8", 64)
    assert fp8_top["output_tok_s"] > 1.2 * top["output_tok_s"]
    assert fp8_top["running_max"] == 64


def test_no_evict_running_matches_the_capacity_prediction(frame):
    df, results = frame
    bf16 = next(r for r in results if r.config.kv_dtype == "auto")
    cap = bf16.capacity
    assert cap.policy == "guaranteed_no_evict" and cap.pool_blocks
    pred = predict_level(cap.policy, cap.pool_blocks, cap.block_size, 128, 384, 64)
    assert pred.running < 64
    assert _row(df, "auto", 64)["running_max"] == pred.running
    assert "queueing_mismatch" not in ",".join(df["flags"])
