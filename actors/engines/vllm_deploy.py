"""vLLM's ``Deployment`` of a trial: ``vllm serve MODEL ...`` and Ray Serve LLM's
``engine_kwargs`` (``VllmAdapter.deployment``).

The command is the one ``VllmAdapter.build_launch`` renders for the trial (so the export
carries exactly the flags a trial runs with), in the CLI form, without the benchmark-only
settings; each of those is listed with its reason. Ray Serve LLM forwards
``engine_kwargs`` to vLLM's ``AsyncEngineArgs``: the same flags, as Python names and
values (``--tensor-parallel-size 2`` -> ``tensor_parallel_size: 2``).
"""

from __future__ import annotations

import json
from typing import Any

from actors.contracts.config import TrialConfig
from actors.engines.base import LaunchContext, LaunchPlan
from actors.engines.deploy import (
    NOT_MEASURED,
    Deployment,
    Removed,
    argv_drift,
    host_or_port,
    option_groups,
)

__all__ = ["vllm_deployment", "engine_kwargs", "BENCH_ENV"]

#: environment the host sets for the benchmark only, and why it is not deployed
BENCH_ENV = {
    "HF_HUB_OFFLINE": "the benchmark node runs offline with the weights already on disk",
    "TRANSFORMERS_OFFLINE": "the benchmark node runs offline with the weights already on disk",
    "VLLM_NO_USAGE_STATS": "servesweep's opt-out of vLLM's usage reporting on the benchmark "
                           "node (set it in your deployment if you want it)",
    "DO_NOT_TRACK": "servesweep's opt-out of usage reporting on the benchmark node",
    "VLLM_CACHE_ROOT": "a compile cache under the sweep's state folder on the benchmark node",
    "PYTHONUNBUFFERED": "lets the benchmark host read the server log line by line",
}
_JSON_FLAGS = ("--compilation-config",)
_NONCE_PREFIX = "servesweep-launch-"


def _value(flag: str, text: str) -> Any:
    if flag in _JSON_FLAGS:
        return json.loads(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def engine_kwargs(groups: list[tuple[str, tuple[str, ...]]]) -> dict[str, Any]:
    """vLLM flags -> ``AsyncEngineArgs`` keyword arguments (what Ray Serve LLM takes)."""
    out: dict[str, Any] = {}
    for flag, values in groups:
        if not flag or flag == "--served-model-name":
            continue
        if not values:
            if flag.startswith("--no-"):
                out[flag[5:].replace("-", "_")] = False
            else:
                out[flag[2:].replace("-", "_")] = True
            continue
        out[flag[2:].replace("-", "_")] = _value(flag, values[0])
    return out


def _serve_tail(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """(the program part before ``serve``, the options after ``serve MODEL``)."""
    if "serve" not in argv:
        return None
    i = argv.index("serve")
    return argv[:i], argv[i + 2:]


def vllm_deployment(trial: TrialConfig, ctx: LaunchContext, plan: LaunchPlan,
                    measured_argv: list[str] | None) -> Deployment:
    parts = _serve_tail(plan.argv)
    if parts is None:  # pragma: no cover - build_launch always renders `serve`
        raise ValueError("vLLM's launch has no `serve` subcommand")
    program, tail = parts
    removed: list[Removed] = []
    if program != ["vllm"]:
        removed.append(Removed(setting=" ".join(program), why=(
            "the benchmark node's interpreter or CLI path (launch.python / launch.executable); "
            "deployed as the `vllm` command of the environment vLLM is installed in")))
    kept: list[tuple[str, tuple[str, ...]]] = []
    w = ctx.workload
    ran = _serve_tail(measured_argv) if measured_argv else None
    as_ran = dict(option_groups(ran[1])) if ran else {}  # show values as the trial ran them
    for flag, values in option_groups(tail):
        setting = " ".join([flag, *as_ran.get(flag, values)])
        bench = host_or_port(flag, setting, "vllm serve")
        if bench is not None:
            removed.append(bench)
        elif flag == "--served-model-name":
            if ctx.model.served_name:
                kept.append((flag, (ctx.model.served_name,)))
            else:
                removed.append(Removed(setting=setting, why=(
                    "the load generator's name for the model (the model path): vLLM serves "
                    "under that name by default")))
        elif flag == "--max-model-len" and trial.max_model_len is None:
            removed.append(Removed(setting=setting, why=(
                f"the workload's request length ({w.prompt_tokens} prompt + "
                f"{w.output_tokens} output tokens), not set in the spec: a deployment keeps "
                f"vLLM's own (the model's context length); add `{setting}` back to "
                "reproduce the measured server exactly")))
        elif flag == "--tokenizer" and ctx.model.tokenizer:
            kept.append((flag, (ctx.model.tokenizer,)))  # as the spec gave it, not resolved
        else:
            kept.append((flag, values))
    if measured_argv:
        for alias in [a for a in measured_argv if a.startswith(_NONCE_PREFIX)]:
            removed.append(Removed(setting=f"--served-model-name ... {alias}", why=(
                "the per-launch nonce alias the benchmark host used to prove the server its "
                "own")))
    env: dict[str, str] = {}
    for name, value in plan.env.items():
        if name in BENCH_ENV and name not in ctx.launch.env:
            removed.append(Removed(setting=f"{name}={value}", why=BENCH_ENV[name]))
        else:
            env[name] = value
    drift: list[str] = []
    if measured_argv:
        drift = (["the recorded argv has no `serve` subcommand: "
                  + " ".join(measured_argv)] if ran is None else
                 argv_drift(tail, ran[1], {"--host", "--port", "--served-model-name",
                                           "--tokenizer"}))
    model = ctx.model.path or ""
    argv = ["vllm", "serve", model] + [t for f, v in kept for t in (f, *v)]
    note = ("the command the trial ran, without the benchmark-only settings listed"
            if not drift else
            f"{NOT_MEASURED}: the adapter renders this trial differently than it ran "
            f"({'; '.join(drift)})")
    return Deployment(
        engine="vllm", measured_engine=trial.engine, measured_form=not drift, note=note,
        script="vllm-serve.sh", argv=argv, env=env, removed=removed, drift=drift,
        model=model, served_name=ctx.model.served_name, tp=trial.tp,
        engine_kwargs=engine_kwargs(kept),
        ray_serve_note=(f"{NOT_MEASURED}: Ray Serve LLM runs vLLM inside its own server "
                        "(its OpenAI ingress, router and replica), with the vLLM of its "
                        "image, not the `vllm serve` process the sweep measured"))
