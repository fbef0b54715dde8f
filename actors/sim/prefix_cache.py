"""Automatic prefix caching over the sim's block pool, as vLLM V1 does it.

A prompt's full blocks are named by chained hashes (each block's hash covers its tokens and
the hash of the block before it), so two prompts share a cached block only when everything
before it matches too. A block whose KV a running sequence computed is registered under its
hash; when no running sequence holds it any more it stays cached but *evictable*: it counts
as free in the pool (vLLM's free queue keeps such blocks, least recently used first) until a
fresh allocation needs its memory. A new request looks up the longest run of its leading
blocks that are cached and starts its prefill after them (at most ``prompt - 1`` tokens: the
last prompt token is always computed, to sample the first output token).

Counters follow vLLM's: ``queries`` the prompt tokens looked up, ``hits`` the tokens found
(``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``); ``hit_rate`` is the share over
the most recent requests, as the engine's periodic stats line prints it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

__all__ = ["PrefixCache", "block_hashes"]

#: requests the logged hit rate looks back over (vLLM's CachingMetrics keeps 1000)
RECENT_REQUESTS = 1000


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (a partial last block has none)."""
    out: list[int] = []
    h = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = hash((h, tuple(token_ids[start:start + block_size])))
        out.append(h)
    return out


class PrefixCache:
    """Which block hashes are cached, who holds them, and which are evictable (LRU)."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.refs: dict[int, int] = {}  # hash -> running sequences holding the block
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached, unheld, oldest first
        self.queries = 0
        self.hits = 0
        self._recent: deque[tuple[int, int]] = deque(maxlen=RECENT_REQUESTS)

    def match(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Leading blocks of a prompt that are cached (capped so one prompt token is left)."""
        limit = (prompt_len - 1) // self.block_size
        n = 0
        for h in hashes[:limit]:
            if h not in self.refs and h not in self.evictable:
                break
            n += 1
        return n

    def unheld(self, hashes: Sequence[int]) -> int:
        """How many of these cached blocks are evictable (taking them uses free blocks)."""
        return sum(1 for h in hashes if h in self.evictable)

    def record(self, prompt_len: int, hit_tokens: int) -> None:
        """One lookup of a new request: ``prompt_len`` tokens queried, ``hit_tokens`` hit."""
        self.queries += prompt_len
        self.hits += hit_tokens
        self._recent.append((prompt_len, hit_tokens))

    @property
    def hit_rate(self) -> float:
        q = sum(n for n, _ in self._recent)
        return sum(h for _, h in self._recent) / q if q else 0.0

    def acquire(self, h: int) -> bool:
        """Hold a cached block; True when it was evictable (it leaves the free pool)."""
        was_free = self.evictable.pop(h, False) is None
        self.refs[h] = self.refs.get(h, 0) + 1
        return was_free

    def register(self, h: int) -> bool:
        """A block a sequence just computed becomes cached under ``h`` (held by it); False
        when that hash is cached already (the sequence keeps its copy private)."""
        if h in self.refs or h in self.evictable:
            return False
        self.refs[h] = 1
        return True

    def release(self, h: int) -> bool:
        """Drop one hold; True when no sequence holds the block any more (it is free,
        still cached, until evicted)."""
        left = self.refs[h] - 1
        if left:
            self.refs[h] = left
            return False
        del self.refs[h]
        self.evictable[h] = None
        return True

    def evict_to(self, free_blocks: int) -> None:
        """Forget the oldest evictable blocks until they fit in the free pool."""
        while len(self.evictable) > max(free_blocks, 0):
            self.evictable.popitem(last=False)
