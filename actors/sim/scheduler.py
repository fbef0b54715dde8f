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

With the profile's ``prefix_caching`` a request whose prompt's token ids are known
starts its prefill after the leading blocks already cached (``actors.sim.prefix_cache``);
the blocks it computes are cached for the next.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from actors.sim.perf import BatchShape, EngineProfile, MemoryPlan, StepModel
from actors.sim.prefix_cache import PrefixCache, block_hashes

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
    hashes: list[int] = field(default_factory=list, repr=False)  # full prompt blocks' hashes
    held: list[int] = field(default_factory=list, repr=False)  # cached blocks it holds
    cached_upto: int = 0  # leading prompt blocks looked up or registered so far
    last_token_at: float | None = None  # when it last produced a token
    prev_token_at: float | None = None  # the token before that (its last inter-token gap)

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
        self.cache = PrefixCache(memory.block_size) if profile.prefix_caching else None
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.now = 0.0
        self.jitter = jitter
        self._rng = random.Random(seed)
        self._admissions = 0
        self._last_visible = 0.0
        self.step_started = 0.0  # sim time the last step began (``now`` is when it ends)
        # seconds the front end fell behind the engine in the last step (0 unless it binds)
        self.frontend_lag = 0.0
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.iterations = 0

    # -- requests ---------------------------------------------------------------------------
    def add(self, rid: str, prompt_len: int, max_tokens: int, user: object = None,
            arrival: float | None = None, prompt_ids: list[int] | None = None) -> Seq:
        """A request arrives at ``arrival`` (default now; a server placing it inside the step
        in progress gives a time within it); the scheduler sees it after the front end's
        delay (``frontend_us`` + ``admit_us_per_running`` x running sequences, plus
        ``frontend_backlog_steps`` x the front end's lag behind the engine in the last step),
        in arrival order. ``prompt_ids`` (the prompt's tokens) let the prefix cache find it."""
        at = self.now if arrival is None else min(max(arrival, self.step_started), self.now)
        prof = self.profile
        delay = (prof.frontend_us + prof.admit_us_per_running * len(self.running)) \
            * prof.host_scale * 1e-6 + prof.frontend_backlog_steps * self.frontend_lag
        visible = max(at + delay, self._last_visible)
        self._last_visible = visible
        seq = Seq(rid, prompt_len, max_tokens, arrival=at, visible_at=visible, user=user)
        if self.cache is not None and prompt_ids:
            seq.hashes = block_hashes(prompt_ids, self.memory.block_size)
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
        if self.cache is not None:
            for h in seq.held:  # still cached: free, but found by the next lookup
                self.free_blocks += self.cache.release(h)
            self.free_blocks += seq.blocks - len(seq.held)
        else:
            self.free_blocks += seq.blocks
        seq.blocks = 0
        seq.held = []
        seq.cached_upto = 0

    def _grow(self, seq: Seq, tokens: int) -> bool:
        need = self.memory.blocks_for(tokens) - seq.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        seq.blocks += need
        if self.cache is not None:  # fresh blocks overwrite the oldest cached free ones
            self.cache.evict_to(self.free_blocks)
        return True

    def _lookup(self, seq: Seq) -> int:
        """Leading prompt blocks of a waiting request found in the prefix cache."""
        if self.cache is None or not seq.hashes:
            return 0
        return self.cache.match(seq.hashes, seq.prompt_len)

    def _take_cached(self, seq: Seq, hit: int) -> None:
        """Hold the ``hit`` cached leading blocks; the prefill starts after them."""
        assert self.cache is not None
        for h in seq.hashes[:hit]:
            self.free_blocks -= self.cache.acquire(h)
        seq.held = list(seq.hashes[:hit])
        seq.blocks = hit
        seq.cached_upto = hit
        seq.computed = hit * self.memory.block_size
        if seq.preemptions == 0:  # vLLM counts a preempted request's lookups apart
            self.cache.record(seq.prompt_len, seq.computed)

    def _register(self, seq: Seq) -> None:
        """Cache the prompt blocks ``seq`` has now computed in full."""
        assert self.cache is not None
        full = min(min(seq.computed, seq.prompt_len) // self.memory.block_size, len(seq.hashes))
        for h in seq.hashes[seq.cached_upto:full]:
            if self.cache.register(h):
                seq.held.append(h)
        seq.cached_upto = max(seq.cached_upto, full)

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
            hit = self._lookup(seq)
            start = hit * bs
            remaining = seq.target_len - start
            n = min(remaining, budget) if self.profile.chunked_prefill else remaining
            if n > budget:
                break
            total = seq.prompt_len + seq.max_tokens if no_evict else start + n
            if hit and self.cache is not None:  # the cached blocks it takes, then fresh ones
                fresh = self.memory.blocks_for(total) - hit
                if fresh + self.cache.unheld(seq.hashes[:hit]) > self.free_blocks:
                    break
                self._take_cached(seq, hit)
            if not self._grow(seq, total):
                break
            if not hit and self.cache is not None and seq.hashes and seq.preemptions == 0:
                self.cache.record(seq.prompt_len, 0)
            self.waiting.popleft()
            seq.state = "running"
            seq.admitted_at = self._admissions
            self._admissions += 1
            self.running.append(seq)
            chunks.append((seq, n))
            budget -= n
        return decodes, chunks

    def decode_run(self) -> tuple[list[float], list[float], int] | None:
        """Several iterations at once where nothing changes but the context: every running
        sequence decodes, none finishes before the last, nobody can be admitted, every block
        needed is free. For clock-free prediction only (the server steps one at a time).
        Returns each sequence's gap to its token in the first iteration, the durations of the
        others (every sequence's gap there) and the batch size; None when the next iteration
        is not such a run (call ``step``). Same results as stepping, the RNG included."""
        run = self.running
        batch = len(run)
        if batch == 0:
            return None
        left = min(seq.max_tokens - seq.generated for seq in run) - 1  # the finish: step()
        if left < 2:
            return None
        ctx = 0
        for seq in run:
            c = seq.computed
            if c == 0 or c < seq.prompt_len + seq.generated - 1:
                return None  # a prefill is due
            ctx += c
        horizon = float("inf")
        if self.waiting and batch < self.max_num_seqs and batch < self.max_num_tokens:
            head = self.waiting[0]
            if head.visible_at > self.now:
                horizon = head.visible_at  # steps that start before it comes are unchanged
            elif self._admissible(head, self.max_num_tokens - batch):
                return None  # it may be admitted now
        bs = self.memory.block_size
        if self.profile.admission != "guaranteed_no_evict":
            need = sum(max(0, -(-(seq.computed + left) // bs) - seq.blocks) for seq in run)
            if need > self.free_blocks:
                return None
        durations: list[float] = []
        t = self.now
        for d in self.model.decode_steps(batch, ctx, left):
            if t >= horizon:
                break
            if self.jitter:
                d *= 1.0 + self._rng.uniform(-self.jitter, self.jitter)
            self.step_started = t
            t += d
            durations.append(d)
        k = len(durations)
        engine, front = self.model.step_parts(
            BatchShape(decode_seqs=batch, decode_ctx=ctx + (k - 1) * batch))
        self.frontend_lag = max(0.0, front - engine)
        first_end = self.now + durations[0]
        first_gaps = [first_end - (s.last_token_at if s.last_token_at is not None else first_end)
                      for s in run if s.last_token_at is not None]
        prev_end = t - durations[-1] if k > 1 else first_end
        for seq in run:
            if k == 1:
                seq.prev_token_at = seq.last_token_at
            else:
                seq.prev_token_at = prev_end
            seq.last_token_at = t
            seq.computed += k
            seq.generated += k
            if seq.first_token_at is None:
                seq.first_token_at = first_end
            if seq.computed > seq.blocks * bs:
                self._grow(seq, seq.computed)
        self.now = t
        self.iterations += k
        self.generation_tokens_total += k * batch
        return first_gaps, durations[1:], batch

    def _admissible(self, seq: Seq, budget: int) -> bool:
        """Whether the waiting ``seq`` could be admitted now, or might be (with cached blocks
        to look up); False means not before blocks are freed (decoding only takes them)."""
        if seq.hashes and self.cache is not None:
            return True
        remaining = seq.target_len - seq.computed
        n = min(remaining, budget) if self.profile.chunked_prefill else remaining
        if n > budget:
            return False
        no_evict = self.profile.admission == "guaranteed_no_evict"
        total = seq.prompt_len + seq.max_tokens if no_evict else seq.computed + n
        return self.memory.blocks_for(total) - seq.blocks <= self.free_blocks

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
        ctx = 0
        for seq in decodes:
            ctx += seq.computed
        shape = BatchShape(
            decode_seqs=len(decodes),
            decode_ctx=ctx,
            prefill_tokens=sum(n for _, n in chunks),
            prefill_attn=sum(n * (s.computed + n / 2) for s, n in chunks),
            prefill_outputs=sum(1 for s, n in chunks if s.computed + n >= s.target_len),
        )
        engine, front = self.model.step_parts(shape)
        duration = max(engine, front)
        self.frontend_lag = max(0.0, front - engine)
        if self.jitter:
            duration *= 1.0 + self._rng.uniform(-self.jitter, self.jitter)
        self.now += duration
        self.iterations += 1
        emitted = decodes.copy()
        for seq, n in chunks:
            seq.computed += n
            self.prompt_tokens_total += n
            if seq.hashes and seq.cached_upto < len(seq.hashes):
                self._register(seq)
            if seq.computed >= seq.target_len:
                emitted.append(seq)
        finished: list[Seq] = []
        now = self.now
        for seq in decodes:  # the common case, kept lean
            seq.computed += 1
            seq.generated += 1
            seq.prev_token_at = seq.last_token_at
            seq.last_token_at = now
            if seq.first_token_at is None:  # a chunk that stopped one token short
                seq.first_token_at = now
            if seq.generated >= seq.max_tokens:
                seq.finished_at = now
                finished.append(seq)
        for seq in emitted[len(decodes):]:  # prefills that ended: a first (or next) token
            seq.generated += 1
            seq.prev_token_at = seq.last_token_at
            seq.last_token_at = now
            if seq.first_token_at is None:
                seq.first_token_at = now
            if seq.generated >= seq.max_tokens:
                seq.finished_at = now
                finished.append(seq)
        self.generation_tokens_total += len(emitted)
        for seq in finished:
            seq.state = "finished"
            self.running.remove(seq)
            self._release(seq)
        return StepOutcome(gap + duration, emitted, finished, shape)
