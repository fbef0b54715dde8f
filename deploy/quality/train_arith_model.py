#!/usr/bin/env python3
"""Train a small Llama on addition word problems (GSM8K answer format), locally.

    <venv-vllm>/bin/python deploy/quality/train_arith_model.py OUT_DIR \
        [--size tiny|h200] [--seed 0] [--device cpu|cuda] [--steps N]

Contract:
- Problem: `Question: What is A plus B?\\nAnswer:` -> ` A + B = S\\n#### S` then `</s>`.
  `tiny`: A, B two-digit (10-99); `h200`: three-digit (100-999).
- Tokenizer: byte-level, no merges (every character, so every digit, is one token),
  specials `<s>` `</s>` `<pad>` + chat roles and chat template as in
  deploy/vllm-cpu/make_tiny_model.py; BOS is added to text. Saved as an HF fast tokenizer.
- Model: `LlamaForCausalLM` trained from scratch (loss on answer tokens only), seeded
  (torch, random, numpy), fixed data order, bf16 autocast on cuda; saved with
  save_pretrained (safetensors, bfloat16) + generation_config.
- Threads on cpu: `--threads N`, or by default whichever of 2 and 1 runs a training step
  faster, timed on this host before training (forward and backward of one fixed batch, no
  optimiser step, so the choice changes no state). Beside two busy loops one thread ran
  1.5-5x faster than two, which wait on each other; idle, two are faster. The
  thread count changes the arithmetic's order, hence the weights, which the stages absorb.
- The same seed does not give the same weights on every CPU (a CI host once reached 0.46
  where this box reached 0.918), so the size's steps are a first stage: while greedy exact
  match on N_VAL validation problems (disjoint from training and from the test set) is
  below the target, up to MAX_EXTENSIONS more stages of EXTEND_STEPS run, each a short
  cosine from a tenth of the learning rate (a third undid what the first stage learnt).
  The report records every stage.
- Writes OUT_DIR/eval/test.jsonl (N_EVAL held-out problems, disjoint from training,
  fields `question`, `answer` ending `#### S`) and OUT_DIR/train_report.json (seed, size,
  steps, wall_s, threads, exact_match, n) where exact_match is greedy decoding of the
  saved bf16 model with HF transformers, scored on the number after `#### `.
- Exit 1 if exact_match < the size's target (TARGET); exit 0 at once if OUT_DIR already
  holds config.json, tokenizer.json and a train_report.json with the same size and seed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

# the specials and chat template of the project's other tiny model, so both load alike
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm-cpu"))
from make_tiny_model import CHAT_TEMPLATE, SPECIALS  # noqa: E402

N_EVAL = 500
N_VAL = 200  # validation problems, held out like the test set, for the stage decisions
EXTEND_STEPS = 300
MAX_EXTENSIONS = 4
SIZES = {  # model shape, digits per operand, optimisation
    "tiny": dict(hidden=192, inter=512, layers=3, heads=6, kv=2, digits=2,
                 steps=600, batch=64, lr=2e-3, target=0.80),
    "h200": dict(hidden=384, inter=1024, layers=6, heads=6, kv=2, digits=3,
                 steps=3000, batch=256, lr=1e-3, target=0.90),
}
ANSWER_RE = re.compile(r"#### (-?[0-9.,]+)")


def question(a: int, b: int) -> str:
    return f"What is {a} plus {b}?"


def prompt(q: str) -> str:
    return f"Question: {q}\nAnswer:"


def answer(a: int, b: int) -> str:
    return f" {a} + {b} = {a + b}\n#### {a + b}"


def split(digits: int, seed: int) -> tuple[list[tuple[int, int]], set[tuple[int, int]]]:
    """Held-out test pairs (seeded) and the set to exclude from training (the test pairs
    and the validation pairs, ``validation``)."""
    held, val = _held_out(digits, seed)
    return held, set(held) | set(val)


def validation(digits: int, seed: int) -> list[tuple[int, int]]:
    """N_VAL pairs disjoint from the test set, never trained on: the stage decisions."""
    return _held_out(digits, seed)[1]


def _held_out(digits: int, seed: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    rng = random.Random(f"eval-{seed}-{digits}")
    drawn: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(drawn) < N_EVAL + N_VAL:  # the test set first: the same pairs as ever
        p = (rng.randint(lo, hi), rng.randint(lo, hi))
        if p not in seen:
            seen.add(p)
            drawn.append(p)
    return drawn[:N_EVAL], drawn[N_EVAL:]


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SPECIALS + alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.add_special_tokens(SPECIALS)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        additional_special_tokens=SPECIALS[3:], model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def encode_batch(tok, pairs, device):
    """Right-padded ids [BOS prompt answer EOS]; labels -100 except answer + EOS."""
    import torch

    ps = tok([prompt(question(a, b)) for a, b in pairs])["input_ids"]
    ts = tok([answer(a, b) for a, b in pairs], add_special_tokens=False)["input_ids"]
    rows = [p + t + [tok.eos_token_id] for p, t in zip(ps, ts)]
    labs = [[-100] * len(p) + t + [tok.eos_token_id] for p, t in zip(ps, ts)]
    n = max(map(len, rows))
    ids = [r + [tok.pad_token_id] * (n - len(r)) for r in rows]
    lab = [r + [-100] * (n - len(r)) for r in labs]
    return torch.tensor(ids, device=device), torch.tensor(lab, device=device)


def llama_config(cfg: dict, vocab: int, **tokens: int):
    """The size's ``LlamaConfig`` (``tokens``: the special token ids, where known)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab, hidden_size=cfg["hidden"], intermediate_size=cfg["inter"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv"], max_position_embeddings=512, rms_norm_eps=1e-5,
        tie_word_embeddings=False, **tokens)


def train(out: Path, tok, cfg: dict, args) -> tuple[int, int, list[dict]]:
    """Train in stages (the module's contract), save the bf16 model; return the steps, the
    parameter count and each stage's record (steps, loss, validation exact match)."""
    import torch
    from transformers import LlamaForCausalLM

    lo, hi = 10 ** (cfg["digits"] - 1), 10 ** cfg["digits"] - 1
    _, held = split(cfg["digits"], args.seed)
    val = validation(cfg["digits"], args.seed)
    rng = random.Random(f"train-{args.seed}")
    model = LlamaForCausalLM(llama_config(cfg, len(tok), bos_token_id=tok.bos_token_id,
                                          eos_token_id=tok.eos_token_id,
                                          pad_token_id=tok.pad_token_id)).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98),
                            weight_decay=0.01)
    cuda = args.device == "cuda"
    t0 = time.monotonic()
    done, stages = 0, []

    def stage(steps: int, peak: float, warm: int) -> float:
        nonlocal done
        for g in opt.param_groups:
            g["lr"] = peak
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
            0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))) + 0.02)
        model.train()
        loss = torch.zeros(())
        for step in range(steps):
            pairs = []
            while len(pairs) < cfg["batch"]:
                p = (rng.randint(lo, hi), rng.randint(lo, hi))
                if p not in held:
                    pairs.append(p)
            ids, lab = encode_batch(tok, pairs, args.device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                loss = model(input_ids=ids, labels=lab).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % 100 == 0 or step == steps - 1:
                print(f"step {done + step} loss {loss.item():.4f} "
                      f"t {time.monotonic() - t0:.1f}s", flush=True)
        done += steps
        return float(loss.item())

    loss = stage(args.steps or cfg["steps"], cfg["lr"], 50)
    while True:
        model.eval()
        em = exact_match(model, tok, [(prompt(question(a, b)), a + b) for a, b in val],
                         args.device)
        stages.append({"steps": done, "loss": round(loss, 4), "val_exact_match": em})
        print(f"after {done} steps: validation exact match {em:.3f} "
              f"(target {cfg['target']})", flush=True)
        if em >= cfg["target"] or len(stages) > MAX_EXTENSIONS or args.steps:
            break
        loss = stage(EXTEND_STEPS, cfg["lr"] / 10, 10)
    model = model.to(torch.bfloat16)
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.generation_config, k, getattr(tok, k))
    model.save_pretrained(out, safe_serialization=True)
    return done, sum(p.numel() for p in model.parameters()), stages


def fastest_threads(cfg: dict, candidates: tuple[int, ...] = (2, 1), reps: int = 4) -> int:
    """The thread count in ``candidates`` whose median training step (forward and backward
    of one fixed batch on a throwaway model of the size) is fastest here; prints each."""
    import torch
    from transformers import LlamaForCausalLM

    before = torch.random.get_rng_state()
    model = LlamaForCausalLM(llama_config(cfg, 300))
    torch.random.set_rng_state(before)  # the real model's init draws as if this never ran
    ids = torch.arange(cfg["batch"] * 64).reshape(cfg["batch"], 64) % 300
    best, best_s = candidates[0], math.inf
    for n in candidates:
        torch.set_num_threads(n)
        times = []
        for _ in range(reps + 1):  # the first warms up
            t = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            times.append(time.perf_counter() - t)
            model.zero_grad(set_to_none=True)
        step_s = sorted(times[1:])[reps // 2]
        print(f"threads {n}: {step_s:.3f} s a step", flush=True)
        if step_s < best_s:
            best, best_s = n, step_s
    return best


def exact_match(model, tok, items: list[tuple[str, int]], device: str,
                batch: int = 100) -> float:
    """Greedy exact match of ``model`` on (prompt, sum) items: the number after `#### `
    in the first paragraph generated."""
    import torch

    side, tok.padding_side = tok.padding_side, "left"
    ok = 0
    try:
        for i in range(0, len(items), batch):
            chunk = items[i:i + batch]
            enc = tok([p for p, _ in chunk], return_tensors="pt", padding=True).to(device)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=32, do_sample=False,
                                     pad_token_id=tok.pad_token_id)
            for (_, want), g in zip(chunk, tok.batch_decode(
                    gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)):
                m = ANSWER_RE.search(g.split("\n\n")[0])
                ok += bool(m) and m.group(1) == str(want)
    finally:
        tok.padding_side = side
    return ok / len(items)


def evaluate(model_dir: Path, device: str = "cpu", batch: int = 100) -> tuple[float, int]:
    """Greedy exact match of the saved model on model_dir/eval/test.jsonl."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device)
    model.eval()
    docs = [json.loads(x) for x in (model_dir / "eval" / "test.jsonl").read_text().splitlines()]
    items = [(prompt(d["question"]), int(d["answer"].split("#### ")[-1])) for d in docs]
    return exact_match(model, tok, items, device, batch), len(docs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--steps", type=int, default=0, help="override (sanity runs only)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads on cpu (default: 2 or 1, whichever this host runs faster)")
    args = ap.parse_args()
    out = Path(args.out_dir).resolve()
    rep = out / "train_report.json"
    if all((out / f).is_file() for f in ("config.json", "tokenizer.json", rep.name)):
        r = json.loads(rep.read_text())
        if (r.get("size"), r.get("seed")) == (args.size, args.seed) and (
                r["exact_match"] >= r["target"]):
            print(f"arith model already present at {out} (em {r['exact_match']}); nothing to do")
            return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    cfg = SIZES[args.size]
    threads = (args.threads or fastest_threads(cfg)) if args.device == "cpu" else (
        torch.get_num_threads())
    torch.set_num_threads(threads)
    t0 = time.monotonic()
    (out / "eval").mkdir(parents=True, exist_ok=True)
    held, _ = split(cfg["digits"], args.seed)
    with open(out / "eval" / "test.jsonl", "w") as f:
        for a, b in held:
            f.write(json.dumps({"question": question(a, b), "answer": answer(a, b).strip()}) + "\n")
    tok = build_tokenizer(out)
    steps, params, stages = train(out, tok, cfg, args)
    train_s = time.monotonic() - t0
    em, n = evaluate(out, args.device)
    report = dict(seed=args.seed, size=args.size, device=args.device, steps=steps,
                  digits=cfg["digits"], train_wall_s=round(train_s, 1),
                  wall_s=round(time.monotonic() - t0, 1), threads=threads,
                  exact_match=em, n=n, target=cfg["target"], params=params, stages=stages)
    rep.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    return 0 if em >= cfg["target"] else 1


if __name__ == "__main__":
    sys.exit(main())
