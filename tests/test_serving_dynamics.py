"""Serving dynamics that hold up (issue 23): Little's law, the steady-state window, streaming, tail targets."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from chalk.analyses.traffic import simulate as S
from chalk.analyses.traffic.serving import (DISAGGREGATION_MARGIN, FixedCurve, Speculation, fixed_deployment,
                                            throughput)
from chalk.errors import FitError, InputError

SC_8B = S.StepCost.from_step_model("llama-3.1-8b", "h100-sxm", "tp=1", batch=64, context=1200, prompt_len=1000,
                                   prefill_tokens=300)

DEPLOYMENTS = [("llama-3.1-8b", "h100-sxm", "tp=1"), ("llama-3.1-70b", "h200", "tp=4"),
               ("llama-3.1-70b", "h100-sxm", "tp=8"), ("gpt-oss-20b", "mi300x", "tp=1"),
               ("qwen3-30b-a3b", "h100-sxm", "tp=2")]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dep=st.sampled_from(DEPLOYMENTS), conc=st.integers(1, 256), inp=st.integers(64, 8000),
       out=st.integers(8, 1000))
def test_a_fixed_deployment_obeys_littles_law(dep, conc, inp, out):
    """N requests in flight completing X per second take N / X each on average: a request's reported time
    (mean TTFT + mean TPOT x (output - 1), on the client's clock) is that, to a few percent; it was up to 1.77x."""
    m, hw, lay = dep
    r = fixed_deployment(m, hw, layout=lay, concurrency=conc, input_len=inp, output_len=out)
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / out  # requests per second over the deployment
    request = r["ttft_s"] + r["tpot_s"] * (out - 1)
    assert request == pytest.approx(conc / x, rel=0.06)
    assert r["latency_window"]["warmup_requests"] >= 2 * conc


@pytest.mark.parametrize("model, hw, lay, conc, inp", [("llama-3.1-70b", "h200", "tp=4", 64, 2000),
                                                      ("llama-3.1-8b", "h100-sxm", "tp=1", 256, 4000)])
def test_a_longer_output_never_shortens_the_request(model, hw, lay, conc, inp):
    """More decode work never makes a request shorter. QA 2026-11-28: Llama-3.1-70B TP4 at 64 in flight, 2000-token
    prompts, took 8.76 / 8.59 / 8.43 s per request for 1 / 5 / 10 output tokens: the replay's step cost took its
    prompt-token secant over the closed form's 128,000 prompt tokens a step, past the 8,192-token chunk every replayed
    step is held to, and the secant's price depended on the output length."""
    times = []
    for out in (1, 2, 5, 10, 20):
        r = fixed_deployment(model, hw, layout=lay, concurrency=conc, input_len=inp, output_len=out)
        times.append(r["ttft_s"] + (r["tpot_s"] * (out - 1) if out > 1 else 0.0))  # one token: no TPOT (nan)
    assert all(b >= a * 0.999 for a, b in zip(times, times[1:])), times


@pytest.mark.parametrize("model, hw, lay, conc, inp, out", [
    ("deepseek-v3", "gb200-nvl72", "tp=1,attn_dp=16,ep=16", 4096, 200, 2000),
    ("deepseek-r1", "gb200-nvl72", "tp=1,attn_dp=16", 4096, 1024, 8192),
])
def test_littles_law_holds_where_the_seats_still_run_in_waves(model, hw, lay, conc, inp, out):
    """QA sweep 2026-11-27: thousands of seats sent at t = 0 with long outputs still finish in waves six rounds
    later, and the window's rate (requests admitted between its first and last admission) put DeepSeek-V3 at
    142k output tokens/s where 4,096 seats over 72.3 s per request allow 113k (+26%; DeepSeek-R1 8K out: +23%).
    A closed loop's rate is now the seats over the window's mean time in system: the law holds to 2%."""
    r = fixed_deployment(model, hw, layout=lay, concurrency=conc, input_len=inp, output_len=out)
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / out
    assert r["ttft_s"] + r["tpot_s"] * (out - 1) == pytest.approx(conc / x, rel=0.02)
    assert "Little's law" in r["latency_window"]["basis"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dep=st.sampled_from(DEPLOYMENTS), conc=st.lists(st.integers(1, 4000), min_size=1, max_size=7),
       inp=st.integers(64, 8000), out=st.integers(8, 1000), disagg=st.booleans())
# found in a fresh environment: the grid's straight line between two batch points missed by 0.2-0.4% here
@example(dep=DEPLOYMENTS[1], conc=[342, 350], inp=240, out=8, disagg=True)
def test_the_curve_plan_sizes_with_is_the_fixed_closed_form(dep, conc, inp, out, disagg):
    """`plan` finds each candidate's concurrency limit on `FixedCurve` (set up once, many concurrencies): at every
    concurrency it gives the figures `fixed_deployment(simulate=False)` gives there alone, and the closed form
    keeps Little's law (in flight = rate x (mean TTFT on the client's clock + TPOT x output), the seats beyond the
    cap waiting) wherever more than one request decodes."""
    m, hw, lay = dep
    kw = dict(layout=lay, input_len=inp, output_len=out)
    if disagg:
        kw.update(gpus=int(lay.split("=")[1]), decode_gpus=int(lay.split("=")[1]))
    cv = FixedCurve(m, hw, **kw)(conc)
    for i, n in enumerate(conc):
        r = fixed_deployment(m, hw, concurrency=n, simulate=False, **kw)
        for k in ("tpot_s", "ttft_s", "ttft_p99_s", "tpot_p99_s", "output_tokens_per_s_per_gpu",
                  "decoding_per_replica"):
            assert cv[k][i] == pytest.approx(r[k], rel=1e-9), k
        if r["decoding_per_replica"] > 1.0:  # (one request alone decodes all the time it is not prefilling)
            x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / out
            assert r["ttft_s"] + r["tpot_s"] * out == pytest.approx(n / x, rel=1e-6)  # B refined on exact times


def test_the_closed_form_p99_ttft_reads_the_prompt_distribution_however_given():
    """The closed form's p99 TTFT prefills the p99 prompt: a length spec string and its parsed distribution give
    the same p99 (the string was read as its mean before: Llama-3.1-8B on one H100, 32 in flight, lognormal prompts
    of mean 2000 and sigma 1 gave 0.25 s, the mean's TTFT, against 0.52 s); a fixed length keeps p99 = mean."""
    from chalk.specs.lengths import parse_lengths

    spec = "lognormal:mean=2000,sigma=1"
    kw = dict(layout="tp=1", concurrency=32, output_len=200, simulate=False)
    as_text = fixed_deployment("llama-3.1-8b", "h100", input_len=spec, **kw)
    parsed = fixed_deployment("llama-3.1-8b", "h100", input_len=parse_lengths(spec), **kw)
    flat = fixed_deployment("llama-3.1-8b", "h100", input_len=2000, **kw)
    assert as_text["ttft_p99_s"] == pytest.approx(parsed["ttft_p99_s"], rel=1e-12)
    assert as_text["ttft_p99_s"] > 1.8 * as_text["ttft_s"]  # the p99 prompt (~5x the mean here) prefills longer
    assert flat["ttft_p99_s"] == pytest.approx(flat["ttft_s"], rel=1e-12)


@settings(max_examples=15, deadline=None)
@given(seats=st.integers(1, 128), cap=st.integers(1, 128), lat=st.floats(0.0, 0.2), seed=st.integers(0, 99))
def test_closed_loop_littles_law_in_the_window(seats, cap, lat, seed):
    """Client seats = completions per second x time per request (from the send), measured in the window; the
    engine holds no more than its cap, measured as a time average."""
    reqs = S.closed_loop_requests(seats, 40 * seats, 400, 64, seed=seed)
    r = S.simulate_continuous(reqs, SC_8B, max_batch=min(cap, seats), closed_loop=True, concurrency=seats,
                              client_latency_s=lat)
    assert r.requests_per_s * r.mean_e2e_s == pytest.approx(seats, rel=0.03)
    assert r.mean_concurrency <= min(cap, seats) * (1 + 1e-9)
    assert r.mean_decode_batch <= r.mean_batch + 1e-9


def test_open_loop_in_engine_count_is_measured_not_assumed():
    """Time-averaged requests in the engine (integrated step by step) = throughput x mean time in the engine."""
    req = S.poisson_arrivals(30.0, 20_000, 512, 128, seed=3)
    r = S.simulate_continuous(req, SC_8B, 128)
    lo, hi = S.steady_window(len(req))
    in_engine = float(np.mean((r.e2e_s - r.queue_s)[lo:hi]))
    assert r.mean_concurrency == pytest.approx(r.requests_per_s * in_engine, rel=0.03)
    assert r.requests_per_s == pytest.approx(30.0, rel=0.05)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dep=st.sampled_from(DEPLOYMENTS), load=st.floats(0.1, 0.9), inp=st.integers(64, 4000),
       out=st.integers(2, 600), lat=st.sampled_from([0.0, 0.18]), seed=st.integers(0, 99))
def test_open_loop_requests_in_flight_obey_littles_law(dep, load, inp, out, lat, seed):
    """Requests sent and not finished (queue, client latency and engine), measured as a time average over the
    window, = completions per second x mean end-to-end time, to 2%. The figure offered before counted only the
    engine: 35.7 in flight against 43.7 by Little's law for Llama-3.1-70B TP4 on H100 replaying Azure's 2023 code
    trace, whose bursts queue 2.9 s on average."""
    from chalk.api import simulate

    m, hw, lay = dep
    one = simulate(m, hw, layout=lay, concurrency=1, requests=20, input_len=inp, output_len=out, client_latency_s=0.0)
    rate = load / one.mean_e2e_s * max(one.max_batch, 1) ** 0.5  # somewhere between light load and a queue
    r = simulate(m, hw, layout=lay, rate=rate, requests=3000, input_len=inp, output_len=out, client_latency_s=lat,
                 seed=seed)
    assume(S.overload(r.result) is None)
    assert r.mean_in_flight == pytest.approx(r.requests_per_s * r.mean_e2e_s, rel=0.02)
    assert r.mean_in_flight >= r.mean_concurrency * (1 - 1e-9)


def test_a_bursty_trace_counts_its_queue_in_flight():
    """Azure's 2023 code trace queues in bursts: the requests waiting count in flight (Little's law to 1%)."""
    from chalk.api import simulate

    trace = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "azure-2023-code.csv"
    if not trace.exists():
        pytest.skip(f"{trace} not present (the public traces live in ../shared/traces)")
    r = simulate("llama-3.1-70b", "h100", layout="tp=4", trace=trace)
    assert r.mean_in_flight == pytest.approx(r.requests_per_s * r.mean_e2e_s, rel=0.01)
    assert r.mean_in_flight > 1.1 * r.mean_concurrency  # 43.8 against 35.7 in the engine


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dep=st.sampled_from([(m, hw) for m, hw, _ in DEPLOYMENTS]), inp=st.integers(64, 8000),
       out=st.integers(8, 1000))
def test_the_search_answer_and_its_fixed_deployment_agree_on_latency(dep, inp, out):
    """`throughput` (the search) and `throughput --layout --concurrency` (its answer as a fixed deployment) are two
    doors to one deployment: its throughput, TTFT and TPOT (means and p99s) agree to 2%. The search reported its
    closed form (Llama-3.1-70B TP4 on H100 at 196 in flight, 2,000 in / 300 out: a lone prompt's 0.35 s TTFT against
    the replay's 0.67 s mean, 1.32 s p99; Llama-3.1-8B on one H100 at 1,625 in flight, 64 in / 8 out: TPOT 288 ms
    against 216 ms)."""
    m, hw = dep
    r = throughput(m, hw, input_len=inp, output_len=out, disaggregated=False)
    p = r["parallelism"]
    lay = ",".join(f"{k}={p[k]}" for k in ("tp", "ep", "etp", "pp", "attn_dp") if p.get(k))
    f = fixed_deployment(m, hw, layout=lay, concurrency=max(round(r["concurrency"]), 1), gpus=r["gpus"],
                         input_len=inp, output_len=out, precision=r["precision"], kv_precision=r["kv_precision"])
    for k in ("ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s", "output_tokens_per_s_per_gpu"):
        assert r[k] == pytest.approx(f[k], rel=0.02), k
    # Little's law on the search's own figures (in flight = requests/s x time in system, client's clock)
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / out
    assert r["concurrency"] == pytest.approx(x * (r["ttft_s"] + r["tpot_s"] * (out - 1)), rel=0.03)


def test_cold_start_is_outside_the_window_and_available_on_request():
    """Every seat of a closed loop starts at t = 0: the first wave queues behind each other's prefill. The steady
    window leaves it out (p99 TTFT near p50); window='all' keeps it (the old figure)."""
    reqs = S.closed_loop_requests(64, 64 * 32, 2000, 500, seed=0)
    sc = S.StepCost.from_step_model("llama-3.1-70b", "h100-sxm", "tp=8", batch=64, context=2250,
                                    prompt_len=2000, prefill_tokens=250)
    steady = S.simulate_continuous(reqs, sc, 64, closed_loop=True)
    cold = S.simulate_continuous(reqs, sc, 64, closed_loop=True, window="all")
    assert cold.ttft_p99_s > 2 * steady.ttft_p99_s
    assert steady.ttft_p99_s < 3 * steady.ttft_p50_s
    w = steady.latency_window
    assert w["kind"] == "steady" and w["warmup_requests"] >= 128 and w["cooldown_requests"] >= 128
    assert cold.latency_window["requests"] == len(reqs)
    with pytest.raises(Exception):
        S.simulate_continuous(reqs, sc, 64, closed_loop=True, window="warm")


@pytest.mark.parametrize("loop", ["python", "compiled"])
def test_a_cold_engines_warmup_delays_the_first_wave_only(loop):
    """`warmup_s`: the first step of a cold engine takes that much longer. In a closed loop of equal requests every
    request of the first wave gets its first token exactly W later and every later one is sent W later too, so its
    own TTFT is unchanged: the run's mean TTFT grows by W x seats / requests, its span by W, and Little's law
    (requests in flight = throughput x time in system) still holds over the whole run. Both loops agree."""
    if loop == "compiled":
        pytest.importorskip("numba")
    seats, n, W = 32, 32 * 8, 1.5
    reqs = S.closed_loop_requests(seats, n, 1000, 200, seed=3)
    run = lambda w: S.simulate_continuous(reqs, SC_8B, seats, closed_loop=True, window="all", loop=loop,  # noqa: E731
                                          keep_requests=True, warmup_s=w)
    cold, warm = run(W), run(0.0)
    first = np.arange(n) < seats
    assert np.allclose(cold.ttft_s[first] - warm.ttft_s[first], W, atol=1e-9)
    assert np.allclose(cold.ttft_s[~first], warm.ttft_s[~first], rtol=1e-9, atol=1e-9)
    assert cold.mean_ttft_s == pytest.approx(warm.mean_ttft_s + W * seats / n, rel=1e-9)
    assert cold.simulated_time_s == pytest.approx(warm.simulated_time_s + W, rel=1e-9)
    assert cold.mean_in_flight == pytest.approx(cold.requests_per_s * cold.mean_e2e_s, rel=0.02)
    with pytest.raises(Exception):
        S.simulate_continuous(reqs, SC_8B, seats, closed_loop=True, warmup_s=-1.0)


def test_a_streamed_run_answers_as_a_held_one():
    """Generated a chunk at a time and folded into histograms, a run gives the held run's rates exactly and its
    percentiles within the histogram's 0.5% relative accuracy, keeping no per-request arrays."""
    stream = S.PoissonStream(600.0, 150_000, 512, 128, seed=0)
    held = S.simulate_continuous(stream, SC_8B, 256, keep_requests=True)
    streamed = S.simulate_continuous(stream, SC_8B, 256)
    assert streamed.e2e_s is None and held.e2e_s is not None
    for k in ("requests_per_s", "output_tokens_per_s", "mean_concurrency", "mean_batch", "n_steps"):
        assert getattr(streamed, k) == pytest.approx(getattr(held, k), rel=1e-12)
    for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s"):
        assert getattr(streamed, k) == pytest.approx(getattr(held, k), rel=0.012)
    assert streamed.mean_ttft_s == pytest.approx(held.mean_ttft_s, rel=1e-9)


def test_log_histogram_quantiles_are_within_their_relative_accuracy():
    from chalk.analyses.traffic.log_histogram import LogHistogram

    rng = np.random.default_rng(1)
    x = rng.lognormal(-4, 1.5, 200_000)
    h = LogHistogram()
    for part in np.array_split(x, 7):
        h.add(part)
    for q in (0.01, 0.5, 0.9, 0.99, 0.999):
        assert h.quantile(q) == pytest.approx(np.quantile(x, q), rel=0.011)
    assert h.count == x.size and h.mean == pytest.approx(x.mean(), rel=1e-12)
    h.add([math.nan, math.inf])
    assert h.count == x.size and math.isnan(LogHistogram().quantile(0.5))


def test_prefix_cached_tokens_skip_prefill_compute():
    """A prompt whose first tokens are in the prefix cache reaches its first token sooner; nothing else moves."""
    a = S.Requests.from_arrays(np.arange(50) * 0.5, 4000, 64)
    c = S.Requests.from_arrays(np.arange(50) * 0.5, 4000, 64, cached_len=3000)
    cold = S.simulate_continuous(a, SC_8B, 8)
    warm = S.simulate_continuous(c, SC_8B, 8)
    assert warm.ttft_p50_s < 0.5 * cold.ttft_p50_s
    assert warm.prefix_hit_rate == pytest.approx(0.75) and cold.prefix_hit_rate == 0.0
    with pytest.raises(Exception):
        S.Requests.from_arrays([0.0], 100, 10, cached_len=100)


@pytest.mark.parametrize("arrivals", ["closed", "poisson"])
def test_tail_targets_are_met_when_replayed(arrivals):
    """--tpot-p99 is answered from the request-level replay, not the mean step: the chosen point's replayed p99
    meets the target, and holding the tail costs throughput against the unconstrained answer; under Poisson
    arrivals (the default) the answer is the rate the replay served."""
    kw = dict(input_len=1000, output_len=1000, gpus=8)
    free = throughput("llama-3.1-70b", "h100-sxm", **kw)
    held = throughput("llama-3.1-70b", "h100-sxm", tpot_p99_s=0.030, ttft_p99_s=2.0, arrivals=arrivals, **kw)
    assert held["tpot_p99_s"] <= 0.030 and held["ttft_p99_s"] <= 2.0
    assert held["tail_latency_source"].startswith("replayed " + ("closed" if arrivals == "closed" else "open"))
    assert held["output_tokens_per_s_per_gpu"] < free["output_tokens_per_s_per_gpu"]
    assert held["tpot_s"] <= held["tpot_p99_s"]
    if arrivals == "poisson":  # what the replica served is what arrived (a queue that keeps up), per GPU
        rate = held["arrival_rate_per_replica"]
        served = rate * 1000 / (held["gpus"] / held["parallelism"]["dp"])  # per replica, over its GPUs
        assert held["output_tokens_per_s_per_gpu"] == pytest.approx(served, rel=0.05)


def test_poisson_tail_targets_are_monotonic_and_cost_throughput():
    """A tighter p99 TPOT never serves more under Poisson arrivals (the bisection finds the highest rate meeting
    it), and a p99 bound costs throughput against the same bound on the mean (MLPerf's interactive scenario: p99
    TPOT <= 40 ms, p99 TTFT <= 450 ms, where the real runs held ~270 rather than ~446 sequences per GPU)."""
    kw = dict(input_len=300, output_len=294, gpus=8, precision="fp8", engine="trtllm")
    loose = throughput("llama-2-70b", "h200", tpot_p99_s=0.06, ttft_p99_s=0.45, **kw)
    tight = throughput("llama-2-70b", "h200", tpot_p99_s=0.04, ttft_p99_s=0.45, **kw)
    mean = throughput("llama-2-70b", "h200", min_user_tps=25, **kw)
    assert tight["output_tokens_per_s_per_gpu"] <= loose["output_tokens_per_s_per_gpu"] * 1.02
    assert tight["output_tokens_per_s_per_gpu"] < mean["output_tokens_per_s_per_gpu"]
    assert tight["tpot_p99_s"] <= 0.04 and tight["ttft_p99_s"] <= 0.45
    assert tight["arrivals"] == "poisson" and tight["tail_replays"]
    both = throughput("llama-2-70b", "h200", tpot_p99_s=0.2, ttft_p99_s=2.0, min_user_tps=30, **kw)
    assert both["user_tokens_per_s"] >= 30  # a mean floor asked beside the p99s holds at the rate found


def test_an_unreachable_p99_target_says_why_in_one_line():
    """A p99 TTFT below the calibrated per-request latency cannot be met at any rate: the closed-form screen (its
    TTFT on the client's clock, as the replays') rules every point out and says why in one line; a target the
    screen passes but no replay meets names each replica shape once however many deployment sizes hold it."""
    from chalk.errors import FitError

    from chalk.analyses.step.calibration import calibration

    lat = calibration().request_latency_s
    with pytest.raises(FitError, match=f"every TTFT includes the calibrated {lat * 1e3:.0f} ms") as e:
        throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, ttft_p99_s=0.06)
    assert "\n" not in str(e.value)
    with pytest.raises(FitError, match="met the p99 targets under Poisson arrivals at any rate tried") as e:
        throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, ttft_p99_s=lat + 0.015)
    assert "\n" not in str(e.value)
    tried = [t.split(":")[0] for t in str(e.value).split("tried ")[-1].split("; ")]
    assert tried and len(set(tried)) == len(tried) and not any(" x" in t for t in tried)


def test_an_unmet_search_names_the_binding_target_and_its_best():
    """A search no layout answers names the target(s) no layout reaches, each with the best any layout that fits
    does, not the ones it meets (QA 2026-11-28: a p99 TTFT failure read 'fastest that fits: 79.3 tokens/s per user;
    p99 TPOT <= 0.1 s asked', both met)."""
    from chalk.errors import FitError

    with pytest.raises(FitError) as e:
        throughput("llama-3.1-70b", "h100", input_len=1000, output_len=200, min_user_tps=400)
    assert "mean speed >= 400 tokens/s per user (best " in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FitError) as e:
        throughput("llama-3.1-8b", "h100", input_len=1000, output_len=200, tpot_p99_s=1.0, ttft_p99_s=0.06)
    msg = str(e.value)
    assert "p99 TTFT <= 60 ms (best " in msg and "TPOT" not in msg


def test_arrivals_must_be_named():
    from chalk.errors import InputError

    with pytest.raises(InputError, match="arrivals must be one of"):
        throughput("llama-3.1-8b", "h100-sxm", input_len=100, output_len=100, tpot_p99_s=0.05, arrivals="bursty")


def test_poisson_requests_draw_lengths_as_the_closed_loop_does():
    """An open-loop replay and a closed one of the same deployment see the same prompts; the arrivals are a Poisson
    process at the rate asked."""
    p = S.poisson_requests(50.0, 20000, 1000, 200, seed=3)
    c = S.closed_loop_requests(8, 20000, 1000, 200, seed=3)
    gaps = np.diff(p.arrival_s)
    assert np.all(gaps >= 0) and np.mean(gaps) == pytest.approx(1 / 50.0, rel=0.03)
    assert np.std(gaps) == pytest.approx(np.mean(gaps), rel=0.05)  # exponential: std = mean
    for m, x, y in ((1000, p.input_len, c.input_len), (200, p.output_len, c.output_len)):  # one spread, one mean
        lo, hi = np.floor(m * S.MEAN_LENGTH_SPREAD[0]), np.ceil(m * S.MEAN_LENGTH_SPREAD[1])
        assert lo <= min(x.min(), y.min()) <= lo + 1 and hi - 1 <= max(x.max(), y.max()) <= hi
        assert np.mean(x) == pytest.approx(m, rel=0.005) and np.mean(y) == pytest.approx(m, rel=0.005)


def test_engine_limits_can_be_overridden():
    """--max-seqs caps the sequences per scheduler over the engine profile; --max-tokens sets the prefill chunk."""
    kw = dict(layout="tp=1", concurrency=512, input_len=1000, output_len=200)
    base = fixed_deployment("llama-3.1-8b", "h100-sxm", engine="vllm", **kw)
    capped = fixed_deployment("llama-3.1-8b", "h100-sxm", engine="vllm", max_seqs=64, **kw)
    assert capped["batch_cap_per_replica"] == 64 < base["batch_cap_per_replica"]
    assert capped["mean_step"]["decode_sequences"] <= 64
    assert capped["output_tokens_per_s_per_gpu"] < base["output_tokens_per_s_per_gpu"]


def test_vllms_default_sequence_cap_follows_a_prefill_budget_the_user_sets():
    """vLLM's default max_num_seqs is min(its tier's, max_num_batched_tokens) whoever sets the budget (vllm.yaml
    cap_seqs_by_chunk): --max-tokens 100 caps it at 100 unless --max-seqs is given; SGLang's cap does not follow it.
    QA 2026-11-28: the cap stayed at 1,024."""
    kw = dict(layout="tp=1", concurrency=5000, input_len=200, output_len=100, max_tokens=100)
    assert fixed_deployment("llama-3.1-8b", "h200", engine="vllm", **kw)["batch_cap_per_replica"] == 100
    assert fixed_deployment("llama-3.1-8b", "h200", engine="vllm", max_seqs=512, **kw)["batch_cap_per_replica"] == 512
    assert fixed_deployment("llama-3.1-8b", "h200", engine="sglang", **kw)["batch_cap_per_replica"] > 100


def test_a_speculating_answer_says_its_tail_is_not_replayed_and_keeps_p99_above_the_mean():
    """QA sweep 2026-11-27: with MTP the p99 targets were checked on the fixed deployment's closed form at the
    chosen point's in-flight count (fewer decoding than the search point, so a shorter step): a 'p99' TPOT of 17.2
    ms under a mean of 18.1 ms, labelled a replayed closed loop."""
    r = throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, tpot_p99_s=0.020, ttft_p99_s=0.5,
                   disaggregated=False, speculative=Speculation(2, 0.7))
    assert r["speculative"]["used"] and "not replayed" in r["tail_latency_source"]
    assert r["tpot_p99_s"] >= r["tpot_s"] and r["ttft_p99_s"] >= r["ttft_s"]


@pytest.mark.parametrize("budget", [256, 2048])
def test_the_search_holds_the_prefill_budget_it_is_given(budget):
    """QA sweep 2026-11-27: `throughput --max-tokens 1` answered 27,401 prompt tokens/s per GPU at 16 steps/s, the
    throughput it gave without the cap. The search now keeps to a given budget (prompt tokens per step <= it, a step
    per token of each user) and refuses, in one line, a budget no batch can run on."""
    r = throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, disaggregated=False,
                   max_tokens=budget)
    per_replica = r["input_tokens_per_s_per_gpu"] * r["gpus"] / (r.get("replicas") or 1)
    assert per_replica <= budget * r["user_tokens_per_s"] * (1 + 1e-6)
    with pytest.raises(FitError, match="raise --max-tokens"):
        throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, disaggregated=False, max_tokens=1)


def test_the_replayed_mean_step_names_a_batch_estimate_takes():
    """The replayed closed loop's decoding sequences are a time average (62.64 here), which `estimate --batch`
    refuses; the pure decode step is timed at the whole number the note tells `estimate` to take (QA 2026-11-27)."""
    from chalk.api import estimate

    r = fixed_deployment("llama-3.1-70b", "h100-sxm", layout="tp=4", concurrency=64, input_len=2000, output_len=300)
    ms = r["mean_step"]
    assert ms["decode_sequences"] != round(ms["decode_sequences"]) and "rounded" in ms["note"]
    e = estimate("llama-3.1-70b", "h100-sxm", batch=round(ms["decode_sequences"]), context=r["mean_decode_context"],
                 layout="tp=4")
    assert e.step_time_s == pytest.approx(ms["pure_decode_step_s"], rel=1e-9)


def test_the_fixed_answer_shows_the_op_table_of_its_mean_mix():
    """The mean step's ops (issue 23: 'the op table of that mixed step'): one step carrying the mean decode batch and
    the mean prompt tokens, its ops adding up to its time (no overlap on TP4), slower than the pure decode step by
    the prompt tokens it carries; the text answer prints it beside the pure step `estimate` times (QA 2026-11-28)."""
    r = fixed_deployment("llama-3.1-70b", "h100-sxm", layout="tp=4", concurrency=32, input_len=2000, output_len=500)
    ms = r["mean_step"]
    assert ms["prefill_tokens_per_step"] > 0 and ms["mean_mix_step_s"] > ms["pure_decode_step_s"]
    assert sum(ms["mean_mix_ops_s"].values()) == pytest.approx(ms["mean_mix_step_s"], rel=1e-6)
    assert {"mlp", "attention_decode", "attention_prefill", "overhead"} <= set(ms["mean_mix_ops_s"])
    p = subprocess.run([sys.executable, "-m", "chalk", "throughput", "-m", "llama-3.1-70b", "-H", "h100-sxm",
                        "--layout", "tp=4", "--concurrency", "32", "--input-len", "2000", "--output-len", "500"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0 and "mean step per replica" in p.stdout
    assert f"--layout tp=4 --batch {round(ms['decode_sequences'])} --context 2250" in " ".join(p.stdout.split())


def test_concurrency_is_bounded_as_users_are():
    """1e12 requests in flight printed a TTFT of 1,930,233 days (QA 2026-11-28): bounded as plan's users (1e9)."""
    with pytest.raises(InputError, match="concurrency must be at most 1,000,000,000"):
        fixed_deployment("llama-3.1-70b", "h100-sxm", layout="tp=4", concurrency=10 ** 12, input_len=2000,
                         output_len=200)


@pytest.mark.parametrize("engine", [None, "vllm", "sglang@0.4", "trtllm"])
def test_the_fixed_answer_reconciles_with_estimate(engine):
    """The fixed deployment's mean step names the decode batch whose pure step `estimate` times, to rounding, with
    the same engine profile (`estimate --engine`: its kernel tables, host time and 'auto' KV) or none; before
    estimate took an engine, an engine's fixed step could only be matched by chalk's defaults, to 15%."""
    from chalk.api import estimate

    r = fixed_deployment("llama-3.1-70b", "h100-sxm", layout="tp=8", concurrency=64, input_len=2000,
                         output_len=500, engine=engine, simulate=False)
    ms = r["mean_step"]
    assert ms["pure_decode_step_s"] <= r["tpot_s"] <= ms["mean_step_s"] * 1.001
    e = estimate("llama-3.1-70b", "h100-sxm", batch=ms["decode_sequences"], context=r["mean_decode_context"],
                 layout="tp=8", engine=engine)
    assert e.step_time_s == pytest.approx(ms["pure_decode_step_s"], rel=1e-9)
    assert e.kv_precision == r["kv_precision"] and (e.engine or "").startswith(engine.split("@")[0] if engine else "")
    assert (e.engine is None) == (engine is None)


@pytest.mark.parametrize("args", [
    ["-m", "deepseek-r1", "-H", "h200", "--layout", "tp=8,ep=4,etp=2", "--engine", "vllm"],
    ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=1"],
])
def test_the_fixed_answers_estimate_command_reproduces_its_pure_decode_step(args):
    """The command the fixed answer prints for its pure decode step, run as printed, times that step. QA 2026-11-28:
    it printed 'estimate --batch 64 --context 2250' without --engine vllm, which answered 30.0 ms (other kernel
    tables, FP8 KV) against the answer's 30.4 ms."""
    import json
    import re
    import shlex

    from typer.testing import CliRunner

    from chalk.faces import cli

    base = ["throughput", *args, "--concurrency", "64", "--input-len", "2000", "--output-len", "500"]
    text = CliRunner().invoke(cli.app, base, env={"COLUMNS": "400"})
    assert text.exit_code == 0, text.output
    cmd = re.search(r"\((estimate [^)]*)\)", " ".join(text.output.split())).group(1)
    got = json.loads(CliRunner().invoke(cli.app, shlex.split(cmd) + ["--json"]).stdout)
    want = json.loads(CliRunner().invoke(cli.app, base + ["--json"]).stdout)["mean_step"]["pure_decode_step_s"]
    assert got["step_time_s"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("chunk", [100, 2048])
def test_a_given_prefill_chunk_replays_as_throughputs_prefill_budget(chunk):
    """simulate --concurrency --prefill-chunk N answers as throughput --layout --concurrency --max-tokens N (one
    attention-DP rank). QA 2026-11-28: replayed apart, on a step cost linearised at the 3,000 seats, a 100-token chunk
    gave 12,343 tokens/s in 4.04 ms steps, below the batch's own weight read; throughput's replay gave 6,729."""
    from chalk.analyses.traffic.simulate_run import simulate_requests

    kw = dict(input_len=200, output_len=100, engine="vllm", layout="tp=1", concurrency=3000)
    thr = throughput("llama-3.1-8b", "h200", max_tokens=chunk, **kw)
    run = simulate_requests("llama-3.1-8b", "h200", prefill_chunk=chunk, **kw)
    out = run.result.summary()["output_tokens_per_s"]
    assert out == pytest.approx(thr["output_tokens_per_s_per_gpu"], rel=1e-9)
    assert run.result.mean_step_s >= thr["mean_step"]["pure_decode_step_s"] * 0.999


def test_estimate_with_an_engine_times_its_kernels_and_host_time():
    """gpt-oss-20b on one H100 under TensorRT-LLM: 'auto' KV is the checkpoint's (BF16: it declares none), the host
    time per step is the profile's 0.3 ms instead of chalk's fitted 1 ms + 10 us per layer; the verify step of
    --mtp takes the engine too; the aggregate view has no engine and says so in one line."""
    from chalk.api import estimate
    from chalk.errors import InputError

    plain = estimate("gpt-oss-20b", "h100-sxm", batch=64, context=2000, layout="tp=1")
    trt = estimate("gpt-oss-20b", "h100-sxm", batch=64, context=2000, layout="tp=1", engine="trtllm")
    assert plain.kv_precision == "fp8" and trt.kv_precision == "bf16" and trt.engine.startswith("trtllm")
    assert trt.overhead_time_s < plain.overhead_time_s and "trtllm" in trt.efficiency
    spec = estimate("llama-3.1-8b", "h100-sxm", batch=8, context=2000, layout="tp=1", mtp=1, acceptance=0.7,
                    engine="vllm")
    assert spec.speculative is not None and spec.engine.startswith("vllm")
    with pytest.raises(InputError, match="aggregate"):
        estimate("llama-3.1-8b", "h100-sxm", aggregate=True, engine="vllm")


def test_one_deployment_answers_alike_through_every_door():
    """`throughput --layout --concurrency`, `simulate --concurrency` (CLI and API) replay the same closed loop:
    TTFT and TPOT, mean, median and p99, and throughput agree within 2%."""
    import json
    import subprocess
    import sys

    import chalk

    kw = dict(layout="tp=8", concurrency=64, input_len=2000, output_len=500)
    f = fixed_deployment("llama-3.1-70b", "h100-sxm", **kw)
    s = chalk.simulate("llama-3.1-70b", "h100-sxm", **kw)
    fe = fixed_deployment("llama-3.1-70b", "h100-sxm", engine="sglang", **kw)  # an engine's profile, both doors
    se = chalk.simulate("llama-3.1-70b", "h100-sxm", engine="sglang", **kw)
    assert se.mean_tpot_s == pytest.approx(fe["tpot_s"], rel=0.02) and se.engine.startswith("sglang")
    cli = json.loads(subprocess.run([sys.executable, "-m", "chalk", "simulate", "-m", "llama-3.1-70b", "-H", "h100-sxm",
                                     "--layout", "tp=8", "--concurrency", "64", "--input-len", "2000", "--output-len",
                                     "500", "--json"], capture_output=True, text=True, check=True).stdout)
    pairs = [(f["ttft_s"], s.mean_ttft_s, cli["mean_ttft_s"]), (f["ttft_p99_s"], s.ttft_p99_s, cli["ttft_p99_s"]),
             (f["ttft_p50_s"], s.ttft_p50_s, cli["ttft_p50_s"]), (f["tpot_p50_s"], s.tpot_p50_s, cli["tpot_p50_s"]),
             (f["tpot_s"], s.mean_tpot_s, cli["mean_tpot_s"]), (f["tpot_p99_s"], s.tpot_p99_s, cli["tpot_p99_s"]),
             (f["output_tokens_per_s_per_gpu"] * f["gpus"], s.output_tokens_per_s, cli["output_tokens_per_s"])]
    for a, b, c in pairs:
        assert b == pytest.approx(a, rel=0.02) and c == pytest.approx(a, rel=0.02)
    assert cli["latency_window"]["warmup_requests"] == f["latency_window"]["warmup_requests"]


OPEN_LOOP_CASES = [("llama-3.1-70b", "h100-sxm", 2000, 500, 0.05, None),
                   ("llama-3.1-8b", "h100-sxm", 1000, 200, 0.02, 1.0),
                   ("qwen3-30b-a3b", "h200", 4000, 300, 0.03, None), ("mixtral-8x7b", "h100-sxm", 500, 500, None, 0.6),
                   ("llama-3.1-70b", "b200", 8000, 1000, 0.04, 3.0)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(OPEN_LOOP_CASES), scale=st.floats(0.5, 2.0),
       engine=st.sampled_from([None, "vllm", "sglang", "trtllm"]))
def test_a_poisson_answer_replays_alike_through_simulate(case, scale, engine):
    """`throughput --tpot-p99/--ttft-p99` (Poisson arrivals) and `chalk simulate --rate --layout` at the rate and
    layout it answered replay one open loop (the engine's cap and chunk, the settled step cost, TTFT on the client's
    clock): p99 and mean TTFT and TPOT and output per GPU agree within 2%. They differed by the 200 ms request latency
    and the batch cap (256 against the engine's) before."""
    import chalk
    from chalk.analyses.traffic.serving import ARRIVAL_REQUESTS
    from chalk.errors import FitError

    m, hw, inp, out, tpot, ttft = case
    inp = max(int(inp * scale), 16)
    try:
        r = throughput(m, hw, input_len=inp, output_len=out, tpot_p99_s=tpot, ttft_p99_s=ttft, engine=engine)
    except FitError:
        assume(False)
    assume(r.get("arrivals") == "poisson")  # else every screened point speculates: replayed closed
    p = r["parallelism"]
    lay = ",".join(f"{k}={p[k]}" for k in ("tp", "ep", "pp", "attn_dp", "etp") if p.get(k, 1) != 1) or "tp=1"
    s = chalk.simulate(m, hw, layout=lay, rate=r["arrival_rate_per_replica"], requests=ARRIVAL_REQUESTS,
                       input_len=inp, output_len=out, engine=engine)
    assert (s.engine is None) == (engine is None) and (r["engine"] is None) == (engine is None)
    assert {k: s.parallelism[k] for k in ("tp", "ep", "pp", "attn_dp")} == {k: p[k] for k in ("tp", "ep", "pp",
                                                                                           "attn_dp")}
    pairs = [(r["tpot_p99_s"], s.tpot_p99_s), (r["ttft_p99_s"], s.ttft_p99_s), (r["tpot_s"], s.mean_tpot_s),
             (r["ttft_s"], s.mean_ttft_s), (r["output_tokens_per_s_per_gpu"], s.output_tokens_per_s / s.replica_gpus)]
    for a, b in pairs:
        assert b == pytest.approx(a, rel=0.02)


PLAN_CASES = [("llama-3.1-8b", "h100-sxm", 1000, 200, "bf16", 12.0), ("llama-3.1-70b", "h200", 2000, 500, "fp8", 3.0),
              ("qwen3-30b-a3b", "h100-sxm", 3000, 300, "bf16", 8.0)]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(PLAN_CASES), load=st.floats(0.2, 1.0), engine=st.sampled_from([None, "vllm", "sglang"]))
# found in a fresh environment: after 275dfaa bounded simulate's open loop by the replica's KV memory and not plan's
# fleet replay, p99 TTFT 0.81 s against 0.61 s here
@example(case=PLAN_CASES[2], load=0.296875, engine=None)
def test_a_plans_replay_of_one_replica_is_simulates(case, load, engine):
    """`plan`'s replay of a one-replica fleet and `chalk simulate --rate --layout` of that replica replay one open
    loop (the same requests, engine limits, settled step cost and client clock): TTFT and TPOT, p50 and p99, within
    2%. They differed by 6-10% in TPOT (plan's own secant step cost, unspread lengths, its own chunk)."""
    import chalk
    from chalk.api import plan

    m, hw, inp, out, prec, top = case
    r = plan(m, hw, rate=top * load, input_len=inp, output_len=out, ttft_p99_s=3.0, precision=prec, engine=engine,
             modes=("aggregated",), speculative=None)
    o = r["options"][0]
    sim = o["simulated"]
    assume(o["replicas"] == 1)
    p = o["parallelism"]
    lay = ",".join(f"{k}={p[k]}" for k in ("tp", "ep", "pp", "attn_dp") if p.get(k, 1) != 1) or "tp=1"
    s = chalk.simulate(m, hw, layout=lay, rate=top * load, requests=sim["n_requests"], input_len=inp, output_len=out,
                       precision=prec, engine=o.get("engine"))
    for q in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"):
        assert getattr(s, q) == pytest.approx(sim[q], rel=0.02), q


def test_a_disaggregated_answer_holds_its_p99s_in_a_replay():
    """`throughput --disaggregated --tpot-p99 --ttft-p99` (Poisson arrivals) is answered from a replay of the whole
    deployment it reports (`_disagg_tail`: prompts queue for the prefill workers, decode on the replicas), not from
    the mean step: its p99s are the replay's and meet the targets, its output per GPU is the replayed rate over all
    its GPUs, and a tighter TTFT target costs throughput. Before, its p99 TPOT and TTFT were the means."""
    kw = dict(input_len=2000, output_len=500, disaggregated=True, tpot_p99_s=0.05)
    r = throughput("llama-3.1-70b", "h100-sxm", ttft_p99_s=1.0, **kw)
    assert r["arrivals"] == "poisson" and "prefill worker" in r["tail_latency_source"]
    assert r["tpot_p99_s"] <= 0.05 and r["ttft_p99_s"] <= 1.0
    assert r["ttft_p99_s"] > r["ttft_p99_s_closed_form"]  # the prefill queue's tail, which the mean step misses
    decode_replicas = r["decode_gpus"] / (r["parallelism"]["tp"] * r["parallelism"]["attn_dp"] * r["parallelism"]["pp"])
    served = r["arrival_rate_per_replica"] * decode_replicas * 500
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(served / r["gpus"], rel=1e-9)
    assert r["gpus"] == r["decode_gpus"] + r["prefill_gpus"]
    tight = throughput("llama-3.1-70b", "h100-sxm", ttft_p99_s=0.5, **kw)
    assert tight["ttft_p99_s"] <= 0.5 and tight["output_tokens_per_s_per_gpu"] < r["output_tokens_per_s_per_gpu"]


def test_whole_disaggregated_pools_count_every_gpu():
    """A disaggregated answer is a whole deployment: decode replicas and enough whole prefill replicas to keep up,
    its GPUs counted in both pools and its output per GPU over all of them."""
    from chalk.analyses.traffic.serving import whole_pools

    assert whole_pools(8, 4, 1.397) == (1, 3)  # 8 + 12 GPUs for an ideal 19.2: 4% over
    k, p = whole_pools(8, 8, 0.1)
    assert p * 8 >= k * 8 * 0.1 and (k * 8 + p * 8) / (k * 8 * 1.1) - 1 <= 0.05
    r = throughput("llama-3.1-70b", "h100-sxm", input_len=2000, output_len=500, disaggregated=True)
    assert r["gpus"] == r["decode_gpus"] + r["prefill_gpus"] and float(r["gpus"]).is_integer()
    assert r["prefill_gpus"] >= r["decode_gpus"] * r["prefill"]["gpus_per_decode_gpu"] - 1e-9


def test_the_search_considers_disaggregation_where_it_wins():
    """disaggregated='auto' (the CLI's --mode all) answers with whichever mode serves more per GPU, and says what the
    other gives."""
    kw = dict(input_len=2000, output_len=500)
    agg = throughput("llama-3.1-70b", "h100-sxm", **kw)
    dis = throughput("llama-3.1-70b", "h100-sxm", disaggregated=True, **kw)
    auto = throughput("llama-3.1-70b", "h100-sxm", disaggregated="auto", **kw)
    a, d = agg["output_tokens_per_s_per_gpu"], dis["output_tokens_per_s_per_gpu"]
    best = d if d > a * (1 + DISAGGREGATION_MARGIN) else a
    assert auto["output_tokens_per_s_per_gpu"] == pytest.approx(best)
    other = "disaggregated" if auto["mode_search"]["chosen"] == "aggregated" else "aggregated"
    assert auto["mode_search"][other]["output_tokens_per_s_per_gpu"] <= best
    from chalk import api  # the public call takes 'auto' too (the CLI's --mode all), and says so when misspelt

    assert api.throughput("llama-3.1-70b", "h100-sxm", disaggregated="auto", **kw)["output_tokens_per_s_per_gpu"] == \
        pytest.approx(best)
    with pytest.raises(Exception, match="True, False or 'auto'"):
        api.throughput("llama-3.1-70b", "h100-sxm", disaggregated="sometimes", **kw)
    fixed = throughput("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=8, disaggregated="auto", **kw)
    assert fixed["mode"] == "fixed" and not fixed["disaggregated"]
    with pytest.raises(Exception):
        throughput("llama-3.1-70b", "h100-sxm", disaggregated="sometimes", **kw)


def test_a_tie_between_modes_answers_with_one_pool():
    """QA 2026-11-28: llama-3.1-8b on H200 at 200K in / 100 out (cut to 131,071 / 1) answered with 9,820 GPUs in two
    pools for 0.35% more output per GPU than one GPU aggregated. Disaggregation answers only where it serves more
    than DISAGGREGATION_MARGIN more per GPU, and the note says why the second pool was not worth it."""
    auto = throughput("llama-3.1-8b", "h200", input_len=200000, output_len=100, disaggregated="auto")
    other = auto["mode_search"]["disaggregated"]["output_tokens_per_s_per_gpu"]
    assert auto["mode_search"]["chosen"] == "aggregated" and auto["gpus"] <= 8
    assert auto["output_tokens_per_s_per_gpu"] <= other <= auto["output_tokens_per_s_per_gpu"] * 1.05
    assert any("not worth a second pool" in n for n in auto["notes"])


def test_the_mode_note_prints_the_figures_it_compared():
    """Within --gpus the modes are compared per GPU given; the note prints those figures. QA 2026-11-28: it printed
    the disaggregated answer's 3,252 per GPU used as 'within 5%' of an aggregated 2,374."""
    import re

    r = throughput("llama-3.1-8b", "h100-sxm", input_len="lognormal:mean=2000,p99=8000", output_len=300,
                   tpot_p99_s=0.03, gpus=8, disaggregated="auto")
    note = next(n for n in r["notes"] if "serving answers" in n)
    other = r["mode_search"]["aggregated" if r["mode_search"]["chosen"] == "disaggregated" else "disaggregated"]
    # a tie ('within 5% ..., not worth a second pool') or a clear win ('serves more ... than disaggregated (...)'):
    # either way the disaggregated figure printed is the one compared, per GPU of the 8 given (since its prefill pool
    # is held to plan's 80% ceiling, disaggregation no longer ties here: 1,881 per GPU given against 2,375)
    assert r["mode_search"]["chosen"] == "aggregated", note
    m = re.search(r"(?:serving's output tokens/s per GPU, |than disaggregated \()([0-9.]+) per GPU of the 8 given",
                  note)
    assert m, note
    compared = float(m.group(1))
    assert compared == pytest.approx(other["output_tokens_per_s_per_gpu"] * other["gpus"] / 8, rel=1e-3)
    assert r["output_tokens_per_s_per_gpu"] * r["gpus"] / 8 * 1.05 >= compared


def test_every_replayed_answer_states_its_latency_window():
    """Every door that answers from a replay says which requests its latencies are over (`latency_window`):
    throughput held to p99s (Poisson, closed loop, disaggregated), a fixed deployment, simulate and plan's replay;
    the window leaves the warm-up out."""
    import chalk
    from chalk.api import plan

    kw = dict(input_len=1000, output_len=200, tpot_p99_s=0.05)
    answers = [throughput("llama-3.1-70b", "h100-sxm", **kw),
               throughput("llama-3.1-70b", "h100-sxm", arrivals="closed", **kw),
               throughput("llama-3.1-70b", "h100-sxm", disaggregated=True, **kw),
               fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=16, input_len=1000,
                                output_len=200),
               chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", rate=5, requests=2000).summary(),
               plan("llama-3.1-8b", "h100-sxm", rate=10, input_len=1000, output_len=200,
                    ttft_p99_s=1.0)["options"][0]["simulated"]]
    for a in answers:
        w = a["latency_window"]
        assert w["kind"] == "steady" and w["requests"] > 0 and w["warmup_requests"] > 0, w


def test_requests_reported_waiting_only_where_a_queue_forms():
    """The fixed answer's 'requests wait' note reads seats - requests in the engine - requests in the client's
    latency; within Little's law's 2% that gap is the window's measurement, not a queue (issue 23's example,
    Llama-3.1-70B TP4 on H200 at 256 in flight, 2000 in / 32 out, said 3 of 256 wait under a 512 cap). Past the cap
    the queue is real: 1,024 seats over what the cap and KV memory allow (550 under the 2026-11-27 fit, whose
    scheduler cap is 2048: the KV memory binds) leave the rest waiting, within 5%."""
    kw = dict(layout="tp=4", input_len=2000, output_len=32)
    under = fixed_deployment("llama-3.1-70b", "h200", concurrency=256, **kw)
    assert not any("wait on average" in n for n in under["notes"])
    over = fixed_deployment("llama-3.1-70b", "h200", concurrency=1024, **kw)
    note = next(n for n in over["notes"] if "wait on average" in n)
    allowed = float(note.split("allows ")[1].split(" in flight")[0])
    assert 256 < allowed < 1024 and float(note.split(" of ")[0]) == pytest.approx(1024 - allowed, rel=0.05)


def test_more_gpus_given_never_serve_less():
    """QA sweep 2026-11-27: under --mode all a disaggregated answer needing more than --gpus was dropped rather than
    resized, so 16 H100s answered aggregated at 59.6k output tokens/s where 14 of them, disaggregated, serve 71.9k
    (the answer without --gpus). A smaller decode pool whose prefill pool fits beside it is now searched, and the
    modes compare per GPU given."""
    kw = dict(input_len=1000, output_len=200, tpot_p99_s=0.020, disaggregated="auto")
    free = throughput("llama-3.1-8b", "h100-sxm", **kw)
    fleet = lambda r: r["output_tokens_per_s_per_gpu"] * r["gpus"]  # noqa: E731
    prev = 0.0
    for n in sorted({8, 16, free["gpus"]}):  # the answer without --gpus takes 17 under the 2026-11-27 fit
        r = throughput("llama-3.1-8b", "h100-sxm", gpus=n, **kw)
        assert r["gpus"] <= n and fleet(r) >= prev
        prev = fleet(r)
    assert prev >= fleet(free) * (1 - 1e-9)


def test_mode_all_keeps_to_the_gpus_given():
    """--gpus is the deployment's size: under --mode all a disaggregated answer whose pools need more GPUs is not a
    candidate (Qwen3-235B FP4 on 4 B200s, 32K in / 1K out: the disaggregated search fed 4 decode GPUs from 28
    prefill GPUs and answered with 40), and the note says why; with no --gpus both modes still compete."""
    kw = dict(input_len=32768, output_len=1024, precision="fp4", engine="trtllm", layout="tp=1,attn_dp=4,ep=4")
    dis = throughput("qwen3-235b-a22b", "b200", gpus=4, disaggregated=True, **kw)
    assert dis["gpus"] > 4  # the pools the decode pool of 4 needs
    auto = throughput("qwen3-235b-a22b", "b200", gpus=4, disaggregated="auto", **kw)
    assert auto["gpus"] == 4 and auto["mode_search"]["chosen"] == "aggregated"
    assert f"need {dis['gpus']} GPUs" in auto["mode_search"]["disaggregated"]["error"]
    assert any("disaggregated serving does not" in n for n in auto["notes"])


@pytest.mark.parametrize("concurrency", [2_000, 20_000, 100_000])
def test_littles_law_holds_far_above_the_cap(concurrency):
    """A fixed deployment with many times its cap in flight (llama-3.1-8b on one H100 runs ~190 at 2000 in / 200
    out; the rest queue): in flight = throughput x time in system, within 2%. The replay used to stop at 20,000
    requests whatever the seats, so 100,000 seats were all sent at t = 0 and the run never left its warm-up (TTFT
    682 s where the law needs ~6,860 s); it now replays at least CLOSED_LOOP_MIN_ROUNDS rounds of the seats."""
    from chalk.analyses.traffic.serving import CLOSED_LOOP_MIN_ROUNDS

    r = fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=concurrency, input_len=2000,
                         output_len=200)
    assert r["concurrency"] > 5 * r["batch_cap_per_replica"]
    assert r["latency_source"].startswith("simulated closed loop")
    assert f"({max(CLOSED_LOOP_MIN_ROUNDS * concurrency, 20_000):,} requests" in r["latency_source"]
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
    assert x * (r["ttft_s"] + r["tpot_s"] * (r["output_len"] - 1)) == pytest.approx(concurrency, rel=0.02)


def test_littles_law_past_a_replay_the_closed_form_answers():
    """Past CLOSED_LOOP_MAX_SEATS per replica a replay of enough rounds would pass the simulator's memory bound: the
    closed form answers, says so, and keeps the law."""
    from chalk.analyses.traffic.serving import CLOSED_LOOP_MAX_SEATS

    n = 2 * CLOSED_LOOP_MAX_SEATS
    r = fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=n, input_len=2000, output_len=200)
    assert r["latency_source"].startswith("closed form (")
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
    assert x * (r["ttft_s"] + r["tpot_s"] * (r["output_len"] - 1)) == pytest.approx(n, rel=0.02)


@pytest.mark.parametrize("kw", [
    dict(input_len="lognormal:mean=4000,p99=30000", output_len=300, ttft_p99_s=1.0),
    dict(input_len="lognormal:mean=2000,p99=8000", output_len=300, tpot_p99_s=0.03, disaggregated=True),
])
def test_an_answer_held_to_p99_targets_states_the_requests_in_flight_it_replayed(kw):
    """A search held to p99 targets answers from its open-loop replay: its requests in flight are that replay's
    (waiting for a prefill chunk included), so Little's law holds on the answer's own rate and latencies. QA
    2026-11-28: the closed form's count from the replay's mean decode batch read 64.8 against 69.2 (aggregated) and
    1,180 against 1,208 (disaggregated)."""
    r = throughput("llama-3.1-8b", "h100-sxm", **kw)
    assert r.get("tail_latency_source", "").startswith("replayed open loop")
    O = r["output_len"]
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / O
    assert x * (r["ttft_s"] + r["tpot_s"] * (O - 1)) == pytest.approx(r["concurrency"], rel=0.01)


def test_a_searched_point_states_the_ttft_its_fixed_deployment_does():
    """The search's closed form and the same deployment's closed form (`simulate=False`) at the concurrency it chose
    report one TTFT: a lone prompt's prefill plus the calibrated per-request latency (the search left the latency
    out: 65 ms against 265 ms on llama-3.1-8b / H100 at 2000 in / 200 out, with the 180 ms latency of that fit); the
    answer states its deployment's replay and says so."""
    r = throughput("llama-3.1-8b", "h100-sxm", input_len=2000, output_len=200)
    lay = r["parallelism"]
    f = fixed_deployment("llama-3.1-8b", "h100-sxm", layout=f"tp={lay['tp']}",
                         concurrency=round(r["concurrency_closed_form"]), input_len=2000, output_len=200,
                         gpus=r["gpus"], simulate=False)
    assert r["ttft_s_closed_form"] == pytest.approx(f["ttft_s"], rel=0.02)
    assert r["tpot_s_closed_form"] == pytest.approx(f["tpot_s"], rel=0.02)
    from chalk.analyses.step.calibration import calibration

    lat = calibration().request_latency_s
    assert r["ttft_s_closed_form"] > lat + 0.02 and "--layout --concurrency" in r["latency_source"]
    assert r["ttft_s"] > r["ttft_s_closed_form"]  # the replay's prompts queue for their prefill chunks


@pytest.mark.parametrize("gpus", [8, 16, 32])
def test_a_disaggregated_answer_counts_one_deployment(gpus):
    """A disaggregated answer's GPUs, layout, replicas and requests in flight describe one deployment: its decode
    replicas (as many as --gpus holds) and the prefill replicas that keep up with them. The whole deployment stayed
    at one decode replica (40 GPUs) while the layout said x2 and x4 and the concurrency counted them; Little's law
    now holds on the fleet's own figures."""
    r = throughput("llama-3.1-70b", "h100-sxm", input_len=2000, output_len=200, min_user_tps=20, disaggregated=True,
                   gpus=gpus)
    k = r["parallelism"]["dp"]
    assert r["decode_gpus"] == gpus == k * r["parallelism"]["tp"] and r["decode_replicas"] == k
    assert r["gpus"] == r["decode_gpus"] + r["prefill_gpus"]
    assert r["prefill_gpus"] == r["prefill"]["replicas"] * r["prefill"]["parallelism"]["tp"]
    assert r["prefill_gpus"] >= r["decode_gpus"] * r["prefill"]["gpus_per_decode_gpu"] - 1e-9
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
    assert r["concurrency"] == pytest.approx(x * (r["ttft_s"] + r["output_len"] * r["tpot_s"]), rel=1e-6)


@pytest.mark.parametrize("model, hw, layout, engine", [
    ("gpt-oss-120b", "h200", "tp=2", "sglang"), ("gpt-oss-120b", "h200", "tp=2", "vllm"),
    ("deepseek-r1", "h200", "tp=8", "sglang"), ("llama-3.1-70b", "h100-sxm", "tp=4", "trtllm")])
def test_the_replay_times_steps_with_the_engines_kernels_as_the_closed_form_does(model, hw, layout, engine):
    """The replayed closed loop's step cost comes from the engine's own kernel tables, as the closed form's steps do:
    gpt-oss-120b on 2 x H200 with SGLang replayed at 24.2 ms per token (chalk's main tables) where the closed form
    said 15.6 ms. At 64 in flight the two agree to a few percent."""
    kw = dict(layout=layout, concurrency=64, input_len=1000, output_len=500, engine=engine)
    sim, closed = (fixed_deployment(model, hw, simulate=s, **kw) for s in (True, False))
    assert sim["latency_source"].startswith("simulated") and closed["latency_source"] == "closed form"
    assert sim["tpot_s"] == pytest.approx(closed["tpot_s"], rel=0.04)
    assert sim["output_tokens_per_s_per_gpu"] == pytest.approx(closed["output_tokens_per_s_per_gpu"], rel=0.05)


def test_a_disaggregated_fixed_deployment_is_replayed_with_its_prefill_pool():
    """A fixed disaggregated deployment goes through the same request-level engine model: its decode replica's
    closed loop, each prompt first queued for its share of the prefill pool, gives a distribution (p50 < p99) and
    Little's law holds on it; its TPOT and throughput stay those of the closed form to a few percent."""
    kw = dict(layout="tp=2", concurrency=64, input_len=2000, output_len=700, gpus=8, decode_gpus=6,
              prefill_layout="tp=2", engine="sglang", precision="mxfp4")
    sim, closed = (fixed_deployment("gpt-oss-120b", "h200", simulate=s, **kw) for s in (True, False))
    assert sim["latency_source"].startswith("simulated") and sim["latency_window"] is not None
    assert sim["ttft_p50_s"] < sim["ttft_p99_s"] and closed["ttft_p50_s"] == closed["ttft_p99_s"]
    assert sim["tpot_s"] == pytest.approx(closed["tpot_s"], rel=0.05)
    x = sim["output_tokens_per_s_per_gpu"] * sim["gpus"] / 700
    assert sim["ttft_s"] + sim["tpot_s"] * 699 == pytest.approx(64 / x, rel=0.04)
    # one prefill worker for seven decode replicas and 8K prompts: prompts queue for the pool, which sets the pace;
    # the replay's queue and the closed form's agree (TTFT 126 s both), and output is the pool's rate
    kw = dict(layout="tp=1", concurrency=512, input_len=8000, output_len=700, gpus=8, decode_gpus=7,
              prefill_layout="tp=1", engine="sglang", precision="mxfp4")
    sim, closed = (fixed_deployment("gpt-oss-120b", "h200", simulate=s, **kw) for s in (True, False))
    assert sim["ttft_p50_s"] == pytest.approx(closed["ttft_s"], rel=0.03) and sim["ttft_p50_s"] > 60
    pool = sim["prefill_pool_requests_per_s"] * 700 / 8
    assert sim["output_tokens_per_s_per_gpu"] == pytest.approx(pool, rel=0.03)


@pytest.mark.parametrize("model, hw, layout, gpus", [("llama-3.1-8b", "h100-sxm", "tp=1", 4),
                                                     ("llama-3.1-70b", "h200", "tp=2", 8)])
def test_concurrency_over_replicas_unevenly_keeps_littles_law(model, hw, layout, gpus):
    """QA sweep 2026-11-27: 5 requests in flight over 4 replicas were replayed as 1 per replica (the seat count
    rounded), so the fleet answered 405 output tokens/s as for 4 and Little's law missed by 20% (6 in flight: +33%).
    N mod R replicas now carry one request more, each group replayed: in flight = throughput x time in system
    within 2%, and one more request in flight never serves less."""
    kw = dict(layout=layout, gpus=gpus, input_len=1000, output_len=200)
    R = gpus // int(layout.split("=")[1])
    prev = 0.0
    for n in range(R, 2 * R + 1):
        r = fixed_deployment(model, hw, concurrency=n, **kw)
        fleet = r["output_tokens_per_s_per_gpu"] * r["gpus"]
        x = fleet / r["output_len"]
        assert n == pytest.approx(x * (r["ttft_s"] + (r["output_len"] - 1) * r["tpot_s"]), rel=0.02), n
        assert fleet > prev and r["concurrency"] == n
        prev = fleet
        if n % R:
            assert "percentiles the busier replicas'" in r["latency_source"] and r["ttft_p99_s"] >= r["ttft_s"]


def test_a_layout_larger_than_the_gpus_given_is_refused():
    """QA sweep 2026-11-27: `throughput --layout tp=4 --gpus 2` answered on 4 GPUs (exit 0), and with
    --disaggregated on a 4-GPU decode pool. A layout that does not fit the GPUs given is one line, exit 2; one that
    fits still answers, --mode all included (its disaggregated candidates are whole replicas of the layout)."""
    from chalk.errors import InputError

    kw = dict(input_len=1000, output_len=200)
    for mode in (False, True, "auto"):
        with pytest.raises(InputError, match="layout TP4 needs 4 GPUs, more than the --gpus 2 given"):
            throughput("llama-3.1-8b", "h100-sxm", layout="tp=4", gpus=2, disaggregated=mode, **kw)
    r = throughput("llama-3.1-8b", "h100-sxm", layout="tp=4", gpus=4, disaggregated="auto", **kw)
    assert r["gpus"] <= 4 and r["layout"].startswith("TP4")


def test_gpus_that_split_badly_serve_on_fewer_rather_than_less():
    """QA sweep 2026-11-27: --gpus N split N into equal replicas of one layout, so 6 H100s held Llama-3.1-70B only as
    TP2 x 3 (its weights leaving little KV) at 279 output tokens/s in all, where TP4 on 4 of them serves 2,148; on 5
    or 7 nothing fitted. The search's own sizes that do not divide N are answered too, the one serving most in all
    wins and says how many GPUs it uses: more GPUs given never serve less, aggregated or under --mode all."""
    kw = dict(input_len=2000, output_len=500)
    fleet = lambda r: r["output_tokens_per_s_per_gpu"] * r["gpus"]  # noqa: E731
    for mode in (False, "auto"):
        prev = 0.0
        for n in range(4, 9):
            r = throughput("llama-3.1-70b", "h100-sxm", gpus=n, disaggregated=mode, **kw)
            assert r["gpus"] <= n and fleet(r) >= prev * (1 - 1e-9), (mode, n)
            prev = fleet(r)
            if mode is False and n in (5, 6, 7):
                assert r["gpus"] == 4 and any(f"{n} GPUs given: the best aggregated deployment uses 4" in x
                                              for x in r["notes"])


def test_a_layout_given_fills_the_gpus_given_with_replicas():
    """QA sweep 2026-11-27: `throughput --layout tp=2 --gpus N` answered one TP2 replica whatever N, and under --mode
    all compared its 2 GPUs' output, spread over the N given, with a disaggregated answer sized to N: on 8 H100s it
    said disaggregated (3,658 tokens/s per GPU) serves more than aggregated (4,494). The GPUs given now hold as many
    replicas of the layout as fit, and any left over are said to be idle."""
    kw = dict(input_len=1000, output_len=200, layout="tp=2")
    one = throughput("llama-3.1-8b", "h100-sxm", disaggregated=False, **kw)
    for n, used in ((8, 8), (7, 6)):
        r = throughput("llama-3.1-8b", "h100-sxm", gpus=n, **kw)
        assert r["gpus"] == used and r["parallelism"]["dp"] == used // 2 and r["mode"] == "aggregated"
        assert r["output_tokens_per_s_per_gpu"] == pytest.approx(one["output_tokens_per_s_per_gpu"], rel=1e-9)
        assert any(f"{n} GPUs given" in x and f"({n - used} idle)" in x for x in r["notes"]) == (used < n)


@pytest.mark.parametrize("cap", [16, 64])
def test_simulate_closed_loop_keeps_the_batch_cap_given(cap):
    """`simulate --concurrency N --max-batch B` runs at most B of the N seats, as `throughput --layout --concurrency N
    --max-seqs B` does (QA 2026-11-27: the cap was dropped for the seats, 4,943 tokens/s at every B on Llama-3.1-8B,
    one H100, 256 in flight, against 1,370 at B = 16)."""
    from chalk.api import simulate

    kw = dict(layout="tp=1", concurrency=256, input_len=1000, output_len=200)
    s = simulate("llama-3.1-8b", "h100", max_batch=cap, **kw)
    t = fixed_deployment("llama-3.1-8b", "h100", max_seqs=cap, **kw)
    assert s.max_batch == cap
    assert s.output_tokens_per_s == pytest.approx(t["output_tokens_per_s_per_gpu"], rel=0.02)
    # ... and with the caller's own prefill chunk or KV capacity beside it (QA 2026-11-28: those replayed every seat
    # in the engine, mean batch 299 of 300 at --max-batch 64); the KV capacity given caps it where it binds
    for extra in (dict(prefill_chunk=2048), dict(kv_capacity_tokens=10**7)):
        own = simulate("llama-3.1-8b", "h100", max_batch=cap, **kw, **extra)
        assert own.max_batch == cap and own.result.mean_batch <= cap + 1e-9
        assert own.output_tokens_per_s < s.output_tokens_per_s * 1.5
    tight = simulate("llama-3.1-8b", "h100", kv_capacity_tokens=cap * 1200, **kw)
    assert tight.result.mean_batch <= cap + 1e-9 and tight.result.closed_loop_concurrency == 256


def test_a_fleet_replay_whose_prefill_pool_falls_behind_says_so():
    """A prefill pool offered more prompt tokens than it computes queues through the whole replay: its window is
    'overloaded' with the waits that grew (as `simulate.overload` says of one replica), not a steady state."""
    from chalk.analyses.traffic import fleet

    def run(rate):
        return fleet.replay(fleet.decode_only(SC_8B), replicas=1, max_batch=256, rate_per_s=rate, n_requests=4000,
                            input_len=1000, output_len=128, est_ttft_s=0.05, est_tpot_s=0.01,
                            prefill={"servers": 1, "tokens_per_s": 20_000.0, "lone_prompt_s": 0.05})
    over, ok = run(30.0), run(10.0)  # 30k and 10k prompt tokens/s offered to a 20k pool
    assert over.overload is not None and over.latency_window["kind"] == "overloaded"
    assert over.overload["median_wait_last_fifth_s"] > 3 * over.overload["median_wait_first_fifth_s"]
    assert ok.overload is None and ok.latency_window["kind"] == "steady"


@pytest.mark.parametrize("gpus", [None, 8])
def test_a_disaggregated_p99_answer_loads_its_prefill_pool_no_more_than_plan_does(gpus):
    """QA 2026-11-28: under a TPOT-only p99 target the search answered with a prefill pool loaded to 99.97% of its
    prompt tokens/s; its replayed TTFT (2.7 s mean, 4.65 s p99) grew with the replay's length (3.5 s / 7.4 s at 4x
    the requests), a queue with no steady state. The replay now serves no rate above plan's utilisation ceiling."""
    from chalk.analyses.traffic.fleet import PREFILL_MAX_UTILISATION

    r = throughput("llama-3.1-8b", "h100-sxm", input_len=1000, output_len=200, tpot_p99_s=0.020, gpus=gpus,
                   disaggregated=True)
    pool, par = r["prefill"], r["parallelism"]
    decode_replicas = round(r["decode_gpus"] / (par["tp"] * par["pp"]))  # a dense model: TP x PP per replica
    m = re.search(r"over (\d+) decode replicas? and (\d+) prefill workers?", r["tail_latency_source"])
    k, p = int(m.group(1)), int(m.group(2))
    assert k <= decode_replicas
    prompts_per_s = r["arrival_rate_per_replica"] * k * 1000
    capacity = p * pool["input_tokens_per_s_per_gpu"] * pool["parallelism"]["gpus"] / pool["parallelism"]["dp"]
    assert prompts_per_s <= PREFILL_MAX_UTILISATION * capacity * (1 + 1e-9)
    assert r["latency_window"]["kind"] == "steady"


def test_more_gpus_never_serve_less_when_disaggregation_must_fit_within_them():
    """QA sweep 2026-11-27: under --mode all at a 30 ms p99 TPOT, Llama-3.1-70B on 64 H100s served 17.6k output
    tokens/s (20 decode + 36 prefill GPUs) but on 72 only 9.4k: the search for a disaggregated deployment within the
    GPUs given bisected over decode pools and read a pool no layout of which met the target as too large, landing on
    4 decode GPUs. Each replica size is now walked toward a fit; the fleet's rate never falls as GPUs are added."""
    prev = 0.0
    for g in (12, 16, 24, 64, 72):
        r = throughput("llama-3.1-70b", "h100-sxm", input_len=2000, output_len=300, tpot_p99_s=0.030, gpus=g,
                       disaggregated="auto")
        fleet = r["output_tokens_per_s_per_gpu"] * r["gpus"]
        assert r["gpus"] <= g and fleet >= prev * (1 - 1e-9), g
        prev = fleet
    # 72 GPUs: 18.1k (23.5k before the prefill pool's replay was held to plan's 80% utilisation ceiling, fleet.
    # PREFILL_MAX_UTILISATION: at 99.97% a pool's TTFT grew with the replay's length)
    assert prev > 17_500


def test_a_ttft_target_alone_steps_down_the_in_flight_count_until_met():
    """QA sweep 2026-11-27: a 1 s p99 TTFT with a closed loop was refused ('no point met the p99 targets when
    replayed', six replays of TP4 at 169-194 in flight) while --tpot-p99 50ms answered TP4 at 43 in flight with a
    0.99 s p99 TTFT. A miss now rules out its replica layout from 60% of its in flight up."""
    r = throughput("llama-3.1-70b", "h100-sxm", input_len=2000, output_len=300, disaggregated=False,
                   arrivals="closed", ttft_p99_s=1.0)
    assert r["ttft_p99_s"] <= 1.0 and r["output_tokens_per_s_per_gpu"] > 0
    assert len(r["tail_replays"]) > 1  # the first tries missed: the step-down found it


@pytest.mark.parametrize("n", [1, 2, 5, 120, 999])
def test_a_short_open_loop_is_measured_whole(n):
    """QA sweep 2026-11-27: 5 requests of Azure's 2023 conversation trace read 0 requests/s (none finished between the
    admissions of the steady window's first and last), and 120 missed Little's law by 5%. `chalk simulate` measures an
    open loop of fewer than MIN_STEADY_REQUESTS arrivals whole: its rates are the run's, Little's law exact. (Fleet
    replays measure their own window over all replicas' requests, and keep each replica's steady one.)"""
    from chalk.api import simulate

    r = simulate("llama-3.1-8b", "h100", layout="tp=1", rate=2.0, requests=n, input_len=800, output_len=150)
    assert r.latency_window["kind"] == "all" and r.requests_per_s > 0
    assert r.mean_in_flight == pytest.approx(r.requests_per_s * r.mean_e2e_s, rel=1e-6)
    assert S.steady_gap(r) == pytest.approx(0.0, abs=1e-6)


def test_a_queue_that_builds_and_drains_is_flagged_not_steady():
    """A quiet hour and a half, then a burst the replica cannot keep up with at the window's end: the overload test
    (the median waits of the first and last fifths of arrivals) does not fire, yet the window is no steady state: in
    flight and Little's law part by more than STEADY_GAP (+37%), and `steady_gap` says so."""
    quiet = S.poisson_arrivals(0.5, 3000, 2000, 200, seed=3).arrival_s  # one every 2 s
    burst = S.poisson_arrivals(400.0, 1000, 2000, 200, seed=2).arrival_s  # 1,000 in 2.5 s
    arrivals = np.concatenate([quiet, float(quiet[-1]) + 1.0 + burst])
    reqs = S.Requests.from_arrays(arrivals, np.full(4000, 2000), np.full(4000, 200))
    r = S.simulate_continuous(reqs, SC_8B, 64)
    gap = S.steady_gap(r)
    assert S.overload(r) is None and gap is not None and abs(gap) > S.STEADY_GAP


def test_a_disaggregated_prefill_pool_keeps_the_token_budget_given():
    """--max-tokens bounds the prompt tokens a prefill worker's step carries as it bounds an aggregated replica's:
    disaggregated answers ignored it (QA 2026-11-27: --max-tokens 1 answered as unbounded, 4,940 tokens/s per GPU).
    A smaller budget never serves more per GPU, nor gives a shorter TTFT."""
    kw = dict(input_len=1000, output_len=200, disaggregated=True)
    free = throughput("llama-3.1-8b", "h100-sxm", **kw)
    tight = throughput("llama-3.1-8b", "h100-sxm", max_tokens=256, **kw)
    assert tight["output_tokens_per_s_per_gpu"] < free["output_tokens_per_s_per_gpu"]
    assert tight["ttft_s"] >= free["ttft_s"]


def test_a_streamed_whole_run_counts_its_queue_in_flight():
    """A streamed run measured whole (`window='all'`) keeps no window edges to clip waits to: its in-flight count
    took in the engine only (16 where Little's law says 6,237 for an overloaded 16-seat replica). It now counts every
    request's wait, as a held run does."""
    reqs = S.PoissonStream(30.0, 20_000, S.length_sampler(512), S.length_sampler(128), 3)
    r = S.simulate_continuous(reqs, SC_8B, 16, window="all", keep_requests=False)
    assert r.mean_in_flight == pytest.approx(r.requests_per_s * r.mean_e2e_s, rel=1e-6)


def test_a_streamed_run_over_capacity_is_an_overload_as_a_held_one_is():
    """A streamed run keeps no per-request waits; `overload` read none and called a queue growing through the run
    steady (QA 2026-11-28: past 1e6 requests, a replica 17% over capacity printed TTFT p50 48 min and no warning).
    It now keeps the waits of its first and last fifth in histograms and flags the same runs a held run flags."""
    over = S.PoissonStream(30.0, 20_000, S.length_sampler(512), S.length_sampler(128), 3)
    held = S.simulate_continuous(over, SC_8B, 16, keep_requests=True)
    streamed = S.simulate_continuous(over, SC_8B, 16, keep_requests=False)
    a, b = S.overload(held), S.overload(streamed)
    assert a is not None and b is not None
    for k in ("median_wait_first_fifth_s", "median_wait_last_fifth_s"):
        assert b[k] == pytest.approx(a[k], rel=0.012)
    assert b["offered_requests_per_s"] == pytest.approx(a["offered_requests_per_s"], rel=1e-6)
    assert b["served_requests_per_s"] < 0.9 * b["offered_requests_per_s"]
    ok = S.PoissonStream(2.0, 20_000, S.length_sampler(512), S.length_sampler(128), 3)
    assert S.overload(S.simulate_continuous(ok, SC_8B, 16, keep_requests=False)) is None


def _stage_token_step(model, chip, layout, b, L, c, I, rank_tokens=None):
    """The step model's own token step (PP stage steps) for `b` decoding sequences of `L` tokens carrying `c`
    prompt tokens of prompts `I` long, as `StepCost.from_step_model` reads it."""
    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.step.estimate import make_layout
    from chalk.analyses.step.parallel import default_kernels, stage_step, step_costs
    from chalk.equations import parallel as P
    from chalk.specs.catalog import as_model, as_system

    m, system = as_model(model), as_system(chip)
    lay, cal = make_layout(m, layout), calibration()
    _, _, costs = step_costs(m, system, None, "auto")
    st = stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, b, c, L, I, cal,
                    kernels=default_kernels(system.chip, cal) or False, prefill_rank_tokens=rank_tokens)
    return float(P.pipeline_token_latency_s(st["stage_time_s"], lay.pp))


@pytest.mark.parametrize("model,chip,layout,B,I,moe", [("llama-3.1-70b", "h100-sxm", "tp=4", 16, 128, False),
                                                       ("llama-3.1-8b", "h200", "tp=1", 32, 1000, False),
                                                       ("llama-3.1-70b", "b200", "tp=8", 64, 2000, False),
                                                       ("qwen3-235b-a22b", "h200", "tp=8,ep=8", 32, 512, True)])
def test_a_burst_of_prompts_costs_what_the_step_model_says_and_the_reference_steps_stay_exact(model, chip, layout,
                                                                                            B, I, moe):
    """The simulator's step cost is linear around a decode step, with a prompt token priced by the secant over one
    chunk: near a memory-bound decode step that token is almost free, so a step carrying every decoding sequence's
    prompt at once (a synchronised wave of equal requests) came out at the low-load price. Found on LMDeploy's rows:
    16 threads of 128-token prompts on Llama-2-70B TP4 A100 prefill all 2,048 tokens in one step, 341 ms in the step
    model, which the replay priced at 193 ms. The compute side of the step cost is now priced at that burst
    (`prefill_tokens_high`): the burst within 3% of the step model, the pure decode and one-chunk steps exact, and
    more prompt tokens never cheaper. An MoE burst is priced no lower than the step model's: its memory line carries
    the one-chunk secant of the experts' read, which a burst that reads every expert anyway does not pay again
    (over-priced, 0.55 s against 0.40 s for Qwen3-235B on H200 TP8/EP8: left as it is)."""
    L = I + 64
    c0 = float(I)
    sc = S.StepCost.from_step_model(model, chip, layout, batch=B, context=L, prompt_len=I, prefill_tokens=c0)
    t0 = _stage_token_step(model, chip, layout, B, L, 0.0, I)
    t1 = _stage_token_step(model, chip, layout, B, L, c0, I)
    assert sc.step_time_s(B, B * L, 0) == pytest.approx(t0, rel=1e-9)
    assert sc.step_time_s(B, B * L, c0) == pytest.approx(t1, rel=1e-9)
    burst = _stage_token_step(model, chip, layout, B, L, B * c0, I)
    if moe:
        assert sc.step_time_s(B, B * L, B * c0) >= 0.97 * burst
    else:
        assert sc.step_time_s(B, B * L, B * c0) == pytest.approx(burst, rel=0.03)
    cs = np.geomspace(1.0, 4 * B * c0, 40)
    ts = np.asarray(sc.step_time_s(B, B * L, cs))
    assert np.all(np.diff(ts) >= 0)


def test_the_burst_side_of_the_step_cost_prices_a_synchronised_wave_in_the_replay():
    """16 seats of equal 128-token prompts and 128-token outputs (LMDeploy's profile_generation shape on Llama-2-70B
    TP4 / A100): the seats stay in step, so every wave's 16 prompts are prefilled in one step whose cost sets every
    TTFT. The replayed TTFT is that step's time in the step model, within 5%."""
    from chalk.analyses.traffic.serving import replica_step_cost

    B, I, O = 16, 128, 128
    sc = replica_step_cost("llama-2-70b", "a100-sxm", "tp=4", B, I, O, precision="fp16")
    reqs = S.Requests.from_arrays(np.zeros(B * 8), np.full(B * 8, I), np.full(B * 8, O))
    r = S.simulate_continuous(reqs, sc, B, closed_loop=True)
    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.step.estimate import make_layout
    from chalk.analyses.step.parallel import default_kernels, stage_step, step_costs
    from chalk.specs.catalog import as_model, as_system

    m, system = as_model("llama-2-70b"), as_system("a100-sxm")
    cal = calibration()
    lay = make_layout(m, "tp=4")
    _, _, costs = step_costs(m, system, "fp16", "auto")
    wave = float(stage_step(costs, system, lay.tp, 1, 1, 1, 0.0, float(B * I), float(I), float(I), cal,
                            kernels=default_kernels(system.chip, cal) or False)["stage_time_s"])
    assert r.ttft_p50_s == pytest.approx(wave, rel=0.05)


@pytest.mark.parametrize("layout,n", [("tp=2,pp=2", 64), ("tp=8", 64)])
def test_a_fixed_answers_pure_decode_step_is_the_estimate_it_prints(layout, n):
    """The fixed answer's mean step names the `estimate` command that times its pure decode step. Under pipeline
    parallelism it printed one stage's step (25.2 ms at TP2 x PP2) beside a command that times the token's pass
    through both (50.5 ms): every step of the mean-step block is now the token's, as estimate and the replay count
    it, and the op table adds up to the mean mix."""
    import chalk
    from chalk.analyses.traffic.serving import fixed_deployment

    r = fixed_deployment("llama-3.1-70b", "h100-sxm", layout=layout, concurrency=n, input_len=2000, output_len=500)
    ms = r["mean_step"]
    b = max(round(ms["decode_sequences"]), 1)
    e = chalk.estimate("llama-3.1-70b", "hgx-h100", layout=layout, batch=b, context=round(r["mean_decode_context"]),
                       precision=r["precision"], kv_precision=r["kv_precision"]).to_dict()
    assert ms["pure_decode_step_s"] == pytest.approx(e["step_time_s"], rel=1e-6)
    assert ms["pure_decode_step_s"] <= ms["mean_mix_step_s"]
    assert sum(ms["mean_mix_ops_s"].values()) == pytest.approx(ms["mean_mix_step_s"], rel=0.02)


def test_the_printed_estimate_command_carries_ideal_and_the_expert_balancer():
    """The reproducer dropped --ideal (it then timed 33 ms against the answer's 20 ms) and --eplb (26 ms against
    30 ms with the balancer off)."""
    from chalk.faces.cli_serving import _estimate_command
    from chalk.analyses.traffic.serving import fixed_deployment

    ideal = fixed_deployment("llama-3.1-70b", "h200", layout="tp=1", concurrency=64, input_len=2000, output_len=500,
                             precision="fp8", ideal=True)
    assert ideal["efficiency"] == "ideal" and " --ideal" in _estimate_command(ideal, 64)
    off = fixed_deployment("deepseek-v3", "gb200-nvl72", layout="tp=1,attn_dp=8,ep=8", concurrency=256,
                           input_len=2000, output_len=200, eplb="off")
    assert off["eplb"] == "off" and " --eplb off" in _estimate_command(off, 256)
    plain = fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=8, input_len=500, output_len=50)
    cmd = _estimate_command(plain, 8)
    assert "--ideal" not in cmd and "--eplb" not in cmd


def test_a_run_shorter_than_a_request_says_so():
    """5,000 requests at 50/s of 2,000 / 1,000 tokens on DeepSeek-V3 DEP32 (GB200 NVL72): each lives ~65 s and the
    measured window spans 86 s, so none finishes inside it. The window rates, counted at finishes, came out 0 tokens/s
    with no warning; the run now says it is shorter than a request's life."""
    p = subprocess.run([sys.executable, "-m", "chalk", "simulate", "-m", "deepseek-v3", "-H", "gb200-nvl72",
                        "--rate", "50", "-n", "5000", "--input-len", "2000", "--output-len", "1000"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "no request finished inside the measured window" in " ".join(p.stdout.split())
    from chalk.analyses.traffic.simulate_run import simulate_requests

    ok = simulate_requests("llama-3.1-8b", "h100-sxm", layout="tp=1", rate=5, requests=2000, input_len=500,
                           output_len=100)
    assert ok.setup["shorter_than_a_request"] is False


def test_a_disaggregated_answer_under_a_ttft_target_is_its_replayed_deployment():
    """A disaggregated answer's TTFT was a lone prompt's prefill in closed form, blind to the queue for the prefill
    pool: Llama-3.1-70B on H100, 2,000 / 500 tokens at >= 30 tokens/s per user and a 300 ms mean TTFT, the search
    said 238 ms at 596 in flight where the same pools replayed 593 ms (the pool 95% busy). Under a TTFT target the
    disaggregated answer is now its deployment as replayed, at fewer in flight where that meets the target, or no
    answer; and whichever mode answers meets the target as `--layout --concurrency` replays it."""
    from chalk.analyses.traffic.serving import fixed_deployment, throughput

    kw = dict(input_len=2000, output_len=500, min_user_tps=30)
    r = throughput("llama-3.1-70b", "h100-sxm", max_ttft_s=0.6, disaggregated=True, **kw)
    assert r["mode"] == "disaggregated" and r["ttft_s"] <= 0.6 and "latency_window" in r
    lay = ",".join(f"{k}={int(v)}" for k, v in r["parallelism"].items()
                   if k in ("tp", "ep", "etp", "pp", "attn_dp") and v)
    pre = ",".join(f"{k}={int(v)}" for k, v in r["prefill"]["parallelism"].items()
                   if k in ("tp", "ep", "etp", "pp", "attn_dp") and v) if r.get("prefill") else None
    again = fixed_deployment("llama-3.1-70b", "h100-sxm", layout=lay, concurrency=int(round(r["concurrency"])),
                             gpus=int(r["gpus"]), decode_gpus=int(r["decode_gpus"]), prefill_layout=pre,
                             input_len=2000, output_len=500)
    assert again["ttft_s"] == pytest.approx(r["ttft_s"], rel=0.02)
    best = throughput("llama-3.1-70b", "h100-sxm", max_ttft_s=0.3, disaggregated="auto", **kw)
    assert best["ttft_s"] <= 0.3 and "latency_window" in best


def test_a_closed_loop_tail_answer_is_its_replay_means_and_p99s_alike():
    """--arrivals closed with p99 targets: the p99s came from the replay of the chosen point at its concurrency, the
    mean TTFT from the closed form (145 ms beside the same replay's 176 ms) and the concurrency was fractional. The
    answer is now the replay, as `--layout --concurrency` gives it."""
    from chalk.analyses.traffic.serving import fixed_deployment, throughput

    r = throughput("llama-3.1-70b", "h100-sxm", input_len=1000, output_len=1000, tpot_p99_s=0.03, ttft_p99_s=2.0,
                   arrivals="closed")
    assert r["mode"] == "aggregated" and r["concurrency"] == int(r["concurrency"])
    lay = ",".join(f"{k}={int(v)}" for k, v in r["parallelism"].items()
                   if k in ("tp", "ep", "etp", "pp", "attn_dp") and v)
    f = fixed_deployment("llama-3.1-70b", "h100-sxm", layout=lay, concurrency=int(r["concurrency"]),
                         gpus=int(r["gpus"]), input_len=1000, output_len=1000)
    for k in ("ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s", "output_tokens_per_s_per_gpu"):
        assert r[k] == pytest.approx(f[k], rel=0.02), k
    assert "ttft_s_closed_form" in r


@pytest.mark.parametrize("model,hw,args", [
    ("llama-3.1-8b", "h100-sxm", ["--min-user-tps", "50"]),
    ("deepseek-v3", "gb200-nvl72", ["--min-user-tps", "30"]),
    pytest.param("deepseek-v3", "gb200-nvl72", ["--min-user-tps", "30", "--mtp", "1", "--acceptance", "0.5"],
                 marks=pytest.mark.slow),
    pytest.param("deepseek-v3", "gb200-nvl72", ["--layout", "tp=1,ep=32,attn_dp=32", "--eplb", "off"],
                 marks=pytest.mark.slow),
    ("llama-3.1-8b", "h100-sxm", ["--ideal"]),
    pytest.param("llama-3.1-70b", "h100-sxm", ["--speculative", "eagle,3,0.7", "--min-user-tps", "30"],
                 marks=pytest.mark.slow),
    ("llama-3.1-8b", "h100-sxm", ["--input-len", "uniform:min=100,max=16000", "--max-tokens", "512",
                                  "--max-seqs", "64"])])
def test_a_search_answer_prints_the_fixed_deployment_that_replays_it(model, hw, args):
    """The search answer names its deployment as a `throughput --layout --concurrency` command (text and JSON
    `fixed_command`): DeepSeek-V3's answer uses its MTP head, and as a fixed deployment without --mtp it read 1,462
    tokens/s per GPU against the answer's 2,287; a second sweep found --ideal (-77%), --eplb off (+75%), --acceptance,
    --speculative eagle (printed as --mtp, refused), --max-tokens, --max-seqs and length distributions dropped. The
    printed command gives the answer's throughput."""
    import shlex

    lengths = [] if "--input-len" in args else ["--input-len", "2000"]
    base = [sys.executable, "-m", "chalk", "throughput", "-m", model, "-H", hw, *lengths, "--output-len", "500",
            "--mode", "aggregated", *args]
    r = json.loads(subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=600).stdout)
    cmd = shlex.split(r["fixed_command"])
    assert cmd[0] == "throughput"
    fixed = json.loads(subprocess.run([sys.executable, "-m", "chalk", *cmd, "--json"], capture_output=True, text=True,
                                      timeout=600).stdout)
    assert fixed["output_tokens_per_s_per_gpu"] == pytest.approx(r["output_tokens_per_s_per_gpu"], rel=0.01)
    text = " ".join(subprocess.run(base, capture_output=True, text=True, timeout=600,
                                   env={**os.environ, "COLUMNS": "400"}).stdout.split())
    assert "as a fixed deployment: " + r["fixed_command"] in text


def test_a_speculating_disaggregated_answer_says_its_ttft_leaves_the_prefill_queue_out():
    """The request simulator runs no draft tokens, so a speculating disaggregated answer under a TTFT target stays in
    closed form, its TTFT a lone prompt's prefill: DeepSeek-V3 on H200 at a 350 ms p99 TTFT (closed loop) answered
    301 ms with its prefill pool 93% busy. The answer now says the queue is not in its TTFT and how busy the pool
    is."""
    from chalk.analyses.traffic.serving import throughput

    r = throughput("deepseek-v3", "h200", input_len=2000, output_len=500, min_user_tps=20, ttft_p99_s=0.35,
                   arrivals="closed", disaggregated=True)
    assert r["mode"] == "disaggregated" and r["speculative"]["used"]
    note = next(n for n in r["notes"] if n.startswith("TTFT is the closed form's"))
    busy = float(note.split("(")[1].split("%")[0])
    assert 50 <= busy <= 100


def test_the_replay_serves_the_prefix_cache_share_the_closed_form_counts():
    """`--cache-hit` was ignored by the replayed closed loop (Llama-3.1-8B on H100, 8,000 / 100 tokens at 32 in
    flight: 384 tokens/s per GPU with or without 90% of prompt tokens cached), though the closed form counted it.
    The replay's prompts now find that share cached (its KV read, not computed): more served, shorter TTFT, Little's
    law held."""
    from chalk.analyses.traffic.serving import fixed_deployment

    kw = dict(layout="tp=1", concurrency=32, input_len=8000, output_len=100)
    plain = fixed_deployment("llama-3.1-8b", "h100-sxm", **kw)
    hit = fixed_deployment("llama-3.1-8b", "h100-sxm", cache_hit=0.9, **kw)
    assert hit["latency_source"].startswith("simulated") and plain["latency_source"].startswith("simulated")
    assert hit["output_tokens_per_s_per_gpu"] > 2 * plain["output_tokens_per_s_per_gpu"]
    assert hit["ttft_s"] < 0.5 * plain["ttft_s"]
    for r in (plain, hit):
        x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / r["output_len"]
        assert r["concurrency"] == pytest.approx(x * (r["ttft_s"] + r["tpot_s"] * (r["output_len"] - 1)), rel=0.02)


def test_a_searched_answer_meets_its_per_user_floor_as_replayed():
    """The screen holds --min-user-tps in closed form; the answer reports its replay, so the replay is held to the
    floor too: fewer in flight on the same layout where the replayed mixed steps are slower. QA 2026-11-28:
    gpt-oss-120b on H200 answered 17.8 tokens/s per user under a floor of 20 without a word."""
    r = throughput("gpt-oss-120b", "h200", input_len=2000, output_len=1000, min_user_tps=20, disaggregated=False)
    assert r["user_tokens_per_s"] >= 20
    O = r["output_len"]
    x = r["output_tokens_per_s_per_gpu"] * r["gpus"] / O
    assert x * (r["ttft_s"] + r["tpot_s"] * (O - 1)) == pytest.approx(r["concurrency"], rel=0.02)
