"""TensorRT-LLM's ``Deployment`` of a trial (``TrtllmAdapter.deployment``): ``trtllm-serve
MODEL ...`` with its options YAML for the release, and a Triton ``tensorrt_llm`` ensemble
repository (``trtllm_triton``) as a form that was not measured."""

from __future__ import annotations

from pathlib import Path

from actors.contracts.config import TrialConfig
from actors.engines.base import LaunchContext, LaunchPlan
from actors.engines.deploy import (
    NOT_MEASURED,
    DeployForm,
    Deployment,
    Removed,
    argv_drift,
    host_or_port,
    option_groups,
)
from actors.engines.trtllm_options import OPTIONS_FILE, Release, TrtllmExtras
from actors.engines.trtllm_triton import TritonSettings, triton_files

__all__ = ["trtllm_deployment"]


def _triton_readme(s: TritonSettings, trial: TrialConfig, release: Release) -> str:
    quant = []
    if trial.weights == "fp8":
        quant.append("FP8 weights")
    if trial.kv_dtype == "fp8":
        quant.append("FP8 KV cache")
    q = (f" Quantize first ({' and '.join(quant)}: ModelOpt's `quantize.py --qformat fp8"
         + (" --kv_cache_dtype fp8" if trial.kv_dtype == "fp8" else "") + "`).") if quant else ""
    return f"""# Triton `tensorrt_llm` ensemble ({NOT_MEASURED})

The sweep measured `trtllm-serve` (TensorRT-LLM {release.label}, PyTorch backend). Triton's
`tensorrtllm` backend runs an engine built by `trtllm-build` through TensorRT-LLM's C++
executor: another runtime than the one measured, so its throughput is {NOT_MEASURED}.

Models: `preprocessing` (tokenize) -> `tensorrt_llm` (in-flight batching) ->
`postprocessing` (detokenize), tied by `ensemble` (send `text_input`, `max_tokens`,
`stream`). Every `config.pbtxt` value is filled from the winning trial: max batch
{s.max_batch_size}, KV-cache fraction {s.kv_fraction}, KV reuse {s.kv_reuse}, chunked
context {s.chunked_context}, scheduler policy {s.policy.lower()}, CUDA graphs
{s.cuda_graphs}.

Before starting Triton:

1. Build the engine into `{s.engine_dir}` (TP {s.tp}):{q}
   `trtllm-build --checkpoint_dir CKPT --output_dir {s.engine_dir} --max_batch_size
   {s.max_batch_size} --max_num_tokens {s.max_num_tokens} --max_seq_len {s.max_seq_len}`
   (CKPT: the checkpoint converted for TP {s.tp} by the model's
   `convert_checkpoint.py --tp_size {s.tp}`).
2. Copy `model.py` of `preprocessing` and `postprocessing` from the same release's
   `triton_backend/all_models/inflight_batcher_llm/<model>/1/` into `<model>/1/`.
3. The tokenizer is read from `{s.tokenizer_dir}`.
4. `tritonserver --model-repository=$(pwd)` (TP > 1: start it with `mpirun -n {s.tp}`,
   or the release's `launch_triton_server.py --world_size {s.tp}`).
"""


def trtllm_deployment(trial: TrialConfig, ctx: LaunchContext, plan: LaunchPlan,
                      limits: tuple[int, int, int], release: Release,
                      measured_argv: list[str] | None) -> Deployment:
    program, model, tail = plan.argv[0], plan.argv[1], plan.argv[2:]
    removed: list[Removed] = []
    if program != "trtllm-serve":
        removed.append(Removed(setting=program, why=(
            "the benchmark node's path to trtllm-serve (launch.executable); deployed as the "
            "`trtllm-serve` of the environment TensorRT-LLM is installed in")))
    w = ctx.workload
    kept: list[tuple[str, tuple[str, ...]]] = []
    as_ran = dict(option_groups(measured_argv[2:])) if measured_argv else {}
    for flag, values in option_groups(tail):
        setting = " ".join([flag, *as_ran.get(flag, values)])
        bench = host_or_port(flag, setting, "trtllm-serve")
        if bench is not None:
            removed.append(bench)
        elif flag == "--max_seq_len" and trial.max_model_len is None:
            removed.append(Removed(setting=setting, why=(
                f"the workload's request length ({w.prompt_tokens} prompt + {w.output_tokens} "
                "output tokens, plus room for a chat template), not set in the spec: a "
                "deployment keeps the model's own; add it back to reproduce the measured "
                "server exactly")))
        elif flag == release.options_flag:
            kept.append((flag, (OPTIONS_FILE,)))  # beside the script, not the trial folder
            removed.append(Removed(setting=setting, why=(
                "the options file in the trial's folder on the benchmark node; the same "
                f"content is exported as {OPTIONS_FILE} beside the script")))
        elif flag == "--tokenizer" and ctx.model.tokenizer:
            kept.append((flag, (ctx.model.tokenizer,)))
        else:
            kept.append((flag, values))
    drift = argv_drift(tail, measured_argv[2:], {"--host", "--port", release.options_flag,
                                                 "--tokenizer"}) if measured_argv else []
    ex = TrtllmExtras.of(trial.extras)
    batch, tokens, seq = limits
    name = Path(model.rstrip("/")).name or "model"
    settings = TritonSettings(
        max_batch_size=batch, max_num_tokens=tokens, max_seq_len=seq, tp=trial.tp,
        kv_fraction=trial.gpu_memory_fraction, kv_reuse=ex.enable_block_reuse is not False,
        chunked_context=bool(ex.enable_chunked_prefill),
        policy=ex.capacity_scheduler_policy or "GUARANTEED_NO_EVICT",
        cuda_graphs=trial.cuda_graphs, tokenizer_dir=ctx.model.tokenizer or model,
        engine_dir=f"/models/engines/{name}-tp{trial.tp}")
    files = triton_files(settings)
    files["README.md"] = _triton_readme(settings, trial, release)
    policy_note = (" STATIC_BATCH has no Triton counterpart: guaranteed_no_evict is used."
                   if settings.policy == "STATIC_BATCH" else "")
    triton = DeployForm(name="triton", title="Triton tensorrt_llm ensemble", files=files,
                        measured_form=False,
                        note=f"{NOT_MEASURED}: Triton runs TensorRT-LLM through its "
                             "tensorrtllm backend (a trtllm-build engine, C++ executor), "
                             "not the trtllm-serve PyTorch backend the sweep measured."
                             + policy_note)
    note = (f"the command the trial ran (TensorRT-LLM {release.label} options layout), "
            "without the benchmark-only settings listed" if not drift else
            f"{NOT_MEASURED}: the adapter renders this trial differently than it ran "
            f"({'; '.join(drift)})")
    return Deployment(
        engine="trtllm", measured_engine=trial.engine, measured_form=not drift, note=note,
        script="trtllm-serve.sh", argv=["trtllm-serve", model] + [t for f, v in kept
                                                                  for t in (f, *v)],
        env=dict(plan.env), files=dict(plan.files), removed=removed, drift=drift,
        model=model, served_name=ctx.model.served_name, tp=trial.tp, engine_kwargs=None,
        ray_serve_note=("Ray Serve LLM runs vLLM (LLMConfig.llm_engine 'vLLM'), not "
                        "TensorRT-LLM: a TensorRT-LLM winner has no Ray Serve LLM or "
                        "RayService form"),
        forms=[triton])
