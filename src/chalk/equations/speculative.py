"""Speculative decoding and multi-token prediction: tokens per verification step, and what a step costs."""

from __future__ import annotations

import numpy as np


def expected_tokens_per_step(acceptance, draft_tokens, decay=1.0):
    """Expected tokens one verification step emits with k drafted tokens, the i-th accepted (given the ones before
    it were) with probability a * d^(i - 1).

    Formula: E = 1 + sum_{i=1..k} a^i * d^(i (i - 1) / 2)
             (d = 1: E = (1 - a^(k+1)) / (1 - a) = 1 + a + a^2 + ... + a^k; a = 1 and d = 1: k + 1)
    Ref: Leviathan et al. 2023 (speculative decoding, eq. 1); DeepSeek-V3 report section 5.4.3
         (MTP, k = 1 at 85-90% acceptance: 1.8x tokens per step); TensorRT-LLM tech blog 1 (accepted lengths of
         DeepSeek-R1's MTP head reused for k = 1..5 drafts: 1.92, 2.58, 2.82, 2.99, 3.01, flattening with k).
    Assumes: the first rejection ends the run and the verifier always adds one token of its own (the correction or
        bonus); each further draft is conditioned on drafts, not on the main model, so its acceptance falls by a
        constant factor d per position (d = 1: every draft accepted independently at the same rate).
    """
    a = np.asarray(acceptance, dtype=float)
    k = np.asarray(draft_tokens, dtype=float)
    d = np.asarray(decay, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = -np.expm1((k + 1) * np.log(a)) / (1.0 - a)  # (1 - a^(k+1)) / (1 - a), accurate near a = 1
    geometric = np.where(a >= 1.0, k + 1.0, np.where(a <= 0.0, 1.0, e))
    if np.all(d >= 1.0):
        return geometric
    kmax = int(np.max(k)) if k.size else 0
    total, term = np.ones(np.broadcast(a, k, d).shape), np.ones(np.broadcast(a, k, d).shape)
    for i in range(1, kmax + 1):  # term_i = term_{i-1} * a * d^(i - 1): the chance the first i drafts all pass
        term = term * a * d ** (i - 1)
        total = total + np.where(i <= k, term, 0.0)
    return np.where(d >= 1.0, geometric, total)


def verification_tokens(batch, draft_tokens):
    """Tokens a verification step pushes through the weights: every sequence's last token plus its drafts.

    Formula: B_verify = B * (k + 1)
    Ref: Leviathan et al. 2023; Chen et al. 2023 (speculative sampling).
    Assumes: every sequence drafts the same k tokens (no tree drafts).
    """
    return np.asarray(batch, dtype=float) * (np.asarray(draft_tokens, dtype=float) + 1.0)


def mtp_draft_time_s(step_time_s, draft_tokens, num_layers, draft_layers=1.0):
    """Time the multi-token-prediction heads take to draft k tokens, sequentially.

    Formula: T_draft = k * (draft_layers / num_layers) * T_step
    Ref: DeepSeek-V3 report section 2.2 (one MTP module = one transformer block plus the shared
         embedding and output head).
    Assumes: an MTP block costs what one of the main model's layers costs in the same step (time scales
        with the share of layers); the shared output head is not counted again.
    """
    return (np.asarray(draft_tokens, dtype=float) * np.asarray(draft_layers, dtype=float) / num_layers
            * np.asarray(step_time_s, dtype=float))


def speculative_speedup(tokens_per_step, plain_step_time_s, speculative_step_time_s):
    """Per-user speed-up over plain decoding at the same batch (equal to the cost-per-token saving).

    Formula: S = E * T_plain / T_speculative
    Ref: Leviathan et al. 2023 (walltime improvement); lecture (speculative decoding as a speed lever).
    Assumes: same batch and chips in both, so tokens/s per user and per chip scale together.
    """
    return (np.asarray(tokens_per_step, dtype=float) * np.asarray(plain_step_time_s, dtype=float)
            / np.asarray(speculative_step_time_s, dtype=float))
