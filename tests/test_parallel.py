"""Parallel layouts: collective costs, memory per chip, pipelines, the MoE rack layout, lecture claims."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from chalk.analyses.step import parallel as par
from chalk.analyses.step.calibration import calibration
from chalk.equations import parallel as P
from chalk.errors import FitError, InputError
from chalk.specs.catalog import load_model, load_system


# -- equations -------------------------------------------------------------------------
def test_ring_allreduce_known_message():
    # 1 GB over 8 chips at 450 GB/s one way (H100 NVLink4 = 900 GB/s bidirectional): 2*7/8 GB / 450 GB/s
    t = P.ring_allreduce_time_s(1e9, 8, 450e9)
    assert float(t) == pytest.approx(1.75e9 / 450e9, rel=1e-12)
    assert float(t) == pytest.approx(3.8889e-3, rel=1e-4)
    # alpha: 2(n-1) hops
    assert float(P.ring_allreduce_time_s(1e9, 8, 450e9, latency_s=1e-6)) == pytest.approx(float(t) + 14e-6)
    assert float(P.ring_allreduce_time_s(1e9, 1, 450e9, latency_s=1e-6)) == 0.0
    assert float(P.allreduce_bytes_per_link(1e9, 2)) == pytest.approx(1e9)


def test_allreduce_hops_on_a_torus():
    # a 16-chip slice of a 2D torus is 4 x 4: reduce-scatter and all-gather along each axis of 4, 2 * 2 * 3 = 12
    # hops one after another, against a 16-chip ring's 2 * 15 = 30 (scaling-book ch. 3; ASTRA-sim's TPU validation)
    assert float(P.allreduce_hops(16, 2)) == pytest.approx(12.0)
    assert float(P.allreduce_hops(64, 3)) == pytest.approx(18.0)  # 4 x 4 x 4 cube: 2 * 3 * 3
    assert float(P.allreduce_hops(16)) == 30.0 and float(P.allreduce_hops(1, 2)) == 0.0
    # never more hops than the ring, whatever the group
    n = np.arange(1, 300, dtype=float)
    for d in (2, 3):
        assert np.all(P.allreduce_hops(n, d) <= P.allreduce_hops(n) + 1e-12)
    # the bytes are the ring's: only the latency term changes
    t_ring = P.ring_allreduce_time_s(131072, 16, 200e9, latency_s=1e-6)
    t_torus = P.ring_allreduce_time_s(131072, 16, 200e9, latency_s=1e-6, torus_dims=2)
    assert float(t_ring - t_torus) == pytest.approx(18e-6)


def test_tpu_step_times_its_all_reduce_on_the_torus():
    # TPU ICI is a torus (catalog scaleup_torus_dims): the same TP16 decode step on a chip described as switched
    # (dims 0) exposes more all-reduce latency, 160 all-reduces x (30 - 12) hops x 1 us at this small batch
    import dataclasses

    from chalk.specs.catalog import load_chip

    tpu = load_system("tpu-v5e-256")
    assert tpu.chip.scaleup_torus_dims == 2 and load_chip("h100-sxm").scaleup_torus_dims == 0
    flat = dataclasses.replace(tpu, chip=dataclasses.replace(tpu.chip, scaleup_torus_dims=0))
    m, cal = load_model("llama-3.1-70b"), calibration()
    costs = par.step_costs(m, tpu, "int8", None)[2]
    torus, ring = (float(par.stage_step(costs, s, 16, 1, 1, 1, 8.0, 0.0, 2048.0, 1.0, cal)["ops"]["allreduce"].time_s)
                   for s in (tpu, flat))
    assert float(ring - torus) == pytest.approx(160 * 18e-6, rel=1e-6)


def test_alltoall_bytes_and_remote_shares():
    # DeepSeek-V3 dispatch of 128 tokens, top-8, hidden 7168, FP8: 128*8*7168 bytes
    assert float(P.alltoall_bytes_per_chip(128, 8, 7168, 1.0)) == 7_340_032
    intra, inter = P.ep_remote_fractions(72, 72)
    assert float(intra) == pytest.approx(71 / 72) and float(inter) == 0
    intra, inter = P.ep_remote_fractions(144, 72)
    assert float(intra) == pytest.approx(71 / 144) and float(inter) == pytest.approx(0.5)
    assert float(P.remote_domain_copies(8, 72, 72)) == 0
    assert float(P.remote_domain_copies(8, 144, 72)) == pytest.approx(1 - 0.5 ** 8)
    # deduplicated per remote domain: never more than k copies, never more than the remote domains
    r = P.remote_domain_copies(8, np.array([16, 64, 256, 1024]), 8)
    assert np.all(r <= 8) and np.all(r <= np.array([1, 7, 31, 127])) and np.all(np.diff(r) > 0)


def test_alltoall_time_takes_the_slower_link():
    t = P.alltoall_time_s(9e8, 5e7, 900e9, 50e9)
    assert float(t) == pytest.approx(1e-3)  # 50 MB over 50 GB/s beats 900 MB over 900 GB/s
    assert float(P.alltoall_time_s(0.0, 0.0, 900e9, 50e9, latency_s=1e-5)) == 0.0


def test_pipeline_bubble_3_over_11_and_interleaved():
    assert float(P.pipeline_bubble_fraction(4, 8)) == pytest.approx(3 / 11)
    assert float(P.pipeline_bubble_fraction(4, 8, interleave=2)) == pytest.approx(3 / 19)
    assert float(P.pipeline_bubble_fraction(1, 8)) == 0.0


def test_overlap_bounds():
    c, m = np.array([3.0, 1.0]), np.array([1.0, 3.0])
    assert np.allclose(P.overlapped_time_s(c, m), 3.0)
    assert np.allclose(P.overlapped_time_s(c, m, 0.0), 4.0)
    assert np.all(P.overlapped_time_s(c, m, 0.3) <= c + m) and np.all(P.overlapped_time_s(c, m, 0.3) >= 3.0)


def test_kv_per_chip_independent_of_pp_weights_fall():
    kv = [float(P.kv_bytes_per_chip(1e6, 64, 1, p, 1.0)) for p in (1, 2, 4, 8)]
    assert kv == [kv[0]] * 4
    w = [float(P.weight_bytes_per_chip(8e11, 0, 8, 1, p)) for p in (1, 2, 4, 8)]
    assert w == pytest.approx([1e11, 5e10, 2.5e10, 1.25e10])


def test_kv_shard_gqa_vs_mla():
    assert float(P.kv_shard_fraction(8, 8)) == pytest.approx(1 / 8)
    assert float(P.kv_shard_fraction(8, 16)) == pytest.approx(1 / 8)  # replicated past the KV heads
    assert float(P.kv_shard_fraction(1, 8, head_shardable=False)) == 1.0  # MLA latent is not head-shardable


# -- layouts and memory ------------------------------------------------------------------
def test_enumerate_layouts_cover_the_gpus():
    m = load_model("llama-3.1-70b")
    lays = par.enumerate_layouts(m, 8, 8)
    assert lays and all(l.gpus == 8 for l in lays)
    assert {l.tp for l in lays} == {1, 2, 4, 8}
    assert all(l.ep == 1 and l.attn_dp == 1 for l in lays)
    moe = par.enumerate_layouts(load_model("deepseek-v3"), 72, 72)
    assert any(l.attn_dp == 72 and l.ep == 72 for l in moe)
    assert all(m.num_heads % l.tp == 0 and l.tp <= 72 for l in moe)
    with pytest.raises(InputError):
        par.enumerate_layouts(m, 0, 8)


def test_memory_per_chip_shards_weights_and_kv():
    m = load_model("llama-3.1-70b")
    costs = par.model_costs(m, "fp8", "bf16")
    w1, kv1 = par.memory_per_chip(costs, 1, 1, 1, 1, 10, 4096)
    w8, kv8 = par.memory_per_chip(costs, 8, 1, 1, 1, 10, 4096)
    assert float(w8) == pytest.approx(float(w1) / 8)
    assert float(kv8) == pytest.approx(float(kv1) / 8)
    assert float(kv1) == pytest.approx(10 * 327_680 * 4096)  # README convention 4
    ds = par.model_costs(load_model("deepseek-v3"), None, "bf16")
    _, kv = par.memory_per_chip(ds, 8, 1, 1, 8, 1, 1000)
    assert float(kv) == pytest.approx(70_272 * 1000)  # MLA latent replicated across the TP group


def test_stage_step_monotone_in_batch_and_ideal_faster():
    m = load_model("deepseek-v3")
    s = load_system("gb200-nvl72")
    costs = par.model_costs(m, "fp8", "fp8")
    B = np.array([8.0, 64, 512, 4096])
    cal = calibration()
    t = par.stage_step(costs, s, 1, 8, 1, 8, B, 0.0, 4096, 1.0, cal)["stage_time_s"]
    assert np.all(np.diff(t) > 0)
    ti = par.stage_step(costs, s, 1, 8, 1, 8, B, 0.0, 4096, 1.0, calibration(ideal=True))["stage_time_s"]
    assert np.all(ti < t)


def test_pipeline_analysis_kv_constant_weights_fall():
    pa = par.pipeline_analysis(load_model("llama-3.1-405b"), load_system("hgx-h200"), precision="fp8", tp=8)
    rows = pa["rows"]
    assert [r["pp"] for r in rows] == [1, 2, 4, 8]
    kv = [r["kv_bytes_per_gpu"] for r in rows]
    assert max(kv) == pytest.approx(min(kv))
    w = [r["weight_bytes_per_gpu"] for r in rows]
    assert w == pytest.approx([w[0] / p for p in (1, 2, 4, 8)])
    assert rows[2]["training_bubble"] == pytest.approx(3 / 11)
    assert all(b["latency_penalty"] > a["latency_penalty"] for a, b in zip(rows, rows[1:]))


def test_moe_rack_layout_spill_costs():
    r = par.moe_rack_layout(load_model("deepseek-v3"), load_system("gb200-nvl72"))
    assert r["applies"] and r["ep_inside_domain"] == 72 and r["ep_spilled"] == 144
    assert r["scaleout_slowdown"] == pytest.approx(18.0)
    assert r["alltoall_slowdown_when_spilled"] > 1 and r["step_slowdown_when_spilled"] > 1
    assert not par.moe_rack_layout(load_model("llama-3.1-8b"), load_system("hgx-h100"))["applies"]


def test_layout_report_fit_error():
    with pytest.raises(FitError):
        par.layout_report(load_model("deepseek-v3"), load_system("hgx-h100"), gpus=1)


def test_layout_report_kv_per_sequence_per_gpu_splits_over_tp_and_pp():
    """One sequence's KV at 4,096 tokens on Llama-3.1-70B (80 layers x 8 KV heads x 128 x 2 x 2 bytes = 327,680 B per
    token, 1.34 GB) is split over the GPUs that hold it: 4 ways by TP4 (8 KV heads) and 4 ways by PP4 alike; the
    PP rows showed the whole 1.34 GB (QA 2026-11-28)."""
    rows = {(r["tp"], r["pp"]): r for r in par.layout_report(load_model("llama-3.1-70b"), load_system("hgx-h100"),
                                                             precision="bf16", kv_precision="bf16",
                                                             context=4096)["layouts"]}
    whole = 327_680 * 4096
    assert rows[(1, 1)]["kv_bytes_per_sequence_per_gpu"] == pytest.approx(whole, rel=1e-9)
    for tp, pp in ((4, 1), (1, 4), (2, 2)):
        assert rows[(tp, pp)]["kv_bytes_per_sequence_per_gpu"] == pytest.approx(whole / 4, rel=1e-9)


def test_claims():
    cs = {c.id: c for c in par.claims()}
    assert set(cs) == {"scale_out_slowdown", "pipeline_kv_per_gpu_constant", "pipeline_training_bubble"}
    assert cs["pipeline_training_bubble"].value == pytest.approx(3 / 11)
    assert cs["pipeline_training_bubble"].within_lecture_range
    kv = cs["pipeline_kv_per_gpu_constant"].value
    assert len(kv) == 4 and max(kv) == min(kv)
    assert cs["scale_out_slowdown"].value == pytest.approx(18.0) and cs["scale_out_slowdown"].within_lecture_range
    for c in cs.values():
        d = c.to_dict()
        assert {"id", "value", "unit", "lecture_value", "assumptions", "explanation", "lecture_range"} <= set(d)


def test_cli_layout_json_and_errors():
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "layout", "--model", "deepseek-v3", "--hardware",
                        "gb200-nvl72", "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {"layouts", "moe_rack_layout", "pipeline"} <= set(d)
    assert d["moe_rack_layout"]["ep_inside_domain"] == 72
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", "layout", "--model", "deepseek-v3", "--hardware",
                        "h100", "--gpus", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "does not fit" in p.stderr


# -- MoE expert work -----------------------------------------------------------------------
def test_grouped_gemm_efficiency_reproduces_deepgemm_masked_table():
    from chalk.equations import moe as MOE
    # DeepGEMM README (H800, FP8), masked grouped GEMMs over the dense M = 4096 GEMM of the same shape:
    # 4096 x 7168: 1233 / 1040 / 932 vs 1304 TFLOPS; 7168 x 2048: 925 / 916 / 815 vs 1025 TFLOPS
    m = np.array([1024, 512, 256])
    measured = np.array([[1233, 1040, 932], [925, 916, 815]]) / np.array([[1304], [1025]])
    eta = MOE.grouped_gemm_efficiency(m, 86)
    assert np.all(np.abs(eta - measured) < 0.1)
    assert float(np.mean(np.abs(eta - measured))) < 0.05
    assert float(MOE.grouped_gemm_efficiency(256, 86)) == pytest.approx(256 / 342)
    assert np.all(np.diff(MOE.grouped_gemm_efficiency([1, 10, 100, 1000, 10000], 86)) > 0)
    assert float(MOE.grouped_gemm_efficiency(1e7, 86)) == pytest.approx(1.0, abs=1e-4)
    assert float(MOE.grouped_gemm_efficiency(3, 0.0)) == 1.0  # m_half = 0: no penalty (the ideal calibration)


def test_max_load_factor_balls_in_bins():
    from chalk.equations import moe as MOE
    # 1,000 copies over 8 chips: 1 + sqrt(2 ln 8 / 125)
    assert float(MOE.max_load_factor(1000, 8)) == pytest.approx(1 + np.sqrt(2 * np.log(8) / 125))
    assert float(MOE.max_load_factor(1000, 8)) == pytest.approx(1.1824, abs=1e-4)
    assert float(MOE.max_load_factor(1000, 1)) == 1.0 and float(MOE.max_load_factor(0, 8)) == 1.0
    assert float(MOE.max_load_factor(1, 8)) <= 8.0 and float(MOE.max_load_factor(1e-3, 8)) == 8.0  # capped
    f = MOE.max_load_factor(np.array([1e2, 1e3, 1e4, 1e5]) * 72, 72)
    assert np.all(np.diff(f) < 0) and float(f[-1]) < 1.01  # the spread averages away at large batches
    # against a direct simulation: an upper estimate, within 50% of the simulated excess
    rng = np.random.default_rng(0)
    for n, lam in ((8, 125), (72, 2048)):
        sim = np.mean([np.bincount(rng.integers(0, n, n * lam), minlength=n).max() / lam for _ in range(200)])
        excess = float(MOE.max_load_factor(n * lam, n)) - 1
        assert (sim - 1) < excess < 1.5 * (sim - 1)


def test_expert_slowdown_in_the_stage_step():
    import dataclasses

    from chalk.analyses.step import step_model as SM
    m = load_model("deepseek-v3")
    s = load_system("gb200-nvl72")
    costs = par.model_costs(m, "fp8", "fp8")
    cal = calibration()
    assert cal.moe_gemm_half_tokens > 0 and cal.moe_load_imbalance
    ideal = calibration(ideal=True)
    assert ideal.moe_gemm_half_tokens == 0 and not ideal.moe_load_imbalance
    tokens = np.array([64.0, 1024, 16384, 262144])
    slow = SM.expert_slowdown(m, tokens, 8, 8, cal)
    assert np.all(slow > 1) and np.all(np.diff(slow) < 0)  # fewer tokens per expert: slower per FLOP
    # 16,384 tokens x 8 / 256 experts = 512 per expert; 131,072 copies over 8 chips
    lam = 16384 * 8 / 8
    assert float(slow[2]) == pytest.approx((1 + np.sqrt(2 * np.log(8) / lam)) * (512 + 86) / 512)
    tp_sharded = SM.expert_slowdown(m, tokens, 1, 8, cal)  # attn_dp = 1: experts TP-sharded, no imbalance
    assert np.allclose(tp_sharded, (tokens * 8 / 256 + 86) / (tokens * 8 / 256))
    assert np.all(SM.expert_slowdown(m, tokens, 8, 8, ideal) == 1.0)
    cal = dataclasses.replace(cal, use_kernel_tables=False)  # the roofline fallback is where these terms live
    assert SM.expert_slowdown(load_model("llama-3.1-70b"), tokens, 1, 1, cal) == 1.0
    # the step: slower with the MoE terms, unchanged for a dense model
    off = dataclasses.replace(cal, moe_gemm_half_tokens=0.0, moe_load_imbalance=False)
    B = np.array([64.0, 512, 4096, 32768])  # the terms show where compute binds: the largest steps
    t_on = par.stage_step(costs, s, 1, 8, 1, 8, B, B, 2000, 2000, cal)["stage_time_s"]
    t_off = par.stage_step(costs, s, 1, 8, 1, 8, B, B, 2000, 2000, off)["stage_time_s"]
    assert np.all(t_on >= t_off) and np.any(t_on > t_off * 1.01)
    dense = par.model_costs(load_model("llama-3.1-70b"), "fp8", "fp8")
    d_on = par.stage_step(dense, load_system("hgx-h100"), 8, 1, 1, 1, B, B, 2000, 2000, cal)["stage_time_s"]
    d_off = par.stage_step(dense, load_system("hgx-h100"), 8, 1, 1, 1, B, B, 2000, 2000, off)["stage_time_s"]
    assert np.allclose(d_on, d_off)


def test_an_all_reduce_across_scale_up_domains_pays_the_scale_out_link():
    """A TP group wider than its scale-up domain (TP16 over two 8-GPU H100 hosts): a ring in each host on NVLink,
    then across hosts on the NIC with each GPU's 1/8 share (NCCL's hierarchical all-reduce). Within one domain it is
    the plain ring; across, never cheaper than the ring inside the domain alone, and at a large message the NIC's
    50 GB/s (vs 450 on NVLink) makes it slower than a 16-GPU ring on NVLink would be (what chalk timed before; QA
    2026-11-28). `estimate` says which link it timed."""
    import chalk
    from chalk.equations.parallel import hierarchical_allreduce_time_s, ring_allreduce_time_s

    up, out, a_up, a_out = 450e9, 50e9, 1e-6, 5e-6
    for M in (1e4, 1e6, 1e8):
        same = hierarchical_allreduce_time_s(M, 8, 8, up, a_up, out, a_out, 0.75)
        assert same == pytest.approx(ring_allreduce_time_s(M, 8, up, a_up, 0.75), rel=1e-12)
        two = hierarchical_allreduce_time_s(M, 16, 8, up, a_up, out, a_out, 0.75)
        assert two > same
    big = 1e8
    assert hierarchical_allreduce_time_s(big, 16, 8, up, a_up, out, a_out, 0.75) > \
        ring_allreduce_time_s(big, 16, up, a_up, 0.75)
    r = chalk.estimate("deepseek-r1", "h100", batch=64, layout="tp=16,ep=16")
    ar = next(o for o in r.ops if o["name"] == "allreduce")
    assert "scale-out NIC" in ar["detail"]


def test_the_layout_reports_pipeline_table_is_at_its_context():
    """`chalk layout --context 32768` printed its pipeline table 'at 8192 tokens': the table now takes the
    question's context and KV precision, so its KV per GPU is the layouts' own."""
    m, s = load_model("llama-3.1-70b"), load_system("hgx-h100")
    r = par.layout_report(m, s, 8, None, "fp8", 32768)
    assert r["pipeline"]["context"] == 32768
    base = par.pipeline_analysis(m, s, None, context=32768, kv_precision="fp8")
    assert r["pipeline"] == base


def test_experts_that_do_not_divide_over_ep_are_said_so():
    """QA 2026-11-28: Mixtral's 8 experts over EP3 were estimated without a word. The note says they are timed at
    their mean per rank, what the busiest rank holds, and the redundant slots an even sharding needs."""
    from chalk.api import estimate

    notes = estimate("mixtral-8x7b", "h100-sxm", batch=16, layout="tp=1,attn_dp=3").to_dict()["notes"]
    assert any("the 8 routed experts do not divide over expert-parallel 3" in n and "busiest rank holds 3" in n
               and "needs 1 redundant expert slot " in n for n in notes), notes
    assert not any("do not divide" in n for n in estimate("mixtral-8x7b", "h100-sxm", batch=16,
                                                          layout="tp=1,attn_dp=4").to_dict()["notes"])


@pytest.mark.parametrize("model, chip, batch, context, layout", [
    ("deepseek-v3", "h200", 41, 131072, "tp=1,ep=8,attn_dp=8"),
    ("qwen3-235b-a22b", "tpu-v6e", 48, 32768, "tp=1,ep=64,attn_dp=64"),
    ("llama-3.1-70b", "a100-sxm", 3, 2304, "tp=1,pp=2"),
])
def test_fits_agrees_with_the_most_sequences_that_fit(model, chip, batch, context, layout):
    """`fits` holds exactly up to `max_batch_fit`: attention-DP ranks hold whole sequences (the busiest holds
    ceil(B / attn_dp)), and pipeline stages hold their layers of every sequence (no rounding to multiples of pp).
    QA 2026-11-28: DeepSeek-V3 at 41 sequences over 8 ranks 'fitted' beside a max of 40, Qwen3-235B on 64 TPU
    ranks beside a max of 0 (throughput refused it), and Llama-70B TP1 PP2 at 3 beside a max of 2."""
    from chalk.api import estimate

    r = estimate(model, chip, batch=batch, context=context, layout=layout)
    n = int(r.max_batch_fit)
    assert r.fits == (batch <= n)
    if n >= 1:
        assert estimate(model, chip, batch=n, context=context, layout=layout).fits
    assert not estimate(model, chip, batch=n + 1, context=context, layout=layout).fits
