"""Derived sizes of a model: parameters, weight bytes, FLOPs per token, KV bytes, experts touched."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from chalk.equations import attention as attn
from chalk.equations import moe
from chalk.equations import params as P
from chalk.equations.num import flt
from chalk.memo import by_identity
from chalk.specs.model import ModelSpec
from chalk.specs.precision import bytes_per_element, canonical


#: Parameter groups a deployment quantised to a narrower precision than 16 bits keeps at 16 bits, whatever the
#: scheme: the input embedding (a lookup), the LM head, the norms and the MoE router. vLLM's `--quantization fp8`
#: quantises the Linear layers of the blocks only; ModelOpt's FP8 and NVFP4 recipes leave `*lm_head*` and the
#: routers unquantised; GPTQ, AWQ and bitsandbytes checkpoints keep embeddings and LM head (`chalk.specs.
#: quantisation.SCHEME_KEEPS`). A what-if `--precision fp8` counted them at 8 bits and fitted a 70B on one H100
#: that the same model's FP8 checkpoint does not fit (QA 2026-11-28).
NARROWED_KEEPS = ("embedding", "lm_head", "norms", "router")


def _like(x, value):
    """`value` in the shape of `x` (an array or a number)."""
    return np.full(x.shape, float(value)) if isinstance(x, np.ndarray) else flt(value)


@dataclass(frozen=True)
class ModelSizes:
    """Parameter groups of one model, and the quantities a roofline needs from it.

    Counts match `transformers` models built from the same config (checked in tests); they exclude
    multi-token-prediction heads that HF does not build (DeepSeek-V3's 14B MTP module).
    """

    model: ModelSpec

    def __hash__(self) -> int:  # the model's hash once (a pydantic model hashes every field each time)
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.model,))

    # ------------------------------------------------------------------ parameter groups
    @cached_property
    def embedding_params(self) -> float:
        return float(P.embedding_params(self.model.vocab_size, self.model.hidden_size))

    @cached_property
    def lm_head_params(self) -> float:
        return 0.0 if self.model.tie_word_embeddings else self.embedding_params

    @cached_property
    def attention_params_per_layer(self) -> float:
        m = self.model
        if m.attention == "mla":
            n = P.mla_attention_params(m.hidden_size, m.num_heads, m.q_lora_rank, m.kv_lora_rank,
                                       m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim)
            if m.is_dsa:
                n += P.dsa_indexer_params(m.hidden_size, m.q_lora_rank, m.index_n_heads, m.index_head_dim)
            return float(n)
        return float(P.gqa_attention_params(m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                                            m.qkv_bias, m.o_bias, m.qk_norm, m.attention_sinks))

    @cached_property
    def dense_mlp_params_per_layer(self) -> float:
        return float(P.gated_mlp_params(self.model.hidden_size, self.model.intermediate_size, self.model.mlp_bias))

    @cached_property
    def params_per_expert(self) -> float:
        m = self.model
        return float(P.gated_mlp_params(m.hidden_size, m.moe_intermediate_size, m.expert_bias)) if m.is_moe else 0.0

    @cached_property
    def router_params_per_layer(self) -> float:
        m = self.model
        return float(P.router_params(m.hidden_size, m.num_experts, m.router_bias)) if m.is_moe else 0.0

    @cached_property
    def shared_expert_params_per_layer(self) -> float:
        m = self.model
        if not (m.is_moe and m.num_shared_experts):
            return 0.0
        return float(P.gated_mlp_params(m.hidden_size, m.moe_intermediate_size * m.num_shared_experts))

    @cached_property
    def norm_params(self) -> float:
        m = self.model
        # MLA's q_a/kv_a layernorms are counted inside mla_attention_params
        return float(P.norm_params(m.hidden_size, 2 * m.num_layers + 1))

    @cached_property
    def routed_expert_params(self) -> float:
        """All routed-expert weights in the model."""
        return self.model.n_moe_layers * self.model.num_experts * self.params_per_expert

    @cached_property
    def total_params(self) -> float:
        m = self.model
        layers = m.num_layers * self.attention_params_per_layer
        dense_layers = m.num_layers - m.n_moe_layers
        mlp = dense_layers * self.dense_mlp_params_per_layer + m.n_moe_layers * (
            self.router_params_per_layer + self.shared_expert_params_per_layer) + self.routed_expert_params
        return self.embedding_params + self.lm_head_params + layers + mlp + self.norm_params

    @cached_property
    def active_params(self) -> float:
        """Parameters one token touches, both embedding matrices included (model-card style)."""
        m = self.model
        idle = m.n_moe_layers * (m.num_experts - m.experts_per_token) * self.params_per_expert
        return self.total_params - idle

    @cached_property
    def active_matmul_params(self) -> float:
        """Active parameters that take part in a matrix multiply (the input embedding is a lookup)."""
        lookup = 0.0 if self.model.tie_word_embeddings else self.embedding_params
        return self.active_params - lookup - self.norm_params

    @cached_property
    def dense_params(self) -> float:
        """Parameters read every step whatever the batch: everything but the routed experts."""
        return self.total_params - self.routed_expert_params

    @cached_property
    def group_params(self) -> dict[str, float]:
        """Parameters of each group (`chalk.specs.quantisation.GROUPS`); they add up to `total_params`."""
        m = self.model
        n_moe = m.n_moe_layers
        return {"embedding": self.embedding_params, "lm_head": self.lm_head_params,
                "attention": m.num_layers * self.attention_params_per_layer,
                "mlp": (m.num_layers - n_moe) * self.dense_mlp_params_per_layer,
                "shared_experts": n_moe * self.shared_expert_params_per_layer,
                "router": n_moe * self.router_params_per_layer, "experts": self.routed_expert_params,
                "norms": self.norm_params}

    # ------------------------------------------------------------------ bytes
    def as_stored(self, precision: str | None) -> str | None:
        """`precision`, or None (the checkpoint's own mix) where it names the checkpoint's own precision: asking
        gpt-oss for mxfp4 is its checkpoint as stored (BF16 attention, MXFP4 experts), not every weight at MXFP4."""
        if precision is not None and canonical(precision) == self.default_precision():
            return None
        return precision

    def wide_dtype(self) -> str:
        """The 16-bit dtype groups kept unquantised are stored at: the checkpoint's own where it is 16-bit, else
        bf16."""
        own = canonical(self.model.native_precision)
        return own if bytes_per_element(own) == 2 else "bf16"

    def narrowed(self, precision: str | None) -> bool:
        """Whether `precision` is a what-if quantisation narrower than 16 bits (not the checkpoint's own mix): its
        `NARROWED_KEEPS` groups stay at `wide_dtype`."""
        precision = self.as_stored(precision)
        return precision is not None and bytes_per_element(precision) < 2

    def _group_bytes(self, precision: str | None) -> dict[str, float] | None:
        """Bytes per element of each group where groups differ: the checkpoint's own mix (`_kept`, for None) or a
        narrowed what-if precision (`NARROWED_KEEPS` at 16 bits, the rest at it); None when every group but the
        routed experts is stored alike."""
        precision = self.as_stored(precision)
        if precision is None:
            return self._kept
        if precision not in self._narrowed_groups:  # worked out once per precision: the step model reads the
            # weights per step (`weight_bytes_read`), where building this each time cost 10 us a call
            out = None
            if self.narrowed(precision):
                b, wide = bytes_per_element(precision), bytes_per_element(self.wide_dtype())
                out = {g: (wide if g in NARROWED_KEEPS else b) for g in self.group_params}
                if self.model.tie_word_embeddings:  # one matrix: the input embedding read as the LM head
                    out["embedding"] = out["lm_head"] = wide
            self._narrowed_groups[precision] = out
        return self._narrowed_groups[precision]

    @cached_property
    def _narrowed_groups(self) -> dict:
        """`_group_bytes` of each what-if precision asked (None where it is not narrowed), kept."""
        return {}

    def _precisions(self, precision: str | None) -> tuple[float, float]:
        """Bytes per element for (non-expert weights, routed-expert weights); the checkpoint's own mix for None
        (routed experts a checkpoint keeps unquantised counted at its 16-bit dtype)."""
        precision = self.as_stored(precision)
        if precision is not None:
            b = bytes_per_element(precision)
            return b, b
        main = bytes_per_element(self.model.native_precision)
        if self._kept is not None:
            return main, self._kept["experts"]
        return main, bytes_per_element(self.model.expert_precision or self.model.native_precision)

    @cached_property
    def _kept(self) -> dict[str, float] | None:
        """Bytes per element of each parameter group in the checkpoint's own mix when it keeps some groups
        unquantised (`ModelSpec.weight_format`): the fraction kept at the 16-bit dtype, the rest at the quantised
        precision; None when every group is stored alike (sizes then as one precision, plus routed experts')."""
        m, fmt = self.model, self.model.weight_format
        if fmt is None or not fmt.unquantised:
            return None
        main = bytes_per_element(m.native_precision)
        out = dict.fromkeys(self.group_params, main)
        out["experts"] = bytes_per_element(m.expert_precision or m.native_precision)
        wide = bytes_per_element(fmt.dense_dtype)
        for g, f in fmt.unquantised:
            out[g] = f * wide + (1.0 - f) * out[g]
        if m.tie_word_embeddings:  # one matrix: the input embedding read as the LM head
            out["embedding"] = out["lm_head"] = max(out["embedding"], out["lm_head"])
        return out

    def group_bytes_per_element(self, group: str, precision: str | None = None) -> float:
        """Bytes per stored element of a parameter group: `precision`'s, or the checkpoint's own (None)."""
        precision = self.as_stored(precision)
        kept = self._group_bytes(precision)
        if kept is not None:
            return kept[group]
        main, expert = self._precisions(precision)
        return expert if group == "experts" else main

    def _dense_bytes(self, precision: str | None, lookup: bool = True) -> float:
        """Bytes of every weight but the routed experts (less the input-embedding lookup unless `lookup`)."""
        precision = self.as_stored(precision)
        skip = 0.0 if lookup or self.model.tie_word_embeddings else self.embedding_params
        kept = self._group_bytes(precision)
        if kept is not None:
            key = (precision, skip)
            if key not in self._dense_kept:  # (kept: read per step by `weight_bytes_read`)
                self._dense_kept[key] = sum(n * kept[g] for g, n in self.group_params.items() if g != "experts") \
                    - skip * kept["embedding"]
            return self._dense_kept[key]
        return (self.dense_params - skip) * self._precisions(precision)[0]

    @cached_property
    def _dense_kept(self) -> dict:
        """`_dense_bytes` where groups are stored differently, per (precision, lookup bytes left out), kept."""
        return {}

    def default_precision(self) -> str:
        """The precision weights run at when none is asked for (the checkpoint's own)."""
        return canonical(self.model.expert_precision or self.model.native_precision)

    def weight_bytes(self, precision: str | None = None) -> float:
        """Bytes of all weights at `precision` (None: the checkpoint's own mix)."""
        precision = self.as_stored(precision)
        kept = self._group_bytes(precision)
        if kept is not None:
            return self._dense_bytes(precision) + self.routed_expert_params * kept["experts"]
        main, expert = self._precisions(precision)
        return self.dense_params * main + self.routed_expert_params * expert

    def weight_bytes_read(self, tokens, precision: str | None = None, refined: bool = True):
        """Weight bytes one forward step over `tokens` tokens reads from HBM.

        Lecture form (refined=False): all weights, N_total * bytes (eq. 3).
        Refined MoE form: non-expert weights (less the input-embedding lookup) plus, in each MoE
        layer, the expected distinct experts the tokens touch, E * (1 - (1 - k/E)^B).
        """
        tokens = flt(tokens)
        precision = self.as_stored(precision)
        if not refined:
            return _like(tokens, self.weight_bytes(precision))
        main, expert = self._precisions(precision)
        if self._group_bytes(precision) is not None:
            dense = self._dense_bytes(precision, lookup=False)
        else:
            lookup = 0.0 if self.model.tie_word_embeddings else self.embedding_params
            dense = (self.dense_params - lookup) * main
        m = self.model
        if not m.is_moe:
            return _like(tokens, dense)
        touched = moe.expected_distinct_experts(m.num_experts, m.experts_per_token, tokens)
        return dense + m.n_moe_layers * touched * self.params_per_expert * expert

    @cached_property
    def sparsity(self) -> float:
        return float(moe.sparsity(self.total_params, self.active_params))

    # ------------------------------------------------------------------ KV cache
    @cached_property
    def _per_precision(self) -> dict:
        """(per-layer KV bytes, per-layer indexer key bytes) per KV precision name, worked out once."""
        return {}

    @cached_property
    def _layer_counts(self) -> tuple[int, int, int]:
        """(full-attention layers, sliding-window layers, layers)."""
        return self.model.n_full_layers, self.model.n_sliding_layers, self.model.num_layers

    def _kv_bytes(self, kv_precision: str) -> tuple[float, float]:
        hit = self._per_precision.get(kv_precision)
        if hit is None:
            hit = self._per_precision[kv_precision] = (self._kv_layer_bytes(kv_precision),
                                                       self._indexer_layer_bytes(kv_precision))
        return hit

    def _kv_layer_bytes(self, kv_precision: str) -> float:
        m, b = self.model, bytes_per_element(kv_precision)
        if m.attention == "mla":
            return float(attn.kv_bytes_per_token_layer_mla(m.kv_lora_rank, m.qk_rope_head_dim, b, packed=m.is_dsa))
        return float(attn.kv_bytes_per_token_layer_gqa(m.num_kv_heads, m.head_dim, b))

    def _indexer_layer_bytes(self, kv_precision: str) -> float:
        m = self.model
        if not m.is_dsa:
            return 0.0
        return float(attn.dsa_indexer_key_bytes_per_token_layer(m.index_head_dim, bytes_per_element(kv_precision)))

    def kv_bytes_per_token(self, kv_precision: str = "bf16") -> float:
        """Bytes the cache grows by per token of context (full-attention layers, plus DSA indexer keys).

        Sliding-window layers are excluded: they hold a constant window per sequence.
        """
        m = self.model
        return m.n_full_layers * self._kv_layer_bytes(kv_precision) + m.num_layers * self._indexer_layer_bytes(
            kv_precision)

    def kv_bytes_per_sequence(self, context, kv_precision: str = "bf16"):
        """Bytes of KV cache one sequence of `context` tokens holds."""
        m = self.model
        L = flt(context)
        per_layer, indexer = self._kv_bytes(kv_precision)
        n_full, n_sliding, n_layers = self._layer_counts
        out = n_full * per_layer * L
        if n_sliding:  # (terms that are zero are not added: a finite context makes them exactly 0)
            out = out + n_sliding * per_layer * attn.effective_context(L, window=m.sliding_window)
        return out + n_layers * indexer * L if indexer else out

    def kv_read_bytes_per_sequence(self, context, kv_precision: str = "bf16", sparse_law: str | None = None):
        """KV bytes one decode step reads for one sequence at `context`.

        Dense attention reads the whole cache; sliding layers their window; DSA reads top-k latent
        entries plus every indexer key. `sparse_law="sqrt"` applies the lecture's square-root law
        (block-sparse attention) to the full-attention layers instead.
        """
        m = self.model
        L = flt(context)
        per_layer, indexer = self._kv_bytes(kv_precision)
        n_full, n_sliding, n_layers = self._layer_counts
        read_full = attn.sqrt_law_tokens_read(L) if sparse_law == "sqrt" else \
            attn.effective_context(L, topk=m.index_topk or None) if m.index_topk else L
        out = n_full * per_layer * read_full
        if n_sliding:
            out = out + n_sliding * per_layer * attn.effective_context(L, window=m.sliding_window)
        return out + n_layers * indexer * L if indexer else out

    # ------------------------------------------------------------------ FLOPs
    def _attn_dims(self, phase: str) -> tuple[float, float]:
        m = self.model
        if m.attention == "mla":
            if phase == "decode":  # weight absorption: attend in the latent space (MQA-like)
                return m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank
            return m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        return m.head_dim, m.head_dim

    def attention_flops_per_token(self, context, sparse_law: str | None = None):
        """Attention FLOPs of one decode token at `context`, summed over layers."""
        m = self.model
        L = flt(context)
        qk, v = self._attn_dims("decode")
        read_full = attn.sqrt_law_tokens_read(L) if sparse_law == "sqrt" else \
            attn.effective_context(L, topk=m.index_topk or None) if m.index_topk else L
        n_full, n_sliding, _ = self._layer_counts
        f = n_full * attn.attention_flops_per_query_token(read_full, m.num_heads, qk, v)
        if n_sliding:  # (a zero term is not added: a finite context makes it exactly 0)
            f = f + n_sliding * attn.attention_flops_per_query_token(
                attn.effective_context(L, window=m.sliding_window), m.num_heads, qk, v)
        if m.is_dsa:  # the indexer scores every cached token with every indexer head
            f = f + m.num_layers * 2 * m.index_n_heads * m.index_head_dim * L
        return f

    def decode_flops_per_token(self, context, sparse_law: str | None = None):
        """FLOPs to decode one token at `context`: 2 * N_active (matmuls) plus attention."""
        return 2 * self.active_matmul_params + self.attention_flops_per_token(context, sparse_law)

    def prefill_attention_flops(self, prompt_len):
        """Attention FLOPs of a causal prefill of `prompt_len` tokens, summed over layers."""
        m = self.model
        qk, v = self._attn_dims("prefill")
        per_pair = 2 * m.num_heads * (qk + v)
        n_full, n_sliding, _ = self._layer_counts
        f = n_full * per_pair * attn.causal_prefix_sum(prompt_len, m.index_topk or None)
        f = f + n_sliding * per_pair * attn.causal_prefix_sum(prompt_len, m.sliding_window)
        if m.is_dsa:
            f = f + m.num_layers * 2 * m.index_n_heads * m.index_head_dim * attn.causal_prefix_sum(prompt_len)
        return f

    def prefill_flops(self, prompt_len):
        """FLOPs to prefill one prompt of `prompt_len` tokens."""
        P_ = flt(prompt_len)
        return 2 * self.active_matmul_params * P_ + self.prefill_attention_flops(P_)

    def summary(self, kv_precision: str = "bf16", precision: str | None = None) -> dict:
        m = self.model
        d = {
            "id": m.id, "name": m.name, "model_type": m.model_type, "attention": m.attention,
            "total_params": self.total_params, "active_params": self.active_params,
            "active_matmul_params": self.active_matmul_params, "embedding_params": self.embedding_params,
            "sparsity": self.sparsity, "layers": m.num_layers, "hidden_size": m.hidden_size,
            "heads": m.num_heads, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
            "weights_precision": precision or self.default_precision(),
            "weight_bytes": self.weight_bytes(precision),
            "weight_format": (m.weight_format.describe() if precision is None and m.weight_format is not None
                              else None),
            "kv_precision": kv_precision, "kv_bytes_per_token": self.kv_bytes_per_token(kv_precision),
            "kv_bytes_per_token_fp8": self.kv_bytes_per_token("fp8"),
            "decode_flops_per_token_at_4k": float(self.decode_flops_per_token(4096)),
            "experts": m.num_experts, "experts_per_token": m.experts_per_token,
            "shared_experts": m.num_shared_experts, "moe_layers": m.n_moe_layers,
            "params_per_expert": self.params_per_expert,
            "sliding_window": m.sliding_window, "sliding_layers": m.n_sliding_layers,
            "dsa_topk": m.index_topk or None, "max_context": m.max_context,
            "card_total_params": m.card_total_params, "card_active_params": m.card_active_params,
            "source": m.source,
        }
        return d


@by_identity(maxsize=256)
def sizes(model: ModelSpec) -> ModelSizes:
    """`ModelSizes(model)`, built once per model so that its cached parameter counts are computed once (found by
    the spec's identity first: hashing a ModelSpec reads every field)."""
    return _sizes(model)


@lru_cache(maxsize=256)
def _sizes(model: ModelSpec) -> ModelSizes:
    return ModelSizes(model)
