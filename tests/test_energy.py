"""Energy per token and its electricity cost (issue 12)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from chalk.analyses.economics.energy import DEFAULT_USD_PER_KWH, energy_of, energy_per_token
from chalk.equations import energy as E
from chalk.errors import InputError
from chalk.specs.catalog import load_chip


def test_golden_hand_computed():
    # 8 chips x 700 W for a 20 ms step producing 256 tokens: 8*700*0.02/256 = 0.4375 J/token;
    # a million tokens = 437,500 J = 0.121528 kWh; at $0.10/kWh = $0.0121528.
    j = E.energy_per_token_j(700.0, 0.02, 8, 256)
    assert j == pytest.approx(0.4375)
    assert E.energy_cost_per_mtok_usd(j, 0.10) == pytest.approx(437500 / 3.6e6 * 0.10)


def test_h100_uses_tdp_as_an_upper_bound_and_says_so():
    chip = load_chip("h100-sxm")
    r = energy_per_token(0.02, 8, 256, chip)
    assert r.power_w_per_chip == 700.0 and r.power_source == "TDP (upper bound)"
    assert r.joules_per_token == pytest.approx(0.4375)
    assert r.usd_per_kwh == DEFAULT_USD_PER_KWH and "upper bound" in r.assumption and "$0.1/kWh" in r.assumption
    m = energy_per_token(0.02, 8, 256, chip, power_w=350.0)
    assert m.power_source == "measured" and m.joules_per_token == pytest.approx(0.4375 / 2)


def test_from_a_roofline_result():
    from chalk import api

    r = api.estimate("llama-3.1-8b", "h100-sxm", 64, 4096, chips=1)
    e = energy_of(r, load_chip("h100-sxm"))
    assert e.joules_per_token == pytest.approx(700.0 * r.step_time_s / (r.tokens_per_s * r.step_time_s))
    assert e.to_dict()["chips"] == 1


def test_bad_inputs_raise():
    chip = load_chip("h100-sxm")
    for kw in ({"usd_per_kwh": -1.0}, {"usd_per_kwh": math.nan}, {"pue": 0.5}, {"power_w": 0.0}):
        with pytest.raises(InputError):
            energy_per_token(0.02, 8, 256, chip, **kw)


@given(st.floats(1, 2000), st.floats(1e-4, 10), st.integers(1, 1024), st.floats(1, 1e6), st.floats(1, 2))
def test_energy_scales_linearly(p, t, n, tokens, pue):
    base = float(E.energy_per_token_j(p, t, n, tokens, pue))
    assert float(E.energy_per_token_j(2 * p, t, n, tokens, pue)) == pytest.approx(2 * base)
    assert float(E.energy_per_token_j(p, t, n, 2 * tokens, pue)) == pytest.approx(base / 2)
    assert base > 0 and math.isfinite(base)
