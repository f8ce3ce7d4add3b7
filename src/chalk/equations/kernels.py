"""Work and traffic of single GPU kernels (one GEMM, one layer's attention, one MoE layer's experts).

These are the roofline floors the measured kernel tables are normalised by (`chalk.analyses.step.kernels`): a measured
time t is stored as the efficiency eta = floor / t, a number in (0, 1] that depends on the kernel's shape, so the
same normalised curve can be scaled to another chip by that chip's own peaks. All quantities are per GPU and in
SI units (FLOP, bytes, seconds). Arguments broadcast as numpy arrays.
"""

from __future__ import annotations

from chalk.equations import roofline as R
from chalk.equations.num import flt as _f
from chalk.equations.num import maximum, minimum

#: MLA geometry of DeepSeek-V3 / R1 / Kimi K2 (config.json): kv_lora_rank, qk_rope_head_dim, qk_nope + rope per head
#: (192) and v_head_dim. The measured MLA tables were taken with these sizes.
MLA_LATENT = 512
MLA_ROPE = 64
MLA_QK_HEAD = 192
MLA_V_HEAD = 128

#: Bytes per element of activations that leave a kernel (BF16 outputs).
OUT_BYTES = 2.0


def roofline_time_s(flops, bytes_, peak_flops_per_s, bandwidth_bytes_per_s):
    """The roofline floor of one kernel: the slower of its FLOPs at peak and its HBM bytes at peak bandwidth.

    Formula: T = max(F / P, B / BW)   (`roofline.step_time_s`, the one max rule, with no overhead)
    Ref: Williams, Waterman, Patterson 2009 (roofline), applied to one kernel.
    Assumes: compute and memory traffic overlap perfectly inside the kernel; no launch latency.
    """
    return R.step_time_s(R.compute_time_s(flops, peak_flops_per_s), R.memory_time_s(bytes_, bandwidth_bytes_per_s))


def gemm_kernel_flops(m, n, k):
    """FLOPs of one GEMM [m x k] @ [k x n].

    Formula: F = 2 m n k
    Ref: one multiply and one add per term of the product.
    Assumes: dense operands.
    """
    return 2.0 * _f(m) * _f(n) * _f(k)


def gemm_kernel_bytes(m, n, k, operand_bytes, out_bytes=OUT_BYTES):
    """HBM bytes of one GEMM: weight and input read once at the operand precision, output written once.

    Formula: B = (n k + m k) * b_op + m n * b_out
    Ref: the memory term of the roofline for one kernel (no re-reads of either operand).
    Assumes: FP8 / FP4 GEMMs take quantised activations (W8A8, W4A4); outputs in BF16; scale factors ignored.
    """
    m, n, k = _f(m), _f(n), _f(k)
    return (n * k + m * k) * operand_bytes + m * n * out_bytes


def decode_attention_flops(batch, q, context, heads, head_dim):
    """FLOPs of one layer's decode attention on one GPU: QK^T and PV over the cached tokens.

    Formula: F = 4 * b * q * L * h * d   (2 matmuls, 2 FLOPs per multiply-add)
    Ref: FlashAttention / FlashDecoding operation counts.
    Assumes: `q` query tokens per sequence (1, or K + 1 when verifying speculative drafts), each over all L keys.
    """
    return 4.0 * _f(batch) * _f(q) * _f(context) * _f(heads) * _f(head_dim)


def decode_attention_bytes(batch, context, kv_heads, head_dim, kv_bytes):
    """HBM bytes of one layer's decode attention on one GPU: every cached K and V vector read once.

    Formula: B = 2 * b * L * h_kv * d * b_kv
    Ref: the KV-cache read that bounds decode (FlashDecoding, PagedAttention).
    Assumes: queries and outputs are negligible next to the cache; grouped-query heads share one read.
    """
    return 2.0 * _f(batch) * _f(context) * _f(kv_heads) * _f(head_dim) * kv_bytes


def causal_pairs(q, context):
    """Query-key pairs of a causal attention of `q` new tokens at the end of a `context`-token sequence.

    Formula: pairs = q * (L - (q - 1) / 2)   (= L (L + 1) / 2 for a whole prompt, q = L)
    Ref: the causal mask's lower triangle.
    Assumes: q <= L.
    """
    q, L = _f(q), _f(context)
    return q * (L - (q - 1.0) / 2.0)


def prefill_attention_flops(batch, q, context, heads, head_dim):
    """FLOPs of one layer's causal prefill attention on one GPU.

    Formula: F = 4 * b * h * d * q (L - (q - 1) / 2)
    Ref: FlashAttention-2 (causal attention does half the work of a full one).
    Assumes: masked-out blocks are skipped.
    """
    return 4.0 * _f(batch) * _f(heads) * _f(head_dim) * causal_pairs(q, context)


def prefill_attention_bytes(batch, q, context, heads, kv_heads, head_dim, kv_bytes):
    """HBM bytes of one layer's prefill attention: Q read and O written in BF16, K and V of the context once.

    Formula: B = b * (4 q h d + 2 L h_kv d b_kv)
    Ref: FlashAttention's IO count with the K/V blocks staying on chip for a query block.
    Assumes: one pass over K and V per sequence (re-reads across query blocks hit L2).
    """
    return _f(batch) * (4.0 * _f(q) * _f(heads) * _f(head_dim)
                        + 2.0 * _f(context) * _f(kv_heads) * _f(head_dim) * kv_bytes)


def mla_decode_flops(batch, q, context, heads, latent=MLA_LATENT, rope=MLA_ROPE):
    """FLOPs of one layer's multi-head latent attention at decode (weights absorbed): scores over the latent plus
    rope part, values over the latent.

    Formula: F = 2 * b * q * L * h * (2 c + r)   (c: kv_lora_rank, r: rope dim)
    Ref: DeepSeek-V2 paper (arXiv 2405.04434), absorbed MLA; FlashMLA.
    Assumes: every head reads the one shared latent vector per token.
    """
    return 2.0 * _f(batch) * _f(q) * _f(context) * _f(heads) * (2.0 * latent + rope)


def mla_decode_bytes(batch, context, kv_bytes, latent=MLA_LATENT, rope=MLA_ROPE):
    """HBM bytes of one layer's MLA decode: the compressed latent (plus rope key) of every cached token, once.

    Formula: B = b * L * (c + r) * b_kv
    Ref: DeepSeek-V2 paper: 576 cached elements per token per layer for DeepSeek-V3.
    Assumes: the latent is shared by all heads of the GPU.
    """
    return _f(batch) * _f(context) * (latent + rope) * kv_bytes


def mla_prefill_flops(batch, q, context, heads, qk_head=MLA_QK_HEAD, v_head=MLA_V_HEAD):
    """FLOPs of one layer's MLA prefill (keys and values decompressed per head, causal).

    Formula: F = 2 * b * h * (d_qk + d_v) * q (L - (q - 1) / 2)
    Ref: DeepSeek-V3 config (qk head 128 + 64 rope = 192, v head 128); FlashAttention causal count.
    Assumes: prefill runs the non-absorbed form.
    """
    return 2.0 * _f(batch) * _f(heads) * (qk_head + v_head) * causal_pairs(q, context)


def mla_prefill_bytes(batch, q, context, heads, qk_head=MLA_QK_HEAD, v_head=MLA_V_HEAD):
    """HBM bytes of one layer's MLA prefill: per-head Q, O, K and V in BF16, each once.

    Formula: B = 2 * b * h * (d_qk + d_v) * (q + L)
    Ref: FlashAttention's IO count on the decompressed heads.
    Assumes: BF16 throughout; the latent cache write is negligible.
    """
    return 2.0 * _f(batch) * _f(heads) * (qk_head + v_head) * (_f(q) + _f(context))


def moe_local_copies(tokens, top_k, ep):
    """Routed token copies one GPU's experts process when `tokens` enter an MoE layer of an EP group.

    Formula: c = T k / EP
    Ref: top-k routing; balanced load over the EP ranks.
    Assumes: balanced routing: the roofline floor; the uneven load of served traffic lives in the measured
    efficiency over it (tables timed under power-law expert loads).
    """
    return _f(tokens) * _f(top_k) / maximum(_f(ep), 1.0)


def moe_experts_touched(copies, local_experts):
    """Local experts whose weights a balanced MoE layer reads: every expert that receives a copy.

    Formula: n = min(E / EP, max(c, 1))
    Ref: balanced routing spreads copies over distinct experts first.
    Assumes: at least one expert's weights are read whenever the layer runs.
    """
    return minimum(_f(local_experts), maximum(_f(copies), 1.0))


def moe_flops(copies, hidden, inter):
    """FLOPs of the routed experts on one GPU: gate/up [H -> 2 I] and down [I -> H] for every local copy.

    Formula: F = 6 * c * H * I
    Ref: SwiGLU expert MLP (Mixtral, DeepSeek-V3, Qwen3 MoE).
    Assumes: gated experts; no padding of expert groups to tiles (the measured efficiency carries that).
    """
    return 6.0 * _f(copies) * _f(hidden) * _f(inter)


def moe_bytes(copies, touched, hidden, inter, weight_bytes):
    """HBM bytes of the routed experts on one GPU: each touched expert's weights once, activations in and out.

    Formula: B = n * 3 H I * b_w + 4 c H
    Ref: the roofline memory term of a grouped GEMM.
    Assumes: BF16 activations; the intermediate stays on chip or is negligible.
    """
    return _f(touched) * 3.0 * _f(hidden) * _f(inter) * weight_bytes + 4.0 * _f(copies) * _f(hidden)


def moe_routing_bytes(tokens, top_k, hidden, passes):
    """HBM bytes of the routing work that scales with every routed copy of the whole EP group, not the GPU's own
    (sorting, permuting, padding): `passes` BF16 reads or writes of each copy's hidden vector.

    Formula: B = passes * T k * H * 2
    Ref: fitted per framework on the measured MoE tables (Triton fused-MoE kernels align all T k copies on
        every rank; CUTLASS grouped GEMMs permute only local ones), see scripts/distill_kernels.py.
    Assumes: the cost does not shrink with expert parallelism.
    """
    return _f(passes) * _f(tokens) * _f(top_k) * _f(hidden) * 2.0
