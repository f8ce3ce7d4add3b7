"""Kernels timed on a real NVIDIA H200 (tests/data/h200_device, SOURCE.md there) against chalk's H200 kernel tables
and catalog, through scripts/compare_device.py's helpers. CPU only: the measurements are committed data.

The measured kernels are torch's (cuBLAS bf16, cuBLASLt FP8 per-tensor, FlashAttention-2 through SDPA); the tables
are TensorRT-LLM's, vLLM's and SGLang's kernels as aiconfigurator-core timed them on H200. The bands below are set
from what was measured (scripts/compare_device.py prints the figures) and say how far apart two implementations of
one kernel may fairly be; the run-to-run spread of a repeated run (p10-p90 0.975-1.035) is the noise under them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from chalk.analyses.step.kernels import FRAMEWORKS, STREAM_CEILING
from device_fixtures import cd, chip, ratios, rows  # noqa: F401 (fixtures, with DATA and CHIP below)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200_device"
CHIP = "h200"


def test_rows_name_their_device_and_cover_the_grid(rows):
    env = json.loads((DATA / "env.json").read_text())
    assert env["device_name"] == "NVIDIA H200" and env["driver"] and env["torch"].startswith("2.")
    assert len(rows) == 408  # every row timed; none recorded an error
    for r in rows:
        for part in ("NVIDIA H200", f"driver {env['driver']}", f"torch {env['torch']}", f"CUDA {env['cuda']}",
                     env["date_utc"][:10], "scripts/device_kernels.py"):
            assert part in r["source"], (part, r["source"])
        assert r["method"] == "cuda graph, events"
        if r["family"] != "gemm":
            assert r["backend"] == "sdpa flash"  # FlashAttention ran every attention shape, GQA included
    ops = {r["op"] for r in rows}
    assert ops == {"gemm_bf16", "gemm_fp8", "attention_decode", "attention_prefill"}
    ms = {int(r["m"]) for r in rows if r["family"] == "gemm"}
    assert min(ms) == 1 and max(ms) == 8192


def test_repeat_run_agrees(cd, rows):
    """A second run of the same script on the same machine: the noise under every band below."""
    s = cd.summary(cd.repeat_ratios(rows, cd.load_rows(DATA / "kernels_repeat.csv")))
    assert s["rows"] == len(rows)
    assert 0.98 <= s["median"] <= 1.02 and s["p10"] >= 0.95 and s["p90"] <= 1.05, s


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_bf16_gemm_tables_match_cublas(ratios, fw):
    """Dense bf16 GEMMs: the engines run cuBLAS(Lt)/CUTLASS kernels of the family torch.mm calls, so the tables should
    time them as the chip does: median within 15% (the tables' own held-out median error is under 10%, the
    repeat spread 3%), and 80% of shapes within [0.75, 1.35]. Measured: medians 1.00-1.04, p10-p90 0.92-1.13."""
    s = ratios[fw]["gemm_bf16"]
    assert s["rows"] == 160
    assert 0.85 <= s["median"] <= 1.15 and s["p10"] >= 0.75 and s["p90"] <= 1.35, s


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_fp8_gemm_tables_no_faster_than_cublas_fp8(ratios, fw):
    """FP8 GEMMs: the tables are never faster than torch's per-tensor FP8 cuBLASLt on the median, and within 2x.
    Measured: the real kernel is faster (medians 0.72-0.78; at m <= 256 the TensorRT-LLM table carries ~10 us
    more per GEMM, and chalk caps it at the bf16 time), so chalk's FP8 decode GEMMs are pessimistic against a
    bare cuBLAS FP8 GEMM (the engines' FP8 linear may add the activation's quantisation: not measured here)."""
    s = ratios[fw]["gemm_fp8"]
    assert 0.5 <= s["median"] <= 1.0, s


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_decode_attention_tables_within_band(ratios, fw):
    """Decode attention: torch's FlashAttention-2 against the engines' decode kernels (XQA, FlashInfer): the
    median within a third either way (measured 0.91-1.09). At KV caches over ~1 GB torch's kernel streams at
    ~2.5 TB/s where the tables stream at chalk's ceiling (p90 1.7)."""
    s = ratios[fw]["attention_decode"]
    assert s["rows"] == 64
    assert 0.75 <= s["median"] <= 1.33, s


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_prefill_attention_tables_faster_than_torch_flash2(ratios, fw):
    """Causal prefill: the engines' Hopper attention kernels beat torch's FlashAttention-2 (~320 TFLOP/s at 8k
    prompts here), so the tables are faster on the median, but not by more than 2x (measured 1.33-1.72)."""
    s = ratios[fw]["attention_prefill"]
    assert 1.0 <= s["median"] <= 2.0, s


def test_measured_kernels_respect_catalog_ceilings(cd, rows, chip):
    """A physical check of the catalog: no real kernel computes faster than the H200's catalog peak or streams
    faster than its catalog HBM bandwidth (by chalk's own FLOP and byte counts); GEMMs stay under STREAM_CEILING.
    One decode-attention row (Llama-3.1-70B TP8, 128 x 32768: 2.1 GB of KV in 0.478 ms, 0.936 of 4.8 TB/s, in both
    runs) streams above STREAM_CEILING = 0.92: chalk's floor makes that kernel at most 1.7% slower than it ran."""
    fr = {r["op"]: [] for r in rows}
    for r in rows:
        fr[r["op"]].append(cd.fractions(r, chip))
    for op, f in fr.items():
        bw, pk = max(x[0] for x in f), max(x[1] for x in f)
        assert bw < 0.97 and pk < 0.9, (op, bw, pk)
        if op.startswith("gemm"):
            assert bw <= STREAM_CEILING, (op, bw)
    over = sum(x[0] > STREAM_CEILING for f in fr.values() for x in f)
    assert over <= max(1, 0.01 * len(rows))


def test_chalk_measure_ceilings_under_catalog(chip):
    """`chalk measure --device cuda`'s ceilings (square matmuls, a 1 GiB device copy) sit under the catalog's H200
    figures, the copy under STREAM_CEILING, and near enough to them (>= 0.6) that the chip was healthy."""
    m = json.loads((DATA / "measure.json").read_text())
    assert m["device_name"] == "NVIDIA H200"
    for p in ("bf16", "fp8"):
        f = m["ceilings"]["flops_per_s"][p] / chip.peak_flops_per_s(p)
        assert 0.6 <= f < 1.0, (p, f)
    bw = m["mem_bandwidth_bytes_per_s"] / chip.hbm_bandwidth_bytes_per_s
    assert 0.6 <= bw <= STREAM_CEILING, bw


def test_chalk_measure_fit_and_estimate(cd):
    """chalk measure's roofline fit predicts its held-out GPU steps to a median 11.7% (p90 28.7%); chalk estimate
    (an engine's step at tp=1) is faster than the eager transformers steps that measure times, for every case:
    ~3-8x at decode (a 16-layer eager step takes ~10 ms of launches) and within 2x at compute-bound prefill."""
    m = json.loads((DATA / "measure.json").read_text())
    assert m["n_held_out"] == 14 and m["median_abs_error_held_out"] <= 0.15 and m["p90_abs_error_held_out"] <= 0.35
    cases = cd.measure_vs_estimate(m)
    r = {ph: np.array([c["measured_s"] / c["estimate_s"] for c in cases if c["phase"] == ph])
         for ph in ("decode", "prefill")}
    assert (r["decode"] > 1.5).all() and (r["prefill"] > 1.0).all()
    assert 1.0 < float(np.median(r["prefill"])) <= 2.0


# ---- the FP8 linear with its activation's quantisation (kernels_fp8q.csv: one run on the same H200, SOURCE.md)
# gemm_fp8_dynq: dynamic per-tensor scale (amax reduction, scale, scaled cast to e4m3: three torch kernels) before
# _scaled_mm; gemm_fp8_staticq: a fixed scale (the scaled cast alone, one kernel); bf16 and bare FP8 re-timed
# beside them. Figures: `python scripts/compare_device.py`.


@pytest.fixture(scope="module")
def qrows(cd):
    return cd.load_rows(DATA / "kernels_fp8q.csv")


@pytest.fixture(scope="module")
def fp8q(cd, qrows, chip):
    return {fw: cd.fp8q_summary(qrows, chip, fw) for fw in FRAMEWORKS}


def _by_shape(cd, rows) -> dict:
    by: dict = {}
    for r in rows:
        by.setdefault(cd.key(r)[1:], {})[r["op"]] = float(r["measured_s"])
    return by


def test_fp8q_rows_name_their_device_and_cover_the_grid(cd, qrows, rows):
    env = json.loads((DATA / "env_fp8q.json").read_text())
    assert env["device_name"] == "NVIDIA H200" and env["fused_cast_probe"]["fused"] is True
    assert len(qrows) == 640  # 16 layer shapes x 10 m x 4 ops, none recorded an error
    ops = {}
    for r in qrows:
        ops[r["op"]] = ops.get(r["op"], 0) + 1
        assert r["method"] == "cuda graph, events" and r["family"] == "gemm"
        for part in ("NVIDIA H200", f"driver {env['driver']}", f"torch {env['torch']}", env["date_utc"][:10]):
            assert part in r["source"], (part, r["source"])
        if r["op"].endswith("q"):
            assert r["dtype"] == "fp8" and "div->e4m3 (one kernel)" in r["backend"], r["backend"]
    assert ops == {op: 160 for op in cd.FP8Q_OPS}
    # the same shapes and m as kernels.csv's GEMM rows
    assert {cd.key(r)[1:] for r in qrows} == {cd.key(r)[1:] for r in rows if r["family"] == "gemm"}


def test_fp8q_run_repeats_and_matches_the_first_run(cd, qrows, rows):
    """Its repeat a minute later agrees as the first data set's did, and its bf16 and bare FP8 GEMMs time as
    kernels.csv's (an hour earlier, another lease of the same kind): the baseline is the same machine's."""
    s = cd.summary(cd.repeat_ratios(qrows, cd.load_rows(DATA / "kernels_fp8q_repeat.csv")))
    assert s["rows"] == 640 and 0.98 <= s["median"] <= 1.02 and s["p10"] >= 0.95 and s["p90"] <= 1.05, s
    old = {cd.key(r): float(r["measured_s"]) for r in rows}
    for op in ("gemm_bf16", "gemm_fp8"):
        s = cd.summary([float(r["measured_s"]) / old[cd.key(r)] for r in qrows if r["op"] == op])
        assert s["rows"] == 160 and 0.95 <= s["median"] <= 1.05 and s["p10"] >= 0.85 and s["p90"] <= 1.15, (op, s)


def test_quantising_the_activation_costs_time_at_every_shape(cd, qrows):
    """Physical order, shape by shape: the static-scale linear is slower than the bare FP8 GEMM everywhere (its cast
    adds a kernel), the dynamic one slower still at nearly every shape (two kernels more); at m <= 256 the cast adds
    at least ~2 us (one dependent kernel in a CUDA graph; measured min 1.8 us, median 5.2)."""
    by = _by_shape(cd, qrows)
    assert len(by) == 160
    assert all(v["gemm_fp8_staticq"] > v["gemm_fp8"] for v in by.values())
    assert np.mean([v["gemm_fp8_dynq"] > v["gemm_fp8_staticq"] for v in by.values()]) >= 0.95
    small = [(v["gemm_fp8_staticq"] - v["gemm_fp8"]) * 1e6 for k, v in by.items() if float(k[3]) <= 256]
    assert len(small) == 112 and min(small) >= 1.0 and 3.0 <= float(np.median(small)) <= 8.0


def test_trtllm_fp8_table_carries_an_activation_quantisation_at_small_m(fp8q):
    """The open question of the first run: at m <= 256 TensorRT-LLM's FP8 table (uncapped) sits ~10 us (measured
    median 9.8) above the bare _scaled_mm. Timed in the same run, quantising the activation first adds 5.2 us with a
    static scale (one kernel) and 15.1 us with torch's dynamic per-tensor scale (three kernels): the table lies
    between the two (static / table 0.79, dynamic / table 1.23), the size of an engine's FP8 linear with its
    activation's quantisation; aiconfigurator timed TensorRT-LLM's FP8 `Linear` forward, whose input is bf16.
    chalk's time (the table capped at bf16) is the static-scale linear's to 5% (0.95), under the dynamic one's."""
    x = fp8q["trtllm"]
    assert 7.0 <= x["gemm_fp8"]["m<=256"]["table_added_us"]["median"] <= 13.0
    st, dy = x["gemm_fp8_staticq"]["m<=256"], x["gemm_fp8_dynq"]["m<=256"]
    assert 3.0 <= st["added_us"]["median"] <= 8.0 and 8.0 <= dy["added_us"]["median"] <= 22.0
    assert st["added_us"]["median"] < x["gemm_fp8"]["m<=256"]["table_added_us"]["median"] < dy["added_us"]["median"]
    assert 0.65 <= st["over_fp8_raw"]["median"] <= 0.95 and 1.0 <= dy["over_fp8_raw"]["median"] <= 1.5
    assert 0.85 <= st["over_chalk"]["median"] <= 1.10 and 1.2 <= dy["over_chalk"]["median"] <= 1.8
    # the bare GEMM stays well under the table: the quantisation, not the GEMM, is what the table adds
    assert x["gemm_fp8"]["m<=256"]["over_fp8_raw"]["median"] <= 0.65


@pytest.mark.parametrize("fw", ("sglang", "vllm"))
def test_sglang_vllm_fp8_tables_carry_less_than_a_cast_at_small_m(fp8q, fw):
    """SGLang's and vLLM's FP8 tables sit ~4 us over the bare GEMM at m <= 256 (measured 3.8, 4.0), less than even
    the static-scale cast adds in torch (5.2): the static-scale linear is 1.07-1.12x their tables, the dynamic one
    1.6-1.7x. Those tables hold a bare GEMM or a quantisation fused tighter than torch's."""
    x = fp8q[fw]
    assert 2.0 <= x["gemm_fp8"]["m<=256"]["table_added_us"]["median"] <= 6.0
    assert x["gemm_fp8"]["m<=256"]["table_added_us"]["median"] < x["gemm_fp8_staticq"]["m<=256"]["added_us"]["median"]
    assert 1.0 <= x["gemm_fp8_staticq"]["m<=256"]["over_chalk"]["median"] <= 1.25
    assert 1.3 <= x["gemm_fp8_dynq"]["m<=256"]["over_chalk"]["median"] <= 2.0


def test_torch_cast_streams_slowly_at_large_m(cd, qrows, fp8q, chip):
    """At m > 256 torch's scaled cast (a TensorIterator division with a dynamic cast to e4m3) streams its 3mk bytes
    at ~0.66 TB/s, 14% of the H200's HBM bandwidth, so there the quantised linears (1.2-1.5x every table) bound an
    engine's fused quantisation from above, and say nothing against the tables."""
    s = cd.summary(cd.cast_stream_tb_per_s(qrows))
    assert s["rows"] == 48 and 0.4 <= s["median"] <= 1.0 and s["p90"] * 1e12 < 0.25 * chip.hbm_bandwidth_bytes_per_s
    for fw in FRAMEWORKS:
        for op in ("gemm_fp8_staticq", "gemm_fp8_dynq"):
            assert 1.05 <= fp8q[fw][op]["m>256"]["over_chalk"]["median"] <= 1.7, (fw, op)


# ---- whole decode steps, one CUDA graph each (steps.csv: scripts/device_steps.py on a third lease of the same kind,
# SOURCE.md): a Llama-3.1-8B-shaped model in plain torch, bf16, TP1, against `chalk estimate` at the same shape
# (tp=1, bf16 weights, bf16 KV). Figures: `python scripts/compare_device.py`.


@pytest.fixture(scope="module")
def steps(cd):
    return cd.load_steps(DATA / "steps.csv")


@pytest.fixture(scope="module")
def step_cases(cd, steps):
    return cd.steps_vs_estimate(steps)


def test_steps_name_their_device_and_cover_the_grid(cd, steps):
    """64 rows: 16 (batch, context) cells x 2 attention variants x 2 passes, every one captured as one CUDA graph
    with FlashAttention running the grouped-query decode; the two cells over 100 GB (128 x 8192, 256 x 8192) skipped."""
    env = json.loads((DATA / "env_steps.json").read_text())
    assert env["device_name"] == "NVIDIA H200" and env["driver"] and env["model_config"]["layers"] == 32
    assert env["skipped"] == [[128, 8192], [256, 8192]]
    assert env["weight_bytes"] == 16060522496  # chalk's llama-3.1-8b weight_bytes (embedding and lm_head untied)
    with open(DATA / "steps.csv", newline="") as fh:
        allrows = list(csv.DictReader(fh))
    assert len(allrows) == 64 and not any(r["error"] for r in allrows)
    for r in allrows:
        for part in ("NVIDIA H200", f"driver {env['driver']}", f"torch {env['torch']}", f"CUDA {env['cuda']}",
                     env["date_utc"][:10], "scripts/device_steps.py"):
            assert part in r["source"], (part, r["source"])
        assert r["method"] == "one cuda graph per step, events" and r["attn_backend"] == "sdpa flash"
        assert r["rope"] == "True" and int(r["reps"]) >= 16
    cells = {(int(r["batch"]), int(r["context"])) for r in steps}
    assert len(steps) == 16 and cells == {(b, L) for b in (1, 8, 32, 64, 128, 256) for L in (512, 2048, 8192)
                                          if b * L <= 64 * 8192}
    # grouped-query attention without a KV copy: enable_gqa and the heads folded into query rows agree
    g = env["gqa_check"]
    assert g["max_abs_gqa_vs_fold"] < 1e-2 and g["max_abs_gqa_vs_fp32_ref"] < 1e-2


def test_steps_repeat_and_gqa_forms_agree(cd, steps):
    """Pass 2 re-timed every cell a few seconds later: median 0.998, p10-p90 0.995-1.000. SDPA's enable_gqa and the
    query heads folded into query rows (no GQA support needed) time the same to 1.3%: FlashAttention reads each KV
    head once either way (no repeated heads)."""
    again = {(r["batch"], r["context"]): float(r["measured_s"]) for r in cd.load_steps(DATA / "steps.csv", pass_=2)}
    fold = {(r["batch"], r["context"]): float(r["measured_s"]) for r in cd.load_steps(DATA / "steps.csv", "fold")}
    rr = cd.summary([float(r["measured_s"]) / again[(r["batch"], r["context"])] for r in steps])
    assert rr["rows"] == 16 and 0.99 <= rr["median"] <= 1.01 and rr["p10"] >= 0.97 and rr["p90"] <= 1.03, rr
    rf = cd.summary([float(r["measured_s"]) / fold[(r["batch"], r["context"])] for r in steps])
    assert 0.97 <= rf["min"] and rf["max"] <= 1.03, rf


def test_steps_are_monotone_and_physical(steps, chip):
    """A longer context never gives a faster step at the same batch, nor a larger batch at the same context (in
    both variants and passes); no step moves its weights and KV faster than the device copy measured in the run
    (4.21 TB/s read + written) or the catalog's HBM bandwidth (measured at most 3.04 TB/s)."""
    env = json.loads((DATA / "env_steps.json").read_text())
    with open(DATA / "steps.csv", newline="") as fh:
        allrows = list(csv.DictReader(fh))
    by: dict = {}
    for r in allrows:
        by.setdefault((r["variant"], r["pass"]), {})[(int(r["batch"]), int(r["context"]))] = float(r["measured_s"])
    assert len(by) == 4
    for t in by.values():
        for (b, L), s in t.items():
            longer = [t[(b, L2)] for L2 in (512, 2048, 8192) if L2 > L and (b, L2) in t]
            larger = [t[(b2, L)] for b2 in (1, 8, 32, 64, 128, 256) if b2 > b and (b2, L) in t]
            assert all(x > s for x in longer + larger), (b, L)
    bw = [(float(r["weight_bytes"]) + float(r["kv_bytes"])) / float(r["measured_s"]) for r in allrows]
    assert max(bw) < env["copy_bytes_per_s"] and max(bw) < chip.hbm_bandwidth_bytes_per_s


def test_step_estimate_band_by_regime(cd, step_cases):
    """Measured step / `chalk estimate` (tp=1, bf16, bf16 KV). chalk's estimate carries a fitted overhead op (2.96 ms
    here: 2 ms fixed + 30 us x 32 layers, the refit of 2026-11-27: launches, scheduling, sampling sync) that a graph
    replay does not pay as such; the torch step pays instead ~16-28 small unfused kernels per layer (RMSNorm, RoPE,
    the KV write, SiLU*mul, residuals) that an engine fuses. Weight-read-bound cells (KV bytes < weight bytes, 10
    cells): as is median 0.82 (p10-p90 0.79-0.94), without the overhead op 1.35. KV-bound cells (6): as is 1.31,
    without overhead 1.66 (p90 1.74): torch's FlashAttention-2 decode streams long caches at ~2.5 TB/s where chalk's
    tables (engine decode kernels) stream near its ceiling. All 16: as is 0.90, without overhead 1.37. The overhead
    op is what the deployments without an engine profile in the validation set (LMDeploy, TGI, NIM, JAX) pull it to,
    and it is more than this graph replay pays beyond chalk's ops (a median 1.63 ms over the weight-bound cells): the
    shipped fit (1 ms + 10 us per layer, 1.32 ms) made the as-is medians 1.05 and 1.09; a fit held under 1.63 ms
    cross-validated worse (19.3% against 16.65%) and was not shipped (calibration.OVERHEAD_FIXED_S). The ops without
    the overhead are never slower than the step."""
    s = cd.steps_summary(step_cases)
    assert s["weights"]["as_is"]["rows"] == 10 and s["kv"]["as_is"]["rows"] == 6
    assert 0.85 <= s["all"]["as_is"]["median"] <= 1.30 and 1.20 <= s["all"]["no_overhead"]["median"] <= 1.55, s["all"]
    w, kv = s["weights"], s["kv"]
    assert 0.78 <= w["as_is"]["median"] <= 1.20 and w["as_is"]["p10"] >= 0.75 and w["as_is"]["p90"] <= 1.3, w
    assert 1.20 <= w["no_overhead"]["median"] <= 1.50, w
    assert 1.20 <= kv["as_is"]["median"] <= 1.75 and 1.45 <= kv["no_overhead"]["median"] <= 1.90, kv
    assert kv["no_overhead"]["median"] > w["no_overhead"]["median"] + 0.15
    assert min(c["measured_s"] / (c["estimate_s"] - c["overhead_s"]) for c in step_cases) >= 1.1


def test_step_gap_is_torchs_attention_and_unfused_tail(cd, step_cases, rows):
    """Split by the same kernels timed alone (kernels.csv, an earlier lease of the same kind; 8 cells where it has the
    shapes): the step's 128 weight GEMMs take what chalk's GEMM ops say to 11% (alone / chalk 1.03-1.11); at
    KV-bound cells torch's decode attention alone is ~1.6x chalk's attention op; with chalk's attention op replaced by
    the kernel timed alone the estimate without overhead is within 1.12-1.39 of the step: what is left is the
    unfused elementwise tail (~1.3-4 ms against chalk's lm_head + elementwise 0.26-0.51 ms, which its 1.32 ms overhead
    op roughly covers at small batch)."""
    dec = cd.steps_decomposition(step_cases, rows)
    assert len(dec) == 8
    for d in dec:
        assert 0.95 <= d["gemms_alone_s"] / d["gemms_chalk_s"] <= 1.15, d
        assert d["rest_s"] > d["rest_chalk_s"], d
        assert 1.0 <= d["swapped"] <= 1.45, d
    kv = [d for d in dec if d["regime"] == "kv"]
    assert kv and all(1.4 <= d["attention_alone_s"] / d["attention_chalk_s"] <= 1.8 for d in kv), kv
    no_ovh = {(c["batch"], c["context"]): c["measured_s"] / (c["estimate_s"] - c["overhead_s"]) for c in step_cases}
    assert all(d["swapped"] < no_ovh[(d["batch"], d["context"])] for d in kv)
