"""Mixture-of-experts: how many experts a batch touches, and sparsity."""

from __future__ import annotations

import numpy as np


def expected_distinct_experts(num_experts, experts_per_token, tokens):
    """Expected number of distinct routed experts that `tokens` tokens touch in one MoE layer.

    Formula: E * (1 - (1 - k/E)^B)
    Ref: balls-in-bins with uniform routing; the foundation issue of chalk.
    Assumes: each token picks k experts uniformly and independently of other tokens (real routers
        are skewed, which touches fewer distinct experts, so this is an upper bound on weight reads).
    """
    e = np.asarray(num_experts, dtype=float)
    k = np.asarray(experts_per_token, dtype=float)
    b = np.asarray(tokens, dtype=float)
    return e * -np.expm1(b * np.log1p(-k / e))


def sparsity(total_params, active_params):
    """The lecture's sparsity: total parameters over active parameters per token.

    Formula: N_total / N_active
    Ref: lecture eq. 5 ("DeepSeek activates 32 of 256 experts: sparsity 8").
    Assumes: nothing.
    """
    return np.asarray(total_params, dtype=float) / np.asarray(active_params, dtype=float)


def expert_sparsity(num_experts, experts_per_token):
    """Sparsity read off the routed experts alone, as the lecture does (256 / 32 = 8).

    Formula: E / k
    Ref: lecture ("32 of 256 experts -> sparsity 8").
    Assumes: dense (attention, shared-expert) weights are negligible.
    """
    return np.asarray(num_experts, dtype=float) / np.asarray(experts_per_token, dtype=float)
