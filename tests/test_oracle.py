"""One step-time oracle (issue 29 item 1): `simulate` (with and without --layout) and `pricing` take their step
times from the step model, and agree with `estimate` on the same layout and batch; the lecture's aggregate bound
is computed in one module and labelled wherever it is shown. The AST guard is tests/test_house.py
(`test_step_times_come_from_the_oracle_or_the_named_aggregate_bound`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.analyses.economics.pricing import pricing_margin, pricing_report
from chalk.analyses.step import roofline as RF
from chalk.analyses.step.estimate import estimate
from chalk.analyses.step.parallel import model_costs, precisions, resolve_kv_precision, step_costs
from chalk.analyses.step.speculative import speculative_estimate
from chalk.analyses.step.step_cost import StepCost
from chalk.analyses.traffic import simulate_run
from chalk.analyses.traffic.simulate_run import simulate_requests
from chalk.equations import kernels as K
from chalk.equations import ops
from chalk.equations import roofline as R
from chalk.specs.catalog import load_model, resolve_hardware

I, O, B = 512, 128, 64
CTX = I + O / 2  # the simulator's step cost is the step model's tangent at B sequences of I + O / 2 tokens


@pytest.mark.parametrize("model, hardware, layout", [("llama-3.1-8b", "h100-sxm", "tp=2"),
                                                      ("llama-3.1-8b", "h100-sxm", None),
                                                      ("qwen3-30b-a3b", "h100-sxm", None)])
def test_simulate_with_and_without_layout_agrees_with_estimate(model, hardware, layout):
    """A pure decode step of the simulation at its tangent point takes what `estimate` says for the replica the
    simulation ran (given, or throughput's pick), exactly: both are the one step model."""
    # (1,000 requests: a shorter open loop is measured whole, warm-up and drain in its mean batch)
    run = simulate_requests(model, hardware, requests=1000, input_len=I, output_len=O, max_batch=B, layout=layout)
    sc = run.replica_step_cost
    assert "step model" in sc.label and "aggregate" not in sc.label
    b = run.step_cost_reference_batch  # the batch the open loop settled at: its step cost's tangent point
    assert 1 <= b <= B and b == pytest.approx(run.mean_batch, rel=0.2)
    e = estimate(model, hardware, b, CTX, layout=run.layout_text)
    assert e.view == "layout"
    assert sc(b, b * CTX) == pytest.approx(e.step_time_s, rel=1e-12)
    if layout is not None:
        assert run.layout_source == "given"
    else:
        assert run.layout_source.startswith("chosen as throughput does")


def test_cli_and_api_choose_the_simulation_step_cost_in_one_function(monkeypatch):
    """`chalk simulate` and `chalk.simulate` go through `simulation_step_cost` once each, and answer alike."""
    from typer.testing import CliRunner

    import chalk
    from chalk.faces import cli

    calls = []
    real = simulate_run.simulation_step_cost

    def counted(*a, **kw):
        calls.append(kw.get("layout"))
        return real(*a, **kw)

    monkeypatch.setattr(simulate_run, "simulation_step_cost", counted)
    res = CliRunner().invoke(cli.app, ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--layout",
                                       "tp=2", "--requests", "200", "--max-batch", "32", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    api = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=2", requests=200, max_batch=32)
    assert calls == ["tp=2", "tp=2"]
    assert d["output_tokens_per_s"] == pytest.approx(api.summary()["output_tokens_per_s"], rel=1e-12)
    assert d["layout"] == api.layout


@pytest.mark.parametrize("model, hardware, chips", [("llama-3.1-8b", "h100-sxm", 8), ("deepseek-v3", "h800", 16)])
def test_pricing_margin_agrees_with_estimate(model, hardware, chips):
    """pricing's cost per output token and decode speed are `estimate`'s on the replica and batch it priced."""
    r = pricing_margin(model, hardware, input_len=2000, output_len=400, chips=chips)
    e = estimate(model, hardware, r["decode_batch"], r["context"], layout=r["parallelism"], gpus=chips,
                 kv_precision="bf16")
    assert e.view == "layout" and e.layout["label"] == r["layout"]
    assert r["cost_output_usd_per_mtok"] == pytest.approx(float(e.cost_per_mtok_usd), rel=1e-12)
    assert r["decode_user_tokens_per_s"] == pytest.approx(float(e.user_tokens_per_s), rel=1e-12)


def test_the_aggregate_bound_is_labelled_where_it_is_shown():
    """Each place that still shows the lecture's aggregate bound says so."""
    assert pricing_report()["mode_reference"]["view"] == "aggregate"
    agg = estimate("llama-3.1-8b", "h100-sxm", 64, 2048, aggregate=True)
    assert agg.view == "aggregate"
    assert speculative_estimate(agg, "llama-3.1-8b", "h100-sxm", 2, 0.7).view == "aggregate"
    lay = estimate("llama-3.1-8b", "h100-sxm", 64, 2048)
    assert speculative_estimate(lay, "llama-3.1-8b", "h100-sxm", 2, 0.7).view == "layout"
    assert "aggregate bound" in StepCost.from_roofline("llama-3.1-8b", "h100-sxm").label
    from chalk.analyses.blackboard.lecture import nvl72_claims

    for c in nvl72_claims():
        if c.id in ("batch1_cost_penalty", "batch1_cost_penalty_refined", "slow_mode_saving"):
            assert "aggregate bound" in c.assumptions


def test_aggregate_verification_is_the_plain_step_at_one_draft_with_no_extra_tokens():
    """With no draft tokens (k + 1 = 1 query token per sequence) verification on the bound is the plain step."""
    m, s = load_model("llama-3.1-8b"), resolve_hardware("h100-sxm")
    plain = RF.step(m, s, np.array([1.0, 64.0, 4096.0]), 2048)
    _, _, _, t = RF.aggregate_verification(plain, m, s, np.array([1.0, 64.0, 4096.0]))
    np.testing.assert_allclose(t, plain.step_time_s, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1e18), st.floats(0, 1e15), st.floats(1e12, 1e16), st.floats(1e11, 1e13),
       st.floats(0, 1e-2))
def test_the_max_rule_is_written_once(flops, bytes_, peak, bw, overhead):
    """A kernel's floor is the step rule with no overhead; max <= step - overhead <= sum (scaling-book's
    T_lower = max, T_upper = sum)."""
    c, m = R.compute_time_s(flops, peak), R.memory_time_s(bytes_, bw)
    assert K.roofline_time_s(flops, bytes_, peak, bw) == R.step_time_s(c, m)
    t = R.step_time_s(c, m)
    assert max(c, m) == t <= c + m
    assert R.step_time_s(c, m, overhead) == t + overhead
    assert not hasattr(ops, "op_time_s")  # the dead copy is gone


@pytest.mark.parametrize("model, hardware, precision, kvp", [("llama-3.1-8b", "h100-sxm", None, "auto"),
                                                               ("llama-3.1-70b", "h100-sxm", "fp8", "auto"),
                                                               ("deepseek-v3", "h800", None, "bf16"),
                                                               ("llama-3.1-8b", "a100-80gb", "fp8", None)])
def test_step_costs_is_the_setup_it_replaced(model, hardware, precision, kvp):
    """`step_costs` = canonical precision (or the checkpoint's), `resolve_kv_precision`, then `model_costs`."""
    from chalk.analyses.step.model_sizes import ModelSizes
    from chalk.specs.precision import canonical

    m, s = load_model(model), resolve_hardware(hardware)
    prec = canonical(precision) if precision else ModelSizes(m).default_precision()
    kv = resolve_kv_precision(kvp, prec, s)
    assert precisions(m, s, precision, kvp) == (prec, kv)
    assert step_costs(m, s, precision, kvp) == (prec, kv, model_costs(m, precision, kv))


def test_measure_predicts_with_the_aggregate_bound_on_its_one_chip_as_it_says():
    """`chalk measure`'s predictions (its table and its plot's curves) are `estimate --aggregate` on the measured
    chip at the fitted efficiency: what `PREDICTED_BY` tells the user."""
    from types import SimpleNamespace

    from chalk.analyses.step.measure.fit import PREDICTED_BY, FitResult, predicted_decode_s
    from chalk.specs.hardware import Chip, System
    from chalk.specs.model import model_from_config

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
           "tie_word_embeddings": False}
    chip = Chip(id="synthetic", name="synthetic", flops_per_s={"bf16": 2e12, "fp32": 5e11}, hbm_bytes=64e9,
                hbm_bandwidth_bytes_per_s=1e11)
    fit = FitResult(compute=0.4, memory=0.7, overhead_s=2e-4, overhead_prefill_s=3e-4, msle_train=0.0, n_train=3,
                    separate_overheads=True)
    result = SimpleNamespace(model_config=cfg, model="tiny", chip=chip, precision="fp32", fit=fit)
    b = np.array([1.0, 4.0, 32.0])
    system = System(id="synthetic", name="synthetic", chip=chip, chips=1, kind="chip")
    want = estimate(model_from_config(cfg, id="tiny"), system, b, 64, aggregate=True, precision="fp32",
                    kv_precision="fp32", efficiency=fit.efficiency("decode")).step_time_s
    np.testing.assert_allclose(predicted_decode_s(result, b, 64), want, rtol=1e-12)
    assert "aggregate bound" in PREDICTED_BY
