"""The compiled continuous-batching loop (numba, `chalk[fast]`) answers exactly as the pure-Python reference loop."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

from chalk.analyses.traffic import simulate as S
from chalk.errors import InputError
from chalk.specs.catalog import load_model, resolve_hardware

numba = pytest.importorskip("numba")

# the simulator's own tests, rerun here with every run handed to the compiled loop (see `compiled_by_default`)
from test_serving_dynamics import (  # noqa: E402,F401
    test_a_streamed_run_answers_as_a_held_one,
    test_closed_loop_littles_law_in_the_window,
    test_cold_start_is_outside_the_window_and_available_on_request,
    test_open_loop_in_engine_count_is_measured_not_assumed,
    test_prefix_cached_tokens_skip_prefill_compute,
)
from test_simulate import (  # noqa: E402,F401
    test_a_closed_loop_hands_each_freed_seat_on_after_the_client_latency,
    test_closed_loop_latency_counts_from_the_send,
    test_fast_engine_matches_step_by_step_reference,
    test_latencies_are_ordered_and_non_negative,
    test_littles_law,
    test_low_load_ttft_is_one_prefill,
    test_small_kv_capacity_queues_and_is_never_exceeded,
    test_throughput_never_exceeds_max_batch_roofline,
)

H100 = resolve_hardware("h100-sxm")
SC_8B = S.StepCost.from_roofline(load_model("llama-3.1-8b"), H100)


@pytest.fixture(autouse=True)
def compiled_by_default(monkeypatch):
    """`loop='auto'` takes the compiled loop for every run in this module, however short."""
    monkeypatch.setattr(S, "COMPILED_MIN_REQUESTS", 0)


def assert_same(a: S.SimulationResult, b: S.SimulationResult):
    """Every field equal, to the bit (per-request arrays included)."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), f.name
        elif isinstance(x, float) and math.isnan(x):
            assert math.isnan(y), f.name
        else:
            assert x == y, (f.name, x, y)


def _spread(lo, hi):
    return lambda rng, k: rng.integers(lo, hi, k)


CASES = [
    ("llama-3.1-8b", S.poisson_arrivals(600, 8000, 512, 128, seed=0), dict(max_batch=256)),
    ("llama-3.1-8b", S.poisson_arrivals(600, 8000, 512, 128, seed=0), dict(max_batch=256, prefill_chunk_tokens=512)),
    ("llama-3.1-8b", S.poisson_arrivals(20, 3000, 512, 128, seed=3), dict(max_batch=256)),  # decode runs jumped
    ("llama-3.1-8b", S.poisson_arrivals(300, 8000, 512, _spread(1, 300), seed=3),  # 1-token outputs, KV-bound
     dict(max_batch=64, kv_capacity_tokens=20_000, prefill_chunk_tokens=256)),
    ("llama-3.1-8b", S.Requests.from_arrays(np.sort(np.random.default_rng(5).uniform(0, 30, 4000)), 700, 90,
                                            cached_len=np.random.default_rng(6).integers(0, 600, 4000)),
     dict(max_batch=32)),
    ("llama-3.1-8b", S.closed_loop_requests(64, 3000, 2000, 200), dict(max_batch=64, closed_loop=True)),
    # batch, chunk and seats far past the run (as many as max_batch takes)
    ("llama-3.1-8b", S.closed_loop_requests(64, 3000, 2000, 200),
     dict(max_batch=10**15, closed_loop=True, concurrency=10**15, prefill_chunk_tokens=10**15)),
    # fewer seats than the engine holds: the next request is often not sent yet while decode runs are jumped
    ("llama-3.1-8b", S.closed_loop_requests(64, 3000, 2000, 200),
     dict(max_batch=256, closed_loop=True, concurrency=32, client_latency_s=0.01)),
    ("llama-3.1-8b", S.PoissonStream(30, 150_000, 512, 128), dict(max_batch=256)),  # streamed: 3 chunks folded
    ("llama-3.1-8b", S.PoissonStream(600, 140_000, 512, _spread(1, 300), seed=2), dict(max_batch=256, window="all")),
    ("mixtral-8x7b", S.poisson_arrivals(50, 6000, _spread(100, 4000), _spread(1, 600), seed=7), dict(max_batch=128)),
    ("gpt-oss-20b", S.poisson_arrivals(50, 6000, _spread(100, 4000), _spread(1, 600), seed=7),
     dict(max_batch=128, prefill_chunk_tokens=1024)),
]


@pytest.mark.parametrize("model, req, kw", CASES, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(CASES)])
def test_compiled_loop_is_bit_identical_to_the_python_loop(model, req, kw):
    sc = SC_8B if model == "llama-3.1-8b" else S.StepCost.from_roofline(load_model(model), H100)
    ref = S.simulate_continuous(req, sc, loop="python", **kw)
    assert_same(ref, S.simulate_continuous(req, sc, loop="compiled", **kw))
    assert ref.n_steps > 100


def test_a_streamed_compiled_run_holds_only_the_requests_in_flight():
    """Memory stays bounded: the compiled loop folds finished chunks as the Python loop does (here 20 chunks)."""
    import tracemalloc

    stream = S.PoissonStream(30, 20 * S.CHUNK_REQUESTS, 512, 128)
    tracemalloc.start()
    r = S.simulate_continuous(stream, SC_8B, 256, loop="compiled")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert r.arrival_s is None and r.n_requests == 20 * S.CHUNK_REQUESTS
    assert peak < 30e6, peak  # ~9 arrays of 8 bytes over a few chunks held; holding all would be ~95 MB


def test_bad_loop_name_and_a_missing_numba_are_one_line_errors(monkeypatch):
    req = S.poisson_arrivals(10, 50, 64, 8)
    with pytest.raises(InputError, match="loop must be"):
        S.simulate_continuous(req, SC_8B, 8, loop="fast")
    monkeypatch.setitem(sys.modules, "numba", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "chalk.analyses.traffic.simulate_compiled", None)
    with pytest.raises(InputError, match=r"chalk\[fast\]"):
        S.simulate_continuous(req, SC_8B, 8, loop="compiled")
    # 'auto' falls back to the Python loop
    assert_same(S.simulate_continuous(req, SC_8B, 8, loop="python"), S.simulate_continuous(req, SC_8B, 8))


def test_importing_chalk_does_not_import_numba():
    code = "import sys, chalk, chalk.analyses.traffic.simulate, chalk.faces.cli; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
