"""Continuous batching over a paged KV block pool: the sim's engine core.

``SimEngine`` is a clock-free state machine. ``step()`` schedules one
iteration (decode every running sequence, then fill the token budget with
prefill chunks), asks the step model how long it takes, advances simulated
time and returns which sequences got a token. The HTTP server sleeps for the
returned duration (scaled); ``simulate_closed_loop`` runs it without sleeping.

Admission policies:
- ``guaranteed_no_evict`` (TensorRT-LLM's default): a request is admitted only
  if the blocks for its whole length (prompt + max tokens) are free; they are
  reserved at once, so nothing is ever evicted.
- ``preempt_recompute`` (vLLM): admitted when its next prefill chunk fits;
  blocks are taken as the sequence grows; when none are free the newest
  running sequence is preempted, its blocks freed, and it later recomputes.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from actors.sim.perf import BatchShape, EngineProfile, MemoryPlan, StepModel

__all__ = ["Seq", "StepOutcome", "SimEngine"]


@dataclass(eq=False)
class Seq:
    """One request inside the engine."""

    rid: str
    prompt_len: int
    max_tokens: int
    arrival: float
    visible_at: float = 0.0  # when the scheduler may first admit it (front-end delay)
    computed: int = 0  # tokens whose KV is in the cache
    generated: int = 0
    blocks: int = 0
    admitted_at: int = -1  # admission order, for choosing whom to preempt
    preemptions: int = 0
    state: str = "waiting"  # waiting | running | finished | aborted
    first_token_at: float | None = None
    finished_at: float | None = None
    user: object = field(default=None, repr=False)  # the server's per-request handle

    @property
    def target_len(self) -> int:
        """Tokens the KV must hold before the next token can be sampled."""
        return self.prompt_len + self.generated

    @property
    def done(self) -> bool:
        return self.generated >= self.max_tokens


@dataclass
class StepOutcome:
    duration: float
    emitted: list[Seq]  # sequences that produced one token this iteration
    finished: list[Seq]
    batch: BatchShape


class SimEngine:
    """Scheduler + block pool + step model; deterministic for a seed."""

    def __init__(self, step_model: StepModel, memory: MemoryPlan, profile: EngineProfile,
                 max_num_seqs: int, max_num_tokens: int, jitter: float = 0.005, seed: int = 0):
        self.model, self.memory, self.profile = step_model, memory, profile
        self.max_num_seqs, self.max_num_tokens = max_num_seqs, max_num_tokens
        self.free_blocks = memory.blocks
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.now = 0.0
        self.jitter = jitter
        self._rng = random.Random(seed)
        self._admissions = 0
        self._last_visible = 0.0
        self.step_started = 0.0  # sim time the last step began (``now`` is when it ends)
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.iterations = 0

    # -- requests ---------------------------------------------------------------------------
    def add(self, rid: str, prompt_len: int, max_tokens: int, user: object = None,
            arrival: float | None = None) -> Seq:
        """A request arrives at ``arrival`` (default now; a server placing it inside the step
        in progress gives a time within it); the scheduler sees it after the front end's
        delay (``admit_us_per_running`` x running sequences), in arrival order."""
        at = self.now if arrival is None else min(max(arrival, self.step_started), self.now)
        delay = self.profile.admit_us_per_running * 1e-6 * len(self.running)
        visible = max(at + delay, self._last_visible)
        self._last_visible = visible
        seq = Seq(rid, prompt_len, max_tokens, arrival=at, visible_at=visible, user=user)
        self.waiting.append(seq)
        return seq

    @property
    def waiting_admitted(self) -> int:
        """Waiting requests the scheduler already sees (vLLM's ``num_requests_waiting``):
        hand-over times rise along the queue (a preempted request, put back in front, was
        seen long ago), so the count stops at the first one still in the front end."""
        n = 0
        for seq in self.waiting:
            if seq.visible_at > self.now:
                break
            n += 1
        return n

    def abort(self, seq: Seq) -> None:
        """Drop a request (client went away); frees its blocks."""
        if seq.state == "running":
            self.running.remove(seq)
            self._release(seq)
        elif seq.state == "waiting":
            self.waiting.remove(seq)
        seq.state = "aborted"

    @property
    def kv_usage(self) -> float:
        total = self.memory.blocks
        return 0.0 if total <= 0 else 1.0 - self.free_blocks / total

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    # -- blocks -----------------------------------------------------------------------------
    def _release(self, seq: Seq) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0

    def _grow(self, seq: Seq, tokens: int) -> bool:
        need = self.memory.blocks_for(tokens) - seq.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        seq.blocks += need
        return True

    def _preempt_for(self, seq: Seq, tokens: int) -> bool:
        """Free blocks by preempting the newest other running sequences until ``seq`` fits."""
        while not self._grow(seq, tokens):
            others = [s for s in self.running[-2:] if s is not seq]
            if not others:
                return False
            victim = others[-1]  # running is in admission order: the newest is last
            self.running.remove(victim)
            self._release(victim)
            victim.state = "waiting"
            victim.computed = 0
            victim.preemptions += 1
            self.preemptions_total += 1
            self.waiting.appendleft(victim)
        return True

    # -- one iteration ----------------------------------------------------------------------
    def _schedule(self) -> tuple[list[Seq], list[tuple[Seq, int]]]:
        no_evict = self.profile.admission == "guaranteed_no_evict"
        decodes: list[Seq] = []
        chunks: list[tuple[Seq, int]] = []
        budget = self.max_num_tokens
        bs = self.memory.block_size
        prefilling = False
        for seq in list(self.running):  # admission order: the oldest keep their blocks
            if seq.state != "running":  # preempted while making room for an older one
                continue
            c = seq.computed
            if c > 0 and c >= seq.prompt_len + seq.generated - 1:  # decoding
                # the next token's KV fits the blocks held (the common case), or grow
                if no_evict or c < seq.blocks * bs or self._preempt_for(seq, c + 1):
                    decodes.append(seq)
                    budget -= 1
            else:
                prefilling = True
        for seq in self.running if prefilling else ():  # running but mid-prefill (chunked)
            if seq.computed < seq.target_len - 1 or seq.computed == 0:
                n = min(seq.target_len - seq.computed, budget)
                if n > 0 and (no_evict or self._grow(seq, seq.computed + n)):
                    chunks.append((seq, n))
                    budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq.visible_at > self.now:
                break  # still in the front end
            remaining = seq.target_len - seq.computed
            n = min(remaining, budget) if self.profile.chunked_prefill else remaining
            if n > budget:
                break
            total = seq.prompt_len + seq.max_tokens if no_evict else seq.computed + n
            if not self._grow(seq, total):
                break
            self.waiting.popleft()
            seq.state = "running"
            seq.admitted_at = self._admissions
            self._admissions += 1
            self.running.append(seq)
            chunks.append((seq, n))
            budget -= n
        return decodes, chunks

    def step(self) -> StepOutcome | None:
        """Run one iteration; None when nothing can be scheduled."""
        decodes, chunks = self._schedule()
        gap = 0.0
        if not decodes and not chunks and self.waiting and self.waiting[0].visible_at > self.now:
            gap = self.waiting[0].visible_at - self.now  # idle until the front end hands over
            self.now += gap
            decodes, chunks = self._schedule()
        if not decodes and not chunks:
            return None
        self.step_started = self.now
        shape = BatchShape(
            decode_seqs=len(decodes),
            decode_ctx=sum(s.computed for s in decodes),
            prefill_tokens=sum(n for _, n in chunks),
            prefill_attn=sum(n * (s.computed + n / 2) for s, n in chunks),
            prefill_outputs=sum(1 for s, n in chunks if s.computed + n >= s.target_len),
        )
        duration = self.model.step_time(shape)
        if self.jitter:
            duration *= 1.0 + self._rng.uniform(-self.jitter, self.jitter)
        self.now += duration
        self.iterations += 1
        for seq in decodes:
            seq.computed += 1
        emitted = decodes.copy()
        for seq, n in chunks:
            seq.computed += n
            self.prompt_tokens_total += n
            if seq.computed >= seq.target_len:
                emitted.append(seq)
        finished: list[Seq] = []
        for seq in emitted:
            seq.generated += 1
            self.generation_tokens_total += 1
            if seq.first_token_at is None:
                seq.first_token_at = self.now
            if seq.done:
                seq.finished_at = self.now
                finished.append(seq)
        for seq in finished:
            seq.state = "finished"
            self.running.remove(seq)
            self._release(seq)
        return StepOutcome(gap + duration, emitted, finished, shape)
