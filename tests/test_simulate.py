"""`chalk simulate`'s engine: step cost vs roofline, the lecture's train, continuous batching, traces."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalk.analyses.step import roofline as R
from chalk.analyses.traffic import simulate as S
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.errors import InputError, SpecError
from chalk.specs.catalog import load_model, resolve_hardware

H100 = resolve_hardware("h100-sxm")
SC_8B = S.StepCost.from_roofline(load_model("llama-3.1-8b"), H100)
T20 = 0.020


def reference_continuous(req: S.Requests, sc: S.StepCost, max_batch: int, cap: float, chunk):
    """Plain step-by-step continuous batching with per-request state, for checking the fast engine."""
    n = len(req)
    a, P, O = req.arrival_s.tolist(), req.input_len.tolist(), req.output_len.tolist()
    admit, first, finish = [math.nan] * n, [math.nan] * n, [math.nan] * n
    cached, produced, phase = [0] * n, [0] * n, ["wait"] * n
    t, head, running, reserved, steps, done = 0.0, 0, [], 0, 0, 0
    while done < n:
        while head < n and a[head] <= t and len(running) < max_batch and reserved + P[head] + O[head] <= cap:
            admit[head], phase[head] = t, "pf"
            reserved += P[head] + O[head]
            running.append(head)
            head += 1
        if not running:
            t = a[head]
            continue
        budget = chunk or 10**18
        n_dec = ctx = n_pf = prior = 0
        att, pieces, decoding = 0.0, [], []
        for i in running:
            if phase[i] == "dec":
                n_dec, ctx = n_dec + 1, ctx + cached[i]
                decoding.append(i)
            elif budget > 0:
                c = min(P[i] - cached[i], budget)
                n_pf, prior, budget = n_pf + c, prior + cached[i], budget - c
                att += c * cached[i] + c * (c + 1) / 2
                pieces.append((i, c))
        t += sc.step_time_s(n_dec, ctx, n_pf, att, prior)
        steps += 1
        leaving = []
        for i in decoding:
            cached[i] += 1
            produced[i] += 1
            if produced[i] == O[i]:
                leaving.append(i)
        for i, c in pieces:
            cached[i] += c
            if cached[i] == P[i]:
                first[i], produced[i], phase[i] = t, 1, "dec"
                if O[i] == 1:
                    leaving.append(i)
        for i in leaving:
            finish[i], phase[i] = t, "done"
            running.remove(i)
            reserved -= P[i] + O[i]
            done += 1
    return np.array(admit), np.array(first), np.array(finish), steps


# ----------------------------------------------------------------------------------------- step cost
@pytest.mark.parametrize("model_id", ["llama-3.1-70b", "llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b"])
@pytest.mark.parametrize("batch", [1, 16, 256, 2048])
@pytest.mark.parametrize("context", [128, 4096, 32768])
def test_step_cost_matches_roofline_decode(model_id, batch, context):
    m = load_model(model_id)
    sc = S.StepCost.from_roofline(m, H100)
    ref = R.step(m, H100, batch, context)
    assert sc(batch, batch * context) == pytest.approx(ref.step_time_s, rel=0.01)
    c, mem = sc.times_s(batch, batch * context)
    assert float(c) == pytest.approx(ref.compute_time_s, rel=0.01)
    assert float(mem) == pytest.approx(ref.memory_time_s, rel=0.01)


@pytest.mark.parametrize("kw", [dict(chips=2, precision="fp8", kv_precision="fp8"),
                                dict(efficiency=R.Efficiency(compute=0.6, memory=0.8, overhead_s=0.002))])
@pytest.mark.parametrize("model_id", ["llama-3.1-70b", "qwen3-30b-a3b"])
def test_step_cost_options_match_roofline(model_id, kw):
    m = load_model(model_id)
    sc = S.StepCost.from_roofline(m, H100, **kw)
    ref = R.step(m, H100, 64, 2048, **kw)
    assert sc(64, 64 * 2048) == pytest.approx(ref.step_time_s, rel=0.01)


def test_step_cost_linearised_at_reference_for_sliding_window_and_prefill():
    m = load_model("gpt-oss-20b")  # sliding-window layers: exact at the reference context
    sc = S.StepCost.from_roofline(m, H100, reference_context_tokens=8192)
    assert sc(32, 32 * 8192) == pytest.approx(R.step(m, H100, 32, 8192).step_time_s, rel=0.01)
    m = load_model("llama-3.1-70b")  # a whole-prompt prefill is a prefill roofline step
    sc = S.StepCost.from_roofline(m, H100)
    for P in (128, 4096):
        ref = R.step(m, H100, 1, P, phase="prefill").step_time_s
        assert sc(0, 0, P, P * (P + 1) / 2) == pytest.approx(ref, rel=0.01)


def test_step_cost_vectorised_and_capacity():
    m = load_model("llama-3.1-70b")
    sc = S.StepCost.from_roofline(m, H100)
    b = np.array([1, 8, 64, 512])
    np.testing.assert_allclose(sc(b, b * 1000.0), [sc(int(x), int(x) * 1000) for x in b])
    sz = ModelSizes(m)
    want = (H100.chips * H100.chip.hbm_bytes - sz.weight_bytes()) / sz.kv_bytes_per_token()
    assert sc.kv_capacity_tokens == pytest.approx(want, rel=1e-9)
    assert S.StepCost.constant(0.01)(5, 500, 100, 5000) == pytest.approx(0.01)
    with pytest.raises(InputError):
        S.StepCost.constant(0.0)


# ----------------------------------------------------------------------------------------- arrivals and traces
def test_poisson_arrivals_rate_and_length_distributions():
    r = S.poisson_arrivals(50.0, 20_000, input_len=[100, 300], output_len=lambda rng, k: rng.integers(1, 11, k))
    assert np.all(np.diff(r.arrival_s) >= 0)
    assert 1 / np.diff(r.arrival_s).mean() == pytest.approx(50.0, rel=0.03)
    assert set(np.unique(r.input_len)) == {100, 300}
    assert r.output_len.min() >= 1 and r.output_len.max() <= 10
    assert np.array_equal(S.poisson_arrivals(5, 10, seed=3).arrival_s, S.poisson_arrivals(5, 10, seed=3).arrival_s)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(InputError):
            S.poisson_arrivals(bad, 10)
    with pytest.raises(InputError):
        S.poisson_arrivals(1.0, 10, input_len=0)


def test_load_trace_reads_and_sorts(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_len,output_len,user\n0.5,10,3,a\n0.1, 20 ,1,b\n")
    r = S.load_trace(p)
    assert r.arrival_s.tolist() == [0.1, 0.5] and r.input_len.tolist() == [20, 10] and r.output_len.tolist() == [1, 3]


@pytest.mark.parametrize("text,needle", [
    ("arrival_s,input_len,output_len\n0.1,10,5\nx,10,5\n", "line 3: arrival_s"),
    ("arrival_s,input_len,output_len\n0.1,10.5,5\n", "line 2: input_len must be a positive integer"),
    ("arrival_s,input_len,output_len\n0.1,10,0\n", "line 2: output_len"),
    ("arrival_s,input_len,output_len\n-1,10,5\n", "line 2: arrival_s"),
    ("arrival_s,input_len,output_len\n0.1,10\n", "line 2: output_len"),
    ("arrival_s,prompt,output_len\n0.1,10,5\n", "missing column(s) input_len"),
    ("arrival_s,input_len,output_len\n", "no requests"),
    ("", "empty trace"),
    ("arrival_s,input_len,output_len\n0.1,10,5\n0.2,1,2,3,4\n", "malformed CSV"),
])
def test_malformed_trace_raises_one_line_spec_error(tmp_path, text, needle):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        S.load_trace(p)
    assert needle in str(e.value) and "\n" not in str(e.value) and str(p) in str(e.value)


def test_missing_trace_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        S.load_trace(tmp_path / "nope.csv")


# ----------------------------------------------------------------------------------------- the train
def test_lecture_train_worst_ttft_is_two_periods():
    rng = np.random.default_rng(0)
    req = S.Requests.from_arrays(rng.uniform(0, 20.0, 5000), 64, 1)  # uniform arrivals, one-token answers
    r = S.simulate_train(req, S.StepCost.constant(T20), T20, 256)  # the step fills the period
    assert r.ttft_s.max() <= 2 * T20 and r.ttft_s.max() >= 1.8 * T20
    assert r.ttft_s.mean() == pytest.approx(1.5 * T20, rel=0.03)
    assert r.queue_s.max() < T20 and r.queue_s.min() >= 0


def test_lecture_train_with_roofline_steps_stays_under_two_periods():
    rng = np.random.default_rng(1)
    req = S.Requests.from_arrays(rng.uniform(0, 10.0, 2000), 16, 1)
    r = S.simulate_train(req, S.StepCost.from_roofline("llama-3.1-70b", H100), T20, 256)
    assert 1.0 * T20 < r.ttft_s.max() <= 2 * T20


def test_train_of_2048_every_16ms_gives_128k_tokens_per_s():
    T, out = 0.016, 16
    rate = 2048 / (out * T)  # just enough riders to fill every train once the line is moving
    n = 2048 * 100
    req = S.Requests.from_arrays((np.arange(n) + 0.5) / rate, 16, out)
    r = S.simulate_train(req, SC_8B, T, 2048)
    assert r.output_tokens_per_s == pytest.approx(2048 / T, rel=0.02)  # 128K tokens/s
    assert r.mean_batch == pytest.approx(2048, rel=0.02)
    assert r.tpot_p50_s == pytest.approx(T)


def test_train_seats_limit_and_overrun():
    req = S.Requests.from_arrays(np.zeros(10), 8, 3)  # 10 arrive together, 4 seats, 3 trains each
    r = S.simulate_train(req, S.StepCost.constant(0.01), 0.01, 4)
    assert sorted(np.round(r.queue_s / 0.01).astype(int).tolist()) == [0] * 4 + [3] * 4 + [6] * 2
    with pytest.raises(InputError, match="longer than the"):
        S.simulate_train(req, S.StepCost.constant(0.02), 0.01, 4)
    for bad in (dict(period_s=0), dict(max_batch=0), dict(max_batch=2.5)):
        with pytest.raises(InputError):
            S.simulate_train(req, S.StepCost.constant(0.01), **{"period_s": 0.01, "max_batch": 4, **bad})


def test_train_heap_and_closed_form_boarding_agree():
    rng = np.random.default_rng(2)
    k = np.sort(rng.integers(0, 300, 3000))
    out = np.full(k.size, 7)
    for seats in (1, 5, 64):
        np.testing.assert_array_equal(S._boarding_ticks(k, out, seats, closed_form=True),
                                      S._boarding_ticks(k, out, seats, closed_form=False))


# ----------------------------------------------------------------------------------------- continuous batching
def test_littles_law():
    rate = 400.0
    r = S.simulate_continuous(S.poisson_arrivals(rate, 20_000, 512, 128, seed=4), SC_8B, 256)
    in_service = (r.e2e_s - r.queue_s).mean()
    assert r.mean_concurrency == pytest.approx(rate * in_service, rel=0.05)
    assert r.requests_per_s == pytest.approx(rate, rel=0.05)


def test_small_kv_capacity_queues_and_is_never_exceeded():
    P, O = 512, 64
    cap = 2.5 * (P + O)  # room for two requests at a time
    req = S.poisson_arrivals(200.0, 300, P, O, seed=5)
    r = S.simulate_continuous(req, SC_8B, 64, kv_capacity_tokens=cap)
    free = S.simulate_continuous(req, SC_8B, 64, kv_capacity_tokens=math.inf)
    assert r.peak_kv_tokens <= cap and free.peak_kv_tokens > cap
    assert r.queue_s.mean() > 0 and (r.queue_s > 0).mean() > 0.5
    assert r.mean_concurrency <= 2.0 + 1e-9
    assert r.ttft_p50_s > free.ttft_p50_s
    with pytest.raises(InputError, match="KV tokens"):
        S.simulate_continuous(req, SC_8B, 64, kv_capacity_tokens=P + O - 1)


@pytest.mark.parametrize("chunk", [None, 256])
def test_low_load_ttft_is_one_prefill(chunk):
    P, O = 1000, 50
    req = S.Requests.from_arrays(np.arange(20) * 5.0, P, O)  # 5 s apart: always alone
    r = S.simulate_continuous(req, SC_8B, 64, prefill_chunk_tokens=chunk)
    if chunk is None:
        want = SC_8B(0, 0, P, P * (P + 1) / 2)
    else:
        starts = range(0, P, chunk)
        want = sum(SC_8B(0, 0, min(chunk, P - a), sum(range(a + 1, min(a + chunk, P) + 1)), a) for a in starts)
    np.testing.assert_allclose(r.ttft_s, want, rtol=1e-9)
    assert np.all(r.queue_s == 0)
    assert SC_8B(1, P) <= r.tpot_p50_s <= SC_8B(1, P + O)


def test_throughput_never_exceeds_max_batch_roofline():
    P, O, B = 512, 128, 64
    req = S.Requests.from_arrays(np.linspace(0, 0.01, 3000), P, O)  # everyone at once: saturated
    bound = R.step(load_model("llama-3.1-8b"), H100, B, P).tokens_per_s
    for chunk in (None, 512):
        r = S.simulate_continuous(req, SC_8B, B, prefill_chunk_tokens=chunk)
        assert 0.3 * bound < r.output_tokens_per_s <= bound
        assert r.mean_batch <= B


def test_fast_engine_matches_step_by_step_reference():
    req = S.poisson_arrivals(30.0, 150, [64, 700, 2000], [1, 3, 40, 300], seed=6)
    for B, cap, chunk in ((8, math.inf, None), (3, 5000, 512), (16, 4000, 97)):
        r = S.simulate_continuous(req, SC_8B, B, kv_capacity_tokens=cap, prefill_chunk_tokens=chunk)
        admit, first, finish, steps = reference_continuous(req, SC_8B, B, cap, chunk)
        np.testing.assert_allclose(r.queue_s + req.arrival_s, admit, rtol=1e-9)
        np.testing.assert_allclose(r.ttft_s + req.arrival_s, first, rtol=1e-9)
        np.testing.assert_allclose(r.e2e_s + req.arrival_s, finish, rtol=1e-9)
        assert r.n_steps == steps


def test_result_to_dict_is_json():
    req = S.Requests.from_arrays([0.0, 0.1], 10, [1, 5])
    r = S.simulate_continuous(req, SC_8B, 4)
    d = json.loads(json.dumps(r.to_dict(per_request=True)))
    assert d["n_requests"] == 2 and d["tpot_s"][0] is None and d["scheduler"] == "continuous"
    assert "ttft_s" not in r.to_dict() and r.summary()["n_steps"] == r.n_steps
    with pytest.raises(InputError):
        S.simulate_continuous([(0.0, 10, 5)], SC_8B, 4)


_req = st.integers(1, 25).flatmap(lambda n: st.tuples(
    st.lists(st.floats(0, 2.0), min_size=n, max_size=n), st.lists(st.integers(1, 600), min_size=n, max_size=n),
    st.lists(st.integers(1, 60), min_size=n, max_size=n)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_req, st.integers(1, 8), st.one_of(st.none(), st.integers(1, 700)), st.floats(1.0, 5.0), st.booleans())
def test_latencies_are_ordered_and_non_negative(data, max_batch, chunk, cap_factor, limited):
    req = S.Requests.from_arrays(*data)
    need = int((req.input_len + req.output_len).max())
    cap = need * cap_factor if limited else math.inf
    r = S.simulate_continuous(req, SC_8B, max_batch, kv_capacity_tokens=cap, prefill_chunk_tokens=chunk)
    assert np.all(r.queue_s >= 0) and np.all(r.ttft_s > r.queue_s) and np.all(r.e2e_s >= r.ttft_s)
    assert np.all(np.isfinite(r.tpot_s[req.output_len > 1])) and np.all(r.tpot_s[req.output_len > 1] > 0)
    assert r.peak_kv_tokens <= cap and r.mean_batch <= max_batch and 0 < r.utilisation <= 1 + 1e-9
    admit, first, finish, _ = reference_continuous(req, SC_8B, max_batch, cap, chunk)
    np.testing.assert_allclose(r.e2e_s + req.arrival_s, finish, rtol=1e-9)
    t = S.simulate_train(req, S.StepCost.constant(0.01), 0.01, max_batch)
    assert np.all(t.queue_s >= 0) and np.all(t.ttft_s > t.queue_s) and np.all(t.e2e_s >= t.ttft_s)
    assert np.all(t.e2e_s - t.ttft_s == pytest.approx(0.01 * (req.output_len - 1)))


# ----------------------------------------------------------------------------------------- issue 12: overload, plot
def test_overload_is_flagged_when_arrivals_outrun_the_train():
    # 4 seats every 10 ms serve at most 400 one-token requests/s: 600/s overloads, 200/s does not
    cost = S.StepCost.constant(0.01)
    over = S.overload(S.simulate_train(S.poisson_arrivals(600, 20_000, 1, 1, seed=1), cost, 0.01, 4))
    assert over is not None
    assert over["offered_requests_per_s"] == pytest.approx(600, rel=0.05)
    assert over["served_requests_per_s"] == pytest.approx(400, rel=0.05)
    assert over["median_wait_last_fifth_s"] > 3 * over["median_wait_first_fifth_s"]
    assert S.overload(S.simulate_train(S.poisson_arrivals(200, 20_000, 1, 1, seed=1), cost, 0.01, 4)) is None


def test_cli_run_shorter_than_a_request_measures_no_rate_and_says_why():
    """QA 2026-11-28: 2 seats for 10 requests printed '0 tokens/s' (2 in flight, 1.2 s each) and a window with 'no
    steady state: the queue grows', where no request finished inside the window and a closed loop has no queue."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "chalk", "simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout",
                        "tp=1", "--concurrency", "2", "-n", "10"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    assert "output throughput" in p.stdout and "none measured" in p.stdout and "0 tokens/s" not in p.stdout
    assert "queue grows" not in p.stdout and "not a steady state" in p.stdout


def test_cli_warns_on_overload_and_plots_the_run_it_simulated(tmp_path):
    # 800 requests/s: about twice what one H100 serves of llama-3.1-8b at these lengths (~380/s), so the queue grows
    import subprocess
    import sys

    base = [sys.executable, "-m", "chalk.faces.cli", "simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm"]
    p = subprocess.run(base + ["--rate", "800", "-n", "20000", "--prefill-chunk", "512"], capture_output=True,
                       text=True, timeout=300, env={**__import__("os").environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    assert "warning: arrivals exceed capacity" in p.stdout
    assert "e+0" not in p.stdout  # long durations in minutes, never "1.53e+03 s"
    out = tmp_path / "train.png"
    p = subprocess.run(base + ["--scheduler", "train", "--period-ms", "50", "--max-batch", "2048", "--output-len",
                               "1", "--input-len", "1", "-n", "2000", "--plot", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 10_000 and "warning" not in p.stdout


def test_plot_draws_the_simulated_period():
    from chalk.faces.plots_simulate import simulation_figure

    r = S.simulate_train(S.poisson_arrivals(1000, 3000, 1, 1, seed=0), S.StepCost.constant(0.01), 0.05, 2048)
    fig = simulation_figure(r)
    ax = fig.axes[0]
    xs = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if len(ln.get_xdata()) == 2
                and ln.get_xdata()[0] == ln.get_xdata()[1] and ln.get_ydata()[0] == 0)
    gaps = np.diff(xs)
    assert len(xs) >= 5 and np.allclose(gaps, 50.0)  # departures every --period-ms, in ms
    assert "50 ms" in ax.get_title(loc="left")


def test_closed_loop_latency_counts_from_the_send():
    """A closed-loop client sends a request when a seat frees: its TTFT must not include the wait for the seat."""
    from chalk.analyses.traffic import simulate as S

    sc = S.StepCost.from_step_model("llama-3.1-8b", "h100-sxm", "tp=1", batch=4, context=600, prompt_len=512,
                                    prefill_tokens=8)
    reqs = S.closed_loop_requests(4, 400, 512, 128, seed=1)
    assert abs(float(reqs.input_len.mean()) - 512) < 512 * 0.02  # the mean is kept (uniform over 8/9..10/9)
    closed = S.simulate_continuous(reqs, sc, max_batch=4, closed_loop=True)
    queued = S.simulate_continuous(reqs, sc, max_batch=4)
    assert float(closed.queue_s.max()) == 0.0
    # from the send, a prompt waits at most the step in flight and its own prefill: well under one request's life
    assert closed.ttft_p99_s < 0.2 * closed.e2e_p50_s
    # counted from t = 0 instead, the last requests would have waited for ~100 lifetimes
    assert queued.ttft_p99_s > 50 * closed.e2e_p50_s


@settings(max_examples=25, deadline=None)
@given(seats=st.integers(1, 16), lat=st.floats(1e-4, 2.0), seed=st.integers(0, 1000))
def test_a_closed_loop_hands_each_freed_seat_on_after_the_client_latency(seats, lat, seed):
    """With a client latency, the k-th request to finish frees the seat request `seats + k` arrives on, `lat`
    later; none arrives earlier, fewer run at once than without it, and a zero latency is the plain closed loop."""
    reqs = S.closed_loop_requests(seats, 6 * seats, 256, 64, seed=seed)
    plain = S.simulate_continuous(reqs, SC_8B, max_batch=seats, closed_loop=True)
    zero = S.simulate_continuous(reqs, SC_8B, max_batch=seats, closed_loop=True, client_latency_s=0.0)
    assert np.array_equal(zero.arrival_s, plain.arrival_s) and np.array_equal(zero.e2e_s, plain.e2e_s)
    late = S.simulate_continuous(reqs, SC_8B, max_batch=seats, closed_loop=True, client_latency_s=lat)
    send = np.asarray(late.arrival_s)           # closed loop: latencies count from the client's send,
    admit = send + lat                          # `lat` before the engine's admission
    ends = np.sort(send + np.asarray(late.e2e_s))
    # admitted at the first step start after it reaches the engine: the latency, plus at most the step in flight
    step_max = float(np.max(np.asarray(late.e2e_s)))
    assert np.all(late.queue_s >= lat * (1 - 1e-12)) and np.all(late.queue_s <= lat + step_max)
    assert np.all(np.asarray(late.ttft_s) >= lat)
    later = admit[seats:]
    # a seat is handed on only after the latency: request seats + k reaches the engine >= lat after the k-th end
    assert np.all(later >= ends[:len(later)] + lat * (1 - 1e-12))
    # ... and no later than the step in flight when it arrives
    assert np.all(later <= ends[:len(later)] + lat + step_max)
    assert float(ends[-1]) > float(np.max(np.asarray(plain.arrival_s) + np.asarray(plain.e2e_s)))
    with pytest.raises(InputError):
        S.simulate_continuous(reqs, SC_8B, max_batch=seats, closed_loop=True, client_latency_s=-1.0)


def test_simulate_and_throughput_agree_on_a_closed_loop():
    """`simulate --concurrency` and `throughput --concurrency` (fixed mode) answer the same closed loop: both hold
    each seat the calibrated request latency outside the engine, so throughput and the decoding batch agree, and
    both count TTFT on the client's clock."""
    import chalk
    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.traffic.serving import fixed_deployment

    kw = dict(layout="tp=1", concurrency=64, input_len=1000, output_len=200)
    s = chalk.simulate("llama-3.1-8b", "h100-sxm", requests=3000, **kw)
    f = fixed_deployment("llama-3.1-8b", "h100-sxm", **kw)
    assert s.output_tokens_per_s == pytest.approx(f["output_tokens_per_s_per_gpu"], rel=0.03)
    assert s.mean_batch == pytest.approx(f["decoding_per_replica"], rel=0.03)
    lat = calibration().request_latency_s
    assert lat > 0 and s.ttft_p50_s > lat and f["ttft_s"] > lat
    # without the latency the seats never idle: every one of the 64 decodes or prefills
    bare = chalk.simulate("llama-3.1-8b", "h100-sxm", requests=3000, client_latency_s=0.0, **kw)
    assert bare.mean_batch > s.mean_batch and bare.ttft_p50_s < s.ttft_p50_s


def test_fixed_mode_latencies_come_from_the_simulator():
    from chalk.analyses.traffic.serving import fixed_deployment

    f = fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=64, input_len=1000, output_len=200)
    assert f["latency_source"].startswith("simulated closed loop")
    assert f["ttft_p99_s"] >= f["ttft_s"] > 0 and f["tpot_p99_s"] >= 0.9 * f["tpot_s"]
    closed = fixed_deployment("llama-3.1-8b", "h100-sxm", layout="tp=1", concurrency=64, input_len=1000,
                              output_len=200, simulate=False)
    assert closed["latency_source"] == "closed form"
    # the closed form and the replay answer the same deployment: within a few percent where no waves form
    assert closed["tpot_s"] == pytest.approx(f["tpot_s"], rel=0.05)
    assert closed["output_tokens_per_s_per_gpu"] == pytest.approx(f["output_tokens_per_s_per_gpu"], rel=0.05)
    assert f["latency_window"]["warmup_requests"] >= 2 * 64 and closed["latency_window"] is None


# ----------------------------------------------------------------------------------------------- issue 23 items 6-7
def test_simulate_without_a_layout_takes_throughputs_layout_and_states_it():
    """issue 23: without --layout the whole box was timed as one chip with no communication. Now the layout is
    throughput's pick for the same lengths, timed on its replica, and the answer says which."""
    import chalk
    from chalk.analyses.traffic.serving import throughput

    kw = dict(input_len=2000, output_len=200)
    s = chalk.simulate("llama-3.1-70b", "h100-sxm", rate=0.5, requests=200, **kw)
    t = throughput("llama-3.1-70b", "h100-sxm", **kw)
    assert s.layout == t["layout"] and s.layout_source.startswith("chosen as throughput does")
    assert s.replica_gpus == t["parallelism"]["tp"] * t["parallelism"]["pp"] and s.replica_gpus > 1
    assert (s.precision, s.kv_precision) == (t["precision"], t["kv_precision"]) and "step model" in s.step_cost
    given = chalk.simulate("llama-3.1-70b", "h100-sxm", rate=0.5, requests=200, layout=s.layout_text, **kw)
    assert given.tpot_p50_s == pytest.approx(s.tpot_p50_s) and given.layout_source == "given"
    d = s.to_dict()
    for k in ("model", "chip", "layout", "replica_gpus", "precision", "kv_precision", "notes"):
        assert d[k] is not None, k


def test_lengths_past_the_context_are_cut_and_noted(tmp_path):
    """llama-3.1-8b's context is 131,072 tokens (max_position_embeddings): a 200,000-token prompt keeps 131,071
    and one output token; a 131,000-token prompt with 500 outputs keeps the prompt and 72 outputs."""
    import chalk

    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_len,output_len\n0,200000,10\n1,131000,500\n2,1000,100\n")
    s = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=8", trace=p)
    assert s.truncated_requests == 2 and any("2 of 3 requests longer" in n for n in s.notes)
    assert s.input_len_mean == pytest.approx((131_071 + 131_000 + 1000) / 3)
    assert s.output_len_mean == pytest.approx((1 + 72 + 100) / 3)
    # sampled lengths too: a lognormal with sigma 3 reaches past 128K in 20,000 draws
    s = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=8", rate=1, requests=20_000, max_batch=64,
                       input_len="lognormal:mean=3000,sigma=2.5", output_len=100)
    assert s.truncated_requests > 0 and s.max_context == 131_072


def test_lengths_are_cut_to_the_context_before_the_replica_is_sized(tmp_path):
    """A replica is sized for the lengths it serves: a 1,000,000-token prompt on Llama-3.1-8B (128K context) was
    sized as one sequence of 1,000,064 tokens on one H100 and refused (QA 2026-11-28), and a 200,000-token one was
    tangent at 200,032 tokens while every request served held 131,072. As a mean, a sampled distribution and a trace
    row."""
    import chalk

    kw = dict(layout="tp=1", rate=1, requests=10)
    for inp in (1_000_000, 200_000):
        s = chalk.simulate("llama-3.1-8b", "h100", input_len=inp, output_len=64, **kw)
        assert "of 131072 tokens" in s.step_cost and any("sized and replayed as cut" in n for n in s.notes)
    s = chalk.simulate("llama-3.1-8b", "h100", input_len="lognormal:mean=400000,sigma=0.5", output_len=64, **kw)
    assert s.max_batch >= 1 and s.input_len_mean <= 131_071
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_len,output_len\n0,1000000,10\n")
    s = chalk.simulate("llama-3.1-8b", "h100", layout="tp=1", trace=p)
    assert s.truncated_requests == 1 and "of 131072 tokens" in s.step_cost
    # lengths that fit are sized as given
    s = chalk.simulate("llama-3.1-8b", "h100", input_len=2000, output_len=64, **kw)
    assert not any("sized and replayed as cut" in n for n in s.notes)


def test_every_door_cuts_lengths_past_the_context_the_same_way():
    """200,000 prompt tokens and 200 outputs on Llama-3.1-8B (131,072-token context) are one request of 131,071 in
    and 1 out through `throughput --layout --concurrency`, `simulate --concurrency` and the search alike, each with
    the note (throughput timed the 200,000 tokens while simulate cut them, 80x apart; QA 2026-11-28); every request
    of a mean past the context counts as cut (55 of 100 were said)."""
    import chalk
    from chalk.analyses.traffic.serving import throughput

    kw = dict(input_len=200_000, output_len=200)
    t = throughput("llama-3.1-8b", "h100", layout="tp=2", concurrency=2, **kw)
    s = chalk.simulate("llama-3.1-8b", "h100", layout="tp=2", concurrency=2, requests=400, **kw)
    assert (t["input_len"], t["output_len"]) == (131_071, 1) and s.input_len_mean == 131_071
    assert s.output_tokens_per_s / 2 == pytest.approx(t["output_tokens_per_s_per_gpu"], rel=0.02)  # TP2
    assert s.truncated_requests == 400
    assert any("sized and replayed as cut" in n for n in t["notes"])
    found = throughput("llama-3.1-8b", "h100", **kw)
    assert (found["input_len"], found["output_len"]) == (131_071, 1)
    assert any("sized and replayed as cut" in n for n in found["notes"])
    s = chalk.simulate("llama-3.1-8b", "h100", layout="tp=1", rate=1, requests=100, input_len=500_000, output_len=10)
    assert s.truncated_requests == 100
    # a measured run is answered as it ran (validate): its engine was built for the longer sequence
    kept = throughput("llama-3.1-8b", "h100", layout="tp=2", concurrency=2, cut_to_context=False,
                      input_len=120_000, output_len=20_000)
    assert kept["input_len"] == 120_000 and any("timed as asked" in n for n in kept["notes"])


def test_one_token_outputs_are_exactly_one_token_and_little_holds():
    """--output-len 1 draws one token per request (a mean's spread narrows to stay at or above one token: the clip
    made it 1.03, output tokens/s 3% above requests/s), TPOT is undefined, and in flight = requests/s x time per
    request (3.8% off at one in flight; QA 2026-11-28)."""
    import chalk

    s = chalk.simulate("llama-3.1-70b", "h100", layout="tp=4", concurrency=1, input_len=2000, output_len=1,
                       requests=2048)
    assert s.output_tokens_per_s == pytest.approx(s.requests_per_s, rel=1e-9)
    assert s.requests_per_s * s.mean_e2e_s == pytest.approx(1.0, rel=0.02)
    from chalk.analyses.traffic.serving import throughput

    t = throughput("llama-3.1-70b", "h100", layout="tp=4", concurrency=1, input_len=2000, output_len=1)
    x = t["output_tokens_per_s_per_gpu"] * 4  # requests/s: one token each
    assert x * t["ttft_s"] == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("rows", [["0,1000,100"], ["0,10,2", "0,10,2"], ["0,500,50", "0.5,500,50", "3,2000,8"]])
def test_a_run_measured_whole_keeps_its_rates_on_the_clients_clock(tmp_path, rows):
    """A trace too short for a steady state is measured whole, from the first send to the last finish: no more
    requests are in flight on average than the trace holds, and in flight = requests/s x mean end-to-end (a
    one-request trace was 1.09 in flight, its rates over the engine's span without the client latency; QA
    2026-11-28)."""
    import chalk

    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_len,output_len\n" + "\n".join(rows) + "\n")
    s = chalk.simulate("llama-3.1-8b", "h100", layout="tp=1", trace=p)
    r = s.result
    assert r.latency_window["kind"] == "all" and r.mean_in_flight <= len(rows) * (1 + 1e-9)
    assert r.mean_in_flight == pytest.approx(r.requests_per_s * r.mean_e2e_s, rel=1e-6)
    assert r.mean_concurrency <= r.mean_in_flight and 0 < r.utilisation <= 1
    more = chalk.simulate("llama-3.1-8b", "h100", layout="tp=1", trace=p, requests=50)
    assert more.result.n_requests == len(rows) and any("more requests than the trace holds" in n for n in more.notes)


def test_simulate_lengths_take_throughputs_forms_and_speedup_needs_a_trace():
    import chalk

    s = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", rate=2, requests=300,
                       input_len="uniform:min=100,max=300", output_len="constant:50")
    assert 100 <= s.input_len_mean <= 300 and s.output_len_mean == 50
    with pytest.raises(InputError, match="speedup"):
        chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", speedup=2)
    # a number is a mean, spread as throughput's replays spread it (the same requests through every door)
    m = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", rate=2, requests=2000, input_len=10.5, output_len=40)
    assert m.input_len_mean == pytest.approx(10.5, rel=0.1) and m.output_len_mean == pytest.approx(40, rel=0.05)


def test_an_attention_dp_replica_s_step_cost_keeps_its_decode_slope():
    """DeepSeek-R1 on DEP32: a prompt token (one rank prefills) costs ~7x a decoding sequence (every rank decodes its
    own). The step cost's one per-token coefficient used to serve both, so a decode step cost 7x its slope, and at a
    large reference batch its intercept went negative (clamped): a one-sequence step took 5 us instead of ~20 ms.
    Now exact at its reference, a one-sequence step takes >10 ms from every reference, and the tangents from 576 to
    the cap stay within 40% of the step model's pure decode step (each batch's own exact reference step) from 1 to
    the cap."""
    from chalk.analyses.traffic.serving import _fixed_setup, open_loop_step_cost

    fx = _fixed_setup("deepseek-r1", "gb200-nvl72", layout="tp=1,ep=32,attn_dp=32", input_len=8000, output_len=1000)
    costs = {b: open_loop_step_cost(fx, b) for b in (1.0, 32.0, 576.0, 5000.0, 11520.0)}
    exact = {b: sc(b, b * fx.L) for b, sc in costs.items()}  # a pure decode step at its own reference
    for ref, sc in costs.items():
        assert sc.overhead_s > 1e-3 and sc(1, fx.L) > 0.01, ref
        for b in costs:
            if ref >= 576:
                assert sc(b, b * fx.L) == pytest.approx(exact[b], rel=0.4), (ref, b)


def test_an_attention_dp_open_loop_settles_and_both_loops_agree():
    """`chalk simulate -m deepseek-r1 -H gb200-nvl72 --layout tp=1,ep=32,attn_dp=32 --rate 5 --input-len 8000
    --output-len 1000` printed a TPOT p50 of 8.33 us over 7.3M steps: the settling replays swung 576, 658, 277,
    3347, 2, 5103 sequences and the last, unsettled one answered. Now the replay settles at its own batch, its TPOT
    is at least a pure decode step (~18 ms), and the Python and compiled loops agree on it."""
    from chalk.analyses.traffic.simulate_run import simulate_requests

    run = simulate_requests("deepseek-r1", "gb200-nvl72", layout="tp=1,ep=32,attn_dp=32", rate=5, requests=4000,
                            input_len=8000, output_len=1000)
    r = run.result
    assert r.tpot_p50_s > 0.015 and r.mean_step_s > 0.015 and r.n_steps < 100 * r.n_requests
    assert run.step_cost_reference_batch == pytest.approx(r.mean_batch, rel=0.05)
    reqs = S.poisson_requests(5, 3000, 8000, 1000, seed=3)
    kw = dict(max_batch=11520, kv_capacity_tokens=math.inf, prefill_chunk_tokens=262_144)
    a = S.simulate_continuous(reqs, run.replica_step_cost, loop="python", **kw)
    b = S.simulate_continuous(reqs, run.replica_step_cost, loop="compiled", **kw)
    assert a.summary() == b.summary()


def test_a_prefill_backlog_inside_the_engine_is_an_overload():
    """With a batch cap above every request, arrivals are admitted at once and queue for their prefill chunk: the
    admission wait stays 0 while TTFT grows through the run. `overload` reads the wait for the first token (DEP32 at
    40 requests/s printed TTFT p50 132 s with "overload": null)."""
    cost = S.StepCost.constant(0.05)
    reqs = S.poisson_arrivals(100, 4000, 1000, 4, seed=2)  # one 1000-token chunk per 50 ms step: 20 prompts/s
    r = S.simulate_continuous(reqs, cost, max_batch=100_000, kv_capacity_tokens=math.inf, prefill_chunk_tokens=1000)
    assert float(np.max(r.queue_s)) < 0.06
    over = S.overload(r)
    assert over is not None and over["median_wait_last_fifth_s"] > 5 * over["median_wait_first_fifth_s"]


def test_a_trains_window_keeps_the_runs_mean_step():
    """QA sweep 2026-11-27: the steady window pro-rated the run's busy time but not its step count, so a train of
    constant 16 ms steps reported a 13.5 ms mean step (and decode batch to match)."""
    r = S.simulate_train(S.poisson_arrivals(1e6, 200000, input_len=1, output_len=100, seed=2), S.StepCost.constant(0.016),
                         period_s=0.016, max_batch=2048)
    assert r.mean_step_s == pytest.approx(0.016) and r.mean_decode_batch <= r.mean_batch <= 2048
    # the tokens the window's trains emitted (one per rider per departure), not every finished request's whole
    assert r.output_tokens_per_s == pytest.approx(2048 / 0.016, rel=1e-9)
    assert r.requests_per_s == pytest.approx(2048 / 0.016 / 100, rel=0.005)  # 100 tokens per request on average



def test_a_closed_loop_needs_as_many_requests_as_seats():
    """QA sweep 2026-11-27: `simulate -n 200 --concurrency 100000` printed 3.1M output tokens/s on one H100 (seats
    over time in system, with 99,800 seats never filled) where its 200 requests moved ~6,000 tokens/s. Fewer
    requests than seats is refused in one line, as a fixed deployment's benchmark run refuses it."""
    from chalk.analyses.traffic.simulate_run import simulate_requests
    from chalk.errors import InputError

    kw = dict(layout="tp=1", input_len=512, output_len=128)
    with pytest.raises(InputError, match="closed loop of 400 requests in flight needs at least that many"):
        simulate_requests("llama-3.1-8b", "h100-sxm", requests=200, concurrency=400, **kw)
    ok = simulate_requests("llama-3.1-8b", "h100-sxm", requests=400, concurrency=40, **kw)
    assert 0 < ok.output_tokens_per_s < 40 * 128 / (ok.mean_tpot_s * 127)  # under seats x tokens per request time


def test_a_streamed_run_says_the_memory_it_held():
    """Issue 23: a streamed run says its peak RSS and what that is per request replayed (JSON and text)."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "chalk", "simulate", "-m", "llama-3.1-8b", "-H", "h200", "--layout", "tp=1", "-n",
            "2000000", "--rate", "20"]
    p = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    mem = json.loads(p.stdout)["process_memory"]
    assert 1e7 < mem["peak_rss_bytes"] < 1e9  # bounded: far below 2M requests held at ~100 bytes each
    assert mem["bytes_per_request"] == mem["peak_rss_bytes"] / 2_000_000
    text = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert "peak RSS" in text.stdout and "2,000,000 requests" in text.stdout


def test_simulate_says_its_rates_are_one_replicas():
    """Every rate simulate answers names what it is per: the run is one replica's (QA 2026-11-28: requests_per_s
    alone, where plan's requests_per_s is the fleet's)."""
    from chalk.analyses.traffic.simulate_run import simulate_requests

    run = simulate_requests("llama-3.1-8b", "h200", layout="tp=2", requests=400, rate=2.0)
    d = run.to_dict()
    for k in ("output_tokens_per_s", "input_tokens_per_s", "requests_per_s"):
        assert d[f"{k}_per_replica"] == d[k] and d[f"{k}_per_gpu"] == pytest.approx(d[k] / 2)


def test_a_run_that_is_no_steady_state_is_not_called_one_from_python():
    """The CLI warned 'not a steady state'; the Python answer's latency_window still said kind 'steady' (QA
    2026-11-28: gpt-oss-120b on one H200 at 80 requests/s for 2,000 requests served 0 requests/s with ~1,080 in
    flight). The window's kind now carries the warning; a light run stays steady."""
    import chalk

    r = chalk.simulate("gpt-oss-120b", "h200", rate=80, requests=2000, input_len=200, output_len=600, layout="tp=1",
                       seed=2)
    assert r.latency_window["kind"] == "not steady" and "shorter than a request's life" in r.latency_window["basis"]
    ok = chalk.simulate("llama-3.1-8b", "h100-sxm", rate=2, requests=2000, input_len=512, output_len=256,
                        layout="tp=1", seed=0)
    assert ok.latency_window["kind"] == "steady" and abs(ok.steady_state_gap) < 0.1
