"""The roofline: a step takes the longer of its compute time and its memory time."""

from __future__ import annotations

import numpy as np

from chalk.equations.num import flt, maximum, where


def compute_time_s(flops, peak_flops_per_s, efficiency=1.0):
    """Time to do `flops` of work at a fraction of peak.

    Formula: T_compute = FLOPs / (peak * efficiency);  for decode FLOPs = B * 2 * N_active (eq. 2)
    Ref: lecture eq. 2; Williams et al. 2009 (roofline).
    Assumes: work spreads evenly over the chips whose peak is summed.
    """
    return flt(flops) / (peak_flops_per_s * efficiency)


def memory_time_s(bytes_moved, bandwidth_bytes_per_s, efficiency=1.0):
    """Time to move `bytes_moved` through HBM at a fraction of its bandwidth.

    Formula: T_memory = bytes / (bandwidth * efficiency); for decode bytes = N_total*b + B*L*kv (eq. 3)
    Ref: lecture eq. 3.
    Assumes: every byte is read once per step (weights are not cached on chip across steps).
    """
    return flt(bytes_moved) / (bandwidth_bytes_per_s * efficiency)


def step_time_s(compute_s, memory_s, overhead_s=0.0):
    """Time of one step: the slower of compute and memory, plus a fixed overhead.

    Formula: T = max(T_compute, T_memory) + T_overhead   (eq. 1; overhead 0 in the ideal roofline)
    Ref: lecture eq. 1; scaling-book "T_lower = max(T_math, T_comms)".
    Assumes: compute and memory traffic overlap perfectly.

    The one place chalk writes the roofline's max rule: a kernel's floor (`kernels.roofline_time_s`), an op of
    the step model, the aggregate bound and the simulator's linear step all call it.
    """
    t = maximum(compute_s, memory_s)
    if type(overhead_s) is float and overhead_s == 0.0:  # no overhead: no array copy
        return t
    return t + overhead_s


def rate_scaled_time_factor(compute_s, memory_s, compute_scale, memory_scale):
    """Factor by which an op's time stretches when its compute and memory rates are scaled: the ratio of its
    roofline time at the scaled rates to that at the unscaled ones. The compute scale where the op is
    compute-bound, the memory scale where it is memory-bound, and between the two across the knee.

    Formula: f = max(T_c, T_m) / max(T_c / s_c, T_m / s_m), with T_c, T_m the op's compute and memory times at the
    scaled rates and s_c, s_m the time scales (1 / rate multiplier) of compute and memory.
    Ref: lecture eq. 1 (the roofline's max rule), applied to a measured kernel time: a software stack that reaches
    a fraction of another's compute rate but most of its memory bandwidth slows compute-bound kernels, not
    memory-bound ones.
    Assumes: the kernel's efficiency relative to the roofline (what the measured table holds) carries over; only
    the rates it is measured against change. 0 where both times are 0. f lies between s_c and s_m; it is clipped
    there, which removes only rounding. The times are taken relative to the larger first, so a subnormal time
    divided by its scale neither loses its bits nor underflows.
    """
    t_scaled = maximum(compute_s, memory_s)
    unit = np.where(t_scaled > 0, t_scaled, 1.0)
    t_base = maximum(flt(compute_s) / unit / compute_scale, flt(memory_s) / unit / memory_scale)  # the larger is 1
    f = np.clip(1.0 / np.where(t_base > 0, t_base, 1.0), np.minimum(compute_scale, memory_scale),
                np.maximum(compute_scale, memory_scale))
    return where(t_scaled > 0, f, 0.0)


def cost_per_token_usd(step_s, usd_per_chip_s, chips, tokens_per_step):
    """Rental cost of one token produced by a step.

    Formula: cost = T * ($ per chip-second * chips) / tokens   (eq. 4; tokens = B for decode)
    Ref: lecture eq. 4.
    Assumes: chips are paid for whether busy or not; no other costs.
    """
    return flt(step_s) * usd_per_chip_s * chips / tokens_per_step


def critical_batch(peak_flops_per_s, bandwidth_bytes_per_s, total_params, active_params,
                   bytes_per_param, flops_per_param=2.0):
    """Batch at which weight-fetch time equals weight-multiply time (KV ignored).

    Formula: B* = (FLOPs / 2) * bytes_per_param / mem_bw * (N_total / N_active)   (eq. 5)
    Ref: lecture eq. 5 ("B ~ 300 x sparsity").
    Assumes: all N_total weights are read every step (the lecture's form); KV traffic ignored.
    """
    ratio = hardware_ratio(peak_flops_per_s, bandwidth_bytes_per_s, bytes_per_param, flops_per_param)
    return ratio * flt(total_params) / active_params


def hardware_ratio(peak_flops_per_s, bandwidth_bytes_per_s, bytes_per_param, flops_per_param=2.0):
    """Multiplies per weight byte fetched: the chip's dimensionless arithmetic intensity.

    Formula: (FLOPs / 2) * bytes_per_param / mem_bw
    Ref: lecture eq. 5 ("a dimensionless constant of around 300 on most GPUs"; H100 BF16: 295).
    Assumes: one multiply-add (2 FLOPs) per weight per token.
    """
    return (flt(peak_flops_per_s) / flops_per_param) * bytes_per_param / bandwidth_bytes_per_s


def critical_batch_with_kv(weight_bytes, flops_per_sequence, kv_read_bytes_per_sequence,
                           peak_flops_per_s, bandwidth_bytes_per_s):
    """Batch at which compute time equals memory time with the KV traffic included.

    Formula: B*_kv = (W / bw) / (c / F - kv / bw), where c = FLOPs and kv = KV bytes read per
             sequence per step; NaN where kv/bw >= c/F (the KV cache alone outweighs compute,
             so decode is memory-bound at every batch)
    Ref: lecture eqs. 1-3 solved for B ("if I add something that consumes more memory bandwidth,
         the batch must grow").
    Assumes: weights read once per step regardless of batch.
    """
    per_seq_gap = (flt(flops_per_sequence) / peak_flops_per_s
                   - flt(kv_read_bytes_per_sequence) / bandwidth_bytes_per_s)
    if isinstance(per_seq_gap, float) and per_seq_gap > 0:  # one number, nothing to guard
        return (flt(weight_bytes) / bandwidth_bytes_per_s) / per_seq_gap
    with np.errstate(divide="ignore", invalid="ignore"):
        b = (flt(weight_bytes) / bandwidth_bytes_per_s) / per_seq_gap
    return where(per_seq_gap > 0, b, np.nan)


def hbm_drain_time_s(capacity_bytes, bandwidth_bytes_per_s):
    """Time to read a memory's whole contents once.

    Formula: capacity / bandwidth
    Ref: lecture ("reading all of HBM takes ~15-20 ms, stable across generations").
    Assumes: sequential streaming at the quoted bandwidth.
    """
    return flt(capacity_bytes) / bandwidth_bytes_per_s


def utilization(achieved, peak):
    """Achieved fraction of a peak (MFU for FLOP/s, MBU for bytes/s).

    Formula: achieved / peak
    Ref: Chowdhery et al. 2022 (PaLM, MFU).
    Assumes: peak is the dense datasheet figure.
    """
    return flt(achieved) / peak
