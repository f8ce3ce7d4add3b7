"""Request-length distributions: the lognormal fit, its moments, and what long outputs cost in held KV.

Pure functions over floats or numpy arrays. Lengths are in tokens.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

_STD_NORMAL = NormalDist()


def standard_normal_quantile(q):
    """The standard normal quantile z_q (q in (0, 1)).

    Formula: z_q = Phi^-1(q)   (Phi^-1(0.99) = 2.3263)
    Ref: Python's statistics.NormalDist.inv_cdf (Wichura's AS241 algorithm).
    Assumes: 0 < q < 1.
    """
    qs = np.asarray(q, dtype=float)
    out = np.vectorize(_STD_NORMAL.inv_cdf, otypes=[float])(qs)
    return float(out) if out.ndim == 0 else out


def lognormal_max_quantile_ratio(q: float = 0.99) -> float:
    """Largest quantile-to-mean ratio any lognormal can have at quantile q.

    Formula: ln(x_q / mean) = z_q s - s^2 / 2 is largest at s = z_q, so x_q / mean <= exp(z_q^2 / 2)
        (p99: exp(2.3263^2 / 2) = 14.97).
    Ref: follows from lognormal_sigma_from_mean_quantile's quadratic.
    Assumes: 0.5 < q < 1.
    """
    z = standard_normal_quantile(q)
    return math.exp(z * z / 2.0)


def lognormal_sigma_from_mean_quantile(mean, quantile_value, q: float = 0.99):
    """Log-space spread s of the lognormal with a given mean and q-quantile (e.g. p99).

    Formula: ln L ~ N(mu, s^2);  mean = exp(mu + s^2/2),  x_q = exp(mu + z_q s)
        => s^2/2 - z_q s + ln(x_q / mean) = 0
        => s = z_q - sqrt(z_q^2 - 2 ln(x_q / mean))   (the smaller root: the lighter tail)
        mean=3790, p99=15000: s = 2.3263 - sqrt(5.4119 - 2.7516) = 0.6952.
    Ref: standard lognormal moments (Johnson, Kotz & Balakrishnan, Continuous Univariate
        Distributions vol. 1, ch. 14); the issue-10 MLPerf DeepSeek-R1 output figure (mean 3,790).
    Assumes: x_q > mean (else no spread is implied) and x_q / mean <= exp(z_q^2/2) (else no
        lognormal fits; returns nan there). The larger root also fits both numbers; it has a far
        heavier tail and a median far below the mean, and is not taken.
    """
    r = np.log(np.asarray(quantile_value, dtype=float) / np.asarray(mean, dtype=float))
    z = standard_normal_quantile(q)
    disc = z * z - 2.0 * r
    with np.errstate(invalid="ignore"):
        s = np.where(disc >= 0, z - np.sqrt(np.maximum(disc, 0.0)), np.nan)
    return float(s) if s.ndim == 0 else s


def lognormal_sigma_from_mean_median(mean, median):
    """Log-space spread s of the lognormal with a given mean and median.

    Formula: median = exp(mu), mean = exp(mu + s^2/2)  =>  s = sqrt(2 ln(mean / median))
        (MLPerf DeepSeek-R1 outputs: mean 3,790, median ~2,100 -> s = 1.087).
    Ref: standard lognormal moments.
    Assumes: mean >= median (a lognormal's mean is never below its median).
    """
    return np.sqrt(2.0 * np.log(np.asarray(mean, dtype=float) / np.asarray(median, dtype=float)))


def lognormal_mu(mean, sigma):
    """Log-space location mu of the lognormal with a given mean and spread.

    Formula: mu = ln(mean) - s^2 / 2   (exp(mu) is the median)
    Ref: standard lognormal moments.
    Assumes: mean > 0.
    """
    s = np.asarray(sigma, dtype=float)
    return np.log(np.asarray(mean, dtype=float)) - s * s / 2.0


def lognormal_quantile(mu, sigma, q):
    """The q-quantile of a lognormal.

    Formula: x_q = exp(mu + s z_q)
    Ref: standard lognormal moments.
    Assumes: 0 < q < 1.
    """
    return np.exp(np.asarray(mu, dtype=float) + np.asarray(sigma, dtype=float) * standard_normal_quantile(q))


def lognormal_second_moment(mean, sigma):
    """E[L^2] of a lognormal with a given mean and spread.

    Formula: E[L^2] = exp(2 mu + 2 s^2) = mean^2 exp(s^2)
    Ref: standard lognormal moments.
    Assumes: nothing beyond the lognormal itself.
    """
    m = np.asarray(mean, dtype=float)
    s = np.asarray(sigma, dtype=float)
    return m * m * np.exp(s * s)


def lognormal_clipped_moments(mean, sigma, cap):
    """E[min(L, c)] and E[min(L, c)^2] of a lognormal with a given mean and spread, cut at c tokens.

    Formula: with Phi the standard normal CDF and u = ln c,
        E[L^k ; L < c] = exp(k mu + k^2 s^2 / 2) Phi((u - mu - k s^2) / s),   P(L >= c) = 1 - Phi((u - mu) / s)
        E[min(L, c)^k] = E[L^k ; L < c] + c^k P(L >= c)   (k = 1, 2; s = 0: min(mean, c)^k)
        mean 200, s 3, c 131,072: E[L] 200 -> 165.6, E[L^2] 3.24e8 -> 5.29e6 (a 4M-draw sample: 165.2, 5.22e6).
    Ref: the lognormal's partial moments (Johnson, Kotz & Balakrishnan, Continuous Univariate Distributions vol. 1,
        ch. 14); a served request holds at most the model's context (issue 23: lengths cut at the context).
    Assumes: c > 0; lengths past c are served as c (the engine cuts them), so they hold c tokens, not their own.
    """
    m = np.asarray(mean, dtype=float)
    s = np.asarray(sigma, dtype=float)
    c = np.asarray(cap, dtype=float)
    mu = np.log(m) - s * s / 2.0
    cdf = np.vectorize(_STD_NORMAL.cdf, otypes=[float])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a spread too wide to hold: nan, said by
        # the caller (LengthDistribution.clipped_moments), not a RuntimeWarning
        ss = np.where(s > 0, s, 1.0)
        u = np.log(c)
        tail = 1.0 - cdf((u - mu) / ss)
        m1 = np.exp(mu + ss * ss / 2.0) * cdf((u - mu - ss * ss) / ss) + c * tail
        m2 = np.exp(2.0 * mu + 2.0 * ss * ss) * cdf((u - mu - 2.0 * ss * ss) / ss) + c * c * tail
    lone = np.minimum(m, c)
    m1, m2 = np.where(s > 0, m1, lone), np.where(s > 0, m2, lone * lone)
    return (float(m1), float(m2)) if m1.ndim == 0 else (m1, m2)


def discrete_uniform_second_moment(lo, hi):
    """E[L^2] of a length drawn uniformly from the integers lo..hi.

    Formula: E[L^2] = Var + mean^2,  mean = (lo + hi)/2,  Var = ((hi - lo + 1)^2 - 1) / 12
    Ref: the discrete uniform distribution's moments.
    Assumes: lo <= hi, both integers.
    """
    a, b = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    n = b - a + 1.0
    return (n * n - 1.0) / 12.0 + ((a + b) / 2.0) ** 2


def mean_held_output_tokens(mean_output, output_second_moment):
    """Average number of its own output tokens a decode slot holds in KV, over a closed-loop run.

    Formula: E_t[o] = E[O^2] / (2 E[O])   (constant O: O/2;  lognormal: (E[O]/2) exp(s^2))
        Derivation (length-biased sampling): a slot is busy with a request for O decode steps,
        so at a random step it sits in a request with probability proportional to O, i.e. the
        request's length is drawn with density O f(O) / E[O]. Inside that request the step is
        uniform over its O tokens, so the tokens already generated average O/2. Together:
        E_t[o] = integral (O/2) O f(O) dO / E[O] = E[O^2] / (2 E[O]).
    Ref: renewal theory's inspection paradox (Feller, An Introduction to Probability Theory and
        Its Applications vol. II, ch. XI); issue 10 ("long outputs hold KV and batch slots longer").
    Assumes: every slot is always refilled (closed loop at fixed concurrency); prefill time is
        short next to the decode time, so the slot's time is counted in decode steps.
    """
    return np.asarray(output_second_moment, dtype=float) / (2.0 * np.asarray(mean_output, dtype=float))


def mean_kv_tokens_per_slot(mean_input, mean_output, output_second_moment):
    """Average KV context (tokens) a decode slot holds in a closed-loop server.

    Formula: E_t[context] = E[I] + E[O^2] / (2 E[O])   (not E[I] + E[O]/2)
    Ref: mean_held_output_tokens (length-biased sampling).
    Assumes: prompt and output lengths independent, so the prompt held next to a length-biased
        output still averages E[I]; the prompt's KV is held for the whole decode.
    """
    return np.asarray(mean_input, dtype=float) + mean_held_output_tokens(mean_output, output_second_moment)
