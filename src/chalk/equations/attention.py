"""Attention: KV-cache bytes per token and attention FLOPs at a context length."""

from __future__ import annotations

import numpy as np

from chalk.equations.num import flt, minimum, where


def matmul_flops(m, k, n):
    """FLOPs of an (m x k) @ (k x n) matrix product.

    Formula: 2 * m * k * n   (one multiply and one add per multiply-add)
    Ref: lecture eq. 2 ("the lecture drops the 2 and says multiplies").
    Assumes: dense operands.
    """
    return 2 * flt(m) * k * n


def kv_elements_per_token_gqa(num_kv_heads, head_dim):
    """Elements one token stores per layer in a GQA/MHA/MQA KV cache.

    Formula: 2 * kv_heads * head_dim   (a key and a value per KV head)
    Ref: reference README convention 4; Ainslie et al. 2023.
    Assumes: keys and values have the same head dim.
    """
    return 2 * num_kv_heads * head_dim


def kv_bytes_per_token_layer_gqa(num_kv_heads, head_dim, bytes_per_element):
    """Bytes one token stores per layer in a GQA cache at a precision.

    Formula: 2 * kv_heads * head_dim * bytes
    Ref: reference README convention 4 (Llama-3.1-70B: 2*80*8*128*2 = 327,680 B over 80 layers).
    Assumes: per-tensor scales for 8-bit caches (negligible bytes).
    """
    return kv_elements_per_token_gqa(num_kv_heads, head_dim) * bytes_per_element


def kv_bytes_per_token_layer_mla(kv_lora_rank, qk_rope_head_dim, bytes_per_element, packed=False):
    """Bytes one token stores per layer in an MLA cache (compressed latent plus the RoPE key).

    Formula: (r_kv + d_rope) * bytes (one latent "head" of r_kv + d_rope elements at the cache dtype, a
             per-tensor scale beside it); with `packed` and below 16 bits, FlashMLA's sparse-decode layout:
             r_kv * bytes + 4 * r_kv/128 (fp32 scale per 128) + 2 * d_rope (RoPE part stays bf16)
    Ref: DeepSeek-V2 sec. 2.1; README convention 4 (61 * 576 * 2 = 70,272 B; FP8 576 B/layer plain, 656 B packed).
         vLLM's FlashMLASparseBackend.get_kv_cache_shape stores 656 bytes per token only for its "fp8_ds_mla" cache
         (DeepSeek-V3.2's sparse attention, which turns any fp8 cache into it), its dense MLA backends
         (num_blocks, block_size, r_kv + d_rope) at the cache dtype; TensorRT-LLM's paged MLA cache holds
         (lora_size + rope_size) elements of one type per token (cpp/tests/unit_tests/kernels/mlaPreprocessTest.cu);
         FlashMLA's README: the FP8 cache is the sparse decoding kernel's.
    Assumes: `packed` for models whose MLA decode runs the sparse (DSA) kernel; dense MLA caches are plain.
    """
    b = flt(bytes_per_element)
    plain = (kv_lora_rank + qk_rope_head_dim) * b
    if not packed:
        return plain
    pk = kv_lora_rank * b + 4 * np.ceil(kv_lora_rank / 128) + 2 * qk_rope_head_dim
    return where(b >= 2, plain, pk)


def dsa_indexer_key_bytes_per_token_layer(index_head_dim, bytes_per_element):
    """Bytes of one token's lightning-indexer key per layer (DeepSeek Sparse Attention).

    Formula: d_I * bytes, plus a 4-byte fp32 scale below 16 bits
    Ref: reference models.csv (V3.2: 61*132 = 8,052 B in FP8; 61*256 = 15,616 B in BF16).
    Assumes: one shared indexer key per token (MQA-style), as released.
    """
    b = flt(bytes_per_element)
    return index_head_dim * b + where(b >= 2, 0.0, 4.0)


def effective_context(context, window=None, topk=None):
    """Tokens of context one query actually reads.

    Formula: min(L, window) for sliding-window layers; min(L, k) for top-k sparse attention; else L
    Ref: Beltagy et al. 2020 (sliding window); DeepSeek-V3.2 (top-k = 2048).
    Assumes: nothing beyond the cap.
    """
    L = flt(context)
    if window:
        L = minimum(L, float(window))
    if topk:
        L = minimum(L, float(topk))
    return L


def causal_prefix_sum(prompt_len, cap=None):
    """Sum over positions t = 1..P of the tokens each attends to, optionally capped at `cap`.

    Formula: P(P+1)/2 uncapped; with cap w and P > w: w(w+1)/2 + (P - w) * w
    Ref: causal self-attention; sliding windows and top-k selection cap each row at w.
    Assumes: each token attends to itself and everything before it (up to the cap).
    """
    P = flt(prompt_len)
    full = P * (P + 1) / 2
    if not cap:
        return full
    w = float(cap)
    return where(P <= w, full, w * (w + 1) / 2 + (P - w) * w)


def sqrt_law_tokens_read(context, selected_blocks=16):
    """Tokens a query reads under block-sparse attention with the block size chosen optimally.

    Formula: reading L/b block summaries plus s selected blocks of b tokens costs L/b + s*b tokens,
             minimised at b = sqrt(L/s) to 2 * sqrt(s * L)
    Ref: the lecture ("DeepSeek's sparse attention puts a square root in the memory term");
         Native Sparse Attention, Yuan et al. 2025 (arXiv 2502.11089), compressed + selected blocks.
    Assumes: block summaries cost one token's bytes each; never more than the dense L.
    """
    L = flt(context)
    return minimum(L, 2 * np.sqrt(selected_blocks * L))


def attention_flops_per_query_token(context, num_heads, qk_dim, v_dim):
    """FLOPs of one query token's attention over `context` tokens in one layer.

    Formula: 2 * h * L * d_qk (scores) + 2 * h * L * d_v (weighted sum of values)
    Ref: Kaplan et al. 2020 Table 1 (2 * n_layer * n_ctx * d_attn per token, forward).
    Assumes: softmax FLOPs negligible. For MLA decode, d_qk = r_kv + d_rope and d_v = r_kv
        (weight absorption, DeepSeek-V2 appendix); for MLA prefill d_qk = d_nope + d_rope.
    """
    return 2 * num_heads * flt(context) * (qk_dim + v_dim)
