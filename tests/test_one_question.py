"""issue 12: one question at a time answers what a grid of them answers.

A scalar question runs the step model on numpy float64 scalars (`chalk.equations.num`) and looks kernel times up in
grids cut at the layer's shape (`chalk.analyses.step.kernels._Slice`); a grid of questions runs it on arrays, and a grid of
layouts takes the whole kernel grids. All three must agree: step time, tokens/s and every op's time, over a dense
model, an MoE model with MLA and one with sliding windows, on chips with measured tables (H100, B200) and without
(MI300X, the curve family), for decode and prefill on several layouts.
"""

from __future__ import annotations

import numpy as np
import pytest

import chalk
from chalk.analyses.step.calibration import calibration
from chalk.analyses.step.estimate import make_layout
from chalk.analyses.step.model_sizes import sizes
from chalk.analyses.step.parallel import model_costs, resolve_kv_precision, stage_step

CASES = [("llama-3.1-70b", ("tp=8", "tp=2,pp=2")),
         ("deepseek-v3", ("tp=8", "tp=1,attn_dp=8", "tp=2,attn_dp=4,pp=2")),
         ("gpt-oss-120b", ("tp=1", "tp=2,attn_dp=2"))]
BATCHES = (1.0, 3.0, 64.0, 300.0)
CONTEXTS = (1.0, 100.0, 4096.0, 70000.0)
REL = 1e-9


def _grid():
    b, c = np.meshgrid(BATCHES, CONTEXTS, indexing="ij")
    return b.ravel(), c.ravel()


def _close(a, b):
    return a == pytest.approx(b, rel=REL, abs=1e-300, nan_ok=True)


def _stage_ops(s, layout, phase, B, L, spread_layout=False):
    """The step model's ops as `estimate` runs it (decode: B sequences at L; prefill: B prompts of L tokens);
    `spread_layout`: the layout as arrays as long as B (a throughput search's way: the whole kernel grids)."""
    m, system = s.model, s.system
    lay = make_layout(m, layout)
    kvp = resolve_kv_precision("auto", sizes(m).default_precision(), system)
    costs, cal = model_costs(m, None, kvp), calibration(False, system.chip)
    tp, a, pp, ep = lay.tp, lay.attn_dp, lay.pp, lay.ep
    if spread_layout:
        tp, a, pp, ep = (np.full(np.shape(B), float(x)) for x in (tp, a, pp, ep))
    if phase == "decode":
        r = stage_step(costs, system, tp, a, pp, ep, B, 0.0, L, 1.0, cal)
    else:
        r = stage_step(costs, system, tp, a, pp, ep, 0.0, B * L, L, L, cal)
    return r["ops"], lay.pp


@pytest.mark.parametrize("hw", ("h100-sxm", "b200", "mi300x"))
@pytest.mark.parametrize("model,layouts", CASES)
def test_one_question_answers_as_a_grid_does(model, layouts, hw):
    B, L = _grid()
    for layout in layouts:
        for phase in ("decode", "prefill"):
            s = chalk.Session(model, hw, layout=layout, phase=phase)
            grid = s.estimate(B, L)
            ops, pp = _stage_ops(s, layout, phase, B, L)
            spread, _ = _stage_ops(s, layout, phase, B, L, spread_layout=True)
            for i, (b, c) in enumerate(zip(B, L)):
                one = s.estimate(float(b), float(c))
                where = (model, hw, layout, phase, b, c)
                assert isinstance(one.step_time_s, float) and isinstance(one.bound, str), where
                for f in ("step_time_s", "tokens_per_s", "mfu", "mbu", "cost_per_mtok_usd", "memory_needed_bytes",
                          "max_batch_fit", "critical_batch_with_kv", "weight_time_lecture_s"):
                    assert _close(getattr(one, f), np.asarray(getattr(grid, f))[i]), (where, f)
                assert one.bound == grid.bound[i] and one.fits == grid.fits[i], where
                rows = {r["name"]: r for r in one.ops}
                assert rows, where
                for name, op in ops.items():
                    t = float(np.broadcast_to(op.time_s, B.shape)[i])
                    t_spread = float(np.broadcast_to(spread[name].time_s, B.shape)[i])
                    assert _close(t, t_spread), (where, name)
                    if name in rows:  # a decode token passes pp stage steps; a prefill fills and drains the
                        span = pp if phase == "decode" else 2 * pp - 1  # pipeline: 2 pp - 1 (`layout_estimate`)
                        assert _close(rows[name]["time_s"], t * span), (where, name)
                    else:  # dropped from the table: no time, no work
                        assert t == 0, (where, name)
                assert _close(sum(r["time_s"] for r in one.ops), one.step_time_s), where


def test_one_question_is_a_plain_number_and_the_memo_still_answers():
    s = chalk.Session("llama-3.1-70b", "h100-sxm")
    a = s.estimate(7, 3000)
    assert type(a.step_time_s) is float and type(a.fits) is bool and type(a.max_batch_fit) is float
    assert s.estimate(7, 3000) is a
    b = chalk.estimate("llama-3.1-70b", "h100-sxm", 7, 3000)
    assert b == a


def test_kept_plans_follow_the_objects_asked_with():
    """What `estimate` keeps per configuration (`_setup`, `lecture_constants`, found by the model's, system's and
    calibration's identity) is never another configuration's: a system with the same id but twice the HBM and
    twice the price answers with its own numbers, and asking the first one again answers as the first time; a
    Session switching options back and forth answers each as a fresh call does."""
    import dataclasses

    from chalk.specs.catalog import as_system

    s = as_system("h100-sxm")
    big = dataclasses.replace(s, chip=dataclasses.replace(s.chip, hbm_bytes=2 * s.chip.hbm_bytes,
                                                          price_usd_per_hour=2 * s.chip.price_usd_per_hour))
    a = chalk.estimate("llama-3.1-70b", s, 64, 4096, layout="tp=2").to_dict()
    b = chalk.estimate("llama-3.1-70b", big, 64, 4096, layout="tp=2").to_dict()
    assert b["hbm_bytes"] == 2 * a["hbm_bytes"] and b["max_batch_fit"] > a["max_batch_fit"]
    assert b["cost_per_mtok_usd"] == pytest.approx(2 * a["cost_per_mtok_usd"], rel=1e-12)
    assert b["critical_batch"] == a["critical_batch"] and b["fits"] and not a["fits"]
    assert chalk.estimate("llama-3.1-70b", big, 64, 4096).layout["tp"] < \
        chalk.estimate("llama-3.1-70b", s, 64, 4096).layout["tp"]
    assert chalk.estimate("llama-3.1-70b", s, 64, 4096, layout="tp=2").to_dict() == a
    sess = chalk.Session("gpt-oss-120b", "b200")
    for i, kw in enumerate(({}, {"precision": "fp8"}, {"ideal": True}, {"kv_precision": "fp8"}, {"layout": "tp=2"},
                            {"phase": "prefill"}, {})):
        got, fresh = sess.estimate(3 + i, 1000 + i, **kw), chalk.estimate("gpt-oss-120b", "b200", 3 + i, 1000 + i, **kw)
        assert got.to_dict() == fresh.to_dict()


def test_deferred_fields_read_as_given():
    """A layout estimate's deferred fields (op table, range, max batch, the lecture's context quantities) read the
    same whether read first or after the step time, and the result stays immutable."""
    import dataclasses

    first = chalk.estimate("deepseek-v3", "h200", 32, 8192, layout="tp=8")
    ops, rng = first.ops, first.range
    again = chalk.estimate("deepseek-v3", "h200", 32, 8192, layout="tp=8")
    assert again.step_time_s == first.step_time_s and again.to_dict() == first.to_dict()
    assert again.ops == ops and again.range == rng and again == first
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.step_time_s = 1.0
    with pytest.raises(AttributeError):
        first.no_such_field


@pytest.mark.parametrize("phase,b,c", [("prefill", 1, 32768), ("prefill", 4, 4096), ("decode", 64, 2048)])
@pytest.mark.parametrize("layout", ["tp=8", "tp=1,pp=8", "tp=2,pp=4", "tp=4,pp=2"])
def test_no_layout_beats_the_ideal_aggregate_and_every_layout_does_the_same_work(phase, b, c, layout):
    """The lecture's aggregate (8 GPUs summed into one, ideal) bounds every real layout of the same 8 GPUs, ideal too;
    and a step's FLOPs are the model's work whatever the layout (QA 2026-11-28: PP8 prefilled one 32K prompt in pp
    stage steps, 93.9 ms against the bound's 97.7 ms, and reported an eighth of its FLOPs)."""
    kw = dict(batch=b, context=c, phase=phase, ideal=True)
    bound = chalk.estimate("llama-3.1-8b", "hgx-h100", aggregate=True, gpus=8, **kw)
    real = chalk.estimate("llama-3.1-8b", "hgx-h100", layout=layout, **kw)
    tp8 = chalk.estimate("llama-3.1-8b", "hgx-h100", layout="tp=8", **kw)
    assert real.step_time_s >= bound.step_time_s * (1 - 1e-9) and real.mfu <= 1 + 1e-9
    assert real.flops == pytest.approx(tp8.flops, rel=1e-6)
