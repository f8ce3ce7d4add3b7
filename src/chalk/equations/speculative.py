"""Speculative decoding and multi-token prediction: tokens per verification step, and what a step costs."""

from __future__ import annotations

import numpy as np


def expected_tokens_per_step(acceptance, draft_tokens):
    """Expected tokens one verification step emits with k drafted tokens each accepted with probability a.

    Formula: E = (1 - a^(k+1)) / (1 - a) = 1 + a + a^2 + ... + a^k   (a = 1: k + 1)
    Ref: Leviathan et al. 2023 (speculative decoding, eq. 1); DeepSeek-V3 report section 5.4.3
         (MTP, k = 1 at 85-90% acceptance: 1.8x tokens per step).
    Assumes: each draft token is accepted independently with the same probability, and the first
        rejection ends the run; the verifier always adds one token of its own (the correction or bonus).
    """
    a = np.asarray(acceptance, dtype=float)
    k = np.asarray(draft_tokens, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = -np.expm1((k + 1) * np.log(a)) / (1.0 - a)  # (1 - a^(k+1)) / (1 - a), accurate near a = 1
    return np.where(a >= 1.0, k + 1.0, np.where(a <= 0.0, 1.0, e))


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
