"""The distilled kernel tables (`chalk.analyses.step.kernels`): held-out accuracy, invariants, provenance, no heavy deps."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.equations import kernels as K
from chalk.errors import InputError, UnknownNameError
from chalk.specs.catalog import load_chip
from chalk.analyses.step.kernels import KernelProfile, index, kernel_profile

HOLDOUT = Path(__file__).parent / "data" / "kernel_holdout.csv"
MEASURED = ("h100-sxm", "h800", "h200", "b200", "gb200", "b300", "gb300", "a100-sxm")
CURVE = ("mi300x", "mi355x", "tpu-v6e", "rubin")


def _chip(cid):
    return load_chip(cid)


def _rows():
    with open(HOLDOUT) as fh:
        return list(csv.DictReader(fh))


def _predict(r: dict) -> float:
    kp = kernel_profile(_chip(r["chip"]), r["framework"])
    f = lambda k: float(r[k])  # noqa: E731
    fam = r["family"]
    if fam == "gemm":
        return float(kp.gemm_time_s(f("m"), f("n"), f("k"), r["dtype"]))
    if fam.startswith("moe"):  # w4a16: MXFP4 weights under 16-bit math (the mixed-input kernels' own table)
        dt, w = ("bf16", "mxfp4") if r["dtype"] == "w4a16" else (r["dtype"], None)
        return float(kp.moe_time_s(f("tokens"), f("hidden"), f("moe_inter"), f("num_experts"), f("top_k"), f("ep"),
                                   dt, weight_precision=w, balanced=fam == "moe_balanced"))
    kind, phase = fam.split("_")
    kvh = f("kv_heads") if kind == "mha" else f("heads")
    hd = f("head_dim") if kind == "mha" else 128.0
    return float(kp.attention_time_s(phase, kind, f("batch"), f("q"), f("L"), f("heads"), kvh, hd, r["dtype"]))


def test_holdout_sample_names_its_source():
    rows = _rows()
    assert 200 <= len(rows) <= 400
    ver = index()["package_version"]
    shared = {k.split()[0]: v["grid_of"] for k, v in index()["shared_kernels"].items()}  # a grid read from another's
    for r in rows:
        assert r["source"].startswith(f"aiconfigurator-core {ver} ") and r["source"].endswith(".parquet")
        assert f"/{r['framework']}/" in r["source"] or f"/{shared.get(r['framework'])}/" in r["source"]


def test_holdout_median_error_per_family():
    """Rows the distillation never saw: the shipped profile predicts them to <= 10% (median) in every family."""
    errs: dict[str, list[float]] = {}
    for r in _rows():
        errs.setdefault(r["report"], []).append(_predict(r) / float(r["measured_s"]) - 1)
    assert set(errs) == {"gemm", "attention decode", "attention prefill", "moe", "moe balanced"}
    for fam, e in errs.items():
        med = float(np.median(np.abs(e)))
        assert med <= 0.10, f"{fam}: median |error| {med:.3f} on held-out rows"


def test_recorded_holdout_report_meets_target():
    rep = index()["holdout_report"]
    assert set(rep) >= {"h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300", "a100_sxm"}
    for system, fams in rep.items():
        for fam, s in fams.items():
            assert s["median"] <= 0.10 and s["rows"] > 100, (system, fam, s)


@pytest.mark.parametrize("cid", MEASURED)
def test_measured_chips_say_measured(cid):
    kp = kernel_profile(_chip(cid))
    for kind in ("gemm", "attention", "moe"):
        src = kp.source(kind)
        assert src.startswith("measured: aiconfigurator-core "), src
        assert "trtllm" in src or "sglang" in src


@pytest.mark.parametrize("cid", CURVE)
def test_other_chips_use_the_curve_scaled_by_their_peaks(cid):
    kp = kernel_profile(_chip(cid), "vllm")
    for kind in ("gemm", "attention", "moe"):
        src = kp.source(kind)
        assert src.startswith("curve: ") and f"scaled by {cid} peaks" in src, src


def test_frameworks_and_unknown():
    c = _chip("h100-sxm")
    assert "sglang" in kernel_profile(c, "sglang").source("gemm")
    assert "vllm" in kernel_profile(c, "vllm").source("gemm")
    assert "trtllm" in kernel_profile(c, "vllm").source("attention")  # no vLLM MLA kernel table: TRT-LLM's
    assert kernel_profile(c, "no-such-engine") is None


@pytest.mark.parametrize("model, kind", [("llama-3.1-70b", "mha"), ("deepseek-r1", "mla")])
def test_each_attention_op_names_the_table_that_times_it(model, kind):
    """QA 2026-11-28: the prefill attention op named the decode tables (and MLA's for a GQA model)."""
    from chalk.analyses.step.estimate import estimate

    for phase in ("prefill", "decode"):
        ops = {o["name"]: o for o in estimate(model, "h100-sxm", layout="tp=8", batch=4, context=512,
                                               phase=phase).ops}
        detail = ops[f"attention_{phase}"]["detail"]
        assert f"{kind} {phase} fit" in detail, detail
        other = ({"mha", "mla"} - {kind}).pop()
        assert f"{other} " not in detail and ("decode" if phase == "prefill" else "prefill") not in detail


def test_bad_inputs_raise_typed_errors():
    kp = kernel_profile(_chip("h100-sxm"))
    with pytest.raises(InputError):
        kp.gemm_time_s(-1, 128, 128, "bf16")
    with pytest.raises(InputError):
        kp.gemm_time_s(np.array([1.0, np.nan]), 128, 128, "bf16")
    with pytest.raises(InputError):
        kp.attention_time_s("decode", "mha", 1, 1, float("inf"), 8, 1, 128, "bf16")
    with pytest.raises(InputError):
        kp.attention_time_s("verify", "mha", 1, 1, 10, 8, 1, 128, "bf16")
    with pytest.raises(InputError):
        kp.moe_time_s(16, 4096, 1536, 128, 8, 0, "bf16")
    with pytest.raises(InputError):
        kp.source("norm")
    with pytest.raises(UnknownNameError):
        kp.gemm_time_s(1, 128, 128, "fp7")


def test_sane_magnitudes_h100():
    kp = kernel_profile(_chip("h100-sxm"))
    big = float(kp.gemm_time_s(8192, 8192, 8192, "bf16"))
    assert 0.55 < K.gemm_kernel_flops(8192, 8192, 8192) / big / 989.4e12 < 0.95  # large bf16 GEMM: 55-95% of peak
    gemv = float(kp.gemm_time_s(1, 8192, 8192, "bf16"))  # weight-streaming: 50-95% of HBM bandwidth
    assert 0.5 < K.gemm_kernel_bytes(1, 8192, 8192, 2) / gemv / 3.35e12 < 0.95
    dec = float(kp.attention_time_s("decode", "mha", 64, 1, 8192, 8, 1, 128, "bf16"))
    assert 0.4 < K.decode_attention_bytes(64, 8192, 1, 128, 2) / dec / 3.35e12 < 0.95


# --------------------------------------------------------------------------- invariants
CHIPS = ("h100-sxm", "b200", "a100-sxm", "mi300x", "tpu-v6e")
FW = st.sampled_from(("trtllm", "sglang", "vllm"))
pos = lambda lo, hi: st.floats(lo, hi, allow_nan=False, allow_infinity=False)  # noqa: E731


@settings(max_examples=40, deadline=None)
@given(cid=st.sampled_from(CHIPS), fw=FW, n=pos(32, 65536), k=pos(32, 65536), dt=st.sampled_from(("bf16", "fp8")))
def test_gemm_monotone_in_m_and_above_roofline(cid, fw, n, k, dt):
    chip = _chip(cid)
    kp = kernel_profile(chip, fw)
    dt = chip.compute_precision(dt)
    m = np.geomspace(0.5, 200000, 60)
    t = kp.gemm_time_s(m, n, k, dt)
    assert t.shape == m.shape and np.all(np.isfinite(t)) and np.all(t > 0)
    assert np.all(np.diff(t) >= -1e-9 * t[1:])
    floor = K.roofline_time_s(K.gemm_kernel_flops(m, n, k), K.gemm_kernel_bytes(m, n, k, 1.0 if dt == "fp8" else 2.0),
                              chip.peak_flops_per_s(dt), chip.hbm_bandwidth_bytes_per_s)
    assert np.all(t >= floor * (1 - 1e-9))


@settings(max_examples=40, deadline=None)
@given(cid=st.sampled_from(CHIPS), fw=FW, kind=st.sampled_from(("mha", "mla")), heads=st.sampled_from((1, 8, 16, 64)),
       kvh=st.sampled_from((1, 2, 8)), hd=st.sampled_from((64, 128, 256)), L=pos(1, 300000), b=pos(1, 5000),
       q=st.sampled_from((1, 2, 4)), kv=st.sampled_from(("bf16", "fp8")))
def test_decode_monotone_in_batch_and_context(cid, fw, kind, heads, kvh, hd, L, b, q, kv):
    chip = _chip(cid)
    kp = kernel_profile(chip, fw)
    kvh = min(kvh, heads)
    grid = np.geomspace(1, 4096, 40)
    tb = kp.attention_time_s("decode", kind, grid, q, L, heads, kvh, hd, kv)
    tl = kp.attention_time_s("decode", kind, b, q, grid * 64, heads, kvh, hd, kv)
    tq = kp.attention_time_s("decode", kind, b, np.array([1.0, 2.0, 4.0, 8.0]), L, heads, kvh, hd, kv)
    for t in (tb, tl, tq):
        assert np.all(np.isfinite(t)) and np.all(t > 0)
        assert np.all(np.diff(t) >= -1e-9 * t[1:])
    eb = 2.0 if kv == "bf16" else 1.0
    if kind == "mha":
        fl, by = K.decode_attention_flops(grid, q, L, heads, hd), K.decode_attention_bytes(grid, L, kvh, hd, eb)
    else:
        fl, by = K.mla_decode_flops(grid, q, L, heads), K.mla_decode_bytes(grid, L, eb)
    floor = K.roofline_time_s(fl, by, chip.peak_flops_per_s("bf16"), chip.hbm_bandwidth_bytes_per_s)
    assert np.all(tb >= floor * (1 - 1e-9))


@settings(max_examples=30, deadline=None)
@given(cid=st.sampled_from(CHIPS), fw=FW, kind=st.sampled_from(("mha", "mla")), heads=st.sampled_from((4, 32, 128)),
       g=st.sampled_from((1, 4, 8)), prompt=pos(1, 100000), kv=st.sampled_from(("bf16", "fp8")))
def test_prefill_monotone_in_batch_and_prompt(cid, fw, kind, heads, g, prompt, kv):
    kp = kernel_profile(_chip(cid), fw)
    kvh = max(heads // g, 1)
    b = np.geomspace(0.01, 512, 40)  # fractions of a prompt are chunks
    tb = kp.attention_time_s("prefill", kind, b, prompt, prompt, heads, kvh, 128, kv)
    s = np.geomspace(1, 131072, 40)
    ts = kp.attention_time_s("prefill", kind, 1.0, s, s, heads, kvh, 128, kv)
    for t in (tb, ts):
        assert np.all(np.isfinite(t)) and np.all(t > 0)
        assert np.all(np.diff(t) >= -1e-9 * t[1:])


@settings(max_examples=30, deadline=None)
@given(cid=st.sampled_from(CHIPS), fw=FW, E=st.sampled_from((8, 64, 128, 256, 384)), k=st.sampled_from((1, 2, 8)),
       ep=st.sampled_from((1, 4, 8, 32)), h=st.sampled_from((2048, 4096, 7168)),
       inter=st.sampled_from((768, 2048, 14336)), dt=st.sampled_from(("bf16", "fp8", "fp4")))
def test_moe_finite_monotone_and_above_roofline(cid, fw, E, k, ep, h, inter, dt):
    chip = _chip(cid)
    kp = kernel_profile(chip, fw)
    dt = chip.compute_precision(dt)
    T = np.geomspace(1, 200000, 50)
    t = kp.moe_time_s(T, h, inter, E, k, ep, dt)
    assert np.all(np.isfinite(t)) and np.all(t > 0)
    assert np.all(np.diff(t) >= -1e-9 * t[1:])
    c = K.moe_local_copies(T, k, ep)
    from chalk.specs.precision import bytes_per_element

    by = K.moe_bytes(c, K.moe_experts_touched(c, max(E / ep, 1)), h, inter, bytes_per_element(dt))
    floor = K.roofline_time_s(K.moe_flops(c, h, inter), by, chip.peak_flops_per_s(dt), chip.hbm_bandwidth_bytes_per_s)
    assert np.all(t >= floor * (1 - 1e-9))


def test_arrays_broadcast():
    kp = kernel_profile(_chip("h200"))
    m = np.array([[1.0], [64.0], [4096.0]])
    t = kp.gemm_time_s(m, np.array([1024.0, 8192.0]), 8192, "fp8")
    assert t.shape == (3, 2) and np.all(t > 0)
    t = kp.attention_time_s("decode", "mha", np.array([1.0, 8.0]), 1, np.array([[512.0], [8192.0]]), 8, 1, 128, "fp8")
    assert t.shape == (2, 2)


@pytest.mark.parametrize("fw", ("trtllm", "vllm"))
def test_curve_chip_scales_with_its_peaks(fw):
    """A chip without tables: twice the FLOP/s and bandwidth never slows a kernel and at most halves its time;
    big compute-bound kernels speed up by about the FLOP/s ratio."""
    c = _chip("mi300x")
    fast = replace(c, flops_per_s={p: v * 2 for p, v in c.flops_per_s.items()},
                   hbm_bandwidth_bytes_per_s=c.hbm_bandwidth_bytes_per_s * 2)
    k1, k2 = kernel_profile(c, fw), kernel_profile(fast, fw)
    m = np.geomspace(1, 16384, 30)
    r = k2.gemm_time_s(m, 4096, 4096, "bf16") / k1.gemm_time_s(m, 4096, 4096, "bf16")
    assert np.all(r <= 1 + 1e-9) and np.all(r >= 0.5 - 1e-9)
    L = np.geomspace(128, 131072, 20)
    r = k2.attention_time_s("decode", "mha", 64, 1, L, 8, 1, 128, "bf16") / \
        k1.attention_time_s("decode", "mha", 64, 1, L, 8, 1, 128, "bf16")
    assert np.all(r <= 1 + 1e-9) and np.all(r >= 0.5 - 1e-9)
    flops_only = replace(c, flops_per_s={p: v * 2 for p, v in c.flops_per_s.items()})
    r = kernel_profile(flops_only, fw).gemm_time_s(8192, 8192, 8192, "bf16") / k1.gemm_time_s(8192, 8192, 8192, "bf16")
    assert 0.5 - 1e-9 <= r < 0.65


def test_measured_profile_reproduces_its_system_and_h800_shares_h100():
    h100, h800 = _chip("h100-sxm"), _chip("h800")
    a = kernel_profile(h100).gemm_time_s(512, 8192, 8192, "fp8")
    b = kernel_profile(h800).gemm_time_s(512, 8192, 8192, "fp8")
    assert a == pytest.approx(b)
    assert "(for h800)" in kernel_profile(h800).source("gemm")
    # the curve excludes nothing by default; leaving H100 out changes the curve, not the measured profile
    loo = KernelProfile(h100, "trtllm", None, exclude=("h100_sxm",))
    assert loo.source("gemm").startswith("curve:") and "h100_sxm" not in loo.source("gemm")


def test_runs_without_pandas_or_pyarrow():
    code = ("import sys\n"
            "sys.modules['pandas'] = None; sys.modules['pyarrow'] = None\n"  # any import of them would fail
            "from chalk.specs.catalog import load_chip\n"
            "from chalk.analyses.step.kernels import kernel_profile\n"
            "kp = kernel_profile(load_chip('h100-sxm'), 'sglang')\n"
            "t = kp.gemm_time_s([1, 64, 4096], 8192, 8192, 'bf16')\n"
            "t2 = kp.moe_time_s(256, 7168, 2048, 256, 8, 8, 'fp8')\n"
            "t3 = kp.attention_time_s('prefill', 'mla', 0.5, 4096, 4096, 16, 16, 128, 'bf16')\n"
            "assert (t > 0).all() and t2 > 0 and t3 > 0\n"
            "assert sys.modules['pandas'] is None and sys.modules['pyarrow'] is None\n"
            "assert 'aiconfigurator_core' not in sys.modules and 'scipy' not in sys.modules\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr


def test_step_model_with_tables_adds_up():
    """The step model on the tables: op sources say so, and the ops add up to the step time."""
    import dataclasses

    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.step.parallel import model_costs, stage_step
    from chalk.specs.catalog import as_model, as_system

    cal = dataclasses.replace(calibration(), use_kernel_tables=True)
    for model, hw, a, ep in (("llama-3.1-70b", "h100-sxm", 1, 1), ("deepseek-v3", "mi355x", 8, 8)):
        m, s = as_model(model), as_system(hw)
        costs = model_costs(m, None, "bf16")
        r = stage_step(costs, s, np.array([8.0 / a, 4.0]), a, 1, ep, np.array([64.0, 16.0]), 512.0, 4096.0, 2048.0,
                       cal)
        ops = r["ops"]
        total = sum(np.asarray(o.time_s, float) for o in ops.values())
        assert np.allclose(total, r["stage_time_s"])
        want = "measured table" if hw == "h100-sxm" else "fitted curve"
        for name in ("attn_proj", "attention_decode", "attention_prefill"):
            assert ops[name].source == want, (name, ops[name].source)
        if m.is_moe:
            assert ops["experts"].source == want


# --------------------------------------------------------------------------- measured all-reduce
def test_allreduce_golden_values_from_the_table():
    """aiconfigurator-core 0.12.0 b200_sxm/comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet: a 128 B bf16
    all-reduce over 8 B200s takes 5.040 us, and every size over 2 GPUs reads back through the loader at the
    exact measured sizes (no interpolation there; a size measured faster than a smaller one takes the smaller's
    time, as it could be padded)."""
    kp = kernel_profile(load_chip("b200"))
    assert float(kp.allreduce_time_s(128, 8)) == pytest.approx(5.04e-6, rel=1e-3)
    row = next(r for r in csv.DictReader(
        line for line in (Path(__file__).parents[1] / "src/chalk/catalog/kernels/allreduce.csv").read_text()
        .splitlines() if not line.startswith("#")) if (r["system"], r["framework"], r["num_gpus"]) ==
        ("b200_sxm", "trtllm", "2"))
    t_us = [float(x) for x in row["t_us"].split()]
    e = index()["allreduce"]["message_log2"]
    got = kp.allreduce_time_s(2.0 ** np.array(e), 2)
    np.testing.assert_allclose(got * 1e6, np.maximum.accumulate(t_us), rtol=1e-9)
    assert "custom_allreduce_perf.parquet" in row["table"] and row["version"] == "1.3.0rc20"


def test_allreduce_shape_rules():
    kp = kernel_profile(load_chip("h200"))
    sizes = 2.0 ** np.arange(5, 33)
    for n in (2, 3, 4, 8, 16, 72):
        t = kp.allreduce_time_s(sizes, n)
        assert np.all(np.isfinite(t)) and np.all(t > 0)
        assert np.all(np.diff(t) >= -1e-12), n  # more bytes never faster
    assert float(kp.allreduce_time_s(1e6, 1)) == 0.0
    # past the largest measured group: the ring's bytes per link, 2 (n-1)/n, relative to n = 8
    r = float(kp.allreduce_time_s(1e8, 16)) / float(kp.allreduce_time_s(1e8, 8))
    assert r == pytest.approx((2 * 15 / 16) / (2 * 7 / 8))
    assert kernel_profile(load_chip("mi300x")).allreduce_time_s(1e6, 8) is None  # no table: alpha-beta model
    with pytest.raises(InputError):
        kp.allreduce_time_s(-1, 8)


def test_allreduce_holdout_recorded_and_small_messages_use_the_table():
    rep = index()["allreduce"]["holdout_report"]
    assert rep["rows"] >= 200 and rep["median"] <= 0.05
    import chalk

    small = chalk.estimate("llama-3.1-70b", "h100-sxm", 1, 4096, layout="tp=8")
    ar = next(o for o in small.ops if o["name"] == "allreduce")
    assert ar["source"] == "measured table"
    # 160 all-reduces of 16 KiB over 8 H100s: the table's ~3.5 us each, not 14 hops of link latency
    assert 160 * 3.0e-6 < ar["time_s"] < 160 * 6.0e-6
    amd = chalk.estimate("llama-3.1-70b", "mi300x", 1, 4096, layout="tp=8")
    assert next(o for o in amd.ops if o["name"] == "allreduce")["source"] == "roofline (link)"


def test_mxfp4_experts_on_hopper_take_the_mixed_input_kernels():
    """aiconfigurator-core 0.12.0 h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, w4a16_mxfp4, gpt-oss-120b's
    experts (hidden 2880, intermediate 2880, 128 experts, top-4, EP 1), 16,384 tokens: 8.61 ms, about 2x what a
    BF16 grouped GEMM of that shape takes: the mixed-input kernels dequantise in the loop."""
    kp = kernel_profile(load_chip("h200"))
    t = float(kp.moe_time_s(16384, 2880, 2880, 128, 4, 1, "bf16", weight_precision="mxfp4"))
    assert t == pytest.approx(8.61e-3, rel=0.15)
    assert t > 1.6 * float(kp.moe_time_s(16384, 2880, 2880, 128, 4, 1, "bf16"))
    import chalk

    e = chalk.estimate("gpt-oss-120b", "h200", 64, 2048, layout="tp=1", precision="mxfp4")
    assert next(o for o in e.ops if o["name"] == "experts")["source"] == "measured table"


@pytest.mark.parametrize("cid", ("h100-sxm", "b200", "mi300x"))
def test_layer_shape_slices_match_the_whole_grid(cid):
    """issue 12: a layer's fixed shape (GEMM n and k, heads, expert sizes) cuts the grid once (`_Slice`); one
    number is then looked up without numpy. Both answer what the full multilinear interpolation answers, inside,
    below and past the grid; arrays of the fixed features take the full grid."""
    kp = kernel_profile(_chip(cid))
    ms = np.array([0.3, 1.0, 3.0, 17.0, 100.0, 777.0, 4096.0, 5e4, 3e6])
    for n, k, dt in ((1024.0, 8192.0, "bf16"), (3e3, 7168.0, "fp8"), (40.0, 64.0, "bf16"), (2e5, 1e5, "fp8")):
        whole = kp.gemm_time_s(ms, np.full_like(ms, n), k, dt)
        assert np.allclose(kp.gemm_time_s(ms, n, k, dt), whole, rtol=1e-12, atol=0)
        assert np.allclose([kp.gemm_time_s(float(m), n, k, dt) for m in ms], whole, rtol=1e-12, atol=0)
    bs = np.array([0.5, 1.0, 3.0, 60.0, 900.0, 7e4])
    Ls = np.array([1.0, 7.0, 4096.0, 1e5, 3e6, 33.0])
    for phase, kind, h, kvh, hd, q, kv in (("decode", "mha", 64.0, 8.0, 128.0, 1.0, "bf16"),
                                          ("decode", "mha", 8.0, 1.0, 64.0, 4.0, "fp8"),
                                          ("decode", "mla", 16.0, 16.0, 128.0, 1.0, "fp8"),
                                          ("prefill", "mha", 32.0, 4.0, 128.0, None, "bf16"),
                                          ("prefill", "mla", 128.0, 128.0, 128.0, None, "bf16")):
        qq = Ls if q is None else q
        whole = kp.attention_time_s(phase, kind, bs, qq, Ls, np.full_like(bs, h), kvh, hd, kv)
        assert np.allclose(kp.attention_time_s(phase, kind, bs, qq, Ls, h, kvh, hd, kv), whole, rtol=1e-12, atol=0)
        one = [kp.attention_time_s(phase, kind, float(b), float(L) if q is None else q, float(L), h, kvh, hd, kv)
               for b, L in zip(bs, Ls)]
        assert np.allclose(one, whole, rtol=1e-12, atol=0)
    Ts = np.array([1.0, 5.0, 64.0, 2048.0, 1e5, 1e7])
    for h, inter, E, k, ep, dt, w in ((7168.0, 2048.0, 256.0, 8.0, 8.0, "fp8", None),
                                      (2880.0, 2880.0, 128.0, 4.0, 1.0, "bf16", "mxfp4"),
                                      (4096.0, 14336.0, 8.0, 2.0, 2.0, "bf16", None)):
        whole = kp.moe_time_s(Ts, h, inter, E, k, np.full_like(Ts, ep), dt, weight_precision=w)
        assert np.allclose(kp.moe_time_s(Ts, h, inter, E, k, ep, dt, weight_precision=w), whole, rtol=1e-12, atol=0)
        one = [kp.moe_time_s(float(T), h, inter, E, k, ep, dt, weight_precision=w) for T in Ts]
        assert np.allclose(one, whole, rtol=1e-12, atol=0)
    msgs = np.array([1.0, 3e3, 1e6, 5e8, 1e11])
    for n in (1.0, 2.0, 4.0, 8.0, 16.0, 64.0):
        whole = kp.allreduce_time_s(msgs, np.full_like(msgs, n))
        if whole is None:
            continue
        assert np.allclose([kp.allreduce_time_s(float(x), n) for x in msgs], whole, rtol=1e-12, atol=0)


@settings(max_examples=40, deadline=None)
@given(m=st.floats(1, 65536), b=st.floats(1, 2048), L=st.floats(1, 131072))
def test_a_fixed_shape_remembers_the_time_the_whole_grid_gives(m, b, L):
    """A GEMM or attention shape asked one number twice answers from memory what the full interpolation (array
    path, no memory) gives, and never keeps more than MEMO_SIZE sizes."""
    from chalk.analyses.step.kernels import MEMO_SIZE

    kp = kernel_profile(load_chip("h100-sxm"))
    g = kp.gemm_shape(1024.0, 8192.0, "bf16")
    first, again = g(m), g(m)
    assert first == again == pytest.approx(float(g(np.array([m]))[0]), rel=1e-9)
    a = kp.attention_shape("decode", "mha", 8.0, 1.0, 128, "bf16")
    first, again = a(b, 1.0, L), a(b, 1.0, L)
    assert first == again == pytest.approx(float(a(np.array([b]), 1.0, np.array([L]))[0]), rel=1e-9)
    assert len(g._memo) <= MEMO_SIZE and len(a._memo) <= MEMO_SIZE
    with pytest.raises(InputError):
        g(float("nan"))


def test_balanced_expert_loads_take_the_balanced_tables():
    """aiconfigurator-core 0.12.0 h100_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, fp8_block, DeepSeek-V3's MoE layer
    (hidden 7168, inter 2048, 256 experts, top-8) on EP 32, 4096 tokens: 0.532 ms under power-law 1.01 expert loads,
    0.258 ms balanced. Each grid reproduces its own measurement; where one engine's tables were measured under
    power-law loads only (A100 under TensorRT-LLM 1.0), asking for balanced loads keeps that engine's tables."""
    kp = kernel_profile(load_chip("h100-sxm"), "trtllm")
    args = (4096, 7168, 2048, 256, 8, 32, "fp8")
    assert float(kp.moe_time_s(*args)) == pytest.approx(0.532e-3, rel=0.08)
    assert float(kp.moe_time_s(*args, balanced=True)) == pytest.approx(0.258e-3, rel=0.08)
    assert kp.moe_balanced_tables("fp8")
    a100 = kernel_profile(load_chip("a100-sxm"), "trtllm")
    args = (4096, 7168, 2048, 256, 8, 32, "bf16")
    assert not a100.moe_balanced_tables("bf16")
    assert float(a100.moe_time_s(*args, balanced=True)) == float(a100.moe_time_s(*args))


@pytest.mark.parametrize("chunk", (7, 1 << 15))
def test_interpolation_without_corners_equals_the_corner_table(monkeypatch, chunk):
    """issue 28 item 5: `interpolate` (corners added in place, in chunks of points) answers what the plain
    reference answers, `(values[cols] * w).sum(-1)` over `corner_weights`' points x 2^d arrays: bit for bit up to
    2 axes (the same products summed in the same order), to 1e-12 of the grid's scale at 3 and 4 (numpy sums 8 or
    more corners pairwise); for 1-D points, broadcast rows x columns, chunks split along rows or inside one row,
    and single numbers. The real grids (an H100's 4-axis attention grid) too."""
    from chalk.analyses.step import kernels as KK

    monkeypatch.setattr(KK, "CHUNK_POINTS", chunk)
    rng = np.random.default_rng(28)
    cases = []
    for d in (1, 2, 3, 4):
        for shapes in ([(401,)] * d, [(23, 1)] + [(1, 37)] * (d - 1), [()] * d, [(2, 150)] + [(150,)] * (d - 1),
                       [(3, 1, 5)] + [(4, 1)] * (d - 1)):
            axes = [np.sort(rng.choice(np.arange(0.0, 16.0), int(rng.integers(2, 7)), replace=False))
                    for _ in range(d)]
            cases.append((axes, rng.normal(-9.0, 3.0, [len(a) for a in axes]), shapes))
    ax = KK.axes("mha_decode")
    cases.append((list(ax), KK.kernel_profile(_chip("h100-sxm"))._grid("mha_decode", "bf16", 2.0, "bf16")[0],
                  [(300,)] * 4))
    for axes, values, shapes in cases:
        xs = KK.clamp_log2(axes, [2.0 ** rng.uniform(a[0] - 2, a[-1] + 2, s) for a, s in zip(axes, shapes)])
        cols, w = KK.corner_weights(axes, xs)
        ref = (np.ravel(values)[cols] * w).sum(-1)
        got = KK.interpolate(axes, xs, values)
        assert got.shape == ref.shape
        if len(axes) <= 2:
            assert np.array_equal(got, ref)
        assert np.max(np.abs(got - ref), initial=0.0) <= 1e-12 * np.abs(values).max()


def _every_table():
    """(system, key, row) of every measured table chalk ships (all systems, frameworks, families and dtypes)."""
    from chalk.analyses.step import kernels as KK

    return [(s, k, r) for s in sorted(index().get("systems") or {}) for k, r in sorted(KK.tables(s).items())]


def test_a_batch_column_by_a_context_row_equals_the_plain_interpolation_on_every_table():
    """issue 28 item 5: a grid of sizes asked as a column of one size by a row of another (a batch x context sweep)
    takes the cut grid's outer-product interpolation (`interpolate_outer`: no index or weight arrays over the
    grid). For every measured table, at random layer shapes (inside the grid and past it) and random sizes below,
    inside and past the grid, the time equals the plain reference to 1e-12 relative: the whole grid interpolated
    point by point over `corner_weights`' points x 2^d arrays, times `beyond_grid`'s growth past the edges."""
    from chalk.analyses.step import kernels as KK

    rng = np.random.default_rng(285)
    tables = _every_table()
    assert len(tables) >= 300  # 7 systems x families x dtypes x frameworks
    seen = set()
    for system, (fw, family, dtype), row in tables:
        ax = KK.axes(family)
        values = KK._ln_eta(row).ravel()
        nv = len(KK.VARYING[family])
        fixed = tuple(float(2.0 ** rng.uniform(a[0] - 1, a[-1] + 1)) for a in ax[nv:])
        cut = KK._Slice(family, values, fixed)
        col = 2.0 ** rng.uniform(ax[0][0] - 2, ax[0][-1] + 2, (int(rng.integers(20, 60)), 1))
        sizes = (col,) if nv == 1 else (col, 2.0 ** rng.uniform(ax[1][0] - 2, ax[1][-1] + 2, (1, 70)))
        got = cut.time(sizes)
        full = np.broadcast_arrays(*sizes, *[np.full(col.shape, v) for v in fixed])
        cols, w = KK.corner_weights(ax, KK.clamp_log2(ax, full))
        ref = np.exp((values[cols] * w).sum(-1)) * KK.beyond_grid(family, ax, full)
        assert got.shape == ref.shape and np.all(np.isfinite(got))
        assert np.max(np.abs(got / ref - 1.0)) <= 1e-12, (system, fw, family, dtype)
        seen.add(family)
    assert seen == set(KK.FEATURES)


def test_outer_interpolation_takes_only_outer_points():
    """`interpolate_outer` answers only points that are a column by a row (x0's dimensions before x1's), and then
    what `interpolate` answers to rounding; anything else (points of one shape, a row by a column, too few rows)
    is left to the point-by-point path (None)."""
    from chalk.analyses.step import kernels as KK

    rng = np.random.default_rng(7)
    axes = [np.array([0.0, 2.0, 5.0, 9.0]), np.array([1.0, 3.0, 4.0, 8.0, 12.0])]
    grid = rng.normal(-8.0, 2.0, (4, 5))
    x = lambda a, s: np.clip(rng.uniform(a[0] - 1, a[-1] + 1, s), a[0], a[-1])  # noqa: E731
    for s0, s1 in (((6, 1), (1, 9)), ((6,), ()), ((2, 3, 1), (1, 1, 7)), ((5, 1, 1), (1, 2, 3)), ((4,), (1,))):
        xs = [x(axes[0], s0), x(axes[1], s1)]
        got = KK.interpolate_outer(axes, xs, grid)
        ref = KK.interpolate(axes, xs, grid)
        assert got.shape == np.shape(ref)
        assert np.allclose(got, ref, rtol=1e-13, atol=1e-13)
    for s0, s1 in (((6,), (6,)), ((1, 9), (6, 1)), ((3,), (1, 9)), ((6, 2), (1, 2))):
        assert KK.interpolate_outer(axes, [x(axes[0], s0), x(axes[1], s1)], grid) is None


def test_messages_over_one_group_equal_the_two_axis_all_reduce_interpolation():
    """A grid of messages over one GPU count takes the table cut at that count once (1-D in message size, as one
    message does), and answers what the two-axis interpolation over (count, size) answers for the same messages, to
    1e-12: inside the table, past its largest message and group, below its smallest, and 0 for one GPU; on every
    system with an all-reduce table."""
    from chalk.analyses.step import kernels as KK

    msgs = np.array([[0.5, 1.0, 3e3, 1e6], [5e8, 2e10, 1e11, 7.0]])
    systems = sorted({s for s, _ in KK.allreduce_tables()})
    assert len(systems) >= 5
    for system in systems:
        kp = KernelProfile(_chip(KK.index()["systems"][system]["chips"][0]), system=system)
        for n in (1.0, 2.0, 3.0, 4.0, 8.0, 16.0, 72.0):
            grid = kp.allreduce_time_s(msgs, n)
            both = kp.allreduce_time_s(msgs, np.full_like(msgs, n))
            assert grid.shape == msgs.shape
            assert np.all(np.abs(grid - both) <= 1e-12 * both), (system, n)
            assert (n > 1) == bool(np.all(grid > 0))


def _distill_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("distill_kernels", Path(__file__).parents[1] / "scripts" /
                                                  "distill_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_opt_in_kernel_is_never_the_fastest_kept():
    """Where one MoE shape was measured with several kernels the distillation keeps the fastest a default deployment
    runs: TensorRT-LLM's TRTLLM-gen NVFP4 rows (`moe_torch_flow_min_latency`, run only with moe_config.backend
    TRTLLM and timed without their finalize step) are dropped however fast they are, and index.yaml records which
    kernels were dropped and why."""
    pd = pytest.importorskip("pandas")
    D = _distill_script()
    shape = dict(moe_dtype="nvfp4", num_tokens=1024, hidden_size=2048, inter_size=768, topk=8, num_experts=128,
                 moe_tp_size=1, moe_ep_size=1, distribution=D.MOE_DISTRIBUTION)
    raw = pd.DataFrame([dict(shape, kernel_source="moe_torch_flow_cutlass", latency=0.253),
                        dict(shape, kernel_source="moe_torch_flow_min_latency", latency=0.106)])
    kept = D.standardise("moe", raw)
    assert len(kept) == 1 and kept.t.iloc[0] == pytest.approx(0.253e-3, rel=1e-12)
    # without the opt-in row's label, the faster row is kept: the rule drops a label, not a time
    other = raw.assign(kernel_source=["moe_torch_flow_cutlass", "moe_torch_flow"])
    assert D.standardise("moe", other).t.iloc[0] == pytest.approx(0.106e-3, rel=1e-12)
    assert index()["opt_in_kernels"] == D.OPT_IN_KERNELS and "TRTLLM" in D.OPT_IN_KERNELS["moe_torch_flow_min_latency"]


def test_an_engine_reads_the_grid_of_the_kernel_it_runs():
    """SGLang serves MXFP4 experts on Hopper with OpenAI's triton_kernels (its server_args picks the 'triton_kernel'
    MoE runner for GPT-OSS off SM100); aiconfigurator's SGLang collector timed the generic fused-MoE Triton kernel
    (2.1x slower at 64 tokens on H200), its vLLM collector the triton_kernels one. So SGLang's w4a16 expert grid on
    H100 and H200 is vLLM's (the same numbers, the line naming vLLM's table), a gpt-oss-120b layer times alike for
    both engines there, and index.yaml records the rule. Elsewhere each engine keeps its own grid."""
    pd = pytest.importorskip("pandas")
    D = _distill_script()
    assert set(index()["shared_kernels"]) == {f"{fw} {dt}" for fw, dt in D.SHARED_KERNELS}
    root = Path(__file__).parents[1] / "src" / "chalk" / "catalog" / "kernels"
    for system, chip in (("h100_sxm", "h100-sxm"), ("h200_sxm", "h200")):
        t = pd.read_csv(root / f"{system}.csv", comment="#")
        for fam in ("moe", "moe_balanced"):
            sg, vl = (t[(t.framework == fw) & (t.family == fam) & (t.dtype == "w4a16")].iloc[0]
                      for fw in ("sglang", "vllm"))
            assert sg.ln_eta_x100 == vl.ln_eta_x100 and sg.table == vl.table and "/vllm/" in sg.table
        shape = (64, 2880, 2880, 128, 4, 2, "bf16")
        sg, vl = (KernelProfile(load_chip(chip), fw, system).moe_time_s(*shape, weight_precision="mxfp4")
                  for fw in ("sglang", "vllm"))
        assert float(sg) == pytest.approx(float(vl), rel=1e-12)
    t = pd.read_csv(root / "b200_sxm.csv", comment="#")  # no triton_kernels rows there: SGLang's own grid stays
    sg = t[(t.framework == "sglang") & (t.family == "moe") & (t.dtype == "w4a16")]
    assert len(sg) == 1 and "/sglang/" in sg.table.iloc[0]
    # the rule on a synthetic system: the engine's line and held-out rows become the other's, relabelled
    lines = [["sys", fw, "v", "moe", "w4a16", f"sys/moe/{fw}/v/moe_perf.parquet", "dev", 1, 1, 1.0, grid]
             for fw, grid in (("sglang", "1 2"), ("vllm", "3 4"))]
    held = [pd.DataFrame({"system": ["sys"], "family": ["moe"], "framework": [fw], "dtype": ["w4a16"], "t": [t_]})
            for fw, t_ in (("sglang", 9.0), ("vllm", 5.0))]
    D.shared_kernel_present = lambda *a: True
    D.share_kernels("sys", "moe", lines, held)
    assert lines[0][:3] == ["sys", "sglang", "v"] and lines[0][3:] == lines[1][3:]
    assert sorted((h.framework.iloc[0], h.t.iloc[0]) for h in held) == [("sglang", 5.0), ("vllm", 5.0)]


@settings(max_examples=60, deadline=None)
@given(cid=st.sampled_from(MEASURED), b=st.integers(1, 4096), L=st.integers(16, 131072),
       kvh=st.sampled_from((1, 2, 8)), kv=st.sampled_from(("bf16", "fp8")))
def test_no_kernel_streams_faster_than_the_measured_ceiling(cid, b, L, kvh, kv):
    """A fitted grid carried past its measured shapes (decode attention at large batch x context reached 97-100% of
    the catalog bandwidth) is held to STREAM_CEILING, the fraction the measured kernels themselves reach (p99
    0.88-0.92 of peak for decode attention, max 0.92-0.96): the KV read never takes less than its bytes at that
    share of the chip's bandwidth."""
    from chalk.analyses.step.kernels import STREAM_CEILING

    chip = _chip(cid)
    t = kernel_profile(chip).attention_time_s("decode", "mha", b, 1, L, 8 * kvh, kvh, 128, kv)
    kv_bytes = b * L * 2 * kvh * 128 * (1.0 if kv == "fp8" else 2.0)
    assert t >= kv_bytes / (STREAM_CEILING * chip.hbm_bandwidth_bytes_per_s) * (1 - 1e-9)


def test_the_stream_ceiling_is_what_measured_kernels_reach():
    """The held-out decode-attention rows the distillation never saw stream at most ~0.96 of their chip's catalog
    bandwidth; most sit below the ceiling, which binds only where a grid is carried past its measured shapes."""
    from chalk.analyses.step.kernels import STREAM_CEILING

    fr = []
    for r in _rows():
        if r["family"] != "mha_decode":
            continue
        f = lambda k: float(r[k])  # noqa: E731
        by = f("batch") * f("L") * 2 * f("kv_heads") * f("head_dim") * (1.0 if r["dtype"] == "fp8" else 2.0)
        fr.append(by / f("measured_s") / _chip(r["chip"]).hbm_bandwidth_bytes_per_s)
    assert len(fr) >= 20 and max(fr) < 0.97 and np.mean(np.array(fr) <= STREAM_CEILING) > 0.9


@pytest.mark.parametrize("chip, system", [("h100-sxm", "h100_sxm"), ("h200", "h200_sxm"), ("mi300x", None)])
@pytest.mark.parametrize("tokens", [1, 64, 4096])
def test_mixed_input_experts_off_their_measured_shape_keep_the_measured_slowdown(chip, system, tokens):
    """The mixed-input (MXFP4 weights, 16-bit math) expert tables were measured on gpt-oss's 2,880-wide experts; read
    straight at Qwen3-235B's (4,096 x 1,536, 128 experts, top 8) they gave 8x the 16-bit layer at one token on H100
    (40.7 ms for 0.47 GB, the cap), which no kernel does. Off the measured shape the layer takes the 16-bit time
    there times the slowdown the table shows on its own shape at the same tokens per expert (now 1.06x there)."""
    from chalk.analyses.step.kernels import MIXED_INPUT_MEASURED_SHAPE

    prof = KernelProfile(load_chip(chip), "vllm", system)
    h0, i0 = MIXED_INPUT_MEASURED_SHAPE
    ratio = (float(prof.moe_time_s(tokens, h0, i0, 128, 8, 16, "bf16", weight_precision="mxfp4"))
             / float(prof.moe_time_s(tokens, h0, i0, 128, 8, 16, "bf16")))
    got = (float(prof.moe_time_s(tokens, 4096, 1536, 128, 8, 16, "bf16", weight_precision="mxfp4"))
           / float(prof.moe_time_s(tokens, 4096, 1536, 128, 8, 16, "bf16")))
    assert got <= max(ratio, 1.0) * 1.2  # (the table's raw ratio, before routing bytes and floors: within 20%)
