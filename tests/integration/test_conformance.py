"""One contract every engine adapter meets, run against a real server of each.

start -> healthy -> the applied config verifies -> a matched-work streamed request
returns exactly the tokens asked for -> /metrics parses -> the log gave the events the
host relies on -> stop leaves no process behind.

Engines: the sim always; vLLM on CPU when ``.venv-vllm`` and the tiny model exist
(``make vllm-cpu``); TensorRT-LLM where ``trtllm-serve`` is on PATH and
``SERVESWEEP_TRTLLM_MODEL`` names a model directory.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from actors.contracts.config import LaunchOptions, ModelSpec, SimOptions, TrialConfig, Workload
from actors.contracts.settings import settings
from actors.engine_host import EngineHostCore
from actors.engines import LaunchContext, adapter_names, get_adapter
from actors.procs import marked_processes
from tests.conftest import ROOT

PROMPT, OUTPUT = 16, 8
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
TINY_MODEL = ROOT / "mlruns" / "models" / "tiny-llama"


def _vllm_missing() -> str | None:
    if not VLLM_PYTHON.exists() or not list((ROOT / ".venv-vllm").glob(".servesweep-vllm-cpu-*")):
        return f"vLLM-CPU is not installed in {VLLM_PYTHON.parent.parent} (run `make vllm-cpu`)"
    if not (TINY_MODEL / "config.json").is_file():
        return f"the tiny model is missing at {TINY_MODEL} (run `make vllm-cpu`)"
    return None


def _trtllm_missing() -> str | None:
    if shutil.which("trtllm-serve") is None:
        return "trtllm-serve is not on PATH (TensorRT-LLM cannot be installed on this machine)"
    if "trtllm" not in adapter_names():
        return "no 'trtllm' adapter is registered"
    if not settings().trtllm_model:
        return "set SERVESWEEP_TRTLLM_MODEL to a model directory for the TensorRT-LLM server"
    return None


def _case(engine: str) -> tuple[TrialConfig, dict]:
    """(trial, launch-context fields) of one small server per engine."""
    wl = Workload(prompt_tokens=PROMPT, output_tokens=OUTPUT, concurrency=[1])
    if engine == "sim":
        return (TrialConfig(engine="sim", profile="vllm"),
                dict(model=ModelSpec(preset="llama-3.1-8b", served_name="conformance"),
                     hardware="h100-sxm", workload=wl, sim=SimOptions(time_scale=0.05)))
    if engine == "vllm":
        # eager: the contract holds either way, and torch.compile costs the suite ~11 s
        return (TrialConfig(engine="vllm", cuda_graphs=False, max_num_seqs=4,
                            extras={"torch_compile": False}),
                dict(model=ModelSpec(path=str(TINY_MODEL), served_name="conformance"),
                     hardware="cpu", workload=wl,
                     launch=LaunchOptions(python=str(VLLM_PYTHON))))
    return (TrialConfig(engine="trtllm", max_num_seqs=4),
            dict(model=ModelSpec(path=str(settings().trtllm_model),
                                 served_name="conformance"),
                 hardware=settings().trtllm_hardware,
                 workload=wl))


ENGINES = [
    pytest.param("sim", id="sim"),
    pytest.param("vllm", id="vllm-cpu", marks=[
        pytest.mark.engine, pytest.mark.skipif(_vllm_missing() is not None,
                                               reason=str(_vllm_missing()))]),
    pytest.param("trtllm", id="trtllm", marks=[
        pytest.mark.engine, pytest.mark.gpu,
        pytest.mark.skipif(_trtllm_missing() is not None, reason=str(_trtllm_missing()))]),
]


def _stream(base_url: str, name: str, token_ids: list[int]) -> tuple[dict, int]:
    """One matched-work streamed completion: (final usage, chunks that carried usage)."""
    body = {"model": name, "prompt": token_ids, "max_tokens": OUTPUT, "min_tokens": OUTPUT,
            "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    req = urllib.request.Request(f"{base_url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    usage: dict = {}
    chunks = 0
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            data = json.loads(line[5:])
            if data.get("usage"):
                usage = data["usage"]
                chunks += 1
    return usage, chunks


@pytest.mark.parametrize("engine", ENGINES)
def test_adapter_contract(engine: str, tmp_path: Path) -> None:
    adapter = get_adapter(engine)
    trial, fields = _case(engine)
    ctx = LaunchContext(sweep_id="conformance", trial_key=f"{engine}-{trial.key()}",
                        trial_dir=str(tmp_path / "mlruns" / "sweeps" / "c" / "trials" / engine),
                        **fields)
    assert adapter.infeasible(trial, ctx.hardware) is None
    host = EngineHostCore(trial.model_dump(mode="json"), ctx.model_dump(mode="json"))
    try:
        info = host.launch()
        assert isinstance(info.argv, list) and info.pgid
        ready = host.wait_ready(600)
        assert ready.failure is None, f"{ready.failure}: {ready.message}\n" \
                                      f"{ready.log_tail[-3000:]}"
        assert ready.mismatches == []
        kinds = {e["kind"] for e in ready.events}
        assert kinds & {"kv_pool", "kv_blocks"}, f"no KV pool event in {sorted(kinds)}"
        assert ready.applied, "the log gave no applied settings"

        usage, chunks = _stream(ready.base_url, "conformance", list(range(100, 100 + PROMPT)))
        assert usage["completion_tokens"] == OUTPUT
        assert usage["prompt_tokens"] == PROMPT
        assert chunks >= 1

        with urllib.request.urlopen(ready.base_url + adapter.metrics_path, timeout=10) as r:
            sample = adapter.parse_metrics(r.read().decode(), 0.0)
        assert sample.running is not None and sample.waiting is not None
        assert sample.kv_usage is not None
        assert host.observe().alive
    finally:
        stopped = host.stop(30)
    assert stopped.leftovers == []
    assert marked_processes(host.marker) == []
