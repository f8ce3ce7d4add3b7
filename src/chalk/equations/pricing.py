"""Reading API price sheets through the roofline: KV size at the price cliff, MFU, cache, margin.

Pure functions over floats or numpy arrays. Prices are USD per token, sizes bytes, times seconds.
"""

from __future__ import annotations

import numpy as np

from chalk.equations import roofline as R

#: The lecture's hardware ratio for eq. 6: multiplies per byte of HBM traffic (~300).
LECTURE_MULTIPLIES_PER_BYTE = 300.0


def multiplies_per_byte(peak_flops_per_s, bandwidth_bytes_per_s, flops_per_multiply=2.0):
    """A chip's multiply-adds per byte it can read from HBM: the ratio eq. 6 divides by.

    Formula: (FLOPs / 2) / mem_bw
    Ref: lecture eq. 6 ("300"); equals eq. 5's (FLOPs/2) * bytes_per_param / mem_bw when weights are
         1 byte (FP8): H100 at FP8 gives 1978.9e12 / 2 / 3.35e12 = 295.
    Assumes: KV bytes are counted as bytes, so no bytes-per-parameter factor enters; with 2-byte
        weights eq. 5's ratio is twice this one (the lecture uses one "300" for both).
    """
    return R.hardware_ratio(peak_flops_per_s, bandwidth_bytes_per_s, 1.0, flops_per_multiply)


def kv_bytes_per_token_at_cliff(active_params, cliff_context_tokens,
                                multiplies_per_byte=LECTURE_MULTIPLIES_PER_BYTE):
    """KV-cache bytes per token implied by a long-context price cliff (the balance context).

    Formula: kv = N_active / (ratio * L_cliff)   (eq. 6)
        Derivation: a decode step costs each sequence N_active multiplies, taking
        N_active / F_mult seconds (F_mult = FLOPs/2 multiplies per second), and a read of its whole
        cache, L * kv / bw seconds. The cost per token is flat in L while compute is the larger
        term and grows linearly once the KV read is, so the price cliff sits where they are equal:
        L * kv / bw = N_active / F_mult  ->  kv = N_active / (L * F_mult / bw) = N_active / (L * ratio).
    Ref: lecture eq. 6 (N_active = 100B, L = 200K, ratio 300 -> 1,667 B, "~1.7 KB").
    Assumes: the cliff is placed exactly at the balance context; dense attention (the read grows
        linearly in L); weights fully amortised over the batch; attention FLOPs ignored.
    """
    L = np.asarray(cliff_context_tokens, dtype=float)
    return np.asarray(active_params, dtype=float) / (multiplies_per_byte * L)


def kv_bytes_per_token_from_price_multiple(active_params, cliff_context_tokens, price_multiple,
                                           multiplies_per_byte=LECTURE_MULTIPLIES_PER_BYTE):
    """KV bytes per token implied by the cliff's position *and* the price multiple above it.

    Formula: kv = (m - 1) * N_active / (ratio * L_cliff)
        Reading (no overlap): the cost of a decode token is compute + KV read (a sum, as when the
        attention kernels do not overlap the weight matmuls). The standard tier is priced at the
        short-context cost, compute alone; the long-context tier at the cost at the cliff,
        compute + KV read. Then m = 1 + T_kv(L_cliff) / T_compute, so the memory term at the cliff
        is (m - 1) times the compute term. Prices doubling (m = 2) means memory = compute at the
        cliff, which is eq. 6 exactly; m = 1.5 (Gemini's output price) gives half of eq. 6.
    Ref: lecture eq. 6; this reading is chalk's refinement, not the lecture's.
    Assumes: price proportional to cost in both tiers; m <= 1 implies no KV cost (returns 0).
    """
    m = np.asarray(price_multiple, dtype=float)
    eq6 = kv_bytes_per_token_at_cliff(active_params, cliff_context_tokens, multiplies_per_byte)
    return np.maximum(m - 1.0, 0.0) * eq6


def implied_decode_mfu_fraction(output_input_price_ratio):
    """Decode MFU as a fraction of prefill MFU, read off the output / input price ratio.

    Formula: MFU_decode / MFU_prefill = 1 / r,  r = output price / input price
        Both phases do 2 * N_active FLOPs per token; a token's chip-time is 2 N / (F * MFU), and the
        price is proportional to chip-time, so r = MFU_prefill / MFU_decode.
    Ref: lecture ("output 5x input: decode MFU is about 1/5 of prefill MFU").
    Assumes: prices proportional to chip-seconds per token; equal FLOPs per token in both phases.
    """
    return 1.0 / np.asarray(output_input_price_ratio, dtype=float)


def kv_recompute_time_s(flops_per_token, peak_flops_per_s):
    """Chip time to recompute one token's KV: run its prefill again.

    Formula: t = prefill FLOPs per token at context L / peak
    Ref: lecture ("loading KVs from memory is much cheaper than recomputing").
    Assumes: prefill runs at peak (compute-bound).
    """
    return R.compute_time_s(flops_per_token, peak_flops_per_s)


def kv_load_time_s(kv_bytes_per_token, bandwidth_bytes_per_s):
    """Time to load one token's KV from a storage tier into the chip.

    Formula: t = KV bytes per token / bandwidth
    Ref: lecture eq. 3 (memory time = bytes / bandwidth).
    Assumes: streaming reads at the tier's quoted bandwidth, one tier device per chip.
    """
    return R.memory_time_s(kv_bytes_per_token, bandwidth_bytes_per_s)


def breakeven_load_bandwidth_bytes_per_s(kv_bytes_per_token, recompute_time_s, price_fraction):
    """Slowest tier bandwidth at which loading a token's KV costs `price_fraction` of recomputing it.

    Formula: bw = kv / (f * t_recompute)   (load time = f * recompute time)
    Ref: chalk's reading of the cache-read discount (cache price / input price = f).
    Assumes: both are paid in the same chip-seconds; storage capacity itself is free.
    """
    return np.asarray(kv_bytes_per_token, dtype=float) / (np.asarray(price_fraction, dtype=float)
                                                          * recompute_time_s)


def log_distance(a, b):
    """How far apart two positive times are on a log scale (0 = equal; ln 2 = a factor 2).

    Formula: |ln(a / b)|
    Ref: the lecture matches retention windows to drain times "to the right order of magnitude".
    Assumes: a, b > 0.
    """
    return np.abs(np.log(np.asarray(a, dtype=float) / np.asarray(b, dtype=float)))


def implied_storage_usd_per_token_s(write_usd_per_token, input_usd_per_token, window_s):
    """Storage price per token-second implied by a cache-write premium that buys a retention window.

    Formula: (write price - input price) / window
    Ref: Anthropic's 1.25x (5 min) and 2x (1 h) cache-write prices; Gemini quotes storage directly.
    Assumes: the premium over a plain input token pays only for holding the KV for the window.
    """
    return (np.asarray(write_usd_per_token, dtype=float) - input_usd_per_token) / window_s


def cache_breakeven_retention_s(input_usd_per_token, cache_read_usd_per_token, storage_usd_per_token_s):
    """Retention time at which storing a cached token costs what re-sending it as input saves.

    Formula: T = (input price - cache-read price) / storage price per second
    Ref: Gemini context caching (storage $4.50 per 1M tokens per hour; Gemini 2.5 Pro: 15 min).
    Assumes: the token is read back once.
    """
    return (np.asarray(input_usd_per_token, dtype=float) - cache_read_usd_per_token) / storage_usd_per_token_s


def cost_multiple(step_s, batch, base_step_s, base_batch):
    """Cost per token at (T, B) relative to a baseline (T0, B0) on the same chips.

    Formula: (T / B) / (T0 / B0)   (eq. 4: cost per token = T * $ / B)
    Ref: lecture eq. 4 and its cost-vs-batch hyperbola (fast mode = smaller batch).
    Assumes: same chips and price per chip-second.
    """
    return (np.asarray(step_s, dtype=float) / batch) / (base_step_s / base_batch)


def daily_revenue_usd(input_tokens, cache_hit_fraction, input_usd_per_token, cache_read_usd_per_token,
                      output_tokens, output_usd_per_token):
    """Revenue from a token mix at a price sheet's prices.

    Formula: R = I * (h * p_hit + (1 - h) * p_in) + O * p_out
    Ref: DeepSeek open-infra-index day 6 (608B input, 56.3% hits, 168B output at R1 prices: $562,027).
    Assumes: every token billed at list price (no free tier, no off-peak discount).
    """
    h = np.asarray(cache_hit_fraction, dtype=float)
    inp = np.asarray(input_tokens, dtype=float)
    return inp * (h * cache_read_usd_per_token + (1 - h) * input_usd_per_token) + \
        np.asarray(output_tokens, dtype=float) * output_usd_per_token


def fleet_cost_usd(gpus, usd_per_gpu_hour, hours=24.0):
    """Rental cost of a fleet over a period.

    Formula: C = GPUs * hours * $ per GPU-hour
    Ref: DeepSeek day 6: 226.75 nodes * 8 * 24 h * $2 = $87,072 per day.
    Assumes: every GPU is paid for all the time, busy or not.
    """
    return np.asarray(gpus, dtype=float) * hours * usd_per_gpu_hour


def margin(revenue_usd, cost_usd):
    """Profit over cost (DeepSeek's "cost profit margin").

    Formula: revenue / cost - 1
    Ref: DeepSeek day 6 (562,027 / 87,072 - 1 = 545%).
    Assumes: cost > 0.
    """
    return np.asarray(revenue_usd, dtype=float) / cost_usd - 1.0
