"""KV capacity by admission policy (DESIGN.md measurement rule 6).

No-evict engines (TensorRT-LLM's GUARANTEED_NO_EVICT) admit a request only if
its whole length fits: running = floor(blocks / ceil((prompt + output) / bs)),
the rest wait. Preempting engines (vLLM) admit on the prompt and grow on
demand: above the same full-length capacity they preempt (and queue).

Before any of that, a request must fit the server's max model length (vLLM's
``max_model_len``, TensorRT-LLM's ``max_seq_len``): a server refuses a request
whose prompt plus ``max_tokens`` exceeds it, so none runs however large the pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LevelPrediction", "predict_level", "check_observation", "length_rejection"]


@dataclass(frozen=True)
class LevelPrediction:
    policy: str
    concurrency: int
    blocks_per_request: int
    full_length_capacity: int  # requests whose whole length fits the pool at once
    running: int  # expected concurrently running (no-evict: exact)
    waiting: int
    preemption_expected: bool
    request_tokens: int = 0  # prompt + output
    max_model_len: int | None = None  # the server's; None: not known

    @property
    def rejects_requests(self) -> bool:
        """True when the server refuses every request of the workload as too long."""
        return self.max_model_len is not None and self.request_tokens > self.max_model_len

    def describe(self) -> str:
        if self.rejects_requests:
            return (f"every request rejected: {self.request_tokens} tokens exceed the max "
                    f"model length {self.max_model_len}")
        if self.policy == "guaranteed_no_evict":
            return (f"{self.running} run at once, {self.waiting} wait "
                    f"({self.blocks_per_request} blocks per request)")
        extra = ("; above it expect preemptions and waiting" if self.preemption_expected
                 else "; no preemption expected")
        return (f"full-length capacity {self.full_length_capacity} requests "
                f"({self.blocks_per_request} blocks each){extra}")


def length_rejection(prompt_tokens: int, output_tokens: int,
                     max_model_len: int | None) -> str | None:
    """The sentence saying the server rejects every request as too long, or None when a
    request fits ``max_model_len`` (or that is not known)."""
    total = prompt_tokens + output_tokens
    if max_model_len is None or total <= max_model_len:
        return None
    return (f"the server rejects every request: {prompt_tokens} + {output_tokens} = {total:,} "
            f"tokens exceed its max model length of {max_model_len:,} (prompt + max_tokens must "
            "fit; raise max_model_len / max_seq_len or shorten the workload)")


def predict_level(policy: str, pool_blocks: int, block_size: int, prompt_tokens: int,
                  output_tokens: int, concurrency: int, max_num_seqs: int | None = None,
                  max_model_len: int | None = None) -> LevelPrediction:
    """What runs and waits at ``concurrency`` (DESIGN.md rule 6). When the request is
    longer than ``max_model_len`` (the server's, when known) nothing runs or waits: every
    request is rejected (``rejects_requests``)."""
    total = prompt_tokens + output_tokens
    per_req = math.ceil(total / block_size)
    cap = pool_blocks // per_req if per_req else 0
    if max_model_len is not None and total > max_model_len:
        return LevelPrediction(policy, concurrency, per_req, cap, 0, 0, False, total,
                               max_model_len)
    limit = min(concurrency, max_num_seqs or concurrency)
    if policy == "guaranteed_no_evict":
        running = min(limit, cap)
        return LevelPrediction(policy, concurrency, per_req, cap, running,
                               concurrency - running, False, total, max_model_len)
    preempt = limit > cap
    return LevelPrediction(policy, concurrency, per_req, cap, limit,
                           concurrency - limit, preempt, total, max_model_len)


def check_observation(pred: LevelPrediction, running_max: float | None,
                      waiting_p50: float | None, waiting_max: float | None,
                      preemptions: float | None) -> str | None:
    """A description of how observation disagrees with the prediction, or None."""
    if pred.rejects_requests:
        return None  # nothing was admitted: the level's errors say so, not its queue
    problems = []
    if pred.policy == "guaranteed_no_evict":
        tolerance = max(1, 0.05 * pred.running)
        if running_max is not None and abs(running_max - pred.running) > tolerance:
            problems.append(f"running peaked at {running_max:.0f}, predicted {pred.running}")
        if pred.waiting > 0 and waiting_max is not None and waiting_max == 0:
            problems.append(f"no request waited, predicted {pred.waiting}")
        if pred.waiting == 0 and waiting_p50 is not None and waiting_p50 > 0:
            problems.append(f"requests waited (median {waiting_p50:.0f}), predicted none")
    elif preemptions is not None:
        if pred.preemption_expected and preemptions == 0:
            problems.append(f"no preemption above the full-length capacity "
                            f"{pred.full_length_capacity}")
        if not pred.preemption_expected and preemptions > 0:
            problems.append(f"{preemptions:.0f} preemptions below the full-length capacity "
                            f"{pred.full_length_capacity}")
    return "; ".join(problems) or None
