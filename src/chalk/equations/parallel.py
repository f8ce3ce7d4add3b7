"""Parallel layouts: collective communication (alpha-beta), memory per chip, pipeline bubbles.

Every bandwidth here is ONE-WAY bytes/s per chip (`Chip.scaleup_bandwidth_bytes_per_s` is already the
vendor's bidirectional figure halved; a NIC's Gb/s rate is per direction).
"""

from __future__ import annotations

import numpy as np

from chalk.equations.num import flt, maximum, minimum, ones_like, where


# --------------------------------------------------------------------------- collectives
def allreduce_bytes_per_link(message_bytes, n):
    """Bytes each chip sends (and receives) in a ring all-reduce of a message over n chips.

    Formula: 2 (n - 1) / n * M   (reduce-scatter then all-gather, each moving (n-1)/n of M)
    Ref: Patarasuk & Yuan 2009 (bandwidth-optimal all-reduce); scaling-book ch. 3.
    Assumes: n chips in one ring, every link equally fast.
    """
    n = flt(n)
    return where(n > 1, 2 * (n - 1) / maximum(n, 1.0) * flt(message_bytes), 0.0)


def allreduce_hops(n, torus_dims=0):
    """Link hops one after another in an all-reduce over n chips (what the per-hop latency multiplies).

    Formula: ring (switched fabric, torus_dims = 0): 2 (n - 1);
             torus of d dimensions: min(2 (n - 1), 2 d (n^(1/d) - 1))   (reduce-scatter, then all-gather, along
             each of d axes of n^(1/d) chips in turn)
    Ref: Thakur, Rabenseifner & Gropp 2005 (ring); scaling-book ch. 3 (collectives on a TPU torus, one axis at a
         time); ASTRA-sim's TPU validation (2D-torus all-reduce, 1 us link latency).
    Assumes: the group spans d axes of equal size (a 16-chip slice of a 2D torus is 4 x 4); 0 when n = 1.
    """
    n = flt(n)
    ring = 2 * (n - 1)
    if torus_dims and torus_dims > 1:
        ring = minimum(ring, 2 * torus_dims * (maximum(n, 1.0) ** (1.0 / torus_dims) - 1))
    return where(n > 1, ring, 0.0)


def ring_allreduce_time_s(message_bytes, n, link_bandwidth_bytes_per_s, latency_s=0.0, efficiency=1.0,
                          torus_dims=0):
    """Time of a ring all-reduce of `message_bytes` over n chips (on a torus: ring by ring along its axes).

    Formula: T = hops(n, d) * alpha + 2 (n - 1) / n * M / (beta * efficiency)   (hops: `allreduce_hops`)
    Ref: Thakur, Rabenseifner & Gropp 2005 (alpha-beta cost of MPI collectives).
    Assumes: one-way link bandwidth beta per chip; alpha the per-hop latency; 0 when n = 1; along a torus's axes
    each chip still moves 2 (n - 1) / n of M in all.
    """
    return allreduce_hops(n, torus_dims) * latency_s + allreduce_bytes_per_link(message_bytes, n) / (
        flt(link_bandwidth_bytes_per_s) * efficiency)


def hierarchical_allreduce_time_s(message_bytes, n, domain, scaleup_bandwidth_bytes_per_s, scaleup_latency_s,
                                  scaleout_bandwidth_bytes_per_s, scaleout_latency_s, efficiency=1.0, torus_dims=0):
    """Time of an all-reduce over n chips that span several scale-up domains of `domain` chips: a ring inside each
    domain on the scale-up link, then a ring across the n / domain domains on the scale-out link, each chip carrying
    its 1 / domain share of the message across; within one domain, the plain ring (`ring_allreduce_time_s`).

    Formula: T = ring(M, min(n, D), beta_up, alpha_up) + ring(M / D, n / D, beta_out, alpha_out)   for n > D
    Ref: NCCL's hierarchical (tree / NVLS + ring) algorithms; Thakur, Rabenseifner & Gropp 2005 for each ring.
    Assumes: n a multiple of D; the inner phase's reduce-scatter and all-gather counted as one ring all-reduce
    (an upper bound by at most the inner ring's latency terms).
    """
    n, D = flt(n), flt(domain)
    inner = ring_allreduce_time_s(message_bytes, minimum(n, D), scaleup_bandwidth_bytes_per_s, scaleup_latency_s,
                                  efficiency, torus_dims)
    across = ring_allreduce_time_s(flt(message_bytes) / minimum(n, D), maximum(n / D, 1.0),
                                   scaleout_bandwidth_bytes_per_s, scaleout_latency_s, efficiency)
    return where(n > D, inner + across, ring_allreduce_time_s(message_bytes, n, scaleup_bandwidth_bytes_per_s,
                                                               scaleup_latency_s, efficiency, torus_dims))


def alltoall_bytes_per_chip(tokens, experts_per_token, hidden_size, bytes_per_element):
    """Bytes one chip sends in an MoE dispatch (or combine) of its tokens.

    Formula: tokens * top_k * H * bytes   (each token goes to k experts; combine returns as many)
    Ref: DeepSeek-V3 tech report sec. 3.2 (DeepEP dispatch in FP8, combine in BF16); GShard (Lepikhin 2020).
    Assumes: no deduplication of a token sent to two experts on the same chip (upper bound).
    """
    return flt(tokens) * experts_per_token * hidden_size * bytes_per_element


def ep_remote_fractions(ep, domain_chips):
    """Share of an EP all-to-all's traffic that leaves the chip inside, and outside, its scale-up domain.

    Formula: intra = (min(EP, D) - 1) / EP;  inter = max(EP - D, 0) / EP   (uniform routing over EP chips)
    Ref: the lecture ("MoE all-to-all fits a 72-GPU rack, degrades across racks"); LMSYS large-scale EP blog.
    Assumes: experts are spread evenly and tokens route uniformly (EPLB balances load towards this).
    """
    ep = flt(ep)
    d = flt(domain_chips)
    intra = (minimum(ep, d) - 1) / ep
    inter = maximum(ep - d, 0.0) / ep
    return intra, inter


def alltoall_scaleup_share(ep, domain_chips):
    """Bytes a chip moves over its scale-up link in an EP all-to-all, per byte of copies it sends, when remote
    copies cross the scale-out network once per domain and are forwarded to their chips over the scale-up link.

    Formula: (D' - 1) / EP + (EP - D') / EP * (D' - 1) / D',  D' = min(EP, D)
             (copies for its own domain's other chips, plus, by symmetry, the copies arriving from other domains
             that it forwards to the other chips of its domain); (EP - 1) / EP inside one domain
    Ref: DeepEP internode dispatch/combine (RDMA to the same-index GPU of each destination node, NVLink forwarding
         inside it); balls in bins as in `ep_remote_fractions`.
    Assumes: uniform routing; every chip forwards as much as it receives from other domains.
    """
    ep = flt(ep)
    d = minimum(ep, flt(domain_chips))
    return (d - 1) / ep + (ep - d) / ep * (d - 1) / d


def remote_domain_copies(experts_per_token, ep, domain_chips):
    """Copies of one token that cross the scale-out network in an EP dispatch (sent once per remote domain).

    Formula: (n - 1) * (1 - (1 - 1/n)^k) with n = EP / D domains in the EP group (0 when n <= 1)
    Ref: DeepEP internode dispatch (one RDMA send per destination node, then NVLink forwarding);
         balls in bins as in `moe.expected_distinct_experts`.
    Assumes: a token's k experts fall in uniformly random domains.
    """
    n = maximum(flt(ep) / flt(domain_chips), 1.0)
    # n = 1 (one domain): log1p(-1) = -inf; nothing crosses, so that case is 0 rather than 0 * (1 - 0^k)
    safe = where(n > 1, n, 2.0)
    return where(n > 1, (n - 1) * -np.expm1(experts_per_token * np.log1p(-1 / safe)), 0.0)


def alltoall_time_s(scaleup_bytes, scaleout_bytes, scaleup_bytes_per_s, scaleout_bytes_per_s, latency_s=0.0,
                    efficiency=1.0):
    """Time of one all-to-all when part of a chip's traffic crosses the scale-out network.

    Formula: T = alpha + max(M_up / beta_up, M_out / beta_out) / efficiency
    Ref: DeepEP (NVLink and RDMA paths run concurrently); alpha-beta model.
    Assumes: NVLink and NIC transfers overlap; the slower path sets the time; 0 when nothing moves.
    """
    up = flt(scaleup_bytes) / scaleup_bytes_per_s
    m_out = flt(scaleout_bytes)
    out = where(m_out > 0, m_out / max(scaleout_bytes_per_s, 1e-30), 0.0)
    busy = (up > 0) | (out > 0)
    return where(busy, latency_s + maximum(up, out) / efficiency, 0.0)


def p2p_time_s(message_bytes, link_bandwidth_bytes_per_s, latency_s=0.0, efficiency=1.0):
    """Time to send one message point to point (a pipeline stage's activations).

    Formula: T = alpha + M / (beta * efficiency)
    Ref: alpha-beta model (Hockney 1994).
    Assumes: a single link, no contention.
    """
    return latency_s + flt(message_bytes) / (link_bandwidth_bytes_per_s * efficiency)


def overlapped_time_s(compute_s, comm_s, overlap_fraction=1.0):
    """Step time when communication of one micro-batch hides under the compute of the other.

    Formula: T = max(T_compute, T_comm) + (1 - f) * min(T_compute, T_comm); f = 1 perfect overlap,
             f = 0 none (T_compute + T_comm)
    Ref: DeepSeek-V3 inference (dual micro-batch overlap, open-infra-index day 6); SGLang two-batch overlap.
    Assumes: the caller charges the second weight read of the split batch in T_compute.
    """
    c = flt(compute_s)
    m = flt(comm_s)
    return maximum(c, m) + (1 - overlap_fraction) * minimum(c, m)


# --------------------------------------------------------------------------- memory per chip
def weight_bytes_per_chip(dense_bytes, expert_bytes, tp, ep, pp, etp=1.0):
    """Weight bytes one chip holds.

    Formula: dense / (TP * PP) + routed experts / (EP * ETP * PP)
    Ref: Megatron-LM (Shoeybi 2019) TP sharding; GShard expert parallelism; GPipe stages; expert tensor
         parallelism (each expert's FFN split ETP ways inside an EP group: TensorRT-LLM moe_tp_size, SGLang
         moe-tp, Megatron-Core expert_tensor_parallel_size).
    Assumes: attention-DP replicas each hold the full (TP-sharded) dense weights; stages get equal shares.
    """
    return flt(dense_bytes) / (flt(tp) * flt(pp)) + flt(expert_bytes) / (flt(ep) * flt(etp) * flt(pp))


def kv_shard_fraction(num_kv_heads, tp, head_shardable=True):
    """Fraction of a sequence's KV cache one chip of a TP group holds.

    Formula: 1 / min(TP, kv_heads) for GQA/MHA (heads split, replicated once TP > kv_heads); 1 for MLA
    Ref: vLLM/SGLang tensor-parallel attention; DeepSeek-V2 (MLA caches one latent shared by all heads).
    Assumes: TP divides the KV heads or the KV heads divide TP.
    """
    tp = flt(tp)
    if not head_shardable:
        return ones_like(tp)
    return 1.0 / minimum(tp, flt(num_kv_heads))


def kv_bytes_per_chip(kv_bytes_per_sequence, sequences_per_stage, attention_dp, pp, shard_fraction):
    """KV-cache bytes one chip holds when PP stages each keep their layers' KV for every sequence in flight.

    Formula: (B / DP_attn) * kv_seq * shard / PP, with B = PP * b sequences in flight at per-stage batch b
             -> b * kv_seq * shard / DP_attn: independent of PP
    Ref: the lecture ("pipelining divides weights per GPU, not KV per GPU"); GPipe.
    Assumes: B sequences in flight across the pipeline, each stage holds 1/PP of the layers.
    """
    return (flt(sequences_per_stage) * flt(pp) / flt(attention_dp) * flt(kv_bytes_per_sequence) * flt(shard_fraction)
            / flt(pp))


def max_sequences_fit(usable_bytes, weight_bytes, kv_bytes_per_sequence):
    """Largest number of sequences whose KV fits beside the weights.

    Formula: floor((usable - weights) / kv_per_sequence), 0 when the weights alone do not fit
    Ref: lecture eq. 3's memory side; vLLM PagedAttention block budget.
    Assumes: no fragmentation beyond the reserve already taken out of `usable_bytes`.
    """
    free = flt(usable_bytes) - flt(weight_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.floor(free / flt(kv_bytes_per_sequence))
    return where(free > 0, maximum(n, 0.0), 0.0)


# --------------------------------------------------------------------------- pipelines
def pipeline_bubble_fraction(stages, microbatches, interleave=1):
    """Share of a training step a pipeline's chips sit idle (GPipe / 1F1B, optionally interleaved).

    Formula: (PP - 1) / (v * M + PP - 1); v = 1 plain, v chunks per chip interleaved (bubble / v)
    Ref: Huang et al. 2019 (GPipe); Narayanan et al. 2021 (Megatron interleaved 1F1B, eq. bubble = (p-1)/(v m)).
    Assumes: equal stage times, no communication cost.
    """
    p = flt(stages)
    m = flt(microbatches)
    v = flt(interleave)
    return (p - 1) / (v * m + p - 1)


def pipeline_batch_latency_s(stage_time_s, stages, microbatches):
    """Time for one batch, split into micro-batches, to pass a pipeline that holds nothing else (a prefill).

    Formula: T = (m + PP - 1) * T_stage, with m micro-batches of T_stage per stage
    Ref: the pipeline fill and drain (GPipe, Huang et al. 2019); the lecture's pipeline bubble.
    Assumes: equal stages; the first micro-batch enters an empty pipeline and the last leaves it empty.
    """
    return (flt(microbatches) + flt(stages) - 1.0) * flt(stage_time_s)


def pipeline_token_latency_s(stage_time_s, stages, hop_time_s=0.0):
    """Time for one token's forward pass through all stages of an inference pipeline.

    Formula: T_token = PP * T_stage + (PP - 1) * T_hop
    Ref: the lecture (inference pipelining costs latency, not throughput: "~50% with 4 stages").
    Assumes: equal stages; PP micro-batches in flight keep every stage busy, so throughput is unchanged.
    """
    p = flt(stages)
    return p * flt(stage_time_s) + (p - 1) * flt(hop_time_s)
