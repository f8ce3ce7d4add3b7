"""Prefix caching: prefill computes the uncached suffix, attention still reads the whole prompt's KV."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.analyses.economics import pricing as AP
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.equations import prefix_cache as PC
from chalk.specs.catalog import load_model


@settings(max_examples=40, deadline=None)
@given(p=st.floats(1, 1e6), f1=st.floats(0, 1), f2=st.floats(0, 1))
def test_prefix_cache_terms(p, f1, f2):
    lo, hi = sorted((f1, f2))
    assert float(PC.effective_prefill_tokens(p, hi)) <= float(PC.effective_prefill_tokens(p, lo)) + 1e-9
    assert float(PC.prefill_kv_read_tokens(p, hi)) == p          # every prompt token's KV is still read
    assert float(PC.prefill_attention_pairs(p, hi)) <= float(PC.prefill_attention_pairs(p, lo)) * (1 + 1e-12) + 1e-9
    assert float(PC.prefill_attention_pairs(p, 0.0)) == pytest.approx(p * (p + 1) / 2)
    assert float(PC.prefill_attention_pairs(p, 1.0)) == pytest.approx(0.0, abs=1e-6 * p)


def test_attention_pairs_golden():
    """P = 4, half cached: new tokens 3 and 4 score 3 + 4 = 7 pairs (of the full triangle's 10)."""
    assert float(PC.prefill_attention_pairs(4, 0.5)) == 7.0
    assert float(PC.effective_prefill_tokens(4, 0.5)) == 2.0


def test_suffix_cost_equals_the_flops_of_the_suffix():
    """Prefill FLOPs(P) - FLOPs(F P) = 2 N (1 - F) P + attention over the suffix's pairs: the same term."""
    sz = ModelSizes(load_model("llama-3.1-70b"))
    P, F = 8192.0, 0.5
    full, prefix = float(sz.prefill_flops(P)), float(sz.prefill_flops(F * P))
    c_full, c_prefix = full / P, prefix / (F * P)
    eff = PC.cached_prefill_cost_per_token(c_full, c_prefix, F) * P
    linear = 2 * sz.active_matmul_params * float(PC.effective_prefill_tokens(P, F))
    m = sz.model
    per_pair = 2 * m.num_heads * 2 * m.head_dim * m.num_layers
    assert eff == pytest.approx(linear + per_pair * float(PC.prefill_attention_pairs(P, F)), rel=1e-9)
    assert eff > (1 - F) * full  # the (1 - F) discount undercounts attention to the cached prefix


def test_pricing_margin_charges_the_suffix_not_a_flat_discount():
    r0 = AP.pricing_margin("deepseek-v3", "h800", input_len=8000, output_len=1000, cache_hit_fraction=0.0001,
                           ideal=True)
    r = AP.pricing_margin("deepseek-v3", "h800", input_len=8000, output_len=1000, cache_hit_fraction=0.5,
                          ideal=True)
    flat = 0.5 * r["cost_input_usd_per_mtok"]
    assert r["cost_input_effective_usd_per_mtok"] > flat
    assert r["cost_input_effective_usd_per_mtok"] < r0["cost_input_effective_usd_per_mtok"]
    assert r["cost_usd"] == pytest.approx(r["input_tokens"] * r["cost_input_effective_usd_per_mtok"] / 1e6
                                          + r["output_tokens"] * r["cost_output_usd_per_mtok"] / 1e6, rel=1e-9)
