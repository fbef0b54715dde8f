"""The ``--extra_llm_api_options`` file of ``trtllm-serve``: layouts and keys per release.

Releases and their key lists live in ``trtllm_releases.yaml`` (researched from
public docs). ``resolve_release`` picks the release a spec targets;
``render_options`` writes a trial in that release's layout (1.x:
``cuda_graph_config`` and ``kv_cache_config.dtype``; 0.20: the same settings
under ``pytorch_backend_config``, which silently ignored the 1.x keys);
``unknown_keys`` lists what the release does not know. Where ``tensorrt_llm``
is importable, the installed ``LlmArgs`` classes are the key list instead.

Weight precision is the checkpoint's: ``checkpoint_precision`` reads it from a
local Hugging Face directory so a disagreeing trial is refused before launch.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import re
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import field_validator

from actors.contracts.config import ModelSpec, TrialConfig
from actors.engines.extras import Extras

__all__ = ["TrtllmExtras", "Release", "resolve_release", "release_names", "render_options",
           "render_text",
           "unknown_keys", "refuse_unknown", "catalog_from_class", "checkpoint_precision",
           "check_checkpoint", "version_mm", "OPTIONS_FILE", "DEFAULT_MAX_BATCH",
           "DEFAULT_MAX_TOKENS", "DEFAULT_GRAPH_MAX_BATCH", "KV_DTYPES"]

RELEASES_FILE = Path(__file__).with_name("trtllm_releases.yaml")
OPTIONS_FILE = "extra_llm_api_options.yaml"
DEFAULT_MAX_BATCH = 2048  # trtllm-serve's own defaults, passed explicitly so they are verified
DEFAULT_MAX_TOKENS = 8192
DEFAULT_GRAPH_MAX_BATCH = 128  # CudaGraphConfig default
KV_DTYPES = ("auto", "fp8")
_WEIGHT_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


@dataclasses.dataclass(frozen=True)
class Release:
    """The options-file layout and known keys of one TensorRT-LLM release line."""

    name: str  # the table entry, e.g. "1.1"
    layout: str  # "1.x" | "pytorch_backend_config"
    options_flag: str
    top_level: frozenset[str]
    nested: dict[str, frozenset[str]]
    kv_dtype_key: str
    iter_stats_key: str
    policies: tuple[str, ...]
    served_name_flag: str | None = None  # the CLI flag that sets the served model name
    requested: str | None = None  # what the spec asked for, when it differs from ``name``
    source: str = "trtllm_releases.yaml"

    @property
    def label(self) -> str:
        return f"{self.requested} (keys of {self.name})" if self.requested else self.name


def version_mm(version: str) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)", str(version))
    return (int(m[1]), int(m[2])) if m else None


@functools.lru_cache(maxsize=1)
def _table() -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    raw = yaml.safe_load(RELEASES_FILE.read_text())
    policies = tuple(raw["common"]["scheduler_config"]["capacity_scheduler_policy"]["allowed"])
    flat: dict[str, dict[str, Any]] = {}

    def resolve(name: str) -> dict[str, Any]:
        if name in flat:
            return flat[name]
        r = raw["releases"][name]
        base = dict(resolve(str(r["inherits"]))) if "inherits" in r else {}
        top = set(base.get("top", ())) | set(r.get("top_level_keys", ())) | \
            set(r.get("added_top_level_keys", ()))
        nested = {k: set(v) for k, v in base.get("nested", {}).items()}
        for part in ("nested_keys", "added_nested_keys"):
            for k, v in (r.get(part) or {}).items():
                nested.setdefault(k, set()).update(v)
        out = {**base, "top": top, "nested": nested}
        for key in ("layout", "options_flag", "iter_perf_stats_key", "served_model_name_flag"):
            if key in r:
                out[key] = r[key]
        if "kv_cache_dtype" in r:
            out["kv_dtype_key"] = r["kv_cache_dtype"]["key"]
        flat[name] = out
        return out

    for name in raw["releases"]:
        resolve(str(name))
    return flat, policies


def release_names() -> list[str]:
    return sorted(_table()[0], key=lambda n: version_mm(n) or (0, 0))


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[str, Any] | None:
    """(version, TorchLlmArgs or LlmArgs) of an importable ``tensorrt_llm``, else None."""
    if importlib.util.find_spec("tensorrt_llm") is None:
        return None
    try:  # heavy (torch, CUDA libraries): only where TensorRT-LLM is really installed
        import tensorrt_llm
        from tensorrt_llm.llmapi import llm_args
    except Exception:  # noqa: BLE001  - a broken install validates against the table instead
        return None
    cls = getattr(llm_args, "TorchLlmArgs", None) or getattr(llm_args, "LlmArgs", None)
    return (str(getattr(tensorrt_llm, "__version__", "?")), cls) if cls is not None else None


def _aliases(field: Any) -> set[str]:
    out = set()
    for a in (getattr(field, "alias", None), getattr(field, "validation_alias", None)):
        if isinstance(a, str):
            out.add(a)
        for choice in getattr(a, "choices", None) or ():  # pydantic AliasChoices
            if isinstance(choice, str):
                out.add(choice)
    return out


def _field_names(cls: Any) -> frozenset[str] | None:
    fields = getattr(cls, "model_fields", None)  # pydantic v2
    if isinstance(fields, dict):
        names = set(fields)
        for f in fields.values():
            names |= _aliases(f)
        return frozenset(names)
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls))
    return None


def _nested_keys(cls: Any, key: str) -> frozenset[str] | None:
    """Keys of the config class(es) a field holds; a union of classes gives all their keys."""
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, dict) and key in fields:
        ann = fields[key].annotation
    elif dataclasses.is_dataclass(cls):
        try:
            ann = typing.get_type_hints(cls).get(key)
        except (NameError, TypeError):
            return None
    else:
        return None
    found = [_field_names(c) for c in (ann, *typing.get_args(ann)) if isinstance(c, type)]
    names = [f for f in found if f is not None]
    return frozenset().union(*names) if names else None


def catalog_from_class(cls: Any) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Top-level keys of an ``LlmArgs`` class and the keys of its nested config classes."""
    top = _field_names(cls) or frozenset()
    nested = {}
    for key in top:
        sub = _nested_keys(cls, key)
        if sub is not None:
            nested[key] = sub
    return top, nested


def _table_mm(name: str) -> tuple[int, int]:
    """(major, minor) of a release named in trtllm_releases.yaml."""
    mm = version_mm(name)
    if mm is None:
        raise ValueError(f"{RELEASES_FILE.name}: release {name!r} is not a version like '1.1'")
    return mm


def resolve_release(requested: str | None) -> Release:
    """The release to render for: ``requested``, else the installed one, else the newest 1.x.

    A release not in the table uses the newest listed one of the same major that is not
    newer. Keys come from the installed ``LlmArgs`` when its version is that release.
    """
    flat, policies = _table()
    installed = _installed()
    names = release_names()
    want = requested or (installed and ".".join(map(str, version_mm(installed[0]) or ()))) or \
        [n for n in names if n.startswith("1.")][-1]
    target = version_mm(want)
    if target is None:
        raise ValueError(f"launch.release {want!r} is not a version like '1.1'")
    same = [n for n in names if _table_mm(n)[0] == target[0] and _table_mm(n) <= target]
    if not same:
        raise ValueError(f"TensorRT-LLM release {want!r} is not in trtllm_releases.yaml "
                         f"(known: {', '.join(names)}); add its key list there")
    name = same[-1]
    r = flat[name]
    rel = Release(name=name, layout=r["layout"], options_flag=r["options_flag"],
                  top_level=frozenset(r["top"]),
                  nested={k: frozenset(v) for k, v in r["nested"].items()},
                  kv_dtype_key=r["kv_dtype_key"], iter_stats_key=r["iter_perf_stats_key"],
                  policies=policies, served_name_flag=r.get("served_model_name_flag"),
                  requested=want if ".".join(map(str, target)) != name else None)
    if installed and version_mm(installed[0]) == target:
        top, nested = catalog_from_class(installed[1])
        if top:
            rel = dataclasses.replace(rel, top_level=top, nested={**rel.nested, **nested},
                                      source=f"the installed tensorrt_llm {installed[0]} LlmArgs")
    return rel


def _put(opts: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        opts = opts.setdefault(p, {})
    opts[leaf] = value


class TrtllmExtras(Extras):
    """TensorRT-LLM's extras (see ``TrtllmAdapter``); the policies a release accepts are
    checked against that release in ``check_space``."""

    engine: Literal["trtllm"] = "trtllm"
    capacity_scheduler_policy: str | None = None
    enable_block_reuse: bool | None = None
    enable_chunked_prefill: bool | None = None
    cuda_graph_padding: bool | None = None
    tokens_per_block: int | None = None

    @field_validator("tokens_per_block")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v <= 0:
            raise ValueError(f"must be positive, got {v!r}")
        return v


def render_options(trial: TrialConfig, release: Release) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` mapping for ``trial`` in ``release``'s layout."""
    ex = TrtllmExtras.of(trial.extras)
    opts: dict[str, Any] = {}
    if trial.weights in _WEIGHT_DTYPE:
        opts["dtype"] = _WEIGHT_DTYPE[trial.weights]
    kv: dict[str, Any] = {"free_gpu_memory_fraction": trial.gpu_memory_fraction,
                          "enable_block_reuse": ex.enable_block_reuse is not False}
    if ex.tokens_per_block is not None:
        kv["tokens_per_block"] = ex.tokens_per_block
    opts["kv_cache_config"] = kv
    padding = ex.cuda_graph_padding is not False
    graph_max = trial.graph_max_batch or DEFAULT_GRAPH_MAX_BATCH
    if release.layout == "1.x":
        opts["cuda_graph_config"] = ({"enable_padding": padding, "max_batch_size": graph_max}
                                     if trial.cuda_graphs else None)
    else:
        cfg: dict[str, Any] = {"use_cuda_graph": trial.cuda_graphs}
        if trial.cuda_graphs:
            cfg.update(cuda_graph_padding_enabled=padding, cuda_graph_max_batch_size=graph_max)
        opts["pytorch_backend_config"] = cfg
    _put(opts, release.kv_dtype_key, trial.kv_dtype)
    _put(opts, release.iter_stats_key, True)
    opts["scheduler_config"] = {"capacity_scheduler_policy":
                                ex.capacity_scheduler_policy or "GUARANTEED_NO_EVICT"}
    opts["enable_chunked_prefill"] = bool(ex.enable_chunked_prefill)
    return opts


def unknown_keys(opts: dict[str, Any], release: Release) -> list[str]:
    """Rendered keys (dotted) that ``release`` does not know."""
    bad = []
    for key, value in opts.items():
        if key not in release.top_level:
            bad.append(key)
        elif isinstance(value, dict) and key in release.nested:
            bad += [f"{key}.{sub}" for sub in value if sub not in release.nested[key]]
    return bad


def refuse_unknown(opts: dict[str, Any], release: Release) -> None:
    bad = unknown_keys(opts, release)
    if bad:
        raise ValueError(f"{bad[0]} is not a key of TensorRT-LLM {release.label} (checked "
                         f"against {release.source}); set launch.release to a release that "
                         f"has it or drop the option")


def render_text(trial: TrialConfig, release: Release) -> str:
    """The options file for ``trial``: a header naming release and key source, then YAML."""
    opts = render_options(trial, release)
    refuse_unknown(opts, release)
    head = (f"# servesweep: trtllm-serve options for trial {trial.label()}\n"
            f"# layout of TensorRT-LLM {release.label}; keys checked against "
            f"{release.source}\n")
    return head + yaml.safe_dump(opts, sort_keys=False, default_flow_style=False)


def checkpoint_precision(path: str | None) -> str | None:
    """Weight precision of a local Hugging Face checkpoint: fp8, nvfp4, bf16, fp16, or None."""
    if not path or not Path(path).is_dir():
        return None
    d = Path(path)
    algo = None
    try:
        if (d / "hf_quant_config.json").is_file():  # ModelOpt export
            q = json.loads((d / "hf_quant_config.json").read_text()).get("quantization") or {}
            algo = q.get("quant_algo")
        cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").is_file() \
            else {}
    except (OSError, ValueError):
        return None
    qc = cfg.get("quantization_config") or {}
    algo = algo or qc.get("quant_algo") or qc.get("quant_method")
    if algo:
        a = str(algo).upper()
        return "nvfp4" if "FP4" in a else "fp8" if "FP8" in a else str(algo).lower()
    return {"bfloat16": "bf16", "float16": "fp16"}.get(str(cfg.get("torch_dtype")))


def check_checkpoint(trial: TrialConfig, model: ModelSpec) -> None:
    have = checkpoint_precision(model.path)
    if have is None or trial.weights == "auto":
        return
    quantized = have not in _WEIGHT_DTYPE
    if (trial.weights in _WEIGHT_DTYPE) == quantized or (quantized and have != trial.weights):
        raise ValueError(f"weights={trial.weights} but {model.path} is a {have} checkpoint: "
                         "TensorRT-LLM's PyTorch backend runs the checkpoint's own precision "
                         "(use a ModelOpt checkpoint of that precision, or weights: auto)")
