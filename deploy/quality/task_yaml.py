#!/usr/bin/env python3
"""Write the lm-evaluation-harness (0.4.13) task YAML for the local addition set.

    python deploy/quality/task_yaml.py TASK_DIR DATA_FILE [--name arith_addition]
    # or: from task_yaml import write_task; write_task(task_dir, data_file, name)

Why a writer and not a static YAML: lm-eval hands `dataset_kwargs` straight to
`datasets.load_dataset("json", data_files=...)`, which resolves a relative path against
the process's working directory, not the YAML's folder. So the YAML is written at run
time with the ABSOLUTE path of the model's `eval/test.jsonl`; pass
`--include_path TASK_DIR --tasks NAME` to lm_eval. Stdlib only (usable from any venv).

Task: 0-shot `generate_until`, prompt `Question: {question}\\nAnswer:`, greedy
(temperature 0, until `\\n\\n` / `Question:`, max_gen_toks 32); target is the number
after `#### ` in `answer`; metric `exact_match` under two filters: `strict-match`
(number after `#### `, like gsm8k) and `flexible-extract` (last number in the output).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

TEMPLATE = """\
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data_file}
output_type: generate_until
test_split: test
num_fewshot: 0
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer.split('#### ')[-1]}}}}"
generation_kwargs:
  until: ["\\n\\n", "Question:"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 32
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [","]
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[0-9][0-9,]*)"
      - function: take_first
metadata:
  version: 1.0
"""


def write_task(task_dir: str | Path, data_file: str | Path, name: str = "arith_addition",
               relative: bool = False) -> Path:
    """Write TASK_DIR/NAME.yaml pointing at DATA_FILE (absolute; with ``relative``, as a
    path relative to TASK_DIR: servesweep runs lm-eval with the task folder as its working
    directory, so the folder can move, e.g. into a sweep); return its path."""
    data = Path(data_file)
    data = (Path(task_dir) / data if relative and not data.is_absolute() else data).resolve()
    if not data.is_file():
        raise FileNotFoundError(data)
    out = Path(task_dir) / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    where = os.path.relpath(data, out.parent.resolve()) if relative else str(data)
    out.write_text(TEMPLATE.format(name=name, data_file=json.dumps(where)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task_dir")
    ap.add_argument("data_file")
    ap.add_argument("--name", default="arith_addition")
    ap.add_argument("--relative", action="store_true",
                    help="DATA_FILE is relative to TASK_DIR and stays so in the YAML")
    a = ap.parse_args()
    print(write_task(a.task_dir, a.data_file, a.name, a.relative))


if __name__ == "__main__":
    main()
