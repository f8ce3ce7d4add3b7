"""The one step model: ops that add up, the same step time from every command, fixed deployments, speculation in
the search, and one-line errors for bad layouts, engines and serving options."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chalk
from chalk.analyses.traffic import simulate as sim
from chalk.analyses.step.calibration import calibration
from chalk.analyses.step.estimate import make_layout, parse_layout
from chalk.analyses.traffic.serving import Speculation, fixed_deployment, prefill_step_tokens, throughput
from chalk.errors import ChalkError, FitError, InputError, UnknownNameError


def run(*args):
    p = subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 2048), context=st.floats(16, 131072), layout=st.sampled_from(
    ["tp=1,attn_dp=8", "tp=8", "tp=4,pp=2", "tp=2,attn_dp=4"]), model=st.sampled_from(["deepseek-v3", "qwen3-30b-a3b"]))
def test_ops_add_up_to_the_step_and_are_non_negative(batch, context, layout, model):
    r = chalk.estimate(model, "gb200-nvl72", batch, context, layout=layout)
    assert sum(o["time_s"] for o in r.ops) == pytest.approx(r.step_time_s, rel=1e-9)
    assert all(o["time_s"] >= 0 and o["flops"] >= 0 and o["bytes"] >= 0 for o in r.ops)
    assert any(o["name"] == "overhead" for o in r.ops)
    assert np.isfinite(r.step_time_s) and r.step_time_s > 0


@settings(max_examples=20, deadline=None)
@given(b=st.integers(1, 512))
def test_more_sequences_never_take_less_time(b):
    a = chalk.estimate("llama-3.1-70b", "hgx-h100", b, 4096, layout="tp=8")
    c = chalk.estimate("llama-3.1-70b", "hgx-h100", b + 16, 4096, layout="tp=8")
    assert c.step_time_s >= a.step_time_s


def test_estimate_defaults_to_the_smallest_tp_group_that_fits():
    r = chalk.estimate("llama-3.1-70b", "h100-sxm", 64, 4096)  # BF16 70B: 141 GB of weights + 86 GB of KV
    assert r.view == "layout" and r.layout["tp"] == 4 and r.fits
    small = chalk.estimate("llama-3.1-8b", "h100-sxm", 1, 1024)
    assert small.layout["tp"] == 1
    agg = chalk.estimate("llama-3.1-70b", "h100-sxm", 64, 4096, aggregate=True)
    assert agg.view == "aggregate" and agg.chips == 8 and agg.step_time_s < r.step_time_s  # the bound is faster


def test_estimate_matches_the_disaggregated_throughput_answer():
    """Issue 9: estimate at the layout and batch throughput --disaggregated chose gives its TPOT within 2%."""
    for model, hw in (("deepseek-v3", "gb200-nvl72"), ("llama-3.1-70b", "hgx-h100")):
        t = throughput(model, hw, input_len=2000, output_len=1000, disaggregated=True, speculative=None)  # the plain step
        p = t["parallelism"]
        if p["pp"] != 1:
            continue
        lay = f"tp={p['tp']},attn_dp={p['attn_dp']},pp=1"
        e = chalk.estimate(model, hw, int(t["batch_per_replica"]), 2000 + 1000 / 2, layout=lay)
        assert e.step_time_s == pytest.approx(t["tpot_s"], rel=0.02)


def test_fixed_mode_and_the_simulator_agree_on_tpot():
    """Issue 10: simulate (closed loop at the same layout and concurrency, in steady state) and fixed mode within
    5% on TPOT."""
    # lengths drawn as serving benchmarks draw them (uniform in [0.8 L, L]): equal lengths keep a closed loop in
    # lock-step, every request prefilled in the same step, which no benchmark run looks like
    rng = np.random.default_rng(0)
    n = 4000
    I, O = rng.integers(410, 513, n), rng.integers(205, 257, n)
    f = fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=64, input_len=float(I.mean()),
                         output_len=float(O.mean()))
    B = f["decoding_per_replica"]
    c_step = float(prefill_step_tokens(B, 1.0, I.mean(), O.mean(), I.mean())[0])  # a step carrying one prompt
    sc = sim.StepCost.from_step_model("llama-3.1-8b", "h100-sxm", "tp=1", batch=B, context=I.mean() + O.mean() / 2,
                                      prompt_len=I.mean(), prefill_tokens=c_step)
    # the same closed loop: 64 seats, each handed on the calibrated request latency after its request ends
    s = sim.simulate_continuous(sim.Requests.from_arrays(np.zeros(n), I, O), sc, max_batch=64, closed_loop=True,
                                client_latency_s=calibration().request_latency_s)
    assert float(np.nanmean(_steady(s.tpot_s, 64))) == pytest.approx(f["tpot_s"], rel=0.05)


def _steady(per_request, seats):
    """A closed loop's requests in steady state, as fixed mode models it: without the first wave (all sent at
    once) and the last `seats` requests (sent while the queue runs dry, decoding in a shrinking batch)."""
    return np.asarray(per_request)[seats:len(per_request) - seats]


@settings(max_examples=60, deadline=None)
@given(B=st.floats(1, 4096), Ip=st.floats(1, 131072), O=st.floats(1, 32768), piece=st.floats(1, 16384),
       a=st.sampled_from([1, 2, 4, 8, 32]), alignment=st.floats(0, 1))
def test_prefill_chunks_per_attention_dp_rank_conserve_the_prompt_load(B, Ip, O, piece, a, alignment):
    """Each attention-DP rank prefills its own chunks: the steps carrying chunks, times what they carry, is the
    prompt load (B Ip / O per step); the busiest rank holds one chunk (or its share of a load no chunk budget
    covers); aligning the ranks never makes chunk steps more frequent."""
    c, F, c_r = (float(v) for v in prefill_step_tokens(B, 1.0, Ip, O, piece, a, alignment))
    load = B * Ip / O
    assert 0 < F <= 1 and F * c == pytest.approx(load, rel=1e-9)
    assert c_r == pytest.approx(max(piece, load / a), rel=1e-12)
    assert c_r * (1 - 1e-12) <= c <= a * c_r * (1 + 1e-12)
    F_aligned = float(prefill_step_tokens(B, 1.0, Ip, O, piece, a, 1.0)[1])
    assert F_aligned <= F * (1 + 1e-12)
    if a == 1:  # one rank: the plain chunked-prefill rule, whatever the alignment
        assert c == pytest.approx(max(piece, load), rel=1e-12) and F == pytest.approx(load / c, rel=1e-12)


def test_an_attention_dp_replica_prefills_on_every_rank_at_once():
    """A DEP4 replica fed 32k-token prompts (TensorRT-LLM's Qwen3-235B-A22B B200 DEP4 32k/1k case) is not capped
    at one prompt per step: with each rank's chunks lined up, a step carrying prefill carries one on every rank,
    and the mean step is shorter than with the chunks placed independently."""
    from dataclasses import replace

    from chalk.analyses.step.calibration import CALIBRATION
    from chalk.analyses.step.parallel import model_costs
    from chalk.analyses.traffic.serving import mixed_step_s
    from chalk.specs.catalog import as_system

    c, F, c_r = prefill_step_tokens(148, 1.0, 32768, 1024, 32768, 4, 1.0)
    assert float(c) == pytest.approx(4 * 32768) and float(c_r) == 32768
    costs, system = model_costs(chalk.specs.catalog.as_model("qwen3-235b-a22b"), "fp4", "fp8"), as_system("b200")
    mean = {al: float(mixed_step_s(costs, system, 1, 4, 1, 4, 148.0, 1.0, 32768.0, 1024.0, 33280.0, 32768.0,
                                   32768.0, replace(CALIBRATION, dp_prefill_alignment=al))[0]) for al in (0.0, 1.0)}
    assert mean[1.0] < 0.7 * mean[0.0]


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 4096), extra=st.integers(1, 4096), per_seq=st.floats(1e-7, 5e-5),
       layout=st.sampled_from([(1, 1), (8, 1), (1, 4), (2, 4)]))
def test_host_time_per_sequence_adds_linearly_to_the_overhead_row(b, extra, per_seq, layout):
    """The fitted per-sequence host time: the overhead row grows by per_seq for each sequence the busiest rank's
    scheduler carries (sequences / attention-DP ranks), every other op is untouched, and the ideal roofline has
    none of it."""
    from dataclasses import replace

    from chalk.analyses.step.calibration import CALIBRATION, IDEAL_CALIBRATION
    from chalk.analyses.step.parallel import model_costs
    from chalk.analyses.step.step_model import stage_ops
    from chalk.specs.catalog import as_model, as_system

    tp, a = layout
    costs, system = model_costs(as_model("qwen3-30b-a3b"), "fp8", "fp8"), as_system("hgx-h100")
    cal0, cal1 = replace(CALIBRATION, overhead_per_seq_s=0.0), replace(CALIBRATION, overhead_per_seq_s=per_seq)

    def ops(cal, B):
        return stage_ops(costs, system, tp, a, 1, tp * a, float(B), 0.0, 2048.0, 1.0, cal, overlap="none")["ops"]

    lo0, lo1, hi1 = ops(cal0, b), ops(cal1, b), ops(cal1, b + extra)
    assert float(lo1["overhead"].time_s) - float(lo0["overhead"].time_s) == pytest.approx(per_seq * b / a, rel=1e-9)
    assert float(hi1["overhead"].time_s) - float(lo1["overhead"].time_s) == pytest.approx(per_seq * extra / a,
                                                                                        rel=1e-9)
    assert all(float(lo1[n].time_s) == float(lo0[n].time_s) for n in lo0 if n != "overhead")
    ideal = replace(IDEAL_CALIBRATION, overhead_per_seq_s=per_seq)
    assert float(ops(ideal, b)["overhead"].time_s) == 0.0


def test_fixed_mode_and_the_simulator_agree_on_tpot_under_attention_dp():
    """The simulator's step cost for an attention-DP replica (secant to a step carrying each rank's chunk, a chunk
    budget per rank) gives fixed mode's mean TPOT within 5% in steady state."""
    rng = np.random.default_rng(1)
    n = 4000
    I, O = rng.integers(1640, 2049, n), rng.integers(205, 257, n)
    kw = dict(layout="tp=1,attn_dp=4,ep=4", concurrency=256, input_len=float(I.mean()), output_len=float(O.mean()))
    f = fixed_deployment("qwen3-30b-a3b", "h100-sxm", **kw)
    from chalk.analyses.traffic.serving import replica_step_cost

    sc = replica_step_cost(chalk.specs.catalog.as_model("qwen3-30b-a3b"), chalk.specs.catalog.as_system("h100-sxm"),
                           "tp=1,attn_dp=4,ep=4", f["decoding_per_replica"], float(I.mean()), float(O.mean()),
                           precision=f["precision"], kv_precision=f["kv_precision"])
    s = sim.simulate_continuous(sim.Requests.from_arrays(np.zeros(n), I, O), sc, max_batch=256, closed_loop=True,
                                client_latency_s=calibration().request_latency_s)
    assert float(np.nanmean(_steady(s.tpot_s, 256))) == pytest.approx(f["tpot_s"], rel=0.05)


def test_a_disaggregated_deployment_admits_what_its_prefill_pool_can_prefill():
    """Disaggregated fixed mode: requests per second never exceed what the prefill GPUs prefill
    (`_prefill_pool_requests_per_s`); with a pool too small the rest wait for their prompt (longer TTFT, fewer
    decoding), and a larger pool never serves less."""
    from chalk.analyses.traffic.serving import _prefill_pool_requests_per_s, _serving_setup

    kw = dict(layout="tp=1", concurrency=256, input_len=4000, output_len=200, decode_gpus=1)
    small, big = (fixed_deployment("llama-3.1-8b", "h100-sxm", gpus=g, **kw) for g in (2, 3))
    m, system, _, _, _, _, cal, _, costs, kern = _serving_setup("llama-3.1-8b", "h100-sxm", 4000, 200, None, "auto",
                                                                False, None, None, None)
    x_pool = _prefill_pool_requests_per_s(costs, system, make_layout(m, "tp=1"), 1, 4000.0, 4000.0, cal, kern,
                                          None)
    x_small = small["output_tokens_per_s_per_gpu"] * 2 / 200
    assert x_small == pytest.approx(x_pool, rel=0.02)
    assert big["output_tokens_per_s_per_gpu"] * 3 / 200 > 1.5 * x_small
    assert small["ttft_s"] > 2 * big["ttft_s"] and small["decoding_per_replica"] < big["decoding_per_replica"]


def test_throughput_runs_a_fixed_disaggregated_deployment_it_is_asked_for():
    """`--disaggregated` with `--layout --concurrency` is the disaggregated fixed deployment (decode on --gpus,
    prefill on --prefill-gpus), not the aggregated one with the flag dropped."""
    kw = dict(layout="tp=1", concurrency=256, input_len=4000, output_len=200)
    r = throughput("llama-3.1-8b", "hgx-h100", gpus=1, prefill_gpus=1, disaggregated=True, **kw)
    f = fixed_deployment("llama-3.1-8b", "hgx-h100", gpus=2, decode_gpus=1, **kw)
    agg = throughput("llama-3.1-8b", "hgx-h100", gpus=2, **kw)
    assert r["disaggregated"] and (r["decode_gpus"], r["prefill_gpus"], r["gpus"]) == (1, 1, 2)
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(f["output_tokens_per_s_per_gpu"], rel=1e-12)
    assert not agg["disaggregated"] and agg["output_tokens_per_s_per_gpu"] != pytest.approx(
        r["output_tokens_per_s_per_gpu"], rel=0.01)
    code, out, err = run("throughput", "-m", "llama-3.1-8b", "-H", "hgx-h100", "--input-len", "4000",
                         "--output-len", "200", "--layout", "tp=1", "--concurrency", "256", "--gpus", "1",
                         "--prefill-gpus", "1", "--disaggregated", "--json")
    assert code == 0, err
    assert json.loads(out)["output_tokens_per_s_per_gpu"] == pytest.approx(r["output_tokens_per_s_per_gpu"])


def test_a_disaggregated_prefill_pool_must_hold_its_workers():
    """QA sweep 2026-11-27: the prefill pool was never checked against its workers: DeepSeek-R1 DEP16 decode with one
    prefill GPU ran the 16-GPU decode layout as its prefill worker (1,442 tokens/s per GPU, and 3 prefill GPUs
    ranked above 8), and an explicit TP1 prefill worker was accepted for 671 GB of weights on a 186 GB GB200."""
    kw = dict(layout="tp=1,attn_dp=16", concurrency=1229, input_len=1024, output_len=1024, gpus=17, decode_gpus=16)
    with pytest.raises(InputError, match="do not divide into prefill workers of 16"):
        fixed_deployment("deepseek-r1", "gb200-nvl72", **kw)
    with pytest.raises(FitError, match="prefill layout TP1"):
        fixed_deployment("deepseek-r1", "gb200-nvl72", **{**kw, "gpus": 20}, prefill_layout="tp=1")


def test_fixed_mode_contract_and_littles_law():
    f = fixed_deployment("deepseek-r1", "b200", layout="tp=8", concurrency=64, input_len=1024, output_len=1024)
    for k in ("output_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "ttft_s", "tpot_s", "ttft_p99_s",
              "tpot_p99_s", "user_tokens_per_s", "parallelism"):
        assert k in f
    # closed loop: requests in flight = completions per second x time per request (Little's law), in SI units;
    # the engine holds at most the requests in flight
    X = f["output_tokens_per_s_per_gpu"] * 8 / 1024
    assert X * (f["ttft_s"] + f["tpot_s"] * (1024 - 1)) == pytest.approx(64, rel=0.03)
    assert f["decoding_per_replica"] <= 64
    more = fixed_deployment("deepseek-r1", "b200", layout="tp=8", concurrency=256, input_len=1024, output_len=1024)
    assert more["output_tokens_per_s_per_gpu"] > f["output_tokens_per_s_per_gpu"] and more["tpot_s"] > f["tpot_s"]


def test_speculation_in_the_search_reaches_fast_deepseek():
    """Issue 10: DeepSeek-R1 at >= 75 tok/s per user is answered with MTP, and the search says what it bought."""
    r = throughput("deepseek-r1", "b200", input_len=1024, output_len=1024, min_user_tps=75,
                   speculative=Speculation(3, 0.7))
    assert r["user_tokens_per_s"] >= 75 and r["speculative"]["used"]
    assert r["speculative"]["tokens_per_step"] == pytest.approx((1 - 0.7 ** 4) / (1 - 0.7))


def test_length_distribution_holds_kv_longer():
    flat = throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=3790)
    tail = throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len="lognormal:mean=3790,p99=15000")
    assert tail["output_len"] == pytest.approx(3790, rel=1e-6)
    assert tail["mean_decode_context"] > flat["mean_decode_context"] * 1.3


def test_compare_mode_json():
    rc, out, err = run("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm,h200", "--input-len", "500",
                       "--output-len", "200", "--json")
    assert rc == 0, err
    rows = json.loads(out)["compare"]
    assert [r["hardware"] for r in rows] == ["h100-sxm", "h200"]
    assert rows[1]["output_tokens_per_s_per_gpu"] > rows[0]["output_tokens_per_s_per_gpu"]  # more HBM bandwidth


def test_layout_parsing():
    assert parse_layout("tp=8,ep=8,pp=1,attn_dp=8") == {"tp": 8, "ep": 8, "pp": 1, "attn_dp": 8}
    from chalk.specs.catalog import load_model

    lay = make_layout(load_model("deepseek-v3"), "tp=1,ep=8,attn_dp=8")
    assert lay.ep == 8 and lay.replica_gpus == 8
    for bad in ("tp8", "tp=0", "tp=1.5", "xx=2", "tp=2,tp=4", "", "tp=2,,", ",tp=2", "tp=2,,pp=1"):
        with pytest.raises(InputError):
            parse_layout(bad)
    with pytest.raises(InputError):
        make_layout(load_model("llama-3.1-70b"), "tp=3")  # 64 heads / 8 KV heads
    with pytest.raises(InputError):
        make_layout(load_model("deepseek-v3"), "tp=1,ep=4,attn_dp=8")


BAD = [
    (["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=eight"], "layout"),
    (["estimate", "-m", "llama-3.1-70b", "-H", "hgx-h100", "--layout", "tp=3"], "heads"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "100", "--output-len", "100",
      "--engine", "nosuch"], "engine"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "100", "--output-len", "100",
      "--layout", "tp=1", "--concurrency", "0"], "concurrency"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "100", "--output-len", "100",
      "--mtp", "2", "--acceptance", "1.5"], "acceptance"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "100", "--output-len", "100",
      "--mtp", "0"], "draft"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "lognormal:mean=", "--output-len",
      "100"], "lognormal"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm,nosuch", "--input-len", "100", "--output-len", "100"],
     "nosuch"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "hgx-h100", "--input-len", "100", "--output-len", "100",
      "--layout", "tp=1", "--concurrency", "8", "--disaggregated"], "--prefill-gpus"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "hgx-h100", "--input-len", "100", "--output-len", "100",
      "--prefill-gpus", "2"], "--prefill-gpus"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "hgx-h100", "--input-len", "100", "--output-len", "100",
      "--layout", "tp=1", "--concurrency", "8", "--disaggregated", "--prefill-gpus", "0"], "prefill_gpus"),
    (["throughput", "-m", "llama-3.1-8b", "-H", "hgx-h100", "--input-len", "100", "--output-len", "100",
      "--layout", "tp=1", "--concurrency", "8", "--disaggregated", "--prefill-gpus", "100000000"], "prefill_gpus"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_serving_input_one_line_exit_2(args, needle):
    rc, out, err = run(*args)
    assert rc == 2 and out == "", (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle.lower() in err.lower(), err


def test_lengths_files_are_checked(tmp_path):
    for name, text in (("empty.csv", ""), ("words.csv", "a\nb\n"), ("neg.csv", "10\n-5\n")):
        p = tmp_path / name
        p.write_text(text)
        rc, out, err = run("throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", str(p),
                           "--output-len", "100")
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_library_raises_typed_errors():
    with pytest.raises(ChalkError):
        fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=2.5, input_len=10, output_len=10)
    with pytest.raises(UnknownNameError):
        throughput("llama-3.1-8b", "h100-sxm", input_len=10, output_len=10, engine="nosuch")
    with pytest.raises(InputError):
        Speculation(2, 0.0)


def test_ops_name_their_source_measured_or_curve():
    """issue 9: a chip with measured kernel tables times its GEMMs and attention from them; a chip without uses the
    curve family scaled by its own peaks (and its vendor's fitted software factor); elementwise ops and links stay
    on the roofline; every op says which."""
    h100 = {o["name"]: o for o in chalk.estimate("llama-3.1-70b", "h100-sxm", 64, 4096, layout="tp=4").ops}
    mi = {o["name"]: o for o in chalk.estimate("llama-3.1-70b", "mi300x", 64, 4096, layout="tp=4").ops}
    for name in ("attn_proj", "mlp", "attention_decode", "lm_head"):
        assert h100[name]["source"] == "measured table" and "aiconfigurator-core" in h100[name]["detail"]
        assert mi[name]["source"] == "fitted curve" and "mi300x" in mi[name]["detail"]
    assert "AMD" in mi["mlp"]["detail"]
    assert h100["elementwise"]["source"] == "calibrated roofline" and h100["allreduce"]["source"] == "roofline (link)"
    ideal = {o["name"]: o for o in chalk.estimate("llama-3.1-70b", "h100-sxm", 64, 4096, layout="tp=4",
                                                  ideal=True).ops}
    assert ideal["mlp"]["source"] == "roofline"
    # measured kernels never beat the roofline at peak rates
    assert h100["mlp"]["time_s"] >= ideal["mlp"]["time_s"] * 0.999



def _cold(kwargs: dict) -> dict:
    """chalk.estimate(**kwargs).to_dict() in a fresh interpreter: nothing kept from an earlier question."""
    code = "import json, sys, chalk; print(json.dumps(chalk.estimate(**json.loads(sys.argv[1])).to_dict()))"
    p = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_kept_stage_plans_answer_as_a_cold_start():
    """The step model keeps a plan per configuration and layout (`step_model._stage`) and each kernel shape's cut
    grid: one Session asked about other layouts, calibrations, precisions and phases in turn answers exactly what a
    cold start answers (a stale plan would give the earlier question's configuration)."""
    s = chalk.Session("deepseek-v3", "h100-sxm")
    asks = [dict(layout="tp=8"), dict(layout="tp=8", ideal=True), dict(layout="tp=8", precision="bf16"),
            dict(layout="tp=2,attn_dp=4", phase="prefill"), dict(layout="tp=4,pp=2"), dict(layout="tp=8")]
    for i, kw in enumerate(asks):
        warm = json.loads(json.dumps(s.estimate(17 + i, 3000 + 5 * i, **kw).to_dict()))
        cold = _cold(dict(model="deepseek-v3", hardware="h100-sxm", batch=17 + i, context=3000 + 5 * i, **kw))
        assert warm == cold, kw

def test_kept_token_ops_answer_as_a_cold_start():
    """Every op but decode attention is kept per plan and token count (`step_model._token_ops_kept`): a Session
    asked a new context at a batch it has seen answers exactly what a cold start answers, under two-micro-batch
    overlap and for a prompt too; arrays are never kept, and the store stays bounded."""
    from chalk.analyses.step import step_model as SM

    cases = [("llama-3.1-70b", "h100-sxm", {}), ("deepseek-v3", "gb200-nvl72", dict(layout="tp=1,ep=8,pp=1,attn_dp=8")),
             ("qwen3-235b-a22b", "h200", dict(layout="tp=4,pp=2")), ("llama-3.1-8b", "b200", dict(phase="prefill"))]
    for model, hw, kw in cases:
        s = chalk.Session(model, hw, **kw)
        s.estimate(48, 1000)  # keeps the token ops of batch 48
        warm = json.loads(json.dumps(s.estimate(48, 7777, **kw).to_dict()))
        cold = _cold(dict(model=model, hardware=hw, batch=48, context=7777, **kw))
        assert warm == cold, (model, kw)
    n = len(SM._TOKEN_OPS)
    chalk.Session("llama-3.1-70b", "h100-sxm").estimate(np.arange(1.0, 300.0), 2048.0)
    assert len(SM._TOKEN_OPS) == n  # a grid is evaluated whole, not kept point by point
    s = chalk.Session("llama-3.1-8b", "h100-sxm")
    for b in range(SM.TOKEN_OPS_MEMO + 50):
        s.estimate(1 + b, 512.0)
    assert len(SM._TOKEN_OPS) <= SM.TOKEN_OPS_MEMO


def test_a_layout_array_and_its_layouts_one_by_one_agree():
    """A plan over an array of layouts (worked out afresh) and the kept plans of each layout give the same step."""
    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.step.parallel import model_costs, stage_step
    from chalk.specs.catalog import as_model, as_system

    m, system = as_model("qwen3-235b-a22b"), as_system("h200")
    costs, cal = model_costs(m, None, "bf16"), calibration(False, system.chip)
    tp, a, pp = np.array([1.0, 2.0, 4.0, 8.0]), np.array([8.0, 4.0, 2.0, 1.0]), np.array([1.0, 1.0, 2.0, 1.0])
    ep = tp * a
    whole = stage_step(costs, system, tp, a, pp, ep, 64.0, 256.0, 4096.0, 2048.0, cal)["stage_time_s"]
    for i in range(4):
        one = stage_step(costs, system, int(tp[i]), int(a[i]), int(pp[i]), int(ep[i]), 64.0, 256.0, 4096.0, 2048.0,
                         cal)["stage_time_s"]
        assert float(one) == pytest.approx(float(whole[i]), rel=1e-12)


def test_wide_expert_parallel_groups_balance_expert_load():
    """Published wide-EP deployments run an expert-load balancer (DeepSeek's EPLB, SGLang --enable-eplb); engines'
    defaults do not. From the calibrated EP width (`eplb_min_ep`) the experts op is timed on the balanced-load
    tables, below it on served traffic's power-law loads, and it says which. With many tokens per expert balanced
    loads are faster (the busiest GPU no longer sets the pace: 0.258 vs 0.532 ms measured for 4096 tokens on EP 32,
    `test_kernels`); with few they are within tens of percent either way (64 tokens: 0.145 vs 0.134 ms, every
    expert touched once balanced). An array of layouts straddling the threshold agrees with its layouts one by one."""
    from dataclasses import replace

    from chalk.analyses.step.parallel import model_costs, stage_step
    from chalk.specs.catalog import as_model, as_system

    m, system = as_model("deepseek-v3"), as_system("h100-sxm")
    costs, cal = model_costs(m, None, "fp8"), calibration(False, system.chip)
    n = cal.eplb_min_ep
    assert 8 <= n <= 128  # the current fit: a finite width inside the grid
    wide = chalk.estimate("deepseek-v3", "gb200-nvl72", 64, 4096, layout=f"tp=1,attn_dp={int(n)}")
    narrow = chalk.estimate("deepseek-v3", "gb200-nvl72", 64, 4096, layout="tp=1,attn_dp=8")
    ex = lambda r: next(o for o in r.ops if o["name"] == "experts")  # noqa: E731
    assert "balanced expert loads" in ex(wide)["detail"] and "power-law" in ex(narrow)["detail"]
    never = replace(cal, eplb_min_ep=float("inf"))
    for a in (n, 2 * n):
        ratio = []
        for seqs in (2.0 * a, 128.0 * a):  # 2 and 128 decoding sequences per attention-DP rank
            bal = stage_step(costs, system, 1, a, 1, a, seqs, 0.0, 4096.0, 1.0, cal)["ops"]["experts"].time_s
            pl = stage_step(costs, system, 1, a, 1, a, seqs, 0.0, 4096.0, 1.0, never)["ops"]["experts"].time_s
            ratio.append(float(pl) / float(bal))
        assert 0.75 < ratio[0] < 1.5 and 1.3 < ratio[1] < 5.0, (a, ratio)
    a = np.array([8.0, n, 2 * n])
    whole = stage_step(costs, system, 1.0, a, 1.0, a, 64.0, 0.0, 4096.0, 1.0, cal)["stage_time_s"]
    for i in range(3):
        one = stage_step(costs, system, 1, int(a[i]), 1, int(a[i]), 64.0, 0.0, 4096.0, 1.0, cal)["stage_time_s"]
        assert float(one) == pytest.approx(float(whole[i]), rel=1e-12)


def test_eplb_can_be_set_and_every_command_says_which_loads_it_timed():
    """--eplb auto|on|off: the default follows the calibrated EP width; on/off override it for estimate (its experts
    op) and throughput (its answer and its notes); a bad mode, or one given to the aggregate view, is one line and
    exit 2."""
    n = int(calibration().eplb_min_ep)
    w = n // 2  # an EP width below the calibrated one
    base = ["estimate", "-m", "deepseek-v3", "-H", "gb200-nvl72", "-b", "2048", "--layout", f"tp=1,attn_dp={w}",
            "--json"]
    got = {}
    for mode in ("auto", "on", "off"):
        rc, out, err = run(*base, "--eplb", mode)
        assert rc == 0, err
        d = json.loads(out)
        ex = next(o for o in d["ops"] if o["name"] == "experts")
        got[mode] = (d["step_time_s"], ex["time_s"], ex["detail"])
    assert 8 <= w < n and got["auto"] == got["off"]  # below the calibrated width: power-law loads
    assert "power-law" in got["off"][2] and "balanced expert loads" in got["on"][2]
    assert got["on"][1] < got["off"][1] and got["on"][0] < got["off"][0]
    py = chalk.estimate("deepseek-v3", "gb200-nvl72", 2048, 4096, layout=f"tp=1,attn_dp={w}", eplb="on")
    assert py.step_time_s == pytest.approx(got["on"][0], rel=1e-12)
    # throughput: the answer's notes say which loads its experts were timed with
    t_off = chalk.throughput("deepseek-v3", "gb200-nvl72", input_len=2000, output_len=1000, layout=f"tp=1,attn_dp={n}",
                             eplb="off")
    t_auto = chalk.throughput("deepseek-v3", "gb200-nvl72", input_len=2000, output_len=1000,
                              layout=f"tp=1,attn_dp={n}")
    assert any("power-law" in x for x in t_off["notes"]) and any("balanced loads" in x for x in t_auto["notes"])
    assert t_auto["output_tokens_per_s_per_gpu"] > t_off["output_tokens_per_s_per_gpu"]
    dense = chalk.throughput("llama-3.1-8b", "h100-sxm", input_len=2000, output_len=1000, eplb="on")
    assert not any("expert" in x for x in dense["notes"])
    for args in (["--eplb", "sometimes"], ["--aggregate", "--eplb", "on"]):
        rc, out, err = run("estimate", "-m", "deepseek-v3", "-H", "gb200-nvl72", *args)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "eplb" in err, (args, err)
    rc, _, err = run("throughput", "-m", "deepseek-v3", "-H", "h200", "--input-len", "100", "--output-len", "10",
                     "--eplb", "2")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--eplb must be one of" in err


@pytest.mark.parametrize("chip", ["mi300x", "mi355x"])
def test_a_vendor_factor_slows_what_binds_each_gemm(chip):
    """A vendor's fitted compute factor stretches compute-bound kernel times and its memory factor memory-bound
    ones (`equations.roofline.rate_scaled_time_factor`): on an AMD chip one decode step at batch 1, where every
    dense GEMM reads its weights, takes the same GEMM time whatever `amd_compute` is (it once took 1 / amd_compute
    longer: a 70B decode step on MI300X at 11 ms against vLLM's measured 8.4 ms); 16k prompt tokens (compute-bound
    GEMMs) take 1 / amd_compute longer."""
    import dataclasses

    from chalk.analyses.step.parallel import stage_step
    from chalk.analyses.traffic.serving import _serving_setup

    _, system, _, _, _, _, cal, _, costs, kern = _serving_setup("llama-3.1-70b", chip, 1000, 100, "fp8", "auto",
                                                                False, None, None, None, None)

    def gemm_s(amd_compute, decode, prefill):  # the weight GEMMs' time (attention projections and MLP)
        c = dataclasses.replace(cal, amd_compute=amd_compute)
        ops = stage_step(costs, system, 8, 1, 1, 1, decode, prefill, 1000.0, 1000.0, c, kernels=kern)["ops"]
        return float(ops["attn_proj"].time_s + ops["mlp"].time_s)

    assert gemm_s(0.5, 1.0, 0.0) == pytest.approx(gemm_s(1.0, 1.0, 0.0), rel=1e-9)
    assert gemm_s(0.5, 0.0, 16384.0) == pytest.approx(2 * gemm_s(1.0, 0.0, 16384.0), rel=1e-6)


@settings(max_examples=50, deadline=None)
@given(c=st.floats(0, 1.0), m=st.floats(0, 1.0), sc=st.floats(1.0, 3.0), sm=st.floats(1.0, 3.0))
def test_the_rate_scaled_factor_lies_between_the_two_scales(c, m, sc, sm):
    from chalk.equations.roofline import rate_scaled_time_factor

    f = float(rate_scaled_time_factor(c, m, sc, sm))
    if c == 0 and m == 0:
        assert f == 0.0
    else:
        assert min(sc, sm) - 1e-12 <= f <= max(sc, sm) + 1e-12
        if c > m and c / sc > m / sm:  # compute-bound at both rates
            assert f == pytest.approx(sc)


@pytest.mark.parametrize("model, chip, layout", [("qwen3-235b-a22b", "h200", "attn_dp=72,ep=72"),
                                                 ("deepseek-r1", "h100", "attn_dp=72,ep=72"),
                                                 ("gpt-oss-120b", "h200", "attn_dp=32,ep=32"),
                                                 ("gpt-oss-120b", "b200", "attn_dp=8,ep=8")])
def test_a_wide_expert_parallel_step_never_shortens_as_the_batch_grows(model, chip, layout):
    """QA sweep 2026-11-27: the busiest EP chip's expert time was the mean chip's kernel time times the balls-in-bins
    load ratio, which at a few routed copies per chip is up to the EP width, so one sequence of Qwen3-235B over
    attention DP 72 / EP 72 on H200 stepped in 65.6 ms and 512 in 27.8 ms. The busiest chip's kernel is now timed at
    its own load: more sequences never step faster."""
    from chalk.analyses.step.estimate import estimate

    prev = 0.0
    for b in (1, 8, 72, 512):
        t = float(estimate(model, chip, b, 2048, layout=layout).step_time_s)
        assert t >= prev * (1 - 1e-9), b
        prev = t


@pytest.mark.parametrize("model, hw, layout", [("deepseek-r1", "h100-sxm", "tp=8,ep=8"), ("kimi-k2", "h200", "tp=8,ep=8"),
                                               ("deepseek-r1", "tpu-v6e", "tp=8,ep=8")])
def test_no_weight_op_reads_faster_than_hbm(model, hw, layout):
    """A weight GEMM's bytes over its time never pass the chip's HBM bandwidth. QA 2026-11-28: an FP8 checkpoint's
    BF16 lm_head was timed from the FP8 table: 232 MB in 53 us on H100, 1.3x its 3.35 TB/s."""
    from chalk.api import estimate
    from chalk.specs.catalog import as_system

    bw = as_system(hw).chip.hbm_bandwidth_bytes_per_s
    for b in (1, 8, 64):
        r = estimate(model, hw, layout=layout, batch=b, context=2048)
        for o in r.ops:
            if o["kind"] == "gemm" and o["time_s"] > 0:
                assert o["bytes"] / o["time_s"] <= bw * 1.0001, (o["name"], b, o["bytes"] / o["time_s"] / bw)

