"""The ``quality:`` section's rules: what a spec must hold before any quality run starts.

- ``check_quality`` (at validation): a gate needs trials that measure quality (the sim has
  no accuracy), the reference names config fields, and the gate gets at least
  ``min_questions`` questions (or prompts).
- ``check_task_files`` (at load, with the spec's folder): the task is defined in the
  ``include_path`` folder and every local data file it reads exists.
- ``preflight_quality`` (before a local sweep): the lm-eval executable exists here and
  knows a built-in task.

``min_questions``: the gate compares a drop's 95% interval with ``max_drop``; a score's
worst-case (p = 0.5) 95% half-width is 1.96 * 0.5 / sqrt(n), so the gate can tell a drop of
``max_drop`` from none only when that half-width is at most ``max_drop``:
n >= (0.98 / max_drop)^2, with ``max_drop`` as a share (points / 100).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from actors.contracts.config import SpaceEntry, TrialConfig
from actors.contracts.quality import GateOn, QualitySpec
from actors.engines import adapter_names, get_adapter

__all__ = ["min_questions", "check_quality", "check_task_files", "task_dir", "SWEEP_TASK_DIR",
           "lm_eval_path", "preflight_quality", "context_problems"]

_TASK_FILES = 200  # YAMLs read to find a task's definition


def min_questions(max_drop: float, gate: GateOn) -> int:
    """The fewest questions (prompts) whose 95% interval can resolve ``max_drop``."""
    share = max_drop / 100 if gate is GateOn.TASK else max_drop
    return math.ceil((1.96 * 0.5 / share) ** 2)


def _measures_quality(engine: str) -> bool:
    return engine in adapter_names() and not get_adapter(engine).time_scaled


def check_quality(q: QualitySpec, entries: list[SpaceEntry]) -> None:
    """Raise ValueError naming the field when the section cannot be honoured."""
    engines = {e.engine for e in entries}
    if q.max_drop is not None and not any(_measures_quality(e) for e in engines):
        raise ValueError("quality.max_drop gates on accuracy, and every trial of this space "
                         "is the sim, which has no accuracy (its results say 'not measured "
                         "(sim)'): add a real engine's entry, or drop quality.max_drop")
    for i, e in enumerate(entries):
        short = [n for n in e.max_model_len if n is not None and n < q.context_tokens]
        if short and _measures_quality(e.engine):
            raise ValueError(f"space[{i}].max_model_len: {short[0]} leaves no room for the "
                             f"quality run's {q.context_tokens} tokens (quality.context_tokens)"
                             ": raise it, or lower context_tokens")
    unknown = sorted(set(q.reference) - set(TrialConfig.model_fields))
    if unknown:
        raise ValueError(f"quality.reference: {', '.join(unknown)} not a config field; use "
                         f"any of: {', '.join(sorted(TrialConfig.model_fields))}")
    if q.max_drop is None:
        return
    need = min_questions(q.max_drop, q.gate)
    if q.gate is GateOn.TASK and q.task is not None and q.task.limit is not None \
            and q.task.limit < need:
        raise ValueError(f"quality.task.limit: {q.task.limit} questions cannot resolve a "
                         f"drop of {q.max_drop:g} points (a 95% interval needs at least "
                         f"{need}): raise the limit or max_drop")
    if q.gate is GateOn.AGREEMENT and q.agreement is not None and q.agreement.prompts < need:
        raise ValueError(f"quality.agreement.prompts: {q.agreement.prompts} prompts cannot "
                         f"resolve a drop of {q.max_drop:g} (a 95% interval needs at least "
                         f"{need}): raise prompts or max_drop")


#: a sweep keeps a copy of its task folder here (``run``), which ``resume`` reads
SWEEP_TASK_DIR = "quality-task"


def task_dir(q: QualitySpec, base_dir: Path | None) -> Path | None:
    """The task folder, absolute: relative paths start at the spec's folder; a spec read
    from a sweep folder (``resume``, ``report``) uses the sweep's copy."""
    if q.task is None or q.task.include_path is None:
        return None
    if base_dir is not None and (base_dir / "ledger.jsonl").is_file() \
            and (base_dir / SWEEP_TASK_DIR).is_dir():
        return (base_dir / SWEEP_TASK_DIR).resolve()
    p = Path(q.task.include_path).expanduser()
    return (p if p.is_absolute() else (base_dir or Path.cwd()) / p).resolve()


def _task_yaml(folder: Path, name: str) -> tuple[Path, dict[str, Any]] | None:
    for path in sorted(folder.rglob("*.y*ml"))[:_TASK_FILES]:
        try:
            doc = yaml.load(path.read_text(errors="replace"), Loader=_Loader)
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict) and doc.get("task") == name:
            return path, doc
    return None


class _Loader(yaml.SafeLoader):
    """Reads lm-eval's YAMLs, whose ``!function`` tags name Python callables."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _data_files(doc: dict[str, Any]) -> list[str]:
    files = (doc.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, str):
        return [files]
    if isinstance(files, dict):
        out: list[str] = []
        for v in files.values():
            out += [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)]
        return out
    if isinstance(files, list):
        return [x for x in files if isinstance(x, str)]
    return []


def check_task_files(q: QualitySpec, base_dir: Path | None) -> list[str]:
    """Problems with the task's local files (empty: none); only for ``include_path``
    tasks (a built-in task is checked by ``preflight_quality``)."""
    folder = task_dir(q, base_dir)
    if folder is None or q.task is None:
        return []
    if not folder.is_dir():
        return [f"quality.task.include_path: {folder} is not a folder"]
    found = _task_yaml(folder, q.task.name)
    if found is None:
        return [f"quality.task.name: no task {q.task.name!r} in {folder} (no YAML there has "
                f"`task: {q.task.name}`); lm-eval would not know it"]
    path, doc = found
    problems = []
    for f in _data_files(doc):
        p = Path(f).expanduser()
        p = p if p.is_absolute() else folder / p
        if not p.is_file():
            problems.append(f"quality.task: {path.name} reads data file {f!r}, which does "
                            f"not exist ({p}); data_files are relative to the include_path "
                            "folder")
    return problems


def lm_eval_path(q: QualitySpec, launch_python: str | None) -> str:
    """The lm-eval executable: the spec's, else beside the engine's interpreter, else on
    PATH, else the bare name (the node's PATH decides)."""
    if q.lm_eval:
        return q.lm_eval
    if launch_python:
        sibling = Path(launch_python).parent / "lm_eval"
        if sibling.exists():
            return str(sibling)
    return shutil.which("lm_eval") or "lm_eval"


def preflight_quality(q: QualitySpec, launch_python: str | None) -> list[str]:
    """On the machine that runs the trials: lm-eval is there, and knows a built-in task."""
    if q.task is None:
        return []
    exe = lm_eval_path(q, launch_python)
    if shutil.which(exe) is None:
        return [f"quality.task: lm-eval not found ({exe!r}); install it (`make quality-model` "
                "puts it in .venv-vllm) or set quality.lm_eval"]
    if q.task.include_path is not None:
        return []
    python = Path(exe).parent / "python"
    probe = ("import sys\nfrom lm_eval.tasks import TaskManager\n"
             "sys.exit(0 if sys.argv[1] in TaskManager().all_tasks else 3)")
    try:
        rc = subprocess.run([str(python), "-c", probe, q.task.name], capture_output=True,
                            timeout=300).returncode
    except (OSError, subprocess.TimeoutExpired) as err:
        return [f"quality.task: could not ask lm-eval for its tasks ({err})"]
    if rc == 3:
        return [f"quality.task.name: lm-eval knows no task {q.task.name!r}; give one it "
                "lists (`lm_eval ls tasks`), or your own YAML with include_path"]
    return []


def context_problems(q: QualitySpec, model_paths: list[str]) -> list[str]:
    """A local model whose context (``max_position_embeddings``) is shorter than
    ``quality.context_tokens``: its server would refuse to start."""
    out = []
    for path in model_paths:
        try:
            cfg = json.loads((Path(path) / "config.json").read_text())
        except (OSError, ValueError):
            continue
        limit = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
        if isinstance(limit, int) and limit < q.context_tokens:
            out.append(f"quality.context_tokens: {q.context_tokens} exceeds the context of "
                       f"{path} (max_position_embeddings {limit}): set it to at most {limit}")
    return out

