"""Reversible networks: exact inverse, matching gradients, flat memory, ~4/3 compute."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.analyses.blackboard import reversible as an
from chalk.equations import reversible as eq

DEPTHS = (1, 2, 4, 8, 16, 32, 64)


def _data(width: int, batch: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, width)), rng.normal(size=(batch, width))


@pytest.fixture(scope="module")
def sweep():
    t0 = time.perf_counter()
    ms = an.measure_memory(DEPTHS, batch=64, width=256)
    return ms, time.perf_counter() - t0


def _by_depth(ms):
    return {m.depth: m for m in ms}


# -- implementation: invertibility and gradients ---------------------------------------
@pytest.mark.parametrize("depth,width", [(1, 8), (8, 16), (64, 64)])
def test_inverse_recovers_input(depth, width):
    stack = an.ReversibleStack(depth, width, seed=3)
    x, _ = _data(width)
    y = stack.forward(x).y
    assert not np.allclose(y, x)
    np.testing.assert_allclose(stack.inverse(y), x, rtol=0, atol=1e-10)


def test_reversible_and_stored_forward_agree():
    stack = an.ReversibleStack(6, 12, seed=1)
    x, _ = _data(12)
    np.testing.assert_array_equal(stack.forward(x).y, stack.forward_stored(x).y)
    assert stack.forward(x).tape == ()
    assert len(stack.forward_stored(x).tape) == 6


def test_reversible_gradients_match_stored_activation_gradients():
    stack = an.ReversibleStack(12, 16, seed=2)
    x, dy = _data(16, batch=7)
    stored = stack.forward_stored(x)
    ref = stack.backward_stored(stored.tape, dy)
    rev = stack.backward(stack.forward(x).y, dy)
    assert rev.grads.max_abs_diff(ref.grads) < 1e-8
    np.testing.assert_allclose(rev.dx, ref.dx, rtol=0, atol=1e-8)
    np.testing.assert_allclose(rev.x, x, rtol=0, atol=1e-10)
    assert all(np.any(g != 0) for g in rev.grads.arrays())


def test_gradients_match_finite_differences():
    stack = an.ReversibleStack(4, 8, seed=5)
    x, dy = _data(8, batch=3)
    rev = stack.backward(stack.forward(x).y, dy)

    def loss() -> float:  # L = <y, dy>, so dL/dy = dy
        return float(np.sum(stack.forward(x).y * dy))

    eps = 1e-6
    for name, index in (("w_f", (1, 2, 3)), ("b_g", (2, 1)), ("w_g", (0, 0, 3))):
        param = getattr(stack.params, name)
        saved = param[index]
        param[index] = saved + eps
        up = loss()
        param[index] = saved - eps
        down = loss()
        param[index] = saved
        fd = (up - down) / (2 * eps)
        assert getattr(rev.grads, name)[index] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    x_saved = x[1, 6]
    x[1, 6] = x_saved + eps
    up = loss()
    x[1, 6] = x_saved - eps
    down = loss()
    x[1, 6] = x_saved
    assert rev.dx[1, 6] == pytest.approx((up - down) / (2 * eps), rel=1e-6, abs=1e-8)


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(1, 10), half=st.integers(1, 12), batch=st.integers(1, 6),
       seed=st.integers(0, 2**16))
def test_inverse_and_gradients_for_random_stacks(depth, half, batch, seed):
    stack = an.ReversibleStack(depth, 2 * half, seed=seed)
    x, dy = _data(2 * half, batch=batch, seed=seed)
    y = stack.forward(x).y
    np.testing.assert_allclose(stack.inverse(y), x, rtol=0, atol=1e-10)
    ref = stack.backward_stored(stack.forward_stored(x).tape, dy)
    rev = stack.backward(y, dy)
    assert rev.grads.max_abs_diff(ref.grads) < 1e-8
    np.testing.assert_allclose(rev.dx, ref.dx, rtol=0, atol=1e-8)


def test_rejects_odd_width_and_zero_depth():
    with pytest.raises(ValueError):
        an.ReversibleStack(2, 7)
    with pytest.raises(ValueError):
        an.ReversibleStack(0, 8)


# -- measured memory and compute ---------------------------------------------------------
@pytest.mark.slow
def test_standard_memory_grows_linearly_reversible_stays_flat(sweep):
    ms = _by_depth(sweep[0])
    std = [ms[d].standard_peak_bytes for d in DEPTHS]
    assert all(b > a for a, b in zip(std, std[1:]))
    assert ms[64].standard_peak_bytes / ms[8].standard_peak_bytes > 4
    assert ms[64].reversible_peak_bytes / ms[1].reversible_peak_bytes < 2
    s = an.summary(sweep[0])
    assert s.standard_slope_bytes_per_layer > 0
    assert abs(s.reversible_slope_bytes_per_layer) < 0.01 * s.standard_slope_bytes_per_layer
    assert s.memory_ratio_at_max_depth > 10
    # linear: the fit explains the standard curve to within a few percent at every depth
    depths = np.array(DEPTHS, dtype=float)
    fit = np.polyval(np.polyfit(depths, std, 1), depths)
    np.testing.assert_allclose(std, fit, rtol=0.05)


def test_equations_agree_with_measured_memory(sweep):
    ms = _by_depth(sweep[0])
    batch, width, b = 64, 256, an.BYTES_PER_FLOAT64
    s = an.summary(sweep[0])
    # exact accounting of what the stored path keeps: 2 width-sized tensors per block
    per_layer = eq.activation_bytes_per_layer_standard(
        batch, width, b, activations_per_block=an.STORED_ACTIVATIONS_PER_BLOCK)
    assert s.standard_slope_bytes_per_layer == pytest.approx(per_layer, rel=0.05)
    assert s.predicted_standard_slope_bytes_per_layer == pytest.approx(per_layer)
    predicted_64 = eq.activation_bytes_standard(
        64, batch, width, b, activations_per_block=an.STORED_ACTIVATIONS_PER_BLOCK)
    assert ms[64].standard_peak_bytes == pytest.approx(predicted_64, rel=0.1)
    # lecture defaults ("store each block's input"; "output + one block") within a factor
    for d in DEPTHS:
        ratio_std = ms[d].standard_peak_bytes / eq.activation_bytes_standard(d, batch, width, b)
        ratio_rev = ms[d].reversible_peak_bytes / eq.activation_bytes_reversible(d, batch, width, b)
        assert 0.5 < ratio_std < 4
        assert 1 / 4 < ratio_rev < 4


def test_extra_compute_is_one_forward_per_block(sweep):
    fwd_block = eq.coupling_block_forward_flops(64, 256)
    for m in sweep[0]:
        assert m.standard_matmul_flops == eq.training_flops_standard(m.depth * fwd_block)
        assert m.reversible_matmul_flops == eq.training_flops_reversible(m.depth * fwd_block)
        assert m.reversible_matmul_flops - m.standard_matmul_flops == m.depth * fwd_block
        assert m.compute_ratio == pytest.approx(4 / 3)
    s = an.summary(sweep[0])
    assert s.extra_compute_ratio == pytest.approx(eq.training_flops_ratio_reversible())
    assert s.predicted_extra_compute_ratio == pytest.approx(4 / 3)
    assert s.time_ratio_at_max_depth > 0


def test_report_mentions_every_depth(sweep):
    text = an.format_report(sweep[0], an.summary(sweep[0]))
    assert "extra_compute_ratio" in text
    assert len(text.splitlines()) == 2 + len(DEPTHS) + 5


# -- equations ---------------------------------------------------------------------------
def test_equation_headline_values():
    assert eq.training_flops_ratio_reversible() == pytest.approx(4 / 3)
    assert eq.backward_flops_ratio_reversible() == pytest.approx(3 / 2)
    assert eq.training_flops_standard(1.0) == 3.0
    assert eq.training_flops_reversible(1.0) == 4.0
    assert eq.coupling_block_forward_flops(64, 256) == 2 * 2 * 64 * 128 * 128
    assert eq.activation_bytes_standard(1, 1, 1, 1) == eq.activation_bytes_reversible(1, 1, 1, 1)


def test_equations_broadcast_over_arrays():
    depths = np.arange(1, 6)
    std = eq.activation_bytes_standard(depths, 8, 16, 2)
    rev = eq.activation_bytes_reversible(depths, 8, 16, 2)
    assert std.shape == rev.shape == (5,)
    assert np.all(np.diff(std) == eq.activation_bytes_per_layer_standard(8, 16, 2))
    assert np.all(rev == rev[0])


def test_equations_reject_negative_inputs():
    with pytest.raises(ValueError):
        eq.activation_bytes_standard(-1, 1, 1, 1)
    with pytest.raises(ValueError):
        eq.activation_bytes_reversible(1, 1, -1, 1)
    with pytest.raises(ValueError):
        eq.backward_flops_ratio_reversible(0.0)


sizes = st.integers(1, 4096)


@given(depth=st.integers(1, 1000), batch=sizes, width=sizes, b=st.sampled_from([1, 2, 4, 8]),
       a=st.floats(1.0, 8.0), s=st.floats(0.0, 1.0))
def test_reversible_never_exceeds_standard(depth, batch, width, b, a, s):
    std = eq.activation_bytes_standard(depth, batch, width, b, activations_per_block=a)
    rev = eq.activation_bytes_reversible(depth, batch, width, b, working_set_activations=s)
    assert rev <= std
    ratio = eq.activation_memory_ratio_standard_to_reversible(
        depth, activations_per_block=a, working_set_activations=s)
    assert ratio == pytest.approx(std / rev)


@given(depth=st.integers(0, 1000), batch=sizes, width=sizes, b=st.sampled_from([1, 2, 4, 8]))
def test_memory_linear_in_batch_width_and_bytes(depth, batch, width, b):
    for f in (eq.activation_bytes_standard, eq.activation_bytes_reversible):
        base = f(depth, batch, width, b)
        assert f(depth, 2 * batch, width, b) == pytest.approx(2 * base)
        assert f(depth, batch, 3 * width, b) == pytest.approx(3 * base)
        assert f(depth, batch, width, 2 * b) == pytest.approx(2 * base)


@given(depth=st.integers(0, 1000), batch=sizes, width=sizes)
def test_standard_affine_in_depth_reversible_constant(depth, batch, width):
    step = eq.activation_bytes_standard(depth + 1, batch, width, 4) - eq.activation_bytes_standard(
        depth, batch, width, 4)
    assert step == pytest.approx(eq.activation_bytes_per_layer_standard(batch, width, 4))
    assert eq.activation_bytes_reversible(depth + 1, batch, width, 4) == eq.activation_bytes_reversible(
        0, batch, width, 4)


@given(r=st.floats(0.01, 100.0), f=st.floats(0.0, 1e18))
def test_compute_price_is_one_extra_forward(r, f):
    assert eq.training_flops_reversible(f, r) - eq.training_flops_standard(f, r) == pytest.approx(f)
    ratio = eq.training_flops_ratio_reversible(r)
    assert 1.0 < ratio < 2.0
    assert eq.backward_flops_ratio_reversible(r) > ratio  # the extra forward lands in backward


def test_closed_form_claim_matches_a_fresh_measurement(sweep):
    """The lecture/report quote the RevNet saving without running the experiment (issue 12): the closed form,
    with its once-measured working set, must stay within 10% of what the numpy stack measures now."""
    ms = _by_depth(sweep[0])
    d = max(ms)
    measured = ms[d].standard_peak_bytes / ms[d].reversible_peak_bytes
    assert an.analytic_memory_ratio(d, 64, 256) == pytest.approx(measured, rel=0.10)
    claim = an.claims()[0]
    assert claim.value[1] == pytest.approx(4 / 3)
    assert "closed form" in claim.assumptions
