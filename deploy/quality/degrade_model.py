#!/usr/bin/env python3
"""Make a deliberately worse copy of a trained arith model (seeded weight noise).

    <venv-vllm>/bin/python deploy/quality/degrade_model.py SRC OUT [--noise 1.0] [--seed 0]

Contract: copies SRC's tokenizer/config/generation_config files and SRC/eval/, loads the
model, adds `noise * std(W) * N(0, 1)` (torch generator seeded with --seed, tensors in
sorted-name order) to every nn.Linear weight (attention, MLP, lm_head; not embeddings or
norms), saves it to OUT (safetensors, bfloat16), then scores it with
train_arith_model.evaluate and writes OUT/degrade_report.json (source, noise, seed,
exact_match, n, source_exact_match). Idempotent: exits 0 at once if OUT/config.json and a
degrade_report.json with the same noise and seed exist.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_arith_model import evaluate  # noqa: E402

COPY = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
        "chat_template.jinja", "generation_config.json")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    src, out = Path(args.src).resolve(), Path(args.out).resolve()
    rep = out / "degrade_report.json"
    if (out / "config.json").is_file() and rep.is_file():
        r = json.loads(rep.read_text())
        if (r.get("noise"), r.get("seed")) == (args.noise, args.seed):
            print(f"degraded model already present at {out} (em {r['exact_match']})")
            return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(2)
    out.mkdir(parents=True, exist_ok=True)
    for f in COPY:
        if (src / f).is_file():
            shutil.copy2(src / f, out / f)
    shutil.copytree(src / "eval", out / "eval", dirs_exist_ok=True)
    model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32)
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for _name, mod in sorted(model.named_modules(), key=lambda x: x[0]):
            if isinstance(mod, torch.nn.Linear):
                w = mod.weight
                w += args.noise * w.std() * torch.randn(w.shape, generator=gen)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    em, n = evaluate(out)
    src_em = json.loads((src / "train_report.json").read_text()).get("exact_match")
    report = dict(source=str(src), noise=args.noise, seed=args.seed, exact_match=em, n=n,
                  source_exact_match=src_em)
    rep.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
