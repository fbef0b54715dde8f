"""A Triton ``tensorrt_llm`` ensemble model repository for a TensorRT-LLM trial.

The layout of TensorRT-LLM's ``triton_backend/all_models/inflight_batcher_llm``
(``preprocessing`` -> ``tensorrt_llm`` -> ``postprocessing``, tied by ``ensemble``), with
every ``config.pbtxt`` value filled from the trial (no ``${...}`` placeholder left):
batch limits, KV-cache fraction and reuse, chunked context, the capacity scheduler
policy, CUDA graphs. Tensor names and types follow that repository's templates; the
``preprocessing`` and ``postprocessing`` I/O is theirs in full (their ``model.py`` looks
every output up by name). Inputs for LoRA, multimodal, speculative and guided decoding
are left out of ``tensorrt_llm`` and ``ensemble``.

Not what the sweep measured: Triton's ``tensorrtllm`` backend runs an engine built by
``trtllm-build`` through the C++ executor, while the sweep measured ``trtllm-serve`` on
the PyTorch backend. The form's README says so and how to build the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TritonSettings", "triton_files", "pbtxt"]


class Enum(str):
    """A protobuf enum value: written bare (``TYPE_INT32``), not quoted."""


@dataclass(frozen=True)
class TritonSettings:
    """What the repository takes from the trial."""

    max_batch_size: int
    max_num_tokens: int
    max_seq_len: int
    tp: int
    kv_fraction: float
    kv_reuse: bool
    chunked_context: bool
    policy: str  # GUARANTEED_NO_EVICT | MAX_UTILIZATION
    cuda_graphs: bool
    tokenizer_dir: str
    engine_dir: str


def _scalar(v: Any) -> str:
    if isinstance(v, Enum):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def pbtxt(fields: list[tuple[str, Any]], indent: int = 0) -> str:
    """Protobuf text format of ``(name, value)`` pairs: a value that is a list (of pairs)
    is a message; a tuple of scalars a repeated scalar field; a repeated message field is
    the same name given more than once."""
    pad = "  " * indent
    lines = []
    for name, value in fields:
        if isinstance(value, list):
            lines.append(f"{pad}{name} {{")
            if value:
                lines.append(pbtxt(value, indent + 1))
            lines.append(f"{pad}}}")
        elif isinstance(value, tuple):
            lines.append(f"{pad}{name}: [ {', '.join(_scalar(v) for v in value)} ]")
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}")
    return "\n".join(lines)


# (name, data type, dims, optional, extra) rows of the templates' tensors
_Row = tuple[str, str, list[int], bool]
_S, _I32, _U64, _F32, _B, _U8, _F16, _I64 = ("TYPE_STRING", "TYPE_INT32", "TYPE_UINT64",
                                             "TYPE_FP32", "TYPE_BOOL", "TYPE_UINT8",
                                             "TYPE_FP16", "TYPE_INT64")
_PRE_IN: list[_Row] = [
    ("QUERY", _S, [1], False), ("DECODER_QUERY", _S, [1], True),
    ("IMAGE_BYTES", _U8, [-1, -1, -1, -1], True), ("IMAGE_URL", _S, [1], True),
    ("IMAGES", _S, [-1], True), ("VIDEO_BYTES", _U8, [-1, -1, -1, -1], True),
    ("REQUEST_OUTPUT_LEN", _I32, [1], False), ("BAD_WORDS_DICT", _S, [-1], True),
    ("STOP_WORDS_DICT", _S, [-1], True), ("EMBEDDING_BIAS_WORDS", _S, [-1], True),
    ("EMBEDDING_BIAS_WEIGHTS", _F32, [-1], True), ("END_ID", _I32, [1], True),
    ("PAD_ID", _I32, [1], True), ("PROMPT_TABLE_EXTRA_ID", _U64, [1], True)]
_PRE_OUT: list[_Row] = [
    ("INPUT_ID", _I32, [-1], False), ("REQUEST_INPUT_LEN", _I32, [1], False),
    ("DECODER_INPUT_ID", _I32, [-1], False), ("REQUEST_DECODER_INPUT_LEN", _I32, [1], False),
    ("BAD_WORDS_IDS", _I32, [2, -1], False), ("STOP_WORDS_IDS", _I32, [2, -1], False),
    ("EMBEDDING_BIAS", _F32, [-1], False), ("REQUEST_OUTPUT_LEN", _I32, [-1], False),
    ("OUT_END_ID", _I32, [1], False), ("OUT_PAD_ID", _I32, [1], False),
    ("OUT_PROMPT_TABLE_EXTRA_IDS", _U64, [-1], False),
    ("PIXEL_VALUES", _F16, [-1, -1, -1, -1], False), ("ASPECT_RATIO_IDS", _I64, [-1], False),
    ("ASPECT_RATIO_MASK", _I64, [-1, -1], False),
    ("CROSS_ATTENTION_MASK", _I64, [-1, -1, -1], False), ("IMAGE_SIZES", _I64, [-1, 2], False),
    ("IS_VIDEO_INPUT", _B, [1], False), ("ATTENTION_MASK", _I64, [-1], False),
    ("IMAGE_GRID_THW", _I64, [3], False), ("VISION_INPUT_ID", _I32, [-1], False)]
_POST_IN: list[_Row] = [("TOKENS_BATCH", _I32, [-1, -1], False),
                        ("SEQUENCE_LENGTH", _I32, [-1], False)]
_POST_OUT: list[_Row] = [("OUTPUT", _S, [-1], False)]
# tensorrt_llm: the text-generation inputs; scalars per request are reshaped to []
_LLM_IN: list[_Row] = [
    ("input_ids", _I32, [-1], False), ("input_lengths", _I32, [1], False),
    ("request_output_len", _I32, [1], False), ("decoder_input_ids", _I32, [-1], True),
    ("decoder_input_lengths", _I32, [1], True), ("end_id", _I32, [1], True),
    ("pad_id", _I32, [1], True), ("stop_words_list", _I32, [2, -1], True),
    ("bad_words_list", _I32, [2, -1], True), ("embedding_bias", _F32, [-1], True),
    ("beam_width", _I32, [1], True), ("temperature", _F32, [1], True),
    ("runtime_top_k", _I32, [1], True), ("runtime_top_p", _F32, [1], True),
    ("len_penalty", _F32, [1], True), ("repetition_penalty", _F32, [1], True),
    ("min_tokens", _I32, [1], True), ("presence_penalty", _F32, [1], True),
    ("frequency_penalty", _F32, [1], True), ("seed", _U64, [1], True),
    ("return_log_probs", _B, [1], True), ("return_context_logits", _B, [1], True),
    ("return_generation_logits", _B, [1], True), ("exclude_input_in_output", _B, [1], True),
    ("num_return_sequences", _I32, [1], True), ("streaming", _B, [1], True),
    ("prompt_table_extra_ids", _U64, [-1], True)]
_RAGGED = {"input_ids", "decoder_input_ids", "stop_words_list", "bad_words_list",
           "embedding_bias", "prompt_table_extra_ids"}
_LLM_OUT: list[_Row] = [
    ("output_ids", _I32, [-1, -1], False), ("sequence_length", _I32, [-1], False),
    ("cum_log_probs", _F32, [-1], False), ("output_log_probs", _F32, [-1, -1], False),
    ("context_logits", _F32, [-1, -1], False), ("generation_logits", _F32, [-1, -1, -1], False),
    ("batch_index", _I32, [1], False), ("sequence_index", _I32, [1], False)]
# ensemble input -> (step, the step's input); outputs: ensemble output <- (step, output)
_ENS_IN: list[tuple[str, str, list[int], bool, str, str]] = [
    ("text_input", _S, [1], False, "preprocessing", "QUERY"),
    ("decoder_text_input", _S, [1], True, "preprocessing", "DECODER_QUERY"),
    ("max_tokens", _I32, [1], False, "preprocessing", "REQUEST_OUTPUT_LEN"),
    ("bad_words", _S, [-1], True, "preprocessing", "BAD_WORDS_DICT"),
    ("stop_words", _S, [-1], True, "preprocessing", "STOP_WORDS_DICT"),
    ("embedding_bias_words", _S, [-1], True, "preprocessing", "EMBEDDING_BIAS_WORDS"),
    ("embedding_bias_weights", _F32, [-1], True, "preprocessing", "EMBEDDING_BIAS_WEIGHTS"),
    ("end_id", _I32, [1], True, "preprocessing", "END_ID"),
    ("pad_id", _I32, [1], True, "preprocessing", "PAD_ID"),
    ("prompt_table_extra_id", _U64, [1], True, "preprocessing", "PROMPT_TABLE_EXTRA_ID"),
    ("exclude_input_in_output", _B, [1], True, "tensorrt_llm", "exclude_input_in_output"),
    ("top_k", _I32, [1], True, "tensorrt_llm", "runtime_top_k"),
    ("top_p", _F32, [1], True, "tensorrt_llm", "runtime_top_p"),
    ("temperature", _F32, [1], True, "tensorrt_llm", "temperature"),
    ("length_penalty", _F32, [1], True, "tensorrt_llm", "len_penalty"),
    ("repetition_penalty", _F32, [1], True, "tensorrt_llm", "repetition_penalty"),
    ("min_tokens", _I32, [1], True, "tensorrt_llm", "min_tokens"),
    ("presence_penalty", _F32, [1], True, "tensorrt_llm", "presence_penalty"),
    ("frequency_penalty", _F32, [1], True, "tensorrt_llm", "frequency_penalty"),
    ("seed", _U64, [1], True, "tensorrt_llm", "seed"),
    ("return_log_probs", _B, [1], True, "tensorrt_llm", "return_log_probs"),
    ("return_context_logits", _B, [1], True, "tensorrt_llm", "return_context_logits"),
    ("return_generation_logits", _B, [1], True, "tensorrt_llm", "return_generation_logits"),
    ("num_return_sequences", _I32, [1], True, "tensorrt_llm", "num_return_sequences"),
    ("beam_width", _I32, [1], True, "tensorrt_llm", "beam_width"),
    ("stream", _B, [1], True, "tensorrt_llm", "streaming")]
# preprocessing outputs -> tensorrt_llm inputs, through the ensemble's internal tensors
_PRE_TO_LLM = [("INPUT_ID", "input_ids"), ("REQUEST_INPUT_LEN", "input_lengths"),
               ("DECODER_INPUT_ID", "decoder_input_ids"),
               ("REQUEST_DECODER_INPUT_LEN", "decoder_input_lengths"),
               ("REQUEST_OUTPUT_LEN", "request_output_len"),
               ("STOP_WORDS_IDS", "stop_words_list"), ("BAD_WORDS_IDS", "bad_words_list"),
               ("EMBEDDING_BIAS", "embedding_bias"), ("OUT_END_ID", "end_id"),
               ("OUT_PAD_ID", "pad_id"), ("OUT_PROMPT_TABLE_EXTRA_IDS", "prompt_table_extra_ids")]
_ENS_OUT = [("text_output", _S, [-1], "postprocessing", "OUTPUT"),
            ("cum_log_probs", _F32, [-1], "tensorrt_llm", "cum_log_probs"),
            ("output_log_probs", _F32, [-1, -1], "tensorrt_llm", "output_log_probs"),
            ("context_logits", _F32, [-1, -1], "tensorrt_llm", "context_logits"),
            ("generation_logits", _F32, [-1, -1, -1], "tensorrt_llm", "generation_logits"),
            ("batch_index", _I32, [1], "tensorrt_llm", "batch_index"),
            ("sequence_index", _I32, [1], "tensorrt_llm", "sequence_index")]


def _tensor(name: str, dtype: str, dims: list[int], optional: bool = False,
            reshape: bool = False, ragged: bool = False) -> list[tuple[str, Any]]:
    t: list[tuple[str, Any]] = [("name", name), ("data_type", Enum(dtype)),
                                ("dims", tuple(dims))]
    if reshape:
        t.append(("reshape", [("shape", ())]))
    if ragged:
        t.append(("allow_ragged_batch", True))
    if optional:
        t.append(("optional", True))
    return t


def _params(values: dict[str, str]) -> list[tuple[str, Any]]:
    return [("parameters", [("key", k), ("value", [("string_value", v)])])
            for k, v in values.items()]


def _batching(s: TritonSettings) -> list[tuple[str, Any]]:
    return [("preferred_batch_size", (s.max_batch_size,)),
            ("max_queue_delay_microseconds", 0),
            ("default_queue_policy", [("max_queue_size", 0)])]


def _cpu_instances(count: int) -> list[tuple[str, Any]]:
    return [("instance_group", [("count", count), ("kind", Enum("KIND_CPU"))])]


def _io(rows: list[_Row], field: str, scalar_reshape: bool = False) -> list[tuple[str, Any]]:
    return [(field, _tensor(n, d, dims, opt, reshape=scalar_reshape and dims == [1],
                            ragged=n in _RAGGED)) for n, d, dims, opt in rows]


def _model(name: str, head: list[tuple[str, Any]], body: list[tuple[str, Any]]) -> str:
    return f"# servesweep export: the {name} model\n" + pbtxt([("name", name), *head, *body]) \
        + "\n"


def triton_files(s: TritonSettings) -> dict[str, str]:
    """``<model>/config.pbtxt`` (and each model's version folder ``1/``) by path."""
    pre = _model("preprocessing", [("backend", "python"), ("max_batch_size", s.max_batch_size)],
                 [("dynamic_batching", _batching(s)), *_io(_PRE_IN, "input"),
                  *_io(_PRE_OUT, "output"),
                  *_params({"tokenizer_dir": s.tokenizer_dir, "add_special_tokens": "true",
                            # "" = no vision engine (model.py reads this key)
                            "multimodal_model_path": "", "gpt_model_path": s.engine_dir}),
                  *_cpu_instances(1)])
    post = _model("postprocessing", [("backend", "python"), ("max_batch_size", s.max_batch_size)],
                  [("dynamic_batching", []), *_io(_POST_IN, "input"), *_io(_POST_OUT, "output"),
                   *_params({"tokenizer_dir": s.tokenizer_dir, "skip_special_tokens": "true"}),
                   *_cpu_instances(1)])
    policy = "max_utilization" if s.policy == "MAX_UTILIZATION" else "guaranteed_no_evict"
    flag = {True: "true", False: "false"}
    llm = _model("tensorrt_llm", [("backend", "tensorrtllm"), ("max_batch_size", s.max_batch_size)],
                 [("model_transaction_policy", [("decoupled", True)]),
                  ("dynamic_batching", _batching(s)),
                  *_io(_LLM_IN, "input", scalar_reshape=True), *_io(_LLM_OUT, "output"),
                  *_cpu_instances(1),
                  *_params({"max_beam_width": "1", "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
                            "gpt_model_type": "inflight_fused_batching",
                            "gpt_model_path": s.engine_dir,
                            "batch_scheduler_policy": policy,
                            "kv_cache_free_gpu_mem_fraction": str(s.kv_fraction),
                            "enable_kv_cache_reuse": flag[s.kv_reuse],
                            "enable_chunked_context": flag[s.chunked_context],
                            "cuda_graph_mode": flag[s.cuda_graphs],
                            "exclude_input_in_output": "true",
                            "normalize_log_probs": "true",
                            "cancellation_check_period_ms": "100",
                            "stats_check_period_ms": "100",
                            "decoding_mode": "top_k_top_p",
                            "executor_worker_path":
                                "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"})])
    step_pre = [("model_name", "preprocessing"), ("model_version", -1)]
    step_llm = [("model_name", "tensorrt_llm"), ("model_version", -1)]
    step_post = [("model_name", "postprocessing"), ("model_version", -1)]
    steps = {"preprocessing": step_pre, "tensorrt_llm": step_llm, "postprocessing": step_post}
    for name, _, _, _, step, key in _ENS_IN:
        steps[step].append(("input_map", [("key", key), ("value", name)]))
    for out, into in _PRE_TO_LLM:
        step_pre.append(("output_map", [("key", out), ("value", f"_{out}")]))
        step_llm.append(("input_map", [("key", into), ("value", f"_{out}")]))
    step_llm += [("output_map", [("key", "output_ids"), ("value", "_TOKENS_BATCH")]),
                 ("output_map", [("key", "sequence_length"), ("value", "_SEQUENCE_LENGTH")])]
    step_post += [("input_map", [("key", "TOKENS_BATCH"), ("value", "_TOKENS_BATCH")]),
                  ("input_map", [("key", "SEQUENCE_LENGTH"), ("value", "_SEQUENCE_LENGTH")])]
    for name, _, _, step, key in _ENS_OUT:
        steps[step].append(("output_map", [("key", key), ("value", name)]))
    ens = _model("ensemble", [("platform", "ensemble"), ("max_batch_size", s.max_batch_size)],
                 [*[("input", _tensor(n, d, dims, opt)) for n, d, dims, opt, _, _ in _ENS_IN],
                  *[("output", _tensor(n, d, dims)) for n, d, dims, _, _ in _ENS_OUT],
                  ("ensemble_scheduling", [("step", step_pre), ("step", step_llm),
                                           ("step", step_post)])])
    keep = "version folder: Triton loads version 1 of this model from here\n"
    return {"preprocessing/config.pbtxt": pre, "tensorrt_llm/config.pbtxt": llm,
            "postprocessing/config.pbtxt": post, "ensemble/config.pbtxt": ens,
            "preprocessing/1/README": keep + "put the release's preprocessing model.py here\n",
            "postprocessing/1/README": keep + "put the release's postprocessing model.py here\n",
            "tensorrt_llm/1/README": keep + "(empty for the tensorrtllm backend)\n",
            "ensemble/1/README": keep + "(empty for an ensemble)\n"}
