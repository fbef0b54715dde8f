"""One lm-evaluation-harness task against a running server, as a subprocess.

``task_argv`` builds the command (an argv list): ``run --model local-completions`` (or
``local-chat-completions`` with ``--apply_chat_template``) at ``<base_url>/v1/completions``,
greedy (``temperature=0,do_sample=False``), ``--log_samples`` so every question's score
comes back. It runs offline (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``) with the task
folder as its working directory, so a task YAML's ``data_files`` may be relative to it.
``read_scores`` reads the samples file lm-eval writes
(``<out>/<model>/samples_<task>_<date>.jsonl``, one line per question and filter).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

from actors.contracts.quality import QualityRequest, QualityTask, TaskScore

__all__ = ["task_argv", "read_scores", "run_task", "LmEvalError"]

LOG_NAME = "lm_eval.log"


class LmEvalError(RuntimeError):
    """lm-eval did not produce the task's scores; the text says why (its log's tail)."""


def task_argv(req: QualityRequest, task: QualityTask, out_dir: Path) -> list[str]:
    """The lm-eval command line for ``task`` against ``req``'s server."""
    chat = task.chat
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"
    margs = [f"base_url={req.base_url.rstrip('/')}{endpoint}", f"model={req.model}",
             f"num_concurrent={task.concurrency}", "max_retries=2",
             "tokenized_requests=False"]
    if req.tokenizer_dir:
        margs += [f"tokenizer={req.tokenizer_dir}", "tokenizer_backend=huggingface"]
    else:
        margs += ["tokenizer_backend=None"]
    gen = "temperature=0,do_sample=False"
    if task.max_gen_toks is not None:
        gen += f",max_gen_toks={task.max_gen_toks}"
    argv = [req.lm_eval, "run", "--model",
            "local-chat-completions" if chat else "local-completions",
            "--model_args", ",".join(margs), "--tasks", task.name,
            "--output_path", str(out_dir), "--log_samples", "--gen_kwargs", gen,
            "--seed", "0", "--batch_size", "1"]
    if chat:
        argv.append("--apply_chat_template")
    if req.include_path:
        argv += ["--include_path", req.include_path]
    if task.limit is not None:
        argv += ["--limit", str(task.limit)]
    if task.num_fewshot is not None:
        argv += ["--num_fewshot", str(task.num_fewshot)]
    return argv


def read_scores(out_dir: Path, task: QualityTask) -> tuple[list[int], list[float]]:
    """Each question's score (``task.metric`` under ``task.filter``), by doc id."""
    files = sorted(out_dir.rglob(f"samples_{task.name}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise LmEvalError(f"lm-eval wrote no samples file for task {task.name!r} under "
                          f"{out_dir}")
    scores: dict[int, float] = {}
    filters: set[str] = set()
    with files[-1].open() as f:
        for line in f:
            row = json.loads(line)
            filters.add(str(row.get("filter")))
            if row.get("filter") != task.filter or task.metric not in row:
                continue
            scores[int(row["doc_id"])] = float(row[task.metric])
    if not scores:
        raise LmEvalError(f"task {task.name!r} has no {task.metric!r} under filter "
                          f"{task.filter!r} (its filters: {', '.join(sorted(filters))}); set "
                          "quality.task.metric / quality.task.filter")
    ids = sorted(scores)
    return ids, [scores[i] for i in ids]


def run_task(req: QualityRequest, task: QualityTask) -> TaskScore:
    """Run ``task`` and return its score; raises ``LmEvalError`` with the log's tail."""
    out_dir = Path(req.out_dir) / "lm_eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = task_argv(req, task, out_dir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_OFFLINE": "1"}
    if req.api_key:
        env["OPENAI_API_KEY"] = req.api_key
    if req.include_path and "HF_DATASETS_CACHE" not in os.environ:
        # a local task's data is cached with the trial, not in the user's home; a built-in
        # task reads the datasets cache the user filled (``docs/quality.md``)
        env["HF_DATASETS_CACHE"] = str(out_dir / "datasets-cache")
    log = out_dir / LOG_NAME
    t0 = time.monotonic()
    with log.open("w") as lf:
        try:
            proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, env=env,
                                    cwd=req.include_path or str(out_dir),
                                    start_new_session=True)
        except OSError as err:
            raise LmEvalError(f"could not start lm-eval ({argv[0]}): {err}") from None
        try:
            rc = proc.wait(timeout=req.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise LmEvalError(f"lm-eval ran past quality.timeout_s ({req.timeout_s:g} s)") \
                from None
    wall = time.monotonic() - t0
    if rc != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise LmEvalError(f"lm-eval exited {rc}: ...{tail}")
    ids, per_q = read_scores(out_dir, task)
    n = len(per_q)
    score = sum(per_q) / n
    var = sum((x - score) ** 2 for x in per_q) / (n - 1) if n > 1 else 0.0
    return TaskScore(task=task.name, metric=task.metric, filter=task.filter, n=n,
                     score=score, stderr=math.sqrt(var / n),
                     doc_ids=ids, per_question=per_q, wall_s=wall, argv=argv)
