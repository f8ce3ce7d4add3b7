"""Sizing a fleet of replicas for a demand: requests in flight, replicas, headroom, dollars."""

from __future__ import annotations

import numpy as np

#: z of the 99th percentile of a normal: the headroom a Poisson-fed fleet keeps over its mean load.
Z_P99 = 2.326


def requests_in_flight(rate_per_s, latency_s):
    """Requests held by a system that completes `rate_per_s` requests each taking `latency_s` end to end.

    Formula: N = lambda * W
    Ref: Little's law (Little 1961).
    Assumes: a stable system in steady state (arrivals = completions on average).
    """
    return np.asarray(rate_per_s, dtype=float) * np.asarray(latency_s, dtype=float)


def peak_in_flight(mean_in_flight, z=Z_P99):
    """Requests in flight that a fleet fed by Poisson arrivals reaches at its z-quantile.

    Formula: N_peak = N + z * sqrt(N)
    Ref: M/G/infinity occupancy is Poisson with mean N = lambda * W (Takacs 1962); normal approximation.
    Assumes: a least-loaded router spreads the fleet's requests evenly, so the fleet's total, not each
        replica's, fluctuates (pooling); the fluctuation outlives the latency of one request.
    """
    n = np.asarray(mean_in_flight, dtype=float)
    return n + z * np.sqrt(n)


def mean_in_flight_at_peak(peak_in_flight, z=Z_P99):
    """The most requests a fleet fed by Poisson arrivals can hold on average while its z-quantile stays within
    `peak_in_flight`: the inverse of `peak_in_flight`.

    Formula: N = ((sqrt(z^2 + 4 P) - z) / 2)^2  (the root of N + z sqrt(N) = P)
    Ref: M/G/infinity occupancy is Poisson (Takacs 1962); normal approximation, as `peak_in_flight`.
    Assumes: as `peak_in_flight`.
    """
    p = np.maximum(np.asarray(peak_in_flight, dtype=float), 0.0)
    return ((np.sqrt(z * z + 4.0 * p) - z) / 2.0) ** 2


def p99_request_mean_step(pure_step_s, chunk_step_s, chunk_share, decode_steps, z=Z_P99):
    """The mean step of the p99 request's decode in aggregated serving: its TPOT averages its own decode steps, a
    share of which carry a prompt's prefill chunk.

    Formula: share_99 = min(F + z sqrt(F (1 - F) / n), 1);  t_99 = t_pure + (t_chunk - t_pure) share_99
        (n = O - 1 decode steps, at least 1; F: the share of all steps that carry a chunk)
    Ref: a binomial share of n independent steps, each carrying a chunk with probability F; normal approximation.
    Assumes: chunks fall on a request's steps independently (no burst of prompts lines them up on some requests).
    """
    F = np.asarray(chunk_share, dtype=float)
    n = np.maximum(np.asarray(decode_steps, dtype=float), 1.0)
    share = np.minimum(F + z * np.sqrt(F * (1 - F) / n), 1.0)
    pure = np.asarray(pure_step_s, dtype=float)
    return pure + (np.asarray(chunk_step_s, dtype=float) - pure) * share


def replicas_needed(demand, capacity_per_replica):
    """Replicas that carry `demand` when each carries at most `capacity_per_replica` (same units).

    Formula: R = ceil(D / C), R = 0 when D = 0
    Ref: bin packing of a divisible load.
    Assumes: identical replicas and a router that fills them evenly.
    """
    d = np.asarray(demand, dtype=float)
    c = np.asarray(capacity_per_replica, dtype=float)
    return np.ceil(d / c * (1 - 1e-12)).astype(np.int64)


def headroom(replicas, capacity_per_replica, demand):
    """Spare capacity of a fleet over its demand, as a fraction of the demand.

    Formula: h = R * C / D - 1
    Ref: definition.
    Assumes: C and D in the same units (requests in flight, or requests per second).
    """
    return np.asarray(replicas, dtype=float) * np.asarray(capacity_per_replica, dtype=float) / \
        np.asarray(demand, dtype=float) - 1.0


def fleet_usd_per_hour(gpus, usd_per_gpu_hour):
    """What a fleet costs per hour.

    Formula: $/h = GPUs * $/GPU-h
    Ref: lecture eq. 4 (cost = chip-seconds * price), per hour.
    Assumes: GPUs rented by the hour at one price, idle or busy.
    """
    return np.asarray(gpus, dtype=float) * np.asarray(usd_per_gpu_hour, dtype=float)


def usd_per_mtok(usd_per_hour, tokens_per_s):
    """Dollars per million tokens a fleet serves at `tokens_per_s`.

    Formula: $/Mtok = ($/h / 3600) / tokens_per_s * 1e6
    Ref: lecture eq. 4.
    Assumes: the whole fleet's cost is charged to these tokens.
    """
    with np.errstate(divide="ignore"):
        return np.asarray(usd_per_hour, dtype=float) / 3600.0 / np.asarray(tokens_per_s, dtype=float) * 1e6


def daily_usd(gpus_per_hour, usd_per_gpu_hour):
    """A day's cost of a fleet whose size changes hour by hour (autoscaled); a constant fleet is 24 equal hours.

    Formula: $/day = sum_h GPUs_h * $/GPU-h
    Ref: definition.
    Assumes: scaling happens on the hour and a replica is billed for whole hours.
    """
    return float(np.sum(np.asarray(gpus_per_hour, dtype=float)) * float(usd_per_gpu_hour))


def utilisation_bound_servers(work_rate, server_rate, max_utilisation):
    """Servers that keep a queue of work below a utilisation ceiling.

    Formula: c = ceil(lambda_w / (mu * rho_max))
    Ref: M/G/c stability (rho = lambda / (c mu) < 1); the ceiling bounds the queueing delay.
    Assumes: work arrives as a Poisson stream and each server drains `server_rate` units of work per second.
    """
    w = np.asarray(work_rate, dtype=float)
    return np.ceil(w / (np.asarray(server_rate, dtype=float) * max_utilisation) * (1 - 1e-12)).astype(np.int64)
