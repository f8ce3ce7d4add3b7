"""Prefix caching: what a cache hit saves in prefill, and what it does not (the KV is still read).

Pure functions over floats or numpy arrays. Tokens; costs in any unit per token.
"""

from __future__ import annotations

import numpy as np


def effective_prefill_tokens(prompt_tokens, cache_hit_fraction):
    """Prompt tokens whose prefill must be computed when a fraction is served from a prefix cache.

    Formula: P_eff = (1 - F) P
    Ref: issue 10 item 5 ("--cache-hit F makes a fraction of prompt tokens free to prefill");
        vLLM automatic prefix caching and SGLang RadixAttention reuse the cached KV blocks.
    Assumes: cached tokens cost no prefill FLOPs at all (no recompute of partial blocks); their KV
        is still read by attention, see prefill_kv_read_tokens.
    """
    f = np.asarray(cache_hit_fraction, dtype=float)
    return (1.0 - f) * np.asarray(prompt_tokens, dtype=float)


def prefill_kv_read_tokens(prompt_tokens, cache_hit_fraction):
    """KV tokens attention reads while prefilling a prompt with a cached prefix: all of them.

    Formula: P_read = P   (independent of F: the (1 - F) P new tokens attend to every prior token)
    Ref: issue 10 item 5 ("free to prefill but still read as KV").
    Assumes: the cached prefix's KV already sits in HBM (a hit in a slower tier adds its load
        time, which chalk.analyses.economics.pricing's cache economics prices separately).
    """
    return np.asarray(prompt_tokens, dtype=float) + 0.0 * np.asarray(cache_hit_fraction, dtype=float)


def prefill_attention_pairs(prompt_tokens, cache_hit_fraction):
    """Query-key pairs a causal prefill scores when the first F P tokens are cached.

    Formula: pairs = sum over new positions t = F P + 1 .. P of t = ((P^2 + P) - (c^2 + c)) / 2,
        c = F P   (F = 0: P (P + 1) / 2, the full causal triangle; F = 1: 0)
    Ref: causal attention's triangle (each token attends to itself and every earlier token).
    Assumes: c = F P is treated as a real number (no rounding to KV blocks).
    """
    p = np.asarray(prompt_tokens, dtype=float)
    c = np.asarray(cache_hit_fraction, dtype=float) * p
    return ((p * p + p) - (c * c + c)) / 2.0


def cached_prefill_cost_per_token(cost_per_token_full, cost_per_token_prefix, cache_hit_fraction):
    """Prefill cost per prompt token (cached or not) when the first F of each prompt is cached.

    Formula: c_eff = c(P) - F c(F P)      (per prompt: P c(P) - F P c(F P))
        Derivation: in a causal model the cached prefix's forward pass does not depend on the
        suffix, so prefilling only the suffix costs the whole prompt's prefill minus the prefix's
        own. The (1 - F) P new tokens still attend to all P tokens (the cached KV is read), so
        c_eff >= (1 - F) c(P): the plain (1 - F) discount undercounts attention over the prefix.
    Ref: issue 10 item 5 (prefill compute on the uncached tokens, KV read for all); DeepSeek
        open-infra-index day 6 (56.3% of input tokens hit the on-disk KV cache).
    Assumes: c(L) is the cost per token of prefilling prompts of L tokens at the same token
        budget per step; the read of the cached KV hides under compute (prefill is compute-bound);
        the cache lookup and any load from a slower tier are not counted here.
    """
    f = np.asarray(cache_hit_fraction, dtype=float)
    full = np.asarray(cost_per_token_full, dtype=float)
    out = np.clip(full - f * np.asarray(cost_per_token_prefix, dtype=float), 0.0, full)
    return float(out) if out.ndim == 0 else out


def cache_capacity_blocks(kv_capacity_tokens, block_tokens):
    """Whole KV blocks a prefix cache holds in the KV memory it is given.

    Formula: C = floor(K / b)   (K tokens of KV memory, b tokens per block; K = inf: unlimited)
    Ref: vLLM paged attention (Kwon et al., SOSP 2023): KV is allocated in fixed blocks of b tokens.
    Assumes: the whole KV memory may hold cached blocks (the running requests' own blocks count as cached
        too: in vLLM and SGLang a running request's prefix blocks are the cache's blocks).
    """
    k = np.asarray(kv_capacity_tokens, dtype=float)
    out = np.where(np.isinf(k), np.inf, np.floor(k / np.asarray(block_tokens, dtype=float)))
    return float(out) if out.ndim == 0 else out


def prefix_cached_tokens(leading_hit_blocks, block_tokens, prompt_tokens):
    """Prompt tokens served from the prefix cache when a prompt's first k blocks are cached.

    Formula: c = min(k b, P - 1)   (k leading blocks of b tokens; at least one prompt token is prefilled,
        the one whose logits give the first output token)
    Ref: vLLM automatic prefix caching (a full-prompt hit still recomputes the last token); SGLang
        RadixAttention reuses a matched prefix only.
    Assumes: only a *leading* run of cached blocks counts (a block's KV depends on every token before it,
        so a cached block after a miss cannot be used).
    """
    k = np.asarray(leading_hit_blocks, dtype=float) * np.asarray(block_tokens, dtype=float)
    return np.minimum(k, np.asarray(prompt_tokens, dtype=float) - 1.0)


def token_hit_rate(cached_tokens, prompt_tokens):
    """Fraction of all prompt tokens served from the prefix cache.

    Formula: F = sum c_i / sum P_i
    Ref: DeepSeek open-infra-index day 6 states its hit rate this way (56.3% of input tokens hit the KV cache).
    Assumes: every prompt token would otherwise be prefilled (tokens, not requests, are the unit of work).
    """
    p = float(np.sum(np.asarray(prompt_tokens, dtype=float)))
    return float(np.sum(np.asarray(cached_tokens, dtype=float))) / p if p > 0 else 0.0
