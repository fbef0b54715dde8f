"""The TensorRT-LLM adapter: argv and options file per release, key refusal, log fixtures
quoted from public sources (tests/fixtures/trtllm/SOURCES.md), JSON /metrics, verification.

TensorRT-LLM is not installed here: the ``LlmArgs`` path is exercised with stand-in
pydantic and dataclass classes shaped like the documented ones.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from actors.contracts.config import LaunchOptions, ModelSpec, TrialConfig, Workload
from actors.engines import LaunchContext, LogEvent, adapter_names, get_adapter
from actors.engines import trtllm_options as opts_mod
from actors.engines.trtllm_options import (
    OPTIONS_FILE,
    catalog_from_class,
    checkpoint_precision,
    render_options,
    resolve_release,
    unknown_keys,
)
from orchestrator.errors import SpecError
from orchestrator.planning.feasibility import infeasible_reason
from orchestrator.spec import load_spec, parse_spec
from tests.conftest import FIXTURES, ROOT

TRT = FIXTURES / "trtllm"
trt = get_adapter("trtllm")


def events_of(path: Path) -> list[LogEvent]:
    return [ev for line in path.read_text().splitlines() for ev in trt.parse_log_line(line)]


def trial(**kw) -> TrialConfig:
    return TrialConfig(engine="trtllm", **kw)


def ctx(tmp_path: Path, model: str = "/models/llama", api: str = "completions",
        **launch) -> LaunchContext:
    return LaunchContext(sweep_id="s1", trial_key="k1", trial_dir=str(tmp_path / "k1"),
                         model=ModelSpec(path=model), hardware="h200",
                         workload=Workload(prompt_tokens=512, output_tokens=128,
                                           concurrency=[1], api=api),
                         launch=LaunchOptions(**launch), port=8123)


def spec(entry: dict, hardware: str = "h200") -> dict:
    return {"name": "t", "model": {"path": "/nonexistent/model"}, "hardware": hardware,
            "workload": {"prompt_tokens": 512, "output_tokens": 128, "concurrency": [1, 8]},
            "space": [{"engine": "trtllm", **entry}]}


def spec_error(entry: dict) -> str:
    with pytest.raises(SpecError) as exc:
        parse_spec(spec(entry), "spec.yaml")
    return str(exc.value)


@pytest.fixture(autouse=True)
def no_installed_trtllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validate against trtllm_releases.yaml unless a test installs a stand-in LlmArgs."""
    monkeypatch.setattr(opts_mod, "_installed", lambda: None)


# -- releases -----------------------------------------------------------------------------

def test_default_release_is_the_newest_1x_and_prefers_config_flag():
    rel = resolve_release(None)
    assert rel.name == "1.3" and rel.layout == "1.x" and rel.options_flag == "--config"


def test_unlisted_release_uses_the_nearest_older_list_of_its_major():
    rel = resolve_release("1.2.0rc1")
    assert rel.name == "1.1" and rel.label == "1.2.0rc1 (keys of 1.1)"
    assert resolve_release("1.1.0rc3").name == "1.1"
    with pytest.raises(ValueError, match=r"'2.0' is not in trtllm_releases.yaml \(known: 0.20"):
        resolve_release("2.0")
    with pytest.raises(ValueError, match="not a version"):
        resolve_release("latest")


# -- argv and options file ----------------------------------------------------------------

def test_argv_is_a_list_with_every_limit_and_the_options_file(tmp_path):
    plan = trt.build_launch(trial(tp=2, max_num_seqs=64, max_num_tokens=4096),
                            ctx(tmp_path, release="1.1"))
    path = str(tmp_path / "k1" / OPTIONS_FILE)
    assert plan.argv == ["trtllm-serve", "/models/llama", "--host", "127.0.0.1", "--port",
                         "8123", "--backend", "pytorch", "--tp_size", "2", "--max_batch_size",
                         "64", "--max_num_tokens", "4096", "--max_seq_len", "640",
                         "--extra_llm_api_options", path]
    assert list(plan.files) == [OPTIONS_FILE] and plan.port == 8123


def test_config_flag_executable_tokenizer_env_and_defaults(tmp_path):
    c = ctx(tmp_path, api="chat", executable="/opt/trt/bin/trtllm-serve", env={"A": "1"})
    c = c.model_copy(update={"model": ModelSpec(path="/m", tokenizer="/tok")})
    plan = trt.build_launch(trial(), c)
    assert plan.argv[0] == "/opt/trt/bin/trtllm-serve"
    assert plan.argv[plan.argv.index("--max_batch_size") + 1] == "2048"  # explicit default
    assert plan.argv[plan.argv.index("--max_seq_len") + 1] == str(640 + 256)  # chat margin
    assert "--config" in plan.argv and "--extra_llm_api_options" not in plan.argv
    assert plan.argv[-2:] == ["--tokenizer", "/tok"] and plan.env == {"A": "1"}


def test_served_name_only_where_the_release_has_the_flag(tmp_path):
    named = ModelSpec(path="/m", served_name="llama")
    plan = trt.build_launch(trial(), ctx(tmp_path, release="1.3").model_copy(
        update={"model": named}))
    assert plan.argv[-2:] == ["--served-model-name", "llama"]
    with pytest.raises(ValueError, match="model.served_name needs trtllm-serve's "
                                         "--served-model-name, which TensorRT-LLM 1.1 does not"):
        trt.build_launch(trial(), ctx(tmp_path, release="1.1").model_copy(
            update={"model": named}))


def test_1x_layout_graphs_on_fp8_kv_and_extras():
    t = trial(kv_dtype="fp8", graph_max_batch=256, gpu_memory_fraction=0.85,
              extras={"capacity_scheduler_policy": "MAX_UTILIZATION", "enable_block_reuse": False,
                      "enable_chunked_prefill": True, "cuda_graph_padding": False})
    assert render_options(t, resolve_release("1.0")) == {
        "dtype": "bfloat16",
        "kv_cache_config": {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": False,
                            "dtype": "fp8"},
        "cuda_graph_config": {"enable_padding": False, "max_batch_size": 256},
        "enable_iter_perf_stats": True,
        "scheduler_config": {"capacity_scheduler_policy": "MAX_UTILIZATION"},
        "enable_chunked_prefill": True}


def test_1x_graphs_off_is_a_yaml_null(tmp_path):
    plan = trt.build_launch(trial(cuda_graphs=False), ctx(tmp_path, release="1.1"))
    text = plan.files[OPTIONS_FILE]
    assert "cuda_graph_config: null" in text
    assert text.startswith("# servesweep: trtllm-serve options for trial trtllm tp1")
    assert "layout of TensorRT-LLM 1.1; keys checked against trtllm_releases.yaml" in text
    assert yaml.safe_load(text)["cuda_graph_config"] is None


def test_020_layout_nests_graphs_and_kv_dtype_under_pytorch_backend_config():
    rel = resolve_release("0.20")
    on = render_options(trial(kv_dtype="fp8"), rel)
    assert on["pytorch_backend_config"] == {
        "use_cuda_graph": True, "cuda_graph_padding_enabled": True,
        "cuda_graph_max_batch_size": 128, "kv_cache_dtype": "fp8",
        "enable_iter_perf_stats": True}
    assert "cuda_graph_config" not in on and "dtype" not in on["kv_cache_config"]
    assert "enable_iter_perf_stats" not in on and unknown_keys(on, rel) == []
    off = render_options(trial(cuda_graphs=False), rel)
    assert off["pytorch_backend_config"] == {"use_cuda_graph": False, "kv_cache_dtype": "auto",
                                             "enable_iter_perf_stats": True}


def test_1x_keys_are_unknown_to_020():
    """The keys 0.20 silently ignored are exactly what its key list refuses."""
    bad = unknown_keys(render_options(trial(kv_dtype="fp8"), resolve_release("1.1")),
                       resolve_release("0.20"))
    assert bad == ["kv_cache_config.dtype", "cuda_graph_config", "enable_iter_perf_stats"]


def test_every_rendered_file_is_valid_yaml_of_the_rendered_mapping(tmp_path):
    for rel in ("0.20", "1.0", "1.1", "1.3"):
        for graphs in (True, False):
            t = trial(cuda_graphs=graphs, kv_dtype="fp8")
            text = trt.build_launch(t, ctx(tmp_path, release=rel)).files[OPTIONS_FILE]
            assert yaml.safe_load(text) == render_options(t, resolve_release(rel))


# -- refusing keys and options ------------------------------------------------------------

def test_tokens_per_block_is_refused_where_the_release_lacks_it():
    for rel in ("1.0", "0.20"):
        msg = spec_error({"launch": {"release": rel}, "extras": {"tokens_per_block": 64}})
        assert (f"kv_cache_config.tokens_per_block is not a key of TensorRT-LLM {rel} "
                "(checked against trtllm_releases.yaml)") in msg
    ok = parse_spec(spec({"launch": {"release": "1.1"}, "extras": {"tokens_per_block": 64}}))
    assert ok.space[0].extras == {"tokens_per_block": [64]}


def test_refusal_also_happens_before_launch(tmp_path):
    with pytest.raises(ValueError, match="tokens_per_block is not a key of TensorRT-LLM 1.0"):
        trt.build_launch(trial(extras={"tokens_per_block": 16}), ctx(tmp_path, release="1.0"))


def test_extras_are_allow_listed_and_typed():
    assert "extras.max_beam_width is not an option of engine 'trtllm'" in spec_error(
        {"extras": {"max_beam_width": 2}})
    assert "extras.enable_block_reuse must be bool" in spec_error(
        {"extras": {"enable_block_reuse": "yes"}})
    msg = spec_error({"extras": {"capacity_scheduler_policy": ["GUARANTEED_NO_EVICT", "FIFO"]}})
    assert "capacity_scheduler_policy 'FIFO': use one of MAX_UTILIZATION" in msg
    assert "must be positive" in spec_error({"extras": {"tokens_per_block": 0},
                                             "launch": {"release": "1.1"}})


def test_kv_dtype_python_and_release_checked_at_spec_load():
    assert "kv_dtype 'bf16': TensorRT-LLM's KV cache dtype is 'auto'" in spec_error(
        {"kv_dtype": ["auto", "bf16"]})
    assert "launch.python does not apply to engine 'trtllm'" in spec_error(
        {"launch": {"python": "/venv/bin/python"}})
    assert "'0.19' is not in trtllm_releases.yaml" in spec_error({"launch": {"release": "0.19"}})


# -- the installed LlmArgs, when tensorrt_llm is importable ---------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Kv(_Strict):
    free_gpu_memory_fraction: float | None = None
    enable_block_reuse: bool = True
    dtype: str = "auto"


class _Graphs(_Strict):
    max_batch_size: int = 0
    enable_padding: bool = False


class _Sched(_Strict):
    capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT"


class _Args(_Strict):  # shaped like TorchLlmArgs, minus enable_iter_perf_stats
    dtype: str = "auto"
    kv_cache_config: _Kv = _Kv()
    cuda_graph_config: _Graphs | None = None
    scheduler_config: _Sched = _Sched()
    enable_chunked_prefill: bool = False


def test_installed_llmargs_is_the_key_list_for_its_own_release(monkeypatch):
    monkeypatch.setattr(opts_mod, "_installed", lambda: ("1.1.0", _Args))
    rel = resolve_release(None)  # the installed release is the default target
    assert rel.name == "1.1" and rel.source == "the installed tensorrt_llm 1.1.0 LlmArgs"
    assert rel.nested["cuda_graph_config"] == {"max_batch_size", "enable_padding"}
    with pytest.raises(ValueError, match="enable_iter_perf_stats is not a key of TensorRT-LLM "
                                         "1.1 \\(checked against the installed tensorrt_llm"):
        opts_mod.render_text(trial(), rel)
    assert resolve_release("1.0").source == "trtllm_releases.yaml"  # another target: the table


def test_catalog_reads_dataclass_configs_and_aliases():
    @dataclasses.dataclass
    class PyCfg:  # 0.20's PyTorchConfig was a dataclass
        use_cuda_graph: bool = False
        kv_cache_dtype: str = "auto"

    class Args(BaseModel):
        pytorch_backend_config: PyCfg | None = None
        max_batch_size: int | None = None

    top, nested = catalog_from_class(Args)
    assert top == {"pytorch_backend_config", "max_batch_size"}
    assert nested == {"pytorch_backend_config": {"use_cuda_graph", "kv_cache_dtype"}}

    class Decode(BaseModel):  # a union of mode-specific classes: every member's keys count
        batch_sizes: list[int] | None = None

    class Prefill(BaseModel):
        capture_num_tokens: int = 0

    class Args13(BaseModel):
        cuda_graph_config: Decode | Prefill | None = None
        max_seq_len: int | None = Field(default=None,
                                        validation_alias=AliasChoices("max_seq_len", "msl"))

    top, nested = catalog_from_class(Args13)
    assert top == {"cuda_graph_config", "max_seq_len", "msl"}
    assert nested["cuda_graph_config"] == {"batch_sizes", "capture_num_tokens"}


# -- weights come from the checkpoint ------------------------------------------------------

def test_checkpoint_precision_refuses_a_mismatch_before_launch(tmp_path):
    fp8 = tmp_path / "fp8"
    fp8.mkdir()
    (fp8 / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    (bf16 / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert checkpoint_precision(str(fp8)) == "fp8" and checkpoint_precision(str(bf16)) == "bf16"
    assert checkpoint_precision("meta-llama/Llama-3.1-8B") is None  # a hub id: not checked
    trt.build_launch(trial(weights="fp8"), ctx(tmp_path, model=str(fp8)))
    trt.build_launch(trial(weights="bf16"), ctx(tmp_path, model=str(bf16)))
    with pytest.raises(ValueError, match="weights=bf16 but .* is a fp8 checkpoint"):
        trt.build_launch(trial(weights="bf16"), ctx(tmp_path, model=str(fp8)))
    with pytest.raises(ValueError, match="weights=fp8 but .* is a bf16 checkpoint"):
        trt.build_launch(trial(weights="fp8"), ctx(tmp_path, model=str(bf16)))
    plan = trt.build_launch(trial(weights="fp8"), ctx(tmp_path, model=str(fp8)))
    assert "dtype" not in yaml.safe_load(plan.files[OPTIONS_FILE])  # precision: the checkpoint's


# -- feasibility ----------------------------------------------------------------------------

def _reason(entry: dict, hardware: str) -> str | None:
    s = parse_spec(spec(entry, hardware))
    return infeasible_reason(TrialConfig(engine="trtllm", **entry), s, None, None)


def test_feasibility_cpu_fp8_nvfp4_and_graph_options():
    assert "TensorRT-LLM needs an NVIDIA GPU" in _reason({}, "cpu")
    assert "TensorRT-LLM FP8 weights need compute capability 8.9+; a100-80gb is 8.0" in \
        _reason({"weights": "fp8"}, "a100-80gb")
    assert "FP8 KV cache need compute capability 8.9+" in _reason({"kv_dtype": "fp8"}, "a100-80gb")
    assert "NVFP4 weights need compute capability 10.0+" in _reason({"weights": "nvfp4"}, "h200")
    assert _reason({"weights": "fp8", "kv_dtype": "fp8"}, "h200") is None
    assert _reason({"weights": "nvfp4"}, "b200") is None
    assert "graph_max_batch applies only with cuda_graphs: true" in _reason(
        {"cuda_graphs": False, "graph_max_batch": 64}, "h200")


def test_admission_follows_the_capacity_scheduler_policy():
    assert trt.admission == "guaranteed_no_evict"
    assert trt.admission_for(trial()) == "guaranteed_no_evict"
    assert trt.admission_for(trial(extras={"capacity_scheduler_policy": "MAX_UTILIZATION"})) \
        == "preempt_recompute"


# -- logs (public fixtures) -----------------------------------------------------------------

def test_1x_startup_log_applied_settings_and_pool():
    applied = trt.applied(events_of(TRT / "trtllm-1.x-cudagraph.log"))
    assert applied.version == "1.1.0rc3"
    assert applied.cuda_graphs is True and applied.get("graphs_captured") == 11
    assert applied.graph_max_batch == 128 and applied.get("graph_padding") is True
    assert applied.kv_dtype == "auto" and applied.block_size == 32
    assert applied.kv_pool_tokens == 86720 == 2710 * 32  # the real pool, not the dry run
    assert applied.max_num_seqs == 64 and applied.max_num_tokens == 8192
    assert applied.get("weights_gib") == 63.52 and applied.get("kv_bytes_per_token") == 73728
    assert applied.get("kv_memory_gib") == 5.95


def test_1x_log_verifies_the_config_it_ran_with():
    applied = trt.applied(events_of(TRT / "trtllm-1.x-cudagraph.log"))
    assert trt.verify(trial(max_num_seqs=64), applied) == []


def test_1x_log_mismatches_are_spelled_out():
    applied = trt.applied(events_of(TRT / "trtllm-1.x-cudagraph.log"))
    problems = trt.verify(trial(cuda_graphs=False, kv_dtype="fp8", max_num_seqs=32), applied)
    assert problems[0] == ("cuda_graphs: requested off, the server reports PyTorchConfig("
                           "use_cuda_graph=True), 'Creating CUDA graph instances for 11 batch "
                           "sizes'")
    assert problems[1] == "kv_dtype: requested fp8, server reports 'auto'"
    assert problems[2] == "max_num_seqs: requested 32, server reports 64"
    assert problems[3].startswith("hint: the server is TensorRT-LLM 1.1.0rc3")
    bigger = trt.verify(trial(max_num_seqs=64, graph_max_batch=256), applied)
    assert bigger == ["graph_max_batch: requested 256, server reports 128",
                      "hint: the server is TensorRT-LLM 1.1.0rc3, which reads graph and "
                      "KV-dtype options from cuda_graph_config/kv_cache_config and ignores keys "
                      "of other layouts: set launch.release: '1.1'"]


def test_silent_ignore_of_1x_keys_by_a_020_server_is_a_config_mismatch():
    """No public 0.20 log exists (SOURCES.md): these events stand for its two lines, the
    release banner and PyTorchConfig(use_cuda_graph=False, ...) printed when the 1.x
    cuda_graph_config key was ignored."""
    events = [LogEvent("version", {"version": "0.20.0"}),
              LogEvent("pytorch_config", {"use_cuda_graph": False, "max_batch": 0,
                                          "padding": False, "kv_cache_dtype": "auto"})]
    applied = trt.applied(events)
    assert applied.cuda_graphs is False
    problems = trt.verify(trial(kv_dtype="fp8"), applied)
    assert problems == [
        "cuda_graphs: requested on, the server reports PyTorchConfig(use_cuda_graph=False)",
        "kv_dtype: requested fp8, server reports 'auto'",
        "hint: the server is TensorRT-LLM 0.20.0, which reads graph and KV-dtype options from "
        "pytorch_backend_config and ignores keys of other layouts: set launch.release: '0.20'"]


def test_graphs_requested_but_unconfirmed_is_a_mismatch():
    applied = trt.applied(events_of(TRT / "trtllm-kvpool-blocks.log"))
    assert "cuda_graphs" not in applied
    assert trt.verify(trial(), applied)[0].startswith(
        "cuda_graphs: requested on, but no log line confirms it")
    assert trt.verify(trial(cuda_graphs=False), applied) == []


def test_kv_pool_in_blocks_from_the_kv_manager_line():
    events = events_of(TRT / "trtllm-kvpool-blocks.log")
    applied = trt.applied(events)
    assert applied.kv_pool_blocks == 116617 and applied.block_size == 32
    assert applied.kv_pool_tokens == 3731744 == 116617 * 32
    kv_blocks = [ev for ev in events if ev.kind == "kv_blocks"]
    assert kv_blocks[0].data["blocks"] == 116617  # what trial_exec's capacity check reads


def test_blocks_per_window_entry_and_dry_run():
    # DESIGN.md's `blocks_per_window {W: (N, 0)}` entry; the dry-run wording is source-only
    real = trt.parse_log_line("blocks_per_window {8192: (2710, 0)}")
    assert real[0].data == {"window": 8192, "blocks": 2710, "secondary": 0}
    dry = trt.parse_log_line("[kv cache manager] Primary/secondary blocks for window sizes set "
                             "to {8224: (257, 0)} for estimation dry run")
    assert dry[0].data["dry_run"] is True
    assert trt.applied(real + dry).kv_pool_blocks == 2710


def test_cuda_oom_during_weight_loading_is_startup_oom():
    events = events_of(TRT / "trtllm-oom.log")
    assert [ev.kind for ev in events] == ["fatal"]
    assert trt.classify_exit(events, 1) == "startup_oom"
    assert trt.classify_exit([], 1) == "startup_crash"
    # a taken port is the host's to retry on another (issue 14), OOM still wins over it
    port = trt.parse_log_line("OSError: [Errno 98] Address already in use")
    assert trt.classify_exit(port, 1) == "port_in_use"
    assert trt.classify_exit(port + events, 1) == "startup_oom"


def test_listening_line_and_parser_is_total():
    ev = trt.parse_log_line("INFO:     Uvicorn running on http://0.0.0.0:8355 (Press CTRL+C to "
                            "quit)")
    assert ev[0].kind == "listening" and ev[0].data["port"] == 8355
    for junk in ("", "PyTorchConfig(", "PyTorchConfig()", "\x00\xff", "kv size is ", "{" * 50):
        trt.parse_log_line(junk)


# -- /metrics: JSON iteration stats ---------------------------------------------------------

# The example output of the trtllm-serve docs ("Metrics Endpoint"), its "..." left out.
DOC_EXAMPLE = """[{"gpuMemUsage": 76665782272, "iter": 154, "iterLatencyMS": 7.00688362121582,
 "kvCacheStats": {"allocNewBlocks": 3126, "allocTotalBlocks": 3126, "cacheHitRate": 0.00128,
  "freeNumBlocks": 101253, "maxNumBlocks": 101256, "missedBlocks": 3121, "reusedBlocks": 4,
  "tokensPerBlock": 32, "usedNumBlocks": 3}, "numActiveRequests": 1}]"""


def test_metrics_documented_example():
    s = trt.parse_metrics(DOC_EXAMPLE, 1.0)
    assert s.running == 1 and s.waiting is None and s.preemptions_total is None
    assert s.kv_usage == pytest.approx(3 / 101256)
    assert s.block_size == 32 and s.num_blocks == 101256
    assert trt.metrics_path == "/metrics"


def test_metrics_take_the_newest_iteration_and_fill_gaps_defensively():
    stats = [{"iter": 9, "numActiveRequests": 7, "numQueuedRequests": 3,
              "kvCacheStats": {"maxNumBlocks": 100, "freeNumBlocks": 40}},
             {"iter": 8, "numActiveRequests": 99}]
    s = trt.parse_metrics(json.dumps(stats), 2.0)
    assert (s.running, s.waiting, s.kv_usage, s.num_blocks, s.block_size) == (7, 3, 0.6, 100,
                                                                              None)
    for text in ("[]", "not json", "# HELP x\nx 1", '{"kvCacheStats": "?"}', "null", "[1, 2]"):
        s = trt.parse_metrics(text, 3.0)
        assert (s.t, s.running, s.waiting, s.kv_usage) == (3.0, None, None, None)


# -- example specs --------------------------------------------------------------------------

def test_gpu_trtllm_example_spec_is_valid():
    s = load_spec(ROOT / "search_spaces" / "gpu-trtllm.yaml")
    assert {e.engine for e in s.space} == {"trtllm"}
    assert s.workload.concurrency[0] == 1 and s.workload.concurrency[-1] == 256


@pytest.mark.skipif("vllm" not in adapter_names(), reason="the vLLM adapter is not registered")
def test_gpu_compare_example_spec_is_valid():
    s = load_spec(ROOT / "search_spaces" / "gpu-compare.yaml")
    assert {e.engine for e in s.space} == {"trtllm", "vllm"}


# -- Triton template ------------------------------------------------------------------------

def test_triton_template_placeholders_are_documented():
    root = ROOT / "deploy" / "triton"
    readme = (root / "README.md").read_text()
    found = set()
    for cfg in (root / "model_repository").glob("*/config.pbtxt"):
        found |= set(re.findall(r"\$\{(\w+)\}", cfg.read_text()))
    assert {"ensemble", "preprocessing", "tensorrt_llm", "postprocessing"} == {
        p.parent.name for p in (root / "model_repository").glob("*/config.pbtxt")}
    assert found and all(f"`{name}`" in readme for name in found), found
