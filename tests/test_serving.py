"""Serving throughput search: constraints, monotonicity, JSON contract, plausibility against measurements."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from chalk.analyses.traffic import serving as sv
from chalk.errors import FitError, InputError

KEYS = ("output_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "user_tokens_per_s", "ttft_s", "tpot_s",
        "concurrency", "gpus", "parallelism", "cost_per_mtok_output_usd", "cost_per_mtok_output_decode_share_usd",
        "cost_per_mtok_input_prefill_share_usd", "range")


@pytest.fixture(scope="module")
def nvl72():
    return sv.throughput("deepseek-v3", "gb200-nvl72", input_len=2000, output_len=1000, pareto=True)


def test_result_keys_and_consistency(nvl72):
    r = nvl72
    for k in KEYS:
        assert k in r
    assert set(r["parallelism"]) >= {"tp", "ep", "pp", "dp"}
    lo, hi = r["range"]["output_tokens_per_s_per_gpu"]
    assert lo < r["output_tokens_per_s_per_gpu"] < hi
    assert r["input_tokens_per_s_per_gpu"] == pytest.approx(2 * r["output_tokens_per_s_per_gpu"])
    assert r["user_tokens_per_s"] == pytest.approx(1 / r["tpot_s"])
    # the sequences decoding / TPOT = output tokens/s of the deployment; in flight = requests/s x time in system
    # (Little's law: the decoding ones and those waiting for their first token)
    # (the search's closed form exactly; the answer, its deployment replayed, to the replay's 2%)
    dec = r["batch_per_replica"] * r["parallelism"]["dp"]
    cf = {k: r.get(f"{k}_closed_form", r[k]) for k in ("tpot_s", "ttft_s", "output_tokens_per_s_per_gpu",
                                                       "concurrency")}
    assert dec / cf["tpot_s"] / r["gpus"] == pytest.approx(cf["output_tokens_per_s_per_gpu"], rel=1e-9)
    x = cf["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
    assert cf["concurrency"] == pytest.approx(x * (cf["ttft_s"] + r["output_len"] * cf["tpot_s"]), rel=1e-9)
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
    assert r["concurrency"] == pytest.approx(x * (r["ttft_s"] + r["output_len"] * r["tpot_s"]), rel=0.02)
    assert r["gpus"] <= 72 and r["cost_per_mtok_output_usd"] > 0
    # one cost under one key: the main answer and the speed-up-1 mode are the same point, all GPU time
    same = next(mo for mo in r["modes"] if mo["speedup"] == 1.0)
    assert same["cost_per_mtok_output_usd"] == pytest.approx(r["cost_per_mtok_output_usd"], rel=1e-9)
    assert r["cost_per_mtok_output_decode_share_usd"] <= r["cost_per_mtok_output_usd"]


def test_gb200_deepseek_plausible_vs_measured(nvl72):
    # LMSYS GB200 NVL72 (Sep 2025): 9,087 output tok/s/GPU decode and 18,471 input tok/s/GPU prefill (FP8 MoE,
    # 2000-token inputs). Aggregated 2000-in / 1000-out at those rates: 1 / (1/9087 + 2/18471) = ~4,600.
    expected = 1 / (1 / 9087 + 2 / 18471)
    assert expected / 2 < nvl72["output_tokens_per_s_per_gpu"] < expected * 2
    d = sv.throughput("deepseek-v3", "gb200-nvl72", input_len=2000, output_len=1000, disaggregated=True)
    assert d["mode"] == "disaggregated" and d["prefill"]["gpus_per_decode_gpu"] > 0
    assert expected / 2 < d["output_tokens_per_s_per_gpu"] < expected * 2.5


def test_frontier_is_a_frontier(nvl72):
    f = nvl72["frontier"]
    assert len(f) >= 3
    user = np.array([p["user_tokens_per_s"] for p in f])
    thr = np.array([p["output_tokens_per_s_per_gpu"] for p in f])
    cost = np.array([p["cost_per_mtok_output_usd"] for p in f])
    assert np.all(np.diff(user) > 0) and np.all(np.diff(thr) < 0) and np.all(np.diff(cost) > 0)
    for p in f:
        assert {"user_tokens_per_s", "output_tokens_per_s_per_gpu", "cost_per_mtok_output_usd", "layout"} <= set(p)


def test_min_user_tps_respected_and_monotone():
    prev = np.inf
    for x in (5, 20, 40, 70):
        r = sv.throughput("llama-3.1-70b", "hgx-h100", input_len=1000, output_len=500, gpus=8, precision="fp8",
                          min_user_tps=x)
        assert r["user_tokens_per_s"] >= x
        assert r["output_tokens_per_s_per_gpu"] <= prev * (1 + 1e-9)
        prev = r["output_tokens_per_s_per_gpu"]


def test_max_ttft_respected():
    r = sv.throughput("llama-3.1-8b", "h100", input_len=8000, output_len=500, gpus=1, max_ttft_s=0.5)
    assert r["ttft_s"] <= 0.5


def test_modes_price_multiples_grow(nvl72):
    ms = [m for m in nvl72["modes"] if m["price_multiple"] is not None]
    assert ms[0]["price_multiple"] == pytest.approx(1.0)
    mult = [m["price_multiple"] for m in ms if m["speedup"] >= 1]
    assert all(b >= a - 1e-9 for a, b in zip(mult, mult[1:]))


def test_ideal_is_an_upper_bound():
    kw = dict(input_len=1000, output_len=1000, gpus=8, precision="fp8")
    cal = sv.throughput("llama-3.1-70b", "hgx-h200", **kw)
    ideal = sv.throughput("llama-3.1-70b", "hgx-h200", ideal=True, **kw)
    assert ideal["output_tokens_per_s_per_gpu"] > cal["output_tokens_per_s_per_gpu"]
    assert ideal["efficiency"] == "ideal" and ideal["range"]["output_tokens_per_s_per_gpu"][0] == pytest.approx(
        ideal["output_tokens_per_s_per_gpu"])


def test_longer_outputs_cheaper_inputs_costlier():
    a = sv.throughput("llama-3.1-8b", "h100", input_len=128, output_len=2048, gpus=1, precision="fp8")
    b = sv.throughput("llama-3.1-8b", "h100", input_len=2048, output_len=128, gpus=1, precision="fp8")
    assert a["output_tokens_per_s_per_gpu"] > 3 * b["output_tokens_per_s_per_gpu"]


def test_errors():
    with pytest.raises(FitError):
        sv.throughput("deepseek-v3", "h100", input_len=1000, output_len=100, gpus=1)
    with pytest.raises(FitError):
        sv.throughput("llama-3.1-8b", "h100", input_len=1000, output_len=100, gpus=1, min_user_tps=1e6)
    with pytest.raises(InputError):
        sv.throughput("llama-3.1-8b", "h100", input_len=-1, output_len=100)


def test_claim_fast_mode():
    (c,) = sv.claims()
    assert c.id == "fast_mode_price_for_2_5x_speed"
    assert c.value > 1 and c.within_lecture_range


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_throughput_json_contract():
    p = _cli("throughput", "--model", "deepseek-v3", "--hardware", "gb200-nvl72", "--input-len", "2000",
             "--output-len", "1000", "--min-user-tps", "20", "--pareto", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for k in KEYS:
        assert k in d
    assert d["user_tokens_per_s"] >= 20
    assert len(d["range"]["output_tokens_per_s_per_gpu"]) == 2 and d["frontier"]
    p = _cli("throughput", "--model", "llama-3.1-8b", "--hardware", "h100", "--input-len", "1000", "--output-len",
             "100", "--min-user-tps", "100000")
    assert p.returncode == 2 and p.stderr.startswith("chalk: error:") and p.stderr.count("\n") == 1
    p = _cli("throughput", "--model", "llama-3.1-8b", "--hardware", "h100", "--input-len", "1000", "--output-len",
             "100", "--disaggregated")
    assert p.returncode == 0 and "prefill pool" in p.stdout and "tokens/s per GPU" in p.stdout


def test_batch_grid_reaches_the_cap_in_small_steps():
    from chalk.analyses.step.parallel import enumerate_layouts
    from chalk.specs.catalog import load_model
    lays = enumerate_layouts(load_model("llama-3.1-8b"), 1, 8)
    for cap in (256, 2048):
        s = np.unique(sv._grid(lays, cap)["B"])
        assert s[0] == 1 and s[-1] == cap
        big = s[s >= 16]
        assert np.all(big[1:] / big[:-1] <= sv.BATCH_GRID_STEP + 0.05)  # 15% apart (rounding aside)
    assert len(np.unique(sv._grid(lays, 2048)["B"])) > len(np.unique(sv._grid(lays, 256)["B"])) >= 30


def test_a_request_too_long_for_memory_blames_its_kv_cache_not_the_weights():
    """16 GB of weights fit an H100; a 1e12-token request's KV cache does not: the one line says which (it used to
    say the weights do not fit)."""
    with pytest.raises(FitError, match="weights fit, but one request's KV cache of 1,000,000,000,100 tokens"):
        sv.throughput("llama-3.1-8b", "h100-sxm", input_len=1e12, output_len=100, cut_to_context=False)
    # by default every door cuts it to the model's context first (`within_context`): one request of 131,071 + 1
    assert sv.throughput("llama-3.1-8b", "h100-sxm", input_len=1e12, output_len=100)["input_len"] == 131_071
    with pytest.raises(FitError, match=r"\(812 GB of bf16 weights\) does not fit any layout on 2 x h100-sxm"):
        sv.throughput("llama-3.1-405b", "h100-sxm", input_len=100, output_len=100, gpus=2)


@pytest.mark.parametrize("model, chip", [("deepseek-r1", "h100-sxm"), ("llama-3.1-70b", "h200")])
def test_the_modes_one_x_row_is_the_answer(model, chip):
    """The fast-and-slow-modes table prices speed-ups relative to the answer: its 1x row is the answer, also where the
    answer counts whole prefill workers (QA 2026-11-27: DeepSeek-R1 on H100 answered $0.65 per M output tokens,
    disaggregated, and its 1x row said 0.95x, $0.619)."""
    r = sv.throughput(model, chip, input_len=1024, output_len=256, disaggregated=True)
    same = next(mo for mo in r["modes"] if mo["speedup"] == 1.0)
    assert same["price_multiple"] == pytest.approx(1.0, rel=1e-9)
    assert same["cost_per_mtok_output_usd"] == pytest.approx(r["cost_per_mtok_output_usd"], rel=1e-9)


def test_the_modes_one_x_row_is_a_replayed_answer_too():
    """Held to p99 targets, the answer is its replay; its neighbours on the table were screened in closed form and
    read faster and cheaper than the answer itself (QA 2026-11-28: 1x at 27.17 tokens/s per user, 0.94x, beside an
    answer of 24.04): the multiples are taken on the screen's footing and moved onto the answer's."""
    r = sv.throughput("llama-3.1-70b", "h100", input_len=2000, output_len=200, tpot_p99_s=0.05, ttft_p99_s=2.0,
                      disaggregated="auto")
    same = next(mo for mo in r["modes"] if mo["speedup"] == 1.0)
    assert same["price_multiple"] == pytest.approx(1.0, rel=1e-9)
    assert same["user_tokens_per_s"] == pytest.approx(r["user_tokens_per_s"], rel=1e-9)
    assert same["cost_per_mtok_output_usd"] == pytest.approx(r["cost_per_mtok_output_usd"], rel=1e-9)
    assert all(mo["price_multiple"] >= 1 - 1e-9 for mo in r["modes"] if mo["speedup"] >= 1 and mo["price_multiple"])


@pytest.mark.parametrize("kw", [
    dict(model="llama-3.1-70b", input_len=1000, output_len=1000, tpot_p99_s=0.03, ttft_p99_s=2.0, disaggregated=True),
    dict(model="llama-3.1-8b", input_len="lognormal:mean=2000,p99=8000", output_len=300, tpot_p99_s=0.03,
         disaggregated=True),
    dict(model="llama-3.1-8b", input_len=2000, output_len=300, disaggregated=False),
])
def test_the_cost_split_by_phase_adds_up_to_the_total(kw):
    """decode share per output token + prefill share per input token x I/O = the total per output token: the
    prefill share is charged for the prefill GPUs deployed (whole workers), not the pool at full use. QA 2026-11-28:
    a disaggregated split fell 4.2% and 7.4% short of its total."""
    r = sv.throughput(kw.pop("model"), "h100-sxm", **kw)
    I, O = r["input_len"], r["output_len"]
    split = r["cost_per_mtok_output_decode_share_usd"] + r["cost_per_mtok_input_prefill_share_usd"] * I / O
    assert split == pytest.approx(r["cost_per_mtok_output_usd"], rel=1e-9)
    if r["mode"] == "disaggregated":
        p = r["prefill"]
        assert p["gpus_per_decode_gpu_deployed"] == r["prefill_gpus"] / r["decode_gpus"]
        assert p["gpus_per_decode_gpu_deployed"] >= p["gpus_per_decode_gpu"] - 1e-9
