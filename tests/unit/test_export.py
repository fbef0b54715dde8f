"""`servesweep export`: per regime, the winning config as deployed, over the real H200
sweeps and sweeps rebuilt from their numbers under every other engine."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from actors.contracts.config import LaunchOptions, ModelSpec, TrialConfig, Workload
from actors.engines import get_adapter
from actors.engines.base import LaunchContext
from actors.engines.deploy import NOT_MEASURED, argv_drift, option_groups
from orchestrator.errors import UsageError
from orchestrator.results.ledger import Ledger
from tests.unit.export_sweeps import H200_TP, copy_h200, rebuilt_sweep, run_export

pytestmark = pytest.mark.unit

BENCH_FLAGS = {"--host", "--port", "--max-model-len", "--max_seq_len"}


def _exec_argv(script: str) -> list[str]:
    line = next(x for x in script.splitlines() if x.startswith("exec "))
    return shlex.split(line)[1:]


def _check_regime(d, engine_cli: list[str]) -> dict:
    dep = json.loads((d / "deployment.json").read_text())["deployment"]
    script = (d / dep["script"]).read_text()
    argv = _exec_argv(script)
    assert argv == dep["argv"] and argv[:len(engine_cli)] == engine_cli
    flags = {f for f, _ in option_groups(argv)}
    assert not flags & BENCH_FLAGS
    assert not any("python" in a or "servesweep-launch-" in a for a in argv)
    assert script.startswith("#!/bin/sh\n") and (d / dep["script"]).stat().st_mode & 0o111
    readme = (d / "README.md").read_text()
    assert "## What was measured" in readme and "noise band" in readme
    assert "Round trip on real hardware: NOT done" in readme
    for removed in dep["removed"]:
        assert removed["setting"] in readme and removed["why"]
    return dep


def test_h200_tp_sweep_exports_every_regime_as_measured(state_home, capsys):
    copy_h200(state_home)
    assert run_export(H200_TP) == 0
    out = Ledger.open(H200_TP).dir / "export"
    index = json.loads((out / "export.json").read_text())
    assert [r["dir"] for r in index["regimes"]] == ["c-1", "c-8", "c-32", "c-128"]
    for r in index["regimes"]:
        d = out / r["dir"]
        dep = _check_regime(d, ["vllm", "serve", "/tmp/model"])
        assert dep["measured_form"] and not dep["drift"]
        assert dep["tp"] == 2 and dep["engine_kwargs"]["tensor_parallel_size"] == 2
        assert {x["setting"].split()[0] for x in dep["removed"]} >= {
            "--host", "--port", "--max-model-len", "python3", "HF_HUB_OFFLINE=1"}
        assert dep["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
        readme = (d / "README.md").read_text()
        assert "v0.26.0" in readme and "H200" in readme
        assert "| `ray-serve.yaml` |" in readme and NOT_MEASURED in readme
        serve = yaml.safe_load((d / "ray-serve.yaml").read_text())
        llm = serve["applications"][0]["args"]["llm_configs"][0]
        assert llm["engine_kwargs"] == dep["engine_kwargs"]
        assert llm["model_loading_config"] == {"model_id": "llama-8b-random",
                                               "model_source": "/tmp/model"}
        svc = yaml.safe_load((d / "rayservice.yaml").read_text())
        worker = svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
        assert worker["template"]["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu"] == "2"
        assert yaml.safe_load(svc["spec"]["serveConfigV2"]) == serve
    assert "c=128: vllm tp2" in capsys.readouterr().out


def test_multi_level_regimes_and_an_unknown_regime(state_home):
    rebuilt_sweep(state_home, "vr", [{"engine": "vllm", "max_num_seqs": 256}],
                  {"path": "/tmp/model"}, regimes={"interactive": [1, 8], "batch": [32, 128]})
    assert run_export("vr", "--regime", "batch", "--out", str(state_home / "x")) == 0
    dirs = sorted(p.name for p in (state_home / "x").iterdir())
    assert dirs == ["batch", "export.json"]
    win = json.loads((state_home / "x" / "batch" / "deployment.json").read_text())["regime"]
    assert win["levels"] == ["c=32", "c=128"] and set(win["per_level"]) == {"c=32", "c=128"}
    readme = (state_home / "x" / "batch" / "README.md").read_text()
    assert "geometric mean" in readme
    with pytest.raises(UsageError, match="interactive"):
        run_export("vr", "--regime", "c=1")


def test_trtllm_winner_exports_serve_yaml_and_a_triton_repository(state_home):
    rebuilt_sweep(state_home, "tr", [{"engine": "trtllm", "launch": {"release": "1.1"}}],
                  {"path": "/tmp/model"})
    assert run_export("tr") == 0
    d = Ledger.open("tr").dir / "export" / "c-128"
    dep = _check_regime(d, ["trtllm-serve", "/tmp/model"])
    assert dep["engine_kwargs"] is None and not (d / "ray-serve.yaml").exists()
    argv = dep["argv"]
    assert argv[argv.index("--extra_llm_api_options") + 1] == "extra_llm_api_options.yaml"
    opts = yaml.safe_load((d / "extra_llm_api_options.yaml").read_text())
    assert opts["cuda_graph_config"]["enable_padding"] is True
    assert 'cd "$(dirname "$0")"' in (d / "trtllm-serve.sh").read_text()
    for model in ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble"):
        text = (d / "triton" / model / "config.pbtxt").read_text()
        assert "${" not in text and (d / "triton" / model / "1").is_dir()
    readme = (d / "README.md").read_text()
    assert "Triton" in readme and f"{NOT_MEASURED}: Triton runs TensorRT-LLM" in readme
    assert "Ray Serve LLM runs vLLM" in readme


@pytest.mark.parametrize("profile,cli", [("vllm", ["vllm", "serve"]),
                                         ("trtllm", ["trtllm-serve"])])
def test_sim_winner_exports_the_engine_it_imitates_marked_simulated(state_home, profile, cli):
    rebuilt_sweep(state_home, "sm", [{"engine": "sim", "profile": profile,
                                      "extras": {"jitter": 0.01}}],
                  {"preset": "llama-3.1-8b"})
    assert run_export("sm") == 0
    d = Ledger.open("sm").dir / "export" / "c-8"
    dep = _check_regime(d, cli)
    assert not dep["measured_form"] and dep["measured_engine"] == "sim"
    assert dep["note"].startswith(f"{NOT_MEASURED} (simulated)")
    assert "/models/llama-3.1-8b" in dep["argv"]
    assert any(r["setting"] == "extras.jitter=0.01" for r in dep["removed"])
    assert f"| `{dep['script']}` | the server command and its environment | {NOT_MEASURED}" \
        in (d / "README.md").read_text()


def test_external_winner_has_nothing_to_deploy(state_home):
    rebuilt_sweep(state_home, "ex", [{"engine": "external",
                                      "launch": {"base_url": "http://10.0.0.5:8000"}}],
                  {"path": "/tmp/model"})
    assert run_export("ex") == 0
    d = Ledger.open("ex").dir / "export" / "c-1"
    assert sorted(p.name for p in d.iterdir()) == ["README.md", "deployment.json"]
    readme = (d / "README.md").read_text()
    assert "## Nothing to deploy" in readme and "http://10.0.0.5:8000" in readme


def _ctx(**launch) -> LaunchContext:
    return LaunchContext(sweep_id="s", trial_key="k", trial_dir="/tmp/s/trials/k",
                         model=ModelSpec(path="meta-llama/Llama-3.1-8B"), hardware="h200",
                         workload=Workload(prompt_tokens=512, output_tokens=256,
                                           concurrency=[1]),
                         launch=LaunchOptions(**launch))


def test_secrets_stay_references_in_script_and_manifest(state_home):
    from orchestrator.results.export_ray import rayservice, serve_config
    from orchestrator.results.export_render import render_script

    ctx = _ctx(env={"HF_TOKEN": "${HF_TOKEN}", "VLLM_LOGGING_LEVEL": "INFO"})
    dep = get_adapter("vllm").deployment(TrialConfig(engine="vllm"), ctx)
    script = render_script(dep, "t")
    assert 'export HF_TOKEN="${HF_TOKEN:?set HF_TOKEN (a secret, never written here)}"' in script
    assert "export VLLM_LOGGING_LEVEL=INFO" in script
    serve = serve_config(dep, "t", "h200")
    assert serve["applications"][0]["args"]["llm_configs"][0]["runtime_env"]["env_vars"][
        "HF_TOKEN"] == "${HF_TOKEN}"
    worker = rayservice(dep, "t", "h200", serve)["spec"]["rayClusterConfig"][
        "workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "servesweep-engine-env", "key": "HF_TOKEN"}}}]


def test_a_command_rendered_differently_than_it_ran_is_not_the_measured_form():
    trial = TrialConfig(engine="vllm", max_num_seqs=64)
    ran = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m", "--host", "h",
           "--port", "1", "--tensor-parallel-size", "1", "--max-num-seqs", "32"]
    dep = get_adapter("vllm").deployment(trial, _ctx(), ran)
    assert not dep.measured_form and dep.note.startswith(NOT_MEASURED)
    assert any(d.startswith("--max-num-seqs: the trial ran with 32") for d in dep.drift)
    assert argv_drift(["--a", "1"], ["--a", "1", "--port", "2"], {"--port"}) == []
