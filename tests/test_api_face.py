"""The Python API answers as the commands do (QA 2026-11-28): the same defaults, the same keys, typed errors only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import chalk


def test_throughput_searches_both_modes_by_default_as_the_command_does():
    """The command's --mode all is the library's default: the API answered aggregated at 289 tok/s/GPU where the
    command answered disaggregated at 494 for the README's own question."""
    kw = dict(input_len=2000, output_len=500, min_user_tps=30)
    t = chalk.throughput("llama-3.1-70b", "h100-sxm", **kw)
    p = subprocess.run([sys.executable, "-m", "chalk", "throughput", "-m", "llama-3.1-70b", "-H", "h100-sxm",
                        "--input-len", "2000", "--output-len", "500", "--min-user-tps", "30", "--json"],
                       capture_output=True, text=True, timeout=300)
    d = json.loads(p.stdout)
    assert (t.mode, t.layout) == (d["mode"], d["layout"]) and "mode_search" in t
    assert t.output_tokens_per_s_per_gpu == pytest.approx(d["output_tokens_per_s_per_gpu"], rel=1e-9)
    assert t.output_tokens_per_s_per_fleet == pytest.approx(d["output_tokens_per_s_per_fleet"], rel=1e-9)


def test_simulate_carries_its_checks_and_per_gpu_rates():
    """Overload and the window's distance from Little's law were computed by the command only."""
    s = chalk.simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", rate=30, input_len=1000, output_len=200,
                       requests=3000)
    assert s.overload is not None and s.overload["offered_requests_per_s"] > s.overload["served_requests_per_s"]
    assert s.steady_state_gap == pytest.approx(s.mean_in_flight / (s.requests_per_s * s.mean_e2e_s) - 1)
    t = chalk.simulate("llama-3.1-70b", "h100-sxm", layout="tp=4", rate=1, requests=400)
    assert t.overload is None and abs(t.steady_state_gap) < 0.03
    assert t.output_tokens_per_s_per_gpu == pytest.approx(t.output_tokens_per_s / 4)
    with pytest.raises(chalk.InputError, match="give one of the two"):
        chalk.simulate("llama-3.1-8b", "h100-sxm", concurrency=8, rate=5)


def test_a_closed_loop_is_replayed_until_its_window_settles():
    """DeepSeek-V3 DP8/EP8 on H200 at 256 in flight: the window's mean TTFT fell from 0.70 s to 0.59 s across a
    32-round replay (the first wave's seats fall out of step slowly); throughput now replays longer until its
    halves agree, simulate without -n answers the same, and a run the caller sized too short says so."""
    kw = dict(input_len=2000, output_len=300, layout="tp=1,ep=8,attn_dp=8", concurrency=256, engine="sglang")
    t = chalk.throughput("deepseek-v3", "h200", **kw)
    s = chalk.simulate("deepseek-v3", "h200", **kw)
    assert s.mean_ttft_s == pytest.approx(t.ttft_s, rel=0.02) and s.n_requests > 8192
    a, b = chalk.analyses.traffic.simulate.settling(s.result)
    assert abs(a - b) <= max(0.05 * max(a, b), 0.5 * s.mean_step_s)
    # 4 rounds of the 256 seats (8 settled before SGLang's prefill budget was split over its 8 attention-DP ranks)
    short = chalk.simulate("deepseek-v3", "h200", requests=1024, **kw)
    assert any(n.startswith("not settled") for n in short.notes)


def test_session_refuses_options_it_cannot_use_when_made():
    with pytest.raises(chalk.InputError, match="Session does not take 'foo'"):
        chalk.Session("llama-3.1-8b", "h100-sxm", foo=1)
    with pytest.raises(chalk.InputError, match="ask chalk.estimate"):
        chalk.Session("llama-3.1-8b", "h100-sxm").estimate(8, mtp=1)
    s = chalk.Session("llama-3.1-8b", "h100-sxm", precision="fp8")
    assert s.estimate(8).step_time_s == pytest.approx(chalk.estimate("llama-3.1-8b", "h100-sxm", 8,
                                                                     precision="fp8").step_time_s)


def test_grids_that_do_not_broadcast_are_input_errors():
    for ask in (lambda: chalk.estimate("llama-3.1-8b", "h100-sxm", batch=[1, 2, 3], context=[1024, 2048]),
                lambda: chalk.Session("llama-3.1-8b", "h100-sxm").estimate([1, 2, 3], [1024, 2048])):
        with pytest.raises(chalk.InputError, match="do not broadcast"):
            ask()


def test_errors_and_frames_are_where_the_docs_say():
    assert chalk.ChalkError is chalk.errors.ChalkError and issubclass(chalk.InputError, chalk.ChalkError)
    assert len(chalk.layout("llama-3.1-8b", "h100-sxm").to_frame()) >= 2
    f = chalk.train("llama-3.1-8b", "h100-sxm").to_frame()
    assert len(f) == 1 and {"gpu_hours", "cost_usd", "layout_tensor_parallel"} <= set(f.columns)


def test_a_context_of_less_than_one_token_is_refused():
    """`estimate -c 0.5` answered a step at half a token of context (QA 2026-11-28)."""
    with pytest.raises(chalk.InputError, match="context must be at least 1 token"):
        chalk.estimate("llama-3.1-8b", "h100-sxm", 1, 0.5)
    with pytest.raises(chalk.InputError, match="context must be at least 1 token"):
        chalk.sweep("llama-3.1-8b", "h100-sxm", batches=[1, 2], contexts=[0.5, 1024])
