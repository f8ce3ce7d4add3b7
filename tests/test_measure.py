"""chalk measure: ceilings -> calibrated chip, real (tiny) transformer steps, the roofline fit.

No timing assertions: the machine running the tests may be slow or shared. The measurement path
runs a tiny llama (hidden 64, 2 layers, vocab 256) on a tiny grid; the fit is checked on
synthetic step times made by chalk's own roofline from known efficiencies.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import replace

import numpy as np
import pytest

from chalk.analyses.step import measure as M
from chalk.analyses.step import roofline as RL
from chalk.errors import ChalkError, InputError
from chalk.specs.catalog import resolve_hardware
from chalk.specs.hardware import Chip, System
from chalk.specs.model import model_from_config

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
        "tie_word_embeddings": False}

RESULT_KEYS = {"peak_flops_per_s", "mem_bandwidth_bytes_per_s", "cases", "median_abs_error_held_out",
               "p90_abs_error_held_out", "n_held_out", "efficiency", "device", "dtype", "model",
               "calibrated_chip_yaml"}
CASE_KEYS = {"phase", "batch", "context", "measured_s", "predicted_s", "held_out"}


# --------------------------------------------------------------------------- the fit (no torch)
def _synthetic_system() -> System:
    chip = Chip(id="synthetic", name="synthetic", flops_per_s={"bf16": 2e12, "fp32": 5e11},
                hbm_bytes=64e9, hbm_bandwidth_bytes_per_s=1e11)
    return System(id="synthetic", name="synthetic", chip=chip, chips=1, kind="chip")


def _synthetic_cases(eff_decode: RL.Efficiency, eff_prefill: RL.Efficiency):
    spec = model_from_config(M.QUICK_MODEL_CONFIG, id="quick")
    system = _synthetic_system()
    dec = [(1, 128), (1, 4096), (4, 1024), (16, 256), (16, 4096), (64, 64), (128, 128), (256, 32), (512, 64)]
    pre = [(1, 64), (1, 256), (2, 512), (4, 1024)]
    rows = []
    for phase, grid, eff in (("decode", dec, eff_decode), ("prefill", pre, eff_prefill)):
        for b, c in grid:
            ideal = RL.step(spec, system, b, c, phase=phase, precision="bf16", kv_precision="bf16")
            real = RL.step(spec, system, b, c, phase=phase, precision="bf16", kv_precision="bf16", efficiency=eff)
            rows.append((phase, float(ideal.compute_time_s), float(ideal.memory_time_s), float(real.step_time_s)))
    ph, tc, tm, y = (np.array(col) for col in zip(*rows))
    return ph, tc, tm, y


def test_fit_recovers_known_efficiencies():
    eff = RL.Efficiency(compute=0.55, memory=0.8, overhead_s=0.004)
    ph, tc, tm, y = _synthetic_cases(eff, eff)
    assert {"compute", "memory"} <= {("compute" if a > b else "memory") for a, b in zip(tc, tm)}  # both regimes
    fit = M.fit_efficiency(tc, tm, y, ph)
    assert fit.compute == pytest.approx(0.55, rel=0.05)
    assert fit.memory == pytest.approx(0.8, rel=0.05)
    assert fit.overhead_s == pytest.approx(0.004, rel=0.05)
    assert fit.overhead_prefill_s == fit.overhead_s
    assert fit.msle_train < 1e-4


def test_fit_recovers_separate_phase_overheads():
    ph, tc, tm, y = _synthetic_cases(RL.Efficiency(compute=0.3, memory=0.6, overhead_s=0.002),
                                     RL.Efficiency(compute=0.3, memory=0.6, overhead_s=0.010))
    fit = M.fit_efficiency(tc, tm, y, ph, separate_overheads=True)
    assert fit.compute == pytest.approx(0.3, rel=0.05)
    assert fit.memory == pytest.approx(0.6, rel=0.05)
    assert fit.overhead_s == pytest.approx(0.002, rel=0.05)
    assert fit.overhead_prefill_s == pytest.approx(0.010, rel=0.05)


def test_fit_stays_in_bounds_on_noisy_data():
    rng = np.random.default_rng(0)
    ph, tc, tm, y = _synthetic_cases(RL.Efficiency(compute=0.9, memory=0.95, overhead_s=0.0),
                                     RL.Efficiency(compute=0.9, memory=0.95, overhead_s=0.0))
    y = y * np.exp(rng.normal(0, 0.2, y.size)) * 0.7  # faster than the "ideal" ceilings allow
    fit = M.fit_efficiency(tc, tm, y, ph)
    assert 0 < fit.compute <= 1 and 0 < fit.memory <= 1 and fit.overhead_s >= 0
    assert math.isfinite(fit.msle_train)


def test_fit_leaves_an_unconstrained_efficiency_at_one():
    ph, tc, tm, y = _synthetic_cases(RL.Efficiency(compute=0.5, memory=0.5, overhead_s=0.001),
                                     RL.Efficiency(compute=0.5, memory=0.5, overhead_s=0.001))
    mem = (tm / 0.5 > 1.5 * tc / 0.5) & (ph == "decode")  # clearly memory-bound decode cases only
    fit = M.fit_efficiency(tc[mem], tm[mem], y[mem], ph[mem])
    assert fit.memory == pytest.approx(0.5, rel=0.05)
    assert fit.compute == 1.0  # no case constrains it: the highest efficiency wins the tie


def test_fit_rejects_bad_input():
    with pytest.raises(InputError):
        M.fit_efficiency([1.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(InputError):
        M.fit_efficiency([1.0] * 3, [1.0] * 3, [1.0, -1.0, 1.0])


def test_split_alternates_within_each_phase():
    dec = [(1, 128), (1, 1024), (4, 128), (4, 1024), (16, 128)]
    pre = [(1, 512), (1, 64), (1, 128)]
    hd, hp = M.split_held_out(dec, pre)
    assert hd == [False, True, False, True, False]
    assert hp == [False, False, True]  # order (1, 64) train, (1, 128) held out, (1, 512) train


# --------------------------------------------------------------------------- calibrated chip (no torch)
def _fake_ceilings() -> M.Ceilings:
    return M.Ceilings(device="cpu", device_name="Test CPU 9000", host="testhost", date="2026-01-01",
                      flops_per_s={"fp32": 1.234e11, "bf16": 4.5e11}, mem_bandwidth_bytes_per_s=3.21e10,
                      memory_bytes=25.3e9, matmul_n={"fp32": 2048, "bf16": 2048}, copy_bytes=256 * 2 ** 20,
                      threads=2)


def test_calibrated_chip_round_trips_through_resolve_hardware(tmp_path):
    chip = M.calibrated_chip(_fake_ceilings(), name="my box")
    assert chip.measured and chip.name == "my box"
    assert "measured by chalk measure on Test CPU 9000" in chip.sources["dense_tflops"]
    path = M.write_chip_yaml(chip, tmp_path / "calibrated-chip.yaml")
    system = resolve_hardware(str(path))
    back = system.chip
    assert back.measured and back.id == chip.id and system.chips == 1
    assert back.flops_per_s["fp32"] == pytest.approx(1.234e11, rel=1e-5)
    assert back.flops_per_s["bf16"] == pytest.approx(4.5e11, rel=1e-5)
    assert back.hbm_bandwidth_bytes_per_s == pytest.approx(3.21e10, rel=1e-5)
    assert back.hbm_bytes == pytest.approx(25.3e9, rel=1e-5)
    r = RL.step(model_from_config(TINY, id="tiny"), system, 4, 128, precision="fp32", kv_precision="fp32")
    assert float(r.step_time_s) > 0
    assert back.efficiency is None  # no fit yet: estimate falls back to chalk's calibrated constants


def test_efficiency_block_is_carried_and_used_as_hardware(tmp_path):
    """issue 12: the fitted compute, memory and overhead live in the chip YAML, and chalk.estimate uses them."""
    import chalk
    from chalk.analyses.step.calibration import CALIBRATION, efficiency_for
    from chalk.specs.hardware import ChipEfficiency

    fit = ChipEfficiency(compute=0.31, memory=0.57, overhead_s=2.5e-3, overhead_prefill_s=4e-3, source="test fit")
    chip = replace(M.calibrated_chip(_fake_ceilings(), name="my box"), efficiency=fit)
    path = M.write_chip_yaml(chip, tmp_path / "calibrated-chip.yaml")
    text = path.read_text()
    assert "efficiency:" in text and "overhead_ms: 2.5" in text and "compute: 0.31" in text
    back = resolve_hardware(str(path)).chip
    assert efficiency_for(back) == pytest.approx((0.31, 0.57, 2.5e-3))
    assert efficiency_for(resolve_hardware("h100-sxm").chip) is None
    tiny = model_from_config(TINY, id="tiny")
    r = chalk.estimate(tiny, str(path), 4, 128, precision="fp32", kv_precision="fp32")
    assert r.efficiency.startswith("measured")
    # op by op: each op at the fitted fractions of this chip's own ceilings, plus the fitted overhead
    peak_gemm, peak_attn = back.flops_per_s["fp32"], back.flops_per_s["bf16"]
    bw = back.hbm_bandwidth_bytes_per_s
    expect = 0.0
    for op in r.ops:
        if op["name"] == "overhead":
            assert op["time_s"] == pytest.approx(2.5e-3, rel=1e-9)
            expect += op["time_s"]
            continue
        peak = peak_attn if op["kind"] == "attention" else peak_gemm
        expect += max(op["flops"] / (peak * 0.31), op["bytes"] / (bw * 0.57))
    assert float(r.step_time_s) == pytest.approx(expect, rel=1e-9)
    default = chalk.estimate(tiny, "h100-sxm", 4, 128, precision="fp32", kv_precision="fp32")
    assert default.efficiency == "calibrated"  # a catalog chip keeps chalk's constants


@pytest.mark.parametrize("block,needle", [
    ("efficiency: 3\n", "must be a mapping"),
    ("efficiency: {compute: 1.5, memory: 0.5, overhead_ms: 1}\n", "efficiency"),
    ("efficiency: {memory: 0.5, overhead_ms: 1}\n", "needs 'compute'"),
    ("efficiency: {compute: 0.5, memory: 0.5, overhead_s: 1}\n", "unknown field"),
])
def test_bad_efficiency_block_is_one_spec_error(tmp_path, block, needle):
    from chalk.errors import SpecError

    chip = M.calibrated_chip(_fake_ceilings())
    p = M.write_chip_yaml(chip, tmp_path / "c.yaml")
    p.write_text(p.read_text() + block)
    with pytest.raises(SpecError) as e:
        resolve_hardware(str(p))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_missing_torch_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    with pytest.raises(ChalkError, match=r"pip install -e '\.\[measure\]'"):
        M._transformers()


# --------------------------------------------------------------------------- the real path (torch)
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    pytest.importorskip("torch", reason="needs torch and transformers: pip install -e '.[measure]'")
    pytest.importorskip("transformers", reason="needs torch and transformers: pip install -e '.[measure]'")
    out = tmp_path_factory.mktemp("measure")
    ceil = M.measure_ceilings("cpu", quick=True, matmul_sizes=(256,), copy_bytes=32 * 2 ** 20)
    msgs: list[str] = []
    res = M.run_measure("cpu", quick=True, model=dict(TINY), out_dir=out, progress=msgs.append, dtype="float32",
                        decode_grid=[(1, 16), (1, 64), (4, 16), (4, 64), (8, 32)],
                        prefill_grid=[(1, 8), (1, 32), (2, 16), (2, 32)],
                        passes=2, budget_per_case_s=0.02, ceilings=ceil)
    return res, out, msgs


def test_tiny_run_structure(tiny_run):
    res, _, msgs = tiny_run
    d = res.to_dict()
    assert RESULT_KEYS <= set(d)
    assert d["device"] == "cpu" and d["dtype"] == "float32" and d["model"]
    assert d["peak_flops_per_s"] > 0 and d["mem_bandwidth_bytes_per_s"] > 0
    assert len(d["cases"]) == 9
    for c in d["cases"]:
        assert CASE_KEYS <= set(c)
        assert c["measured_s"] > 0 and c["predicted_s"] > 0
        assert c["phase"] in ("decode", "prefill")
    assert d["n_held_out"] == sum(c["held_out"] for c in d["cases"]) >= 4
    assert any(c["held_out"] for c in d["cases"] if c["phase"] == "decode")
    assert any(c["held_out"] for c in d["cases"] if c["phase"] == "prefill")
    e = d["efficiency"]
    assert 0 < e["compute"] <= 1 and 0 < e["memory"] <= 1 and e["overhead_s"] >= 0
    assert e["overhead_prefill_s"] >= 0
    assert math.isfinite(d["median_abs_error_held_out"]) and d["p90_abs_error_held_out"] >= \
        d["median_abs_error_held_out"]
    assert msgs and msgs[-1] == "done"
    assert "measured: true" in d["calibrated_chip_yaml"]
    assert "efficiency:" in d["calibrated_chip_yaml"]
    assert res.chip.efficiency.compute == pytest.approx(res.fit.compute)
    assert M.format_report(res).count("\n") > 9


def test_tiny_run_predictions_are_chalks_roofline(tiny_run):
    res, _, _ = tiny_run
    spec = model_from_config(TINY, id="tiny")
    system = M.measured_system(res.chip)
    for c in res.cases:
        r = RL.step(spec, system, c.batch, c.context, phase=c.phase, precision="fp32", kv_precision="fp32",
                    efficiency=res.fit.efficiency(c.phase))
        assert float(r.step_time_s) == pytest.approx(c.predicted_s, rel=1e-9)


def test_tiny_run_writes_files(tiny_run):
    res, out, _ = tiny_run
    system = resolve_hardware(str(out / "calibrated-chip.yaml"))
    assert system.chip.measured
    fitted = system.chip.efficiency  # the fit travels with the YAML (issue 12)
    assert (fitted.compute, fitted.memory, fitted.overhead_s) == pytest.approx(
        (res.fit.compute, res.fit.memory, res.fit.overhead_s), rel=1e-5, abs=1e-9)
    assert system.chip.hbm_bandwidth_bytes_per_s == pytest.approx(res.ceilings.mem_bandwidth_bytes_per_s, rel=1e-3)
    # the YAML keeps TFLOP/s to 6 decimals, coarse for the tiny test matmuls
    assert system.chip.flops_per_s["fp32"] == pytest.approx(res.ceilings.flops_per_s["fp32"], rel=1e-3)
    r = RL.step(model_from_config(TINY, id="tiny"), system, 2, 64, precision="fp32", kv_precision="fp32",
                efficiency=res.fit.efficiency())
    assert float(r.step_time_s) > 0
    with open(out / "cases.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(res.cases)
    assert CASE_KEYS <= set(rows[0])
    assert res.files["cases"].endswith("cases.csv")


def test_measure_rejects_bad_device():
    pytest.importorskip("torch", reason="needs torch and transformers: pip install -e '.[measure]'")
    with pytest.raises(InputError):
        M.measure_ceilings("tpu")
