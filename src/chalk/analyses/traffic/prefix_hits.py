"""Prefix-cache hits replayed from a trace's prefix-block ids (Mooncake's `hash_ids`) through an LRU cache.

Requests are taken in arrival order. A request's cached tokens are its *leading* blocks found in the cache
(prefix caching reuses a prefix only: a block's KV depends on every token before it), capped so that one prompt
token is still prefilled (`equations.prefix_cache.prefix_cached_tokens`). Then all its blocks are touched, last
to first, so a prompt's first block is the most recently used and a cache evicts a prefix's tail before its head
(as vLLM's block pool frees a request's blocks tail first); the least recently used blocks are evicted down to
the capacity. LRU is a stack algorithm: a larger cache always holds what a smaller one does, so the hit rate
never falls as the capacity grows (tested).

The replay is stateful, hence here and not in equations: about 0.15 s for the 12,031 requests (289k block
touches) of Mooncake's conversation trace.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from chalk.equations import prefix_cache as E
from chalk.errors import InputError


@dataclass(frozen=True, eq=False)
class PrefixHits:
    """Per-request cached prompt tokens (arrival order) and the token hit rate, for a cache of
    `capacity_blocks` blocks of `block_tokens` tokens (math.inf: unlimited)."""

    cached_tokens: np.ndarray
    hit_rate: float
    capacity_blocks: float
    block_tokens: int
    requests_with_hits: int

    def to_dict(self) -> dict:
        return {"hit_rate": self.hit_rate, "capacity_blocks": None if math.isinf(self.capacity_blocks) else
                self.capacity_blocks, "block_tokens": self.block_tokens,
                "capacity_tokens": None if math.isinf(self.capacity_blocks) else
                self.capacity_blocks * self.block_tokens, "requests_with_hits": self.requests_with_hits,
                "cached_tokens": float(self.cached_tokens.sum())}


def lru_prefix_hits(hash_ids, hash_offsets, input_len, block_tokens: int, capacity_blocks) -> PrefixHits:
    """Replay request i's blocks `hash_ids[hash_offsets[i]:hash_offsets[i + 1]]` (prompt of `input_len[i]`
    tokens; only its first ceil(input_len / block_tokens) blocks count) through an LRU cache of
    `capacity_blocks` blocks. Returns the cached tokens of each request and the token hit rate."""
    b = int(block_tokens)
    if b < 1 or b != block_tokens:
        raise InputError(f"block_tokens must be a positive integer, got {block_tokens!r}")
    cap = _capacity(capacity_blocks)
    P = np.asarray(input_len, dtype=np.int64)
    offs = np.asarray(hash_offsets, dtype=np.int64)
    if offs.shape != (P.size + 1,) or (P.size and (offs[0] != 0 or np.any(np.diff(offs) < 0))):
        raise InputError(f"hash_offsets must be {P.size + 1} non-decreasing offsets from 0, one more than requests")
    ids = np.asarray(hash_ids, dtype=np.int64).tolist()
    if offs.size and offs[-1] != len(ids):
        raise InputError(f"hash_offsets end at {int(offs[-1])} but there are {len(ids)} hash ids")
    n_blocks = np.minimum(np.diff(offs), -(-P // b)).tolist()  # blocks past the (truncated) prompt do not count
    starts, lens = offs[:-1].tolist(), P.tolist()
    lead = [0] * P.size
    cache: OrderedDict = OrderedDict()
    keep = cap > 0
    limit = int(cap) if math.isfinite(cap) else None
    move = cache.move_to_end
    for i in range(P.size):
        s = starts[i]
        blocks = ids[s:s + n_blocks[i]]
        k = 0
        for h in blocks:
            if h not in cache:
                break
            k += 1
        lead[i] = k
        if keep:
            for h in reversed(blocks):
                if h in cache:
                    move(h)
                else:
                    cache[h] = None
            if limit is not None:
                while len(cache) > limit:
                    cache.popitem(last=False)
    cached = np.maximum(E.prefix_cached_tokens(np.array(lead, dtype=float), b, P), 0.0).astype(np.int64)
    return PrefixHits(cached, E.token_hit_rate(cached, P), cap, b, int(np.count_nonzero(cached)))


def trace_prefix_hits(trace, capacity_blocks, input_len=None) -> PrefixHits | None:
    """`lru_prefix_hits` over a `chalk.specs.traces.Trace` (None when it has no block ids); `input_len`
    replaces the trace's prompt lengths (e.g. truncated at the model's context)."""
    if not trace.has_blocks:
        return None
    P = trace.input_len if input_len is None else input_len
    return lru_prefix_hits(trace.hash_ids, trace.hash_offsets, P, trace.block_tokens, capacity_blocks)


def capacity_blocks_for(kv_capacity_tokens, block_tokens: int) -> float:
    """Blocks the KV memory left per replica holds (`equations.prefix_cache.cache_capacity_blocks`)."""
    return E.cache_capacity_blocks(_capacity(kv_capacity_tokens, "kv_capacity_tokens"), block_tokens)


def _capacity(v, name: str = "capacity_blocks") -> float:
    try:
        c = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number (math.inf: unlimited), got {v!r}") from None
    if math.isnan(c) or c < 0:
        raise InputError(f"{name} must be >= 0 (math.inf: unlimited), got {v!r}")
    return c
