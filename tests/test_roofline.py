"""The roofline against hand computation, and its invariants."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.analyses.step.model_sizes import ModelSizes
from chalk.analyses.step.roofline import IDEAL, step
from chalk.equations import attention as A
from chalk.equations import moe
from chalk.equations import roofline as R
from chalk.specs.catalog import load_chip, load_model, resolve_hardware
from chalk.specs.hardware import System

UNSEEN = Path(__file__).parent / "data" / "unseen" / "config.json"


def _hand_decode(cfg, chip, batch, context):
    """A roofline computed by hand from config.json numbers (Qwen2.5-7B: qkv biases, untied embeddings)."""
    H, L, V, I = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = H // nh
    attn = H * nh * d + 2 * H * nkv * d + nh * d * H + nh * d + 2 * nkv * d
    mlp = 3 * H * I
    total = 2 * V * H + L * (attn + mlp + 2 * H) + H
    matmul_active = total - V * H - (2 * L + 1) * H
    flops = batch * (2 * matmul_active + L * 4 * nh * d * context)
    kv_tok = L * 2 * nkv * d * 2
    weight_read = (total - V * H) * 2
    t_c = flops / chip.flops_per_s["bf16"]
    t_m = (weight_read + batch * context * kv_tok) / chip.hbm_bandwidth_bytes_per_s
    return max(t_c, t_m), t_c, t_m


@pytest.mark.parametrize("batch,context,bound", [(1, 1024, "memory"), (2048, 256, "compute")])
def test_unseen_config_matches_hand_roofline(batch, context, bound):
    import json

    cfg = json.loads(UNSEEN.read_text())
    chip = load_chip("h100-sxm")
    system = System(id="one", name="one H100", chip=chip, chips=1, kind="chip")
    r = step(load_model(str(UNSEEN)), system, batch, context, precision="bf16", efficiency=IDEAL)
    t, t_c, t_m = _hand_decode(cfg, chip, batch, context)
    assert r.bound == bound
    assert r.step_time_s == pytest.approx(t, rel=0.02)
    assert r.compute_time_s == pytest.approx(t_c, rel=0.02)
    assert r.memory_time_s == pytest.approx(t_m, rel=0.02)


def test_h100_critical_batch_is_295():
    # lecture / claims.md: H100 BF16 989.4 TFLOP/s over 3.35 TB/s -> 295
    h = load_chip("h100-sxm")
    assert R.hardware_ratio(h.flops_per_s["bf16"], h.hbm_bandwidth_bytes_per_s, 2) == pytest.approx(295.3, abs=0.1)


def test_critical_batch_balances_compute_and_weights():
    m, s = load_model("llama-3.1-70b"), resolve_hardware("h100-sxm")
    r = step(m, s, 1, 1, precision="bf16", refined=False)
    rb = step(m, s, r.critical_batch, 1, precision="bf16", refined=False)
    assert rb.compute_time_s == pytest.approx(rb.weight_time_s, rel=0.01)


def test_balance_context_equalises_kv_and_compute_per_sequence():
    m, s = load_model("llama-3.1-70b"), resolve_hardware("h100-sxm")
    r = step(m, s, 64, 4096, precision="bf16")
    sz = ModelSizes(m)
    L = r.balance_context
    peak, bw = s.chip.flops_per_s["bf16"] * s.chips, s.chip.hbm_bandwidth_bytes_per_s * s.chips
    assert sz.kv_read_bytes_per_sequence(L) / bw == pytest.approx(sz.decode_flops_per_token(L) / peak, rel=1e-6)


def test_critical_batch_with_kv_null_when_kv_dominates():
    r = step(load_model("llama-3.1-70b"), resolve_hardware("h100-sxm"), 8, 1_000_000, precision="bf16")
    assert r.critical_batch_with_kv is None or np.isnan(r.critical_batch_with_kv)
    r = step(load_model("llama-3.1-70b"), resolve_hardware("h100-sxm"), 8, 256, precision="bf16")
    assert r.critical_batch_with_kv > r.critical_batch


def test_prefill_counts_causal_attention():
    m, s = load_model("llama-3.1-8b"), resolve_hardware("h100-sxm")
    sz = ModelSizes(m)
    r = step(m, s, 1, 8192, phase="prefill", precision="bf16")
    expect = 2 * sz.active_matmul_params * 8192 + 32 * 4 * 32 * 128 * 8192 * 8193 / 2
    assert r.flops == pytest.approx(expect, rel=1e-9)
    assert r.bound == "compute"


def test_expected_experts_formula():
    assert moe.expected_distinct_experts(256, 8, 1) == pytest.approx(8)
    assert moe.expected_distinct_experts(256, 8, 10_000) == pytest.approx(256)
    assert moe.expected_distinct_experts(256, 8, 2) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 2))


# ---------------------------------------------------------------- invariants
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b", "deepseek-v3.2"]
pos_batch = st.floats(1, 4096)
pos_ctx = st.floats(1, 200_000)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), pos_batch, pos_batch, pos_ctx, pos_ctx)
def test_step_time_never_falls_as_batch_or_context_grow(mid, b1, b2, l1, l2):
    m, s = load_model(mid), resolve_hardware("h100-sxm")
    (b1, b2), (l1, l2) = sorted((b1, b2)), sorted((l1, l2))
    t = step(m, s, np.array([b1, b2, b1]), np.array([l1, l1, l2])).step_time_s
    assert t[1] >= t[0] * (1 - 1e-12) and t[2] >= t[0] * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(pos_batch, pos_batch, pos_ctx)
def test_cost_per_token_never_rises_with_batch_while_memory_bound(b1, b2, ctx):
    m, s = load_model("llama-3.1-70b"), resolve_hardware("h100-sxm")
    b1, b2 = sorted((b1, b2))
    r = step(m, s, np.array([b1, b2]), ctx)
    if r.bound[1] == "memory":
        assert r.cost_per_mtok_usd[1] <= r.cost_per_mtok_usd[0] * (1 + 1e-12)


def test_step_time_grows_with_model():
    s = resolve_hardware("h100-sxm")
    ts = [step(load_model(m), s, 64, 4096, precision="bf16").step_time_s
          for m in ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")]
    assert ts == sorted(ts)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), st.floats(1, 1000), st.floats(1, 100_000), st.floats(1.5, 8))
def test_kv_bytes_linear_in_batch_and_context(mid, b, ctx, k):
    m, s = load_model(mid), resolve_hardware("h100-sxm")
    r1 = step(m, s, b, ctx)
    r2 = step(m, s, b * k, ctx)
    assert r2.kv_time_s == pytest.approx(k * r1.kv_time_s, rel=1e-9)
    sz = ModelSizes(m)
    if not m.sliding_window and not m.is_dsa:
        assert sz.kv_bytes_per_sequence(ctx * k) == pytest.approx(k * sz.kv_bytes_per_sequence(ctx), rel=1e-9)


@given(st.integers(1, 64), st.integers(1, 8), st.sampled_from([64, 128]))
def test_mqa_le_gqa_le_mha(heads_mult, kv, d):
    heads = kv * heads_mult
    mqa = A.kv_bytes_per_token_layer_gqa(1, d, 2)
    gqa = A.kv_bytes_per_token_layer_gqa(kv, d, 2)
    mha = A.kv_bytes_per_token_layer_gqa(heads, d, 2)
    assert mqa <= gqa <= mha


@given(st.floats(1e-9, 1.0), st.floats(1e-9, 1.0))
def test_max_le_sum_le_two_max(a, b):
    t = float(R.step_time_s(a, b))
    assert t <= a + b <= 2 * t


def test_vectorised_grid_matches_scalar_calls():
    m, s = load_model("deepseek-v3"), resolve_hardware("gb200-nvl72")
    B, L = np.meshgrid([1, 64, 4096], [512, 32768], indexing="ij")
    grid = step(m, s, B, L).step_time_s
    for i in range(3):
        for j in range(2):
            assert grid[i, j] == pytest.approx(step(m, s, float(B[i, j]), float(L[i, j])).step_time_s)
