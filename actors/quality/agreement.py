"""Agreement with the reference config: greedy continuations of a fixed prompt set.

Prompts are seeded token ids (``prompt_ids``), the same for every config. Each prompt's
greedy continuation (``output_tokens`` tokens, ``ignore_eos``) comes back as token ids
(vLLM's ``return_tokens_as_token_ids``; else the text through the model's tokenizer). A
config other than the reference then scores the *reference's* continuation: it sends
prompt + that continuation with ``prompt_logprobs: 0`` and ``max_tokens: 1`` and reads the
logprob it gives each continuation token; the reference scores its own the same way, and
the mean absolute difference is ``logprob_mad``. A server that returns no prompt logprobs
leaves it None.
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from actors.contracts.quality import Agreement, AgreementSpec, QualityRequest
from actors.loadgen.prompts import load_tokenizer, usable_token_ids

__all__ = ["prompt_ids", "first_divergence", "measure_agreement"]

_WORKERS = 4


def prompt_ids(spec: AgreementSpec, vocab_size: int, tokenizer_dir: str | None) -> list[list[int]]:
    """The fixed prompt set: ``spec.prompts`` lists of ``spec.prompt_tokens`` usable ids."""
    ids = usable_token_ids(vocab_size, tokenizer_dir)
    rng = random.Random(spec.seed)
    return [[rng.choice(ids) for _ in range(spec.prompt_tokens)] for _ in range(spec.prompts)]


def first_divergence(a: list[int], b: list[int]) -> int:
    """The first position where ``a`` and ``b`` differ (their common length if none)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else len(a)


class _Client:
    def __init__(self, req: QualityRequest):
        self.url = req.base_url.rstrip("/") + "/v1/completions"
        self.model, self.timeout = req.model, min(req.timeout_s, 600.0)
        self.headers = {"Content-Type": "application/json"}
        if req.api_key:
            self.headers["Authorization"] = f"Bearer {req.api_key}"
        self.tokenizer = load_tokenizer(req.tokenizer_dir)

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps({"model": self.model, "temperature": 0.0, **body}).encode()
        request = urllib.request.Request(self.url, data=data, headers=self.headers)
        with urllib.request.urlopen(request, timeout=self.timeout) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        doc = self.post({"prompt": prompt, "max_tokens": n, "min_tokens": n,
                         "ignore_eos": True, "logprobs": 1,
                         "return_tokens_as_token_ids": True})
        choice = doc["choices"][0]
        tokens = (choice.get("logprobs") or {}).get("tokens") or []
        if tokens and all(str(t).startswith("token_id:") for t in tokens):
            return [int(str(t).split(":", 1)[1]) for t in tokens]
        if self.tokenizer is None:
            raise RuntimeError("the server returned no token ids and there is no "
                               "tokenizer.json to count its text with")
        return list(self.tokenizer.encode(choice.get("text", ""),
                                          add_special_tokens=False).ids)

    def score(self, prompt: list[int], continuation: list[int]) -> list[float] | None:
        """This server's logprob of each continuation token after the prompt."""
        doc = self.post({"prompt": prompt + continuation, "max_tokens": 1,
                         "prompt_logprobs": 0})
        rows = doc["choices"][0].get("prompt_logprobs") or doc.get("prompt_logprobs")
        if not rows:
            return None
        out = []
        full = prompt + continuation
        for pos in range(len(prompt), len(full)):
            row = rows[pos] or {}
            hit = row.get(str(full[pos])) or row.get(full[pos])
            if not isinstance(hit, dict) or "logprob" not in hit:
                return None
            out.append(float(hit["logprob"]))
        return out


def measure_agreement(req: QualityRequest, spec: AgreementSpec) -> Agreement:
    """This server's continuations, compared with the reference's when given."""
    t0 = time.monotonic()
    client = _Client(req)
    prompts = prompt_ids(spec, req.vocab_size, req.tokenizer_dir)
    ref = req.reference_continuations
    with ThreadPoolExecutor(_WORKERS) as pool:
        conts = list(pool.map(lambda p: client.greedy(p, spec.output_tokens), prompts))
        targets = ref if ref is not None else conts
        scored = list(pool.map(lambda pc: client.score(*pc), zip(prompts, targets)))
    logprobs = None if any(s is None for s in scored) else [s or [] for s in scored]
    if ref is None:
        return Agreement(n=len(prompts), continuations=conts, reference_logprobs=logprobs,
                         wall_s=time.monotonic() - t0)
    identical = [c == r for c, r in zip(conts, ref)]
    firsts = [first_divergence(c, r) for c, r in zip(conts, ref)]
    mad = None
    if logprobs is not None and req.reference_logprobs is not None:
        diffs = [abs(a - b) for mine, theirs in zip(logprobs, req.reference_logprobs)
                 for a, b in zip(mine, theirs)]
        mad = sum(diffs) / len(diffs) if diffs else 0.0
    return Agreement(n=len(prompts), continuations=conts, identical=identical,
                     first_divergence=firsts, identical_share=sum(identical) / len(identical),
                     mean_first_divergence=sum(firsts) / len(firsts), logprob_mad=mad,
                     reference_logprobs=logprobs, wall_s=time.monotonic() - t0)
