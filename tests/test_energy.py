"""Energy per token and its electricity cost (issue 12), and energy in every answer (issue 27 item 7):
joules per token, power per GPU and per fleet, kWh per day and the electricity share of $/M tokens, with the price
per kWh and the PUE as options whose defaults are sourced in the catalog (energy.yaml)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from chalk.analyses.economics.energy import (answer_energy, energy_defaults, energy_of, energy_per_token,
                                             energy_settings)
from chalk.equations import energy as E
from chalk.errors import InputError
from chalk.specs.catalog import load_chip

H100 = load_chip("h100-sxm")


def test_golden_hand_computed():
    # 8 chips x 700 W for a 20 ms step producing 256 tokens: 8*700*0.02/256 = 0.4375 J/token;
    # a million tokens = 437,500 J = 0.121528 kWh; at $0.10/kWh = $0.0121528.
    j = E.energy_per_token_j(700.0, 0.02, 8, 256)
    assert j == pytest.approx(0.4375)
    assert E.energy_cost_per_mtok_usd(j, 0.10) == pytest.approx(437500 / 3.6e6 * 0.10)


def test_h100_uses_tdp_as_an_upper_bound_and_says_so():
    r = energy_per_token(0.02, 8, 256, H100, pue=1.0)
    assert r.power_w_per_chip == 700.0 and r.power_source == "TDP (upper bound)"
    assert r.joules_per_token == pytest.approx(0.4375)
    assert r.usd_per_kwh == energy_defaults().usd_per_kwh and "upper bound" in r.assumption
    assert f"${energy_defaults().usd_per_kwh:g}/kWh" in r.assumption
    m = energy_per_token(0.02, 8, 256, H100, power_w=350.0, pue=1.0)
    assert m.power_source == "measured" and m.joules_per_token == pytest.approx(0.4375 / 2)
    # the catalog's PUE applies when none is given
    assert energy_per_token(0.02, 8, 256, H100).joules_per_token == pytest.approx(0.4375 * energy_defaults().pue)


def test_the_defaults_are_sourced_and_plausible():
    d = energy_defaults()
    assert 0.03 <= d.usd_per_kwh <= 0.30 and "EIA" in d.usd_per_kwh_source
    assert 1.0 <= d.pue <= 2.0 and "Uptime Institute" in d.pue_source
    price, price_src, pue, pue_src = energy_settings()
    assert (price, pue) == (d.usd_per_kwh, d.pue) and price_src.startswith("chalk default") and "EIA" in price_src
    assert energy_settings(0.2, 1.1)[::2] == (0.2, 1.1) and energy_settings(0.2, 1.1)[1] == "given"


def test_answer_energy_golden():
    """8 x H100 (700 W TDP) at PUE 1.3 serving 1,000 tokens/s: 8*700*1.3/1000 = 7.28 J per token; the fleet draws
    7,280 W at the wall, 174.72 kWh a day; a million tokens take 7.28e6 J = 2.0222 kWh = $0.20222 at $0.10/kWh,
    10.111% of a $2/M-token cost."""
    e = answer_energy(H100, 8, 1000.0, 2.0, usd_per_kwh=0.10, pue=1.3)
    assert e.joules_per_token == pytest.approx(7.28)
    assert e.power_w_per_gpu == 700.0 and e.power_w_per_fleet == pytest.approx(7280.0)
    assert e.kwh_per_day == pytest.approx(174.72)
    assert e.electricity_usd_per_mtok == pytest.approx(7.28e6 / 3.6e6 * 0.10)
    assert e.electricity_share_of_cost == pytest.approx(7.28e6 / 3.6e6 * 0.10 / 2.0)
    assert e.to_dict()["gpus"] == 8 and e.tokens == "output"
    fleet = answer_energy(H100, 1, 125.0, 2.0, fleet_gpus=8, usd_per_kwh=0.10, pue=1.3)
    assert fleet.joules_per_token == pytest.approx(e.joules_per_token) and fleet.kwh_per_day == e.kwh_per_day


def test_estimate_carries_its_energy_and_the_share_is_power_price_over_gpu_price():
    """The electricity share of a step's $/M tokens is (W x PUE x $/kWh) / ($/GPU-hour x 1000): both scale with
    GPU time, so it is the same at every batch (cost_per_mtok_usd rents chips x $/chip-hour)."""
    import chalk

    shares = []
    for b in (1, 64):
        r = chalk.estimate("llama-3.1-8b", "h100-sxm", b, 4096, pue=1.2, usd_per_kwh=0.1)
        e = r.energy
        assert e.joules_per_token == pytest.approx(700.0 * r.chips * 1.2 / r.tokens_per_s)
        assert e.gpus == r.chips and e.tokens == "output"
        shares.append(e.electricity_share_of_cost)
    assert shares[0] == pytest.approx(shares[1], rel=1e-9)
    assert shares[0] == pytest.approx(700.0 * 1.2 * 0.1 / 1000 / H100.price_usd_per_hour, rel=1e-6)
    pre = chalk.estimate("llama-3.1-8b", "h100-sxm", 4, 2048, phase="prefill")
    assert pre.energy.tokens == "input"


def test_throughput_and_plan_carry_their_energy():
    import chalk

    t = chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, pue=1.0)
    e = t["energy"]
    assert e["joules_per_token"] == pytest.approx(700.0 / t.output_tokens_per_s_per_gpu)
    assert e["gpus"] == t.gpus and e["power_w_per_fleet"] == pytest.approx(700.0 * t.gpus)
    p = chalk.plan("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, rate=5, sim_requests=300,
                   curves=False, usd_per_kwh=0.2)
    for o in p["options"]:
        oe = o["energy"]
        assert oe["power_w_per_fleet"] == pytest.approx(700.0 * o["gpus"] * energy_defaults().pue)
        assert oe["joules_per_token"] * o["output_tokens_per_s"] == pytest.approx(oe["power_w_per_fleet"])
        # a day's electricity over a day's rent (usd_per_mtok_output prices the demand's tokens at usd_per_hour)
        assert oe["electricity_share_of_cost"] == pytest.approx(oe["kwh_per_day"] * 0.2 / o["usd_per_day"],
                                                                rel=1e-6)
    df = p.to_frame()
    assert {"precision", "output_tokens_per_s_per_gpu", "energy_joules_per_token"} <= set(df.columns)


def test_from_a_roofline_result():
    from chalk import api

    r = api.estimate("llama-3.1-8b", "h100-sxm", 64, 4096, chips=1)
    e = energy_of(r, H100, pue=1.0)
    assert e.joules_per_token == pytest.approx(700.0 * r.step_time_s / (r.tokens_per_s * r.step_time_s))
    assert e.to_dict()["chips"] == 1


def test_bad_inputs_raise():
    for kw in ({"usd_per_kwh": -1.0}, {"usd_per_kwh": math.nan}, {"pue": 0.5}, {"pue": math.inf},
               {"power_w": 0.0}, {"usd_per_kwh": "x"}, {"pue": True}):
        with pytest.raises(InputError):
            energy_per_token(0.02, 8, 256, H100, **kw)
    with pytest.raises(InputError, match="pue"):
        answer_energy(H100, 1, 100.0, pue=0.9)


def test_cli_refuses_a_bad_pue_in_one_line(capsys):
    from chalk.faces.cli import main

    with pytest.raises(SystemExit) as e:
        main(["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--pue", "0.5"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "pue" in err and "\n" not in err


@given(st.floats(1, 2000), st.floats(1e-4, 10), st.integers(1, 1024), st.floats(1, 1e6), st.floats(1, 2))
@settings(deadline=None)  # a shared CPU: the first example's imports can pass the default 200 ms
def test_energy_scales_linearly(p, t, n, tokens, pue):
    base = float(E.energy_per_token_j(p, t, n, tokens, pue))
    assert float(E.energy_per_token_j(2 * p, t, n, tokens, pue)) == pytest.approx(2 * base)
    assert float(E.energy_per_token_j(p, t, n, 2 * tokens, pue)) == pytest.approx(base / 2)
    assert base > 0 and math.isfinite(base)


@given(gpus=st.integers(1, 4096), tps=st.floats(1.0, 1e7), cost=st.floats(1e-3, 1e3), price=st.floats(0, 1),
       pue=st.floats(1, 3))
@settings(max_examples=60, deadline=None)
def test_answer_energy_invariants(gpus, tps, cost, price, pue):
    """J per token x tokens/s is the fleet's power at the wall; kWh/day is that power for 86,400 s; the share is
    the electricity over the cost, and never falls as the price per kWh rises."""
    e = answer_energy(H100, gpus, tps, cost, usd_per_kwh=price, pue=pue)
    assert e.joules_per_token * tps == pytest.approx(e.power_w_per_fleet, rel=1e-9)
    assert e.kwh_per_day == pytest.approx(e.power_w_per_fleet * 86400 / 3.6e6, rel=1e-12)
    assert e.electricity_share_of_cost == pytest.approx(e.electricity_usd_per_mtok / cost, rel=1e-9)
    more = answer_energy(H100, gpus, tps, cost, usd_per_kwh=price + 0.01, pue=pue)
    assert more.electricity_share_of_cost >= e.electricity_share_of_cost
