"""A real ``trtllm-serve`` on a GPU: launch, the applied config proved from its log, a
matched-work request, JSON ``/metrics``, and a stop that leaves no process behind.

Runs only where TensorRT-LLM really is: ``trtllm-serve`` on PATH, an NVIDIA GPU visible
and ``SERVESWEEP_TRTLLM_MODEL`` naming a local checkpoint (nothing is downloaded).
Optional: ``SERVESWEEP_TRTLLM_RELEASE`` (the options-file layout, e.g. ``0.20``; default:
the installed release, else the newest 1.x known). Elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from actors.contracts.config import LaunchOptions, ModelSpec, TrialConfig, Workload
from actors.contracts.settings import settings
from actors.engine_host import EngineHostCore
from actors.engines import LaunchContext, get_adapter

pytestmark = [pytest.mark.gpu, pytest.mark.engine]


def _gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def _why_skip() -> str | None:
    if not shutil.which("trtllm-serve"):
        return ("trtllm-serve is not on PATH: TensorRT-LLM is not installed (it has no "
                "installable wheel for these machines); run this where it is")
    if _gpu_count() == 0:
        return "no NVIDIA GPU visible (nvidia-smi -L lists none)"
    model = settings().trtllm_model
    if not model or not model.is_dir():
        return "set SERVESWEEP_TRTLLM_MODEL to a local Hugging Face checkpoint directory"
    return None


_SKIP = _why_skip()
if _SKIP:
    pytestmark.append(pytest.mark.skip(reason=_SKIP))


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("cuda_graphs", [True, False], ids=["graphs", "eager"])
def test_trtllm_serve_runs_what_was_asked(tmp_path: Path, cuda_graphs: bool) -> None:
    model = str(settings().trtllm_model)
    trial = TrialConfig(engine="trtllm", cuda_graphs=cuda_graphs, max_num_seqs=16,
                        max_num_tokens=2048, gpu_memory_fraction=0.5,
                        weights="auto")  # the checkpoint's own precision
    ctx = LaunchContext(
        sweep_id="gpu-test", trial_key=trial.key(), trial_dir=str(tmp_path / trial.key()),
        model=ModelSpec(path=model), hardware="h200",
        workload=Workload(prompt_tokens=128, output_tokens=32, concurrency=[1]),
        launch=LaunchOptions(release=settings().trtllm_release))
    host = EngineHostCore(trial.model_dump(mode="json"), ctx.model_dump(mode="json"))
    try:
        host.launch()
        assert (tmp_path / trial.key() / "extra_llm_api_options.yaml").is_file()
        ready = host.wait_ready(1200)
        assert "failure" not in ready, f"{ready.get('message')}\n{ready.get('log_tail')}"
        applied = ready.applied
        assert ready.mismatches == [] and applied.cuda_graphs is cuda_graphs
        assert applied.get("kv_pool_tokens", 0) > 0 and applied.get("block_size", 0) > 0
        out = _post(ready.base_url + "/v1/completions",
                    {"model": model, "prompt": "Hello", "max_tokens": 32, "min_tokens": 32,
                     "ignore_eos": True})
        assert out["usage"]["completion_tokens"] == 32
        with urllib.request.urlopen(ready.base_url + "/metrics", timeout=30) as resp:
            sample = get_adapter("trtllm").parse_metrics(resp.read().decode(), 0.0)
        assert sample.block_size in (None, applied.block_size)  # the queue may be drained
    finally:
        stopped = host.stop(60)
    assert stopped.leftovers == [], stopped
