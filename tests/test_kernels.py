"""The distilled kernel tables (`chalk.specs.kernels`): held-out accuracy, invariants, provenance, no heavy deps."""

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
from chalk.specs.kernels import KernelProfile, index, kernel_profile

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
    if fam == "moe":
        return float(kp.moe_time_s(f("tokens"), f("hidden"), f("moe_inter"), f("num_experts"), f("top_k"), f("ep"),
                                   r["dtype"]))
    kind, phase = fam.split("_")
    kvh = f("kv_heads") if kind == "mha" else f("heads")
    hd = f("head_dim") if kind == "mha" else 128.0
    return float(kp.attention_time_s(phase, kind, f("batch"), f("q"), f("L"), f("heads"), kvh, hd, r["dtype"]))


def test_holdout_sample_names_its_source():
    rows = _rows()
    assert 200 <= len(rows) <= 400
    ver = index()["package_version"]
    for r in rows:
        assert r["source"].startswith(f"aiconfigurator-core {ver} ") and r["source"].endswith(".parquet")
        assert f"/{r['framework']}/" in r["source"]


def test_holdout_median_error_per_family():
    """Rows the distillation never saw: the shipped profile predicts them to <= 10% (median) in every family."""
    errs: dict[str, list[float]] = {}
    for r in _rows():
        errs.setdefault(r["report"], []).append(_predict(r) / float(r["measured_s"]) - 1)
    assert set(errs) == {"gemm", "attention decode", "attention prefill", "moe"}
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
            "from chalk.specs.kernels import kernel_profile\n"
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

    from chalk.analyses.calibration import calibration
    from chalk.analyses.parallel import model_costs, stage_step
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
