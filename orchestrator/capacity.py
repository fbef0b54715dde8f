"""KV capacity by admission policy (DESIGN.md measurement rule 6).

No-evict engines (TensorRT-LLM's GUARANTEED_NO_EVICT) admit a request only if
its whole length fits: running = floor(blocks / ceil((prompt + output) / bs)),
the rest wait. Preempting engines (vLLM) admit on the prompt and grow on
demand: above the same full-length capacity they preempt (and queue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LevelPrediction", "predict_level", "check_observation"]


@dataclass(frozen=True)
class LevelPrediction:
    policy: str
    concurrency: int
    blocks_per_request: int
    full_length_capacity: int  # requests whose whole length fits the pool at once
    running: int  # expected concurrently running (no-evict: exact)
    waiting: int
    preemption_expected: bool

    def describe(self) -> str:
        if self.policy == "guaranteed_no_evict":
            return (f"{self.running} run at once, {self.waiting} wait "
                    f"({self.blocks_per_request} blocks per request)")
        extra = ("; above it expect preemptions and waiting" if self.preemption_expected
                 else "; no preemption expected")
        return (f"full-length capacity {self.full_length_capacity} requests "
                f"({self.blocks_per_request} blocks each){extra}")


def predict_level(policy: str, pool_blocks: int, block_size: int, prompt_tokens: int,
                  output_tokens: int, concurrency: int,
                  max_num_seqs: int | None = None) -> LevelPrediction:
    per_req = math.ceil((prompt_tokens + output_tokens) / block_size)
    cap = pool_blocks // per_req if per_req else 0
    limit = min(concurrency, max_num_seqs or concurrency)
    if policy == "guaranteed_no_evict":
        running = min(limit, cap)
        return LevelPrediction(policy, concurrency, per_req, cap, running,
                               concurrency - running, False)
    preempt = limit > cap
    return LevelPrediction(policy, concurrency, per_req, cap, limit,
                           concurrency - limit, preempt)


def check_observation(pred: LevelPrediction, running_max: float | None,
                      waiting_p50: float | None, waiting_max: float | None,
                      preemptions: float | None) -> str | None:
    """A description of how observation disagrees with the prediction, or None."""
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
