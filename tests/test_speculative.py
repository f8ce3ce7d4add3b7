"""Speculative decoding / MTP: expected tokens per step, verification cost on the roofline, where it pays."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk import api
from chalk.analyses.step.speculative import speculative_breakeven, speculative_estimate
from chalk.equations import speculative as S
from chalk.errors import InputError


# -- expected tokens per step ----------------------------------------------------------------
@pytest.mark.parametrize("a,k,expected", [
    (0.6, 1, 1.6),  # 1 + 0.6
    (0.8, 3, 2.952),  # (1 - 0.8^4) / 0.2
    (1.0, 4, 5.0),  # every draft accepted: k + 1
    (0.0, 4, 1.0),  # none accepted: the verifier's own token
    (0.85, 1, 1.85),  # DeepSeek-V3 report 5.4.3: MTP acceptance 85-90% -> ~1.8x tokens per step
])
def test_expected_tokens_golden(a, k, expected):
    assert float(S.expected_tokens_per_step(a, k)) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(1, 16))
def test_expected_tokens_bounds_and_monotone(a, k):
    e = float(S.expected_tokens_per_step(a, k))
    assert 1.0 - 1e-12 <= e <= k + 1 + 1e-9
    assert float(S.expected_tokens_per_step(a, k + 1)) >= e - 1e-12  # more drafts never fewer tokens
    a2 = min(1.0, a + 0.01)
    assert float(S.expected_tokens_per_step(a2, k)) >= e - 1e-12  # higher acceptance never fewer tokens


@pytest.mark.parametrize("a,k,d,expected", [
    (0.85, 1, 0.5, 1.85),  # the first draft never decays
    (0.8, 3, 0.5, 1 + 0.8 + 0.64 * 0.5 + 0.512 * 0.125),  # a^i d^(i(i-1)/2): 1 + 0.8 + 0.32 + 0.064
    (0.85, 3, 1.0, (1 - 0.85 ** 4) / 0.15),  # d = 1: the geometric rule
])
def test_expected_tokens_with_decay_golden(a, k, d, expected):
    assert float(S.expected_tokens_per_step(a, k, d)) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(1, 16), st.floats(0.01, 1.0))
def test_expected_tokens_with_decay_bounds_and_monotone(a, k, d):
    e = float(S.expected_tokens_per_step(a, k, d))
    assert 1.0 - 1e-12 <= e <= float(S.expected_tokens_per_step(a, k)) + 1e-9  # never above one rate for all
    assert float(S.expected_tokens_per_step(a, k + 1, d)) >= e - 1e-12  # more drafts never fewer tokens
    assert float(S.expected_tokens_per_step(a, k, min(1.0, d + 0.01))) >= e - 1e-12  # slower fall, more tokens
    assert float(S.expected_tokens_per_step(min(1.0, a + 0.01), k, d)) >= e - 1e-12


def test_expected_tokens_with_decay_vectorised():
    e = S.expected_tokens_per_step(np.array([0.85, 0.85]), np.array([1, 5]), np.array([0.85, 0.85]))
    assert e.shape == (2,) and e[0] == pytest.approx(1.85) and e[1] == pytest.approx(3.126, abs=1e-3)


def test_expected_tokens_vectorised_and_continuous_at_one():
    a = np.array([0.5, 0.999999, 1.0])
    e = S.expected_tokens_per_step(a, 3)
    assert e.shape == (3,)
    assert e[1] == pytest.approx(4.0, rel=1e-5)


# -- the roofline cost of verifying k + 1 tokens ---------------------------------------------
def _spec(model, hw, batch, context, k=1, a=0.8, **kw):
    r = api.estimate(model, hw, batch, context, ideal=True, **{"aggregate": True, **kw})
    # the exact call the CLI makes
    s = speculative_estimate(r, model=model, hardware=hw, draft_tokens=k, acceptance=a, chips=None,
                             precision=None, kv_precision="bf16", ideal=True)
    return r, s


def test_memory_bound_verification_is_nearly_free():
    r, s = _spec("llama-3.1-70b", "hgx-h100", 1, 4096, k=3, a=0.8)
    assert r.bound == "memory" and s.bound == "memory"
    assert s.verify_kv_time_s == pytest.approx(r.kv_time_s)  # KV read once per sequence, not per token
    assert s.verify_cost_ratio == pytest.approx(1.0, abs=0.01)
    draft = 3 / 80  # three MTP blocks of one layer each, 80-layer model
    assert s.speedup_vs_plain == pytest.approx(2.952 / (1 + draft), rel=0.01)
    assert s.pays and s.user_tokens_per_s > r.user_tokens_per_s
    assert s.cost_per_mtok_usd == pytest.approx(r.cost_per_mtok_usd / s.speedup_vs_plain)
    assert s.tokens_per_s == pytest.approx(s.user_tokens_per_s * 1)


def test_compute_bound_verification_costs_k_plus_1():
    r, s = _spec("llama-3.1-8b", "h100-sxm", 8192, 128, k=3, a=0.8)
    assert r.bound == "compute" and s.bound == "compute"
    assert s.verify_cost_ratio == pytest.approx(4.0, rel=0.02)
    assert s.speedup_vs_plain == pytest.approx(2.952 / 4, rel=0.03)
    assert not s.pays and s.cost_per_mtok_usd > r.cost_per_mtok_usd


def test_moe_drafts_touch_more_experts():
    # DeepSeek-V3 at batch 1: the draft token routes to other experts, so verification reads more weights
    r, s = _spec("deepseek-v3", "hgx-h800", 1, 4096, k=1, a=0.85)
    assert s.verify_weight_time_s > r.weight_time_s
    assert s.pays


def test_array_batches_and_json():
    r = api.estimate("deepseek-v3", "hgx-h800", np.array([1.0, 64.0, 4096.0]), 4096, ideal=True)
    s = speculative_estimate(r, "deepseek-v3", "hgx-h800", 2, 0.7, ideal=True)
    assert np.asarray(s.speedup_vs_plain).shape == (3,)
    d = s.to_dict()
    json.dumps(d, allow_nan=False)
    assert {"tokens_per_step", "step_time_s", "user_tokens_per_s", "tokens_per_s", "cost_per_mtok_usd",
            "speedup_vs_plain", "pays"} <= set(d)


def test_where_it_pays():
    be = speculative_breakeven("llama-3.1-8b", "h100-sxm", 3, 0.8, context=512, ideal=True)
    assert 0 < be.free_until_batch <= be.pays_until_batch < 1e6
    assert be.speedup_at_batch_1 > 2.5 and be.compute_bound_speedup == pytest.approx(2.952 / 4)
    below = _spec("llama-3.1-8b", "h100-sxm", be.pays_until_batch * 0.97, 512, k=3, a=0.8)[1]
    above = _spec("llama-3.1-8b", "h100-sxm", be.pays_until_batch * 1.03, 512, k=3, a=0.8)[1]
    assert below.pays and not above.pays
    json.dumps(be.to_dict())


def test_never_pays_at_zero_acceptance_with_drafts_costing_time():
    be = speculative_breakeven("llama-3.1-8b", "h100-sxm", 1, 0.0, context=512, ideal=True)
    assert be.pays_until_batch == 0.0


@pytest.mark.parametrize("k,a", [(0, 0.5), (-1, 0.5), (1.5, 0.5), (2, 1.5), (2, -0.1), (2, float("nan"))])
def test_bad_input(k, a):
    r = api.estimate("llama-3.1-8b", "h100-sxm", 8, 1024, ideal=True)
    with pytest.raises(InputError):
        speculative_estimate(r, "llama-3.1-8b", "h100-sxm", k, a, ideal=True)


def test_prefill_rejected():
    r = api.estimate("llama-3.1-8b", "h100-sxm", 1, 1024, phase="prefill", ideal=True)
    with pytest.raises(InputError):
        speculative_estimate(r, "llama-3.1-8b", "h100-sxm", 2, 0.7, ideal=True)
