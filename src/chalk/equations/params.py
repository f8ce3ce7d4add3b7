"""Parameter counts of transformer pieces, matching Hugging Face `transformers` module layouts."""

from __future__ import annotations


def embedding_params(vocab_size, hidden_size):
    """Parameters of one token-embedding (or unembedding) matrix.

    Formula: V * H
    Ref: any decoder-only transformer (Vaswani et al. 2017); HF `nn.Embedding(V, H)`.
    Assumes: no padding rows beyond `vocab_size`.
    """
    return vocab_size * hidden_size


def gqa_attention_params(hidden_size, num_heads, num_kv_heads, head_dim, qkv_bias=False, o_bias=False,
                         qk_norm=False, sinks=False):
    """Parameters of one grouped-query attention block (MHA when kv=heads, MQA when kv=1).

    Formula: H*h*d + 2*H*k*d + h*d*H  (+ biases h*d + 2*k*d, + H; + q/k norms 2*d; + h sinks)
    Ref: Ainslie et al. 2023 (GQA, arXiv 2305.13245); HF LlamaAttention, Qwen2/Qwen3Attention, GptOssAttention.
    Assumes: q/k norms are per-head RMSNorms of size d (Qwen3); sinks are one scalar per head (gpt-oss).
    """
    q = hidden_size * num_heads * head_dim
    kv = 2 * hidden_size * num_kv_heads * head_dim
    o = num_heads * head_dim * hidden_size
    n = q + kv + o
    if qkv_bias:
        n = n + num_heads * head_dim + 2 * num_kv_heads * head_dim
    if o_bias:
        n = n + hidden_size
    if qk_norm:
        n = n + 2 * head_dim
    if sinks:
        n = n + num_heads
    return n


def mla_attention_params(hidden_size, num_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                         qk_rope_head_dim, v_head_dim):
    """Parameters of one multi-head latent attention block (DeepSeek-V2/V3, Kimi K2).

    Formula: q: H*r_q + r_q + r_q*h*(d_nope+d_rope)  (or H*h*(d_nope+d_rope) without q LoRA)
             kv: H*(r_kv+d_rope) + r_kv + r_kv*h*(d_nope+d_v);  o: h*d_v*H
    Ref: DeepSeek-V2 (arXiv 2405.04434) sec. 2.1; HF DeepseekV3Attention.
    Assumes: no attention biases (attention_bias=false in every shipped config).
    """
    qk_head = qk_nope_head_dim + qk_rope_head_dim
    if q_lora_rank:
        q = hidden_size * q_lora_rank + q_lora_rank + q_lora_rank * num_heads * qk_head
    else:
        q = hidden_size * num_heads * qk_head
    kv = (hidden_size * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank
          + kv_lora_rank * num_heads * (qk_nope_head_dim + v_head_dim))
    o = num_heads * v_head_dim * hidden_size
    return q + kv + o


def dsa_indexer_params(hidden_size, q_lora_rank, index_n_heads, index_head_dim):
    """Parameters of DeepSeek Sparse Attention's lightning indexer, per layer.

    Formula: r_q*h_I*d_I (queries from the q latent) + H*d_I (one shared key) + 2*d_I (key LayerNorm)
             + H*h_I (per-head weights)
    Ref: DeepSeek-V3.2-Exp inference/model.py `Indexer` (wq_b, wk, k_norm, weights_proj).
    Assumes: the layout of the released inference code.
    """
    return q_lora_rank * index_n_heads * index_head_dim + hidden_size * index_head_dim \
        + 2 * index_head_dim + hidden_size * index_n_heads


def gated_mlp_params(hidden_size, intermediate_size, bias=False):
    """Parameters of one SwiGLU feed-forward block (gate, up, down projections).

    Formula: 3 * H * I  (+ 2*I + H with biases)
    Ref: Shazeer 2020 (GLU variants, arXiv 2002.05202); HF LlamaMLP.
    Assumes: gated activation, as in every shipped architecture.
    """
    n = 3 * hidden_size * intermediate_size
    if bias:
        n = n + 2 * intermediate_size + hidden_size
    return n


def router_params(hidden_size, num_experts, bias=False):
    """Parameters of an MoE router (one linear map hidden -> expert logits).

    Formula: H * E (+ E with bias)
    Ref: Shazeer et al. 2017 (arXiv 1701.06538); HF MixtralSparseMoeBlock.gate, GptOssTopKRouter.
    Assumes: DeepSeek's score-correction bias is a buffer, not a parameter (as in HF).
    """
    return hidden_size * num_experts + (num_experts if bias else 0)


def norm_params(hidden_size, count=1):
    """Parameters of `count` RMSNorms of width H.

    Formula: count * H
    Ref: Zhang & Sennrich 2019 (RMSNorm).
    Assumes: weight only, no bias.
    """
    return count * hidden_size
