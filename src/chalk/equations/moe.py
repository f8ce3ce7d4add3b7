"""Mixture-of-experts: how many experts a batch touches, and sparsity."""

from __future__ import annotations

import numpy as np

from chalk.equations.num import flt, maximum, minimum, where


def expected_distinct_experts(num_experts, experts_per_token, tokens):
    """Expected number of distinct routed experts that `tokens` tokens touch in one MoE layer.

    Formula: E * (1 - (1 - k/E)^B)
    Ref: balls-in-bins with uniform routing; the foundation issue of chalk.
    Assumes: each token picks k experts uniformly and independently of other tokens (real routers
        are skewed, which touches fewer distinct experts, so this is an upper bound on weight reads).
        k = E (every token routed to every expert) touches all E experts for any B >= 1, and none at B = 0
        (log1p(-1) is -inf, so that case is taken apart rather than computed as -inf * 0).
    """
    e, k, b = flt(num_experts), flt(experts_per_token), flt(tokens)  # numbers stay numbers (`chalk.equations.num`)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = where(e > 0, k / where(e > 0, e, 1.0), 0.0)
        exact = -np.expm1(b * np.log1p(-where(frac < 1, frac, 0.0)))
        touched = where(frac < 1, exact, where(b > 0, 1.0, 0.0))
    return e * touched


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


def grouped_gemm_efficiency(tokens_per_expert, half_tokens):
    """Fraction of a large dense GEMM's efficiency that a grouped expert GEMM reaches with m tokens per expert.

    Formula: eta(m) = m / (m + m_half)   (1 when m_half = 0: no penalty)
    Ref: DeepGEMM README (deepseek-ai/DeepGEMM, Feb 2025 tables, H800, FP8): masked grouped GEMMs with N x K =
        4096 x 7168 reach 1233 / 1040 / 932 TFLOPS at m = 1024 / 512 / 256 tokens per group against 1304 TFLOPS
        for the dense M = 4096 GEMM of the same shape (eta = 0.95 / 0.80 / 0.71); with 7168 x 2048, 925 / 916 / 815
        against 1025 (0.90 / 0.89 / 0.80); contiguous groups of 4096-8192 tokens reach 0.99. A least-squares fit of
        the six masked points gives m_half = 86 tokens (single points: 59-130), about one 64-128-row M tile.
    Assumes: the loss is per-expert fixed work (tile quantisation of each expert's rows to the M block, pipeline
        fill and drain per tile, per-group scheduling), so it falls as 1/m; m is the mean routed tokens per expert
        in one forward pass; the same curve holds for FP4/BF16 kernels and for other GPUs.
    """
    m, h = flt(tokens_per_expert), flt(half_tokens)  # numbers stay numbers (`chalk.equations.num`)
    with np.errstate(divide="ignore", invalid="ignore"):
        return where(h > 0, m / maximum(m + h, 1e-300), 1.0)


def max_load_factor(balls, bins):
    """Busiest bin's load over the mean when `balls` routed token copies fall uniformly into `bins` chips.

    Formula: max / mean = 1 + sqrt(2 ln(n) / lambda), lambda = balls / n; capped at n (everything on one chip);
             1 when n <= 1 or there are no balls
    Ref: balls into bins, heavy-load regime (Raab & Steger 1998: max load = lambda + sqrt(2 lambda ln n)(1 + o(1))
        for lambda >= ln n); e.g. 1,000 copies over 8 chips: 1 + sqrt(2 ln 8 / 125) = 1.18.
    Assumes: each copy picks its chip independently and uniformly (a token's k experts are distinct, which only
        narrows the spread; real routers are skewed, which widens it); sqrt(2 ln n) is the asymptotic maximum of
        n Gaussians, so at 8-72 chips the excess is 20-45% above a direct simulation (e.g. 1.065 against 1.053 for
        2,048 copies per chip over 72 chips); below the heavy-load regime it overstates the spread more, but
        there expert GEMMs are weight-read bound and the busiest chip's compute is small.
    """
    b, n = flt(balls), flt(bins)  # numbers stay numbers (`chalk.equations.num`)
    n1 = maximum(n, 1.0)
    lam = b / n1
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 1.0 + np.sqrt(2.0 * np.log(n1) / lam)
    f = where(lam > 0, f, 1.0)
    return where(n > 1, minimum(maximum(f, 1.0), n1), 1.0)  # f clipped to [1, n]
