"""Event-driven simulation of requests served by one replica: the lecture's train and continuous batching.

Every step's duration comes from `StepCost` (chalk.analyses.step.step_cost), a linearised roofline (max(compute, weight + KV read)
+ overhead) whose coefficients are read once from `ModelSizes` and the system's rates, so a step
costs a handful of float operations instead of a `roofline.step` call.

Engine choice. Continuous batching is simulated step by step with scalar state (running count,
decode count, sum of decode contexts, KV tokens held) rather than per-request objects or SimPy
processes: every decoding sequence gains exactly one token per step, so a request's finishing
*step* is known the moment its prefill ends, and only steps with an event (admission, prefill
chunk, completion) touch per-request data. Runs of eventless decode steps (light load, long
outputs) are jumped in closed form (`_DecodeRun`: step time is the max of two lines in the step
index, so k steps sum to two arithmetic series), and idle gaps are skipped to the next arrival.
Measured alternatives on the same machine: a numpy slot-array step (256 slots, ~12 array calls)
costs ~12 us, i.e. ~16 s for the 1.35M steps of the 600 req/s run below, against ~1.6 us per step
here; SimPy with one process per request and a slot Resource does ~93K requests/s (~11 s per 1M)
before any per-step batching is even modelled.
The train is solved in closed form: seats are a B-server FCFS queue on a tick clock (cummax along
stride-B chains when all outputs are equal, a heap otherwise) and per-tick batch contents come from
difference arrays.

The same loop runs compiled with numba when it is installed (`pip install 'chalk[fast]'`; chalk.analyses.
simulate_compiled, statement for statement the loop below over numpy arrays, bit-identical answers, tested) for runs
of at least COMPILED_MIN_REQUESTS requests; `simulate_continuous(..., loop='python')` keeps the reference loop.

Measured on the 2-core dev machine, CPU seconds (`python benchmarks/bench_simulate.py [N] [python]`; llama-3.1-8b on
8 x H100, 1M Poisson requests, prompt 512, output 128), compiled (Python loop): continuous, max batch 256, 600 req/s
(96 % of the 625 req/s it sustains in overload): 0.37 s (3.95 s); with 512-token prefill chunks 0.21 s (3.76 s); in
overload 0.12 s (1.94 s); at 20 req/s (67M decode steps, mostly jumped) 0.23 s (8.3 s); loading the compiled loop
~0.5 s once per process (compiling it, once per machine, ~3 s). Train, T = 20 ms, 2048 seats, 200 req/s: 0.2 s
(equal outputs), 0.6 s (outputs 64-192, heap). Streamed (`benchmarks/bench_simulate_stream.py`, one H100 at 30 req/s,
~3 steps per request): 2e6 requests 1.1 s CPU (8.4 s Python), ~1.8M (240K) simulated requests per CPU-second;
1e8 requests 20 CPU-s (442 s Python), 187 MB peak RSS (73 MB Python: numba and LLVM
bring ~110 MB of their own; the requests in flight ~72 bytes each, the rest in log histograms).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass, fields

import numpy as np

from chalk.errors import InputError, SpecError
from chalk.analyses.step.step_cost import StepCost  # noqa: F401  (re-exported: part of simulate's API)
from chalk.specs.workload import positive

#: Most requests one simulation holds in memory with its per-request arrays (about 250 bytes each: ~250 MB).
MAX_REQUESTS = 1_000_000
#: Most requests one streamed simulation generates (`PoissonStream`): memory holds only the requests in flight, but
#: time grows with the run: 1e8 requests (a day of a large provider's traffic) take ~20 CPU-seconds here with the
#: compiled loop (`chalk[fast]`), ~7.5 CPU-minutes with the Python one.
MAX_STREAMED_REQUESTS = 100_000_000
#: Latest arrival time: at 1e9 s float64 still resolves 1e-7 s, so a step of microseconds advances the clock.
MAX_ARRIVAL_S = 1e9


# ----------------------------------------------------------------------------------------- requests
@dataclass(frozen=True, eq=False)
class Requests:
    """Requests sorted by arrival: arrival time (s), prompt and output lengths (tokens), and the prompt tokens each
    finds in the prefix cache (`cached_len`, None: none; their KV is read, not computed)."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    cached_len: np.ndarray | None = None

    @classmethod
    def from_arrays(cls, arrival_s, input_len, output_len, cached_len=None) -> Requests:
        """Validated, stably sorted by arrival; scalar lengths broadcast to every request."""
        a = np.atleast_1d(np.asarray(arrival_s, dtype=float))
        if a.ndim != 1 or a.size == 0:
            raise InputError("arrival_s must be a non-empty 1-D array")
        if a.size > MAX_REQUESTS:
            raise InputError(f"at most {MAX_REQUESTS:,} requests held in memory per simulation, got {a.size:,} "
                             "(longer runs stream their requests: simulate(..., requests=N) generates them as it goes)")
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise InputError("arrival times must be finite and >= 0")
        if np.any(a > MAX_ARRIVAL_S):
            raise InputError(f"arrival times must be at most {MAX_ARRIVAL_S:g} s (about 30 years; beyond it a "
                             f"millisecond step is lost in the float), got up to {float(a.max()):.3g} s")
        lens = []
        for name, v in (("input_len", input_len), ("output_len", output_len)):
            x = np.broadcast_to(np.asarray(v), a.shape) if np.ndim(v) == 0 else np.asarray(v)
            if x.shape != a.shape:
                raise InputError(f"{name} has {x.size} entries for {a.size} arrivals")
            positive(name, x, integer=True)
            lens.append(x.astype(np.int64))
        order = np.argsort(a, kind="stable")
        cached = None
        if cached_len is not None:
            c = np.broadcast_to(np.asarray(cached_len), a.shape) if np.ndim(cached_len) == 0 else \
                np.asarray(cached_len)
            if c.shape != a.shape:
                raise InputError(f"cached_len has {c.size} entries for {a.size} arrivals")
            positive("cached_len", c, integer=True, allow_zero=True)
            c = c.astype(np.int64)
            if np.any(c >= lens[0]):
                raise InputError("cached_len must be below input_len: at least one prompt token is prefilled")
            cached = c[order] if c.any() else None
        return cls(a[order], lens[0][order], lens[1][order], cached)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def chunks(self, size: int):
        """(arrival_s, input_len, output_len, cached_len) in runs of at most `size` requests: the form the
        simulator reads requests in, so a generated stream (`PoissonStream`) and held requests run alike."""
        n = len(self)
        zero = np.zeros(min(size, n), dtype=np.int64)
        for s in range(0, n, size):
            e = min(s + size, n)
            c = self.cached_len[s:e] if self.cached_len is not None else zero[:e - s]
            yield self.arrival_s[s:e], self.input_len[s:e], self.output_len[s:e], c


@dataclass(frozen=True, eq=False)
class PoissonStream:
    """`n` Poisson arrivals at `rate_per_s` generated a chunk at a time, for runs too long to hold (up to
    MAX_STREAMED_REQUESTS): memory stays bounded by the requests in flight, not the run's length. Lengths as in
    `poisson_arrivals` (a number, values sampled with replacement, a callable f(rng, n), or an object with
    `sample(n, rng)`); `max_tokens` truncates prompt + output to the model's context (prompt first kept)."""

    rate_per_s: float
    n: int
    input_len: object = 512
    output_len: object = 128
    seed: int = 0
    max_tokens: int | None = None

    def __post_init__(self):
        positive("rate_per_s", self.rate_per_s, scalar=True)
        positive("requests", self.n, integer=True, maximum=MAX_STREAMED_REQUESTS, scalar=True)

    def __len__(self) -> int:
        return int(self.n)

    def chunks(self, size: int):
        rng = np.random.default_rng(int(self.seed))
        t, left = 0.0, int(self.n)
        while left > 0:
            k = min(size, left)
            a = t + np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=k))
            t = float(a[-1])
            P = np.maximum(_sample("input_len", self.input_len, k, rng).astype(np.int64), 1)
            O = np.maximum(_sample("output_len", self.output_len, k, rng).astype(np.int64), 1)
            if self.max_tokens:
                P, O = truncate_to_context(P, O, self.max_tokens)[:2]
            left -= k
            yield a, P, O, np.zeros(k, dtype=np.int64)


def _sample(name, spec, n, rng):
    if hasattr(spec, "sample"):
        return np.asarray(spec.sample(n, rng))
    return _lengths(name, spec, n, rng)


def truncate_to_context(input_len, output_len, max_tokens: int):
    """(prompt, output, how many were cut): lengths cut so prompt + output <= `max_tokens` (the model's context):
    the output first down to one token, then the prompt. A request longer than the model takes cannot be served
    whole; an engine refuses or truncates it."""
    P, O = np.asarray(input_len, dtype=np.int64), np.asarray(output_len, dtype=np.int64)
    cap = int(max_tokens)
    over = P + O > cap
    if not over.any():
        return P, O, 0
    O = np.where(over, np.maximum(np.minimum(O, cap - P), 1), O)
    P = np.where(P + O > cap, np.maximum(cap - O, 1), P)
    return P, O, int(over.sum())


def _lengths(name, spec, n: int, rng: np.random.Generator) -> np.ndarray:
    if callable(spec):
        return np.asarray(spec(rng, n))
    if np.ndim(spec) == 0:
        return np.full(n, spec)
    values = np.asarray(spec)
    if values.size == 0:
        raise InputError(f"{name}: empty distribution")
    return rng.choice(values, size=n)


def poisson_arrivals(rate_per_s: float, n: int, input_len=512, output_len=128, seed: int = 0) -> Requests:
    """`n` requests with exponential inter-arrival gaps at `rate_per_s`, first gap from t = 0.

    A length is a fixed int, a sequence of values sampled uniformly with replacement (an empirical
    distribution), or a callable `f(rng, n)` returning n lengths (e.g. a lognormal, rounded).
    """
    rate = positive("rate_per_s", rate_per_s, scalar=True)
    n = positive("n", n, integer=True, maximum=MAX_REQUESTS)
    rng = np.random.default_rng(int(positive("seed", seed, integer=True, allow_zero=True, scalar=True)))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    return Requests.from_arrays(arrivals, _lengths("input_len", input_len, n, rng),
                                _lengths("output_len", output_len, n, rng))


def load_trace(path) -> Requests:
    """Requests from a trace file in any format `chalk.specs.traces.read_trace` reads (chalk's CSV with header
    `arrival_s,input_len,output_len`, Azure 2023 CSV, Mooncake JSONL), read bounded."""
    from chalk.specs.traces import read_trace

    t = read_trace(path)
    return Requests.from_arrays(t.arrival_s, t.input_len, t.output_len)


# ----------------------------------------------------------------------------------------- results
@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Latencies and rates of one simulated run. Times in s, rates per s, per replica.

    Percentiles, means and rates are over the steady-state window (`latency_window`): requests past the warm-up
    (the first waves of a closed loop all start at t = 0, an open loop starts empty) and before the cool-down (a
    closed loop's last requests run as its seats empty); `window="all"` measures every request (the cold start).
    Per-request arrays (arrival order, every request) are kept for runs held in memory; a streamed run keeps
    none (None) and reads its percentiles from log-bucketed histograms (relative accuracy 0.5%)."""

    scheduler: str
    step_cost: str
    max_batch: int
    period_s: float | None
    kv_capacity_tokens: float | None
    prefill_chunk_tokens: int | None
    arrival_s: np.ndarray | None
    queue_s: np.ndarray | None  # arrival -> admitted to the batch (boards a train)
    ttft_s: np.ndarray | None  # arrival -> first output token
    tpot_s: np.ndarray | None  # mean time per output token after the first (NaN for 1-token outputs)
    e2e_s: np.ndarray | None  # arrival -> last output token
    n_requests: int
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p99_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    mean_ttft_s: float
    mean_tpot_s: float
    mean_e2e_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    requests_per_s: float
    mean_batch: float  # sequences held per step (decoding or prefilling), averaged over the window's steps
    mean_decode_batch: float  # sequences decoding a token per step
    mean_prefill_tokens_per_step: float  # prompt tokens prefilled per step
    mean_step_s: float  # busy time per step
    mean_concurrency: float  # requests in the engine (admitted, not finished), time-averaged over the window
    utilisation: float  # busy fraction of the window
    n_steps: int
    busy_time_s: float
    simulated_time_s: float  # first arrival -> last completion
    peak_kv_tokens: float
    latency_window: dict = None
    closed_loop_concurrency: int | None = None  # a closed loop's client seats (requests in flight, engine or not)
    prefix_hit_rate: float | None = None  # prompt tokens found in the prefix cache / prompt tokens
    # requests sent and not finished (waiting to be admitted, on their way from the client, or in the engine),
    # time-averaged over the window: measured, and by Little's law requests_per_s x mean_e2e_s
    mean_in_flight: float = math.nan
    # a streamed run's (no per-request arrays): the median waits, send -> first token, of its first and last fifth
    # of requests, its arrival window and its offered rate over the latency window (what `overload` reads)
    stream_waits: dict | None = None

    _ARRAYS = ("arrival_s", "queue_s", "ttft_s", "tpot_s", "e2e_s")

    def summary(self) -> dict:
        """Scalar fields only."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in self._ARRAYS}

    def to_dict(self, per_request: bool = False) -> dict:
        """JSON-ready summary; with `per_request`, the latency arrays as lists (NaN -> None)."""
        d = self.summary()
        if per_request:
            if self.e2e_s is None:
                raise InputError("a streamed run keeps no per-request latencies (only their histograms)")
            d.update({k: [_plain(v) for v in getattr(self, k).tolist()] for k in self._ARRAYS})
        return d

    def to_frame(self):
        """One row per request (arrival, queue, TTFT, TPOT, end-to-end, in s) as a pandas DataFrame, the summary in
        `.attrs`; pandas is an optional extra."""
        from chalk.analyses.records.results import _frame

        if self.e2e_s is None:
            raise InputError("a streamed run keeps no per-request latencies: use summary()")
        df = _frame({k: getattr(self, k) for k in self._ARRAYS})
        df.attrs.update(self.summary())
        return df


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v.item() if isinstance(v, np.generic) else v


#: Steady-state window (`steady_window`): an open loop skips its first 10% of arrivals (the system fills) and its
#: last 5% (it drains); a closed loop skips at least two rounds of its seats at each end.
WARMUP_FRACTION, COOLDOWN_FRACTION, CLOSED_LOOP_EDGE_ROUNDS = 0.10, 0.05, 2
#: `chalk simulate` measures an open loop of fewer arrivals whole (`window='all'`; `simulate_run`): an open loop
#: starts empty (no cold burst), and a short steady window is all edge: between its first and last admissions none
#: may finish (5 requests of Azure's 2023 conversation trace read 0 requests/s) and Little's law missed by 5% at 120
MIN_STEADY_REQUESTS = 1000


def steady_window(n: int, seats: int | None = None, window: str = "steady") -> tuple[int, int]:
    """[first, last) request indices (arrival or send order) measured: the steady state, or every request
    (`window='all'`). `seats`: a closed loop's concurrency. At least a fifth of the requests is always kept."""
    if window not in ("steady", "all"):
        raise InputError(f"window must be 'steady' or 'all', got {window!r}")
    if window == "all" or n < 5:
        return 0, n
    lo = int(math.ceil(WARMUP_FRACTION * n))
    hi = n - int(math.ceil(COOLDOWN_FRACTION * n))
    if seats:
        lo, hi = max(lo, CLOSED_LOOP_EDGE_ROUNDS * seats), min(hi, n - CLOSED_LOOP_EDGE_ROUNDS * seats)
    keep = max(n // 5, 1)
    if hi - lo < keep:  # a short run: keep its middle fifth (or more)
        lo = max((n - keep) // 2, 0)
        hi = lo + keep
    return lo, hi


def _pcts(x):
    x = x[np.isfinite(x)]
    return tuple(float(v) for v in np.percentile(x, (50, 90, 99))) if x.size else (math.nan,) * 3


def _result(scheduler, req: Requests, admit, first, finish, *, n_steps, busy, step_sum, peak_kv,
            step_cost: StepCost, max_batch, period_s=None, kv_cap=None, chunk=None,
            closed_loop: bool = False, client_latency_s: float = 0.0, window: str = "steady",
            seats: int | None = None, rates: dict | None = None, send=None, dec_sum=math.nan,
            pf_sum=math.nan) -> SimulationResult:
    """A run kept in memory, summarised over its steady-state window. `rates`: the window's throughput, in-flight
    and step figures measured by the event loop (continuous batching); without them (the train) they are read
    from the arrays over the same window."""
    # a closed-loop client sends a request when one of its seats frees: latencies count from that send, the
    # client latency before the engine's admission
    a = send if send is not None else (admit - client_latency_s if closed_loop else req.arrival_s)
    out = req.output_len
    queue, ttft, e2e = admit - a, first - a, finish - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    n = len(req)
    lo, hi = steady_window(n, seats if closed_loop else None, window)
    w = slice(lo, hi)
    span = float(finish.max() - a[0])
    span = span if span > 0 else float("nan")
    if rates is None:
        rates = _array_rates(admit, finish, req.input_len, out, lo, hi, span, busy, step_sum, n_steps,
                             dec_sum, pf_sum, steady=window == "steady", first=first)
    rates = {**rates, "wait_area": _wait_area(a, admit, rates["start_s"], rates["end_s"])}
    t50, t90, t99 = _pcts(ttft[w])
    p50, p90, p99 = _pcts(tpot[w])
    e50, e90, e99 = _pcts(e2e[w])
    tp = tpot[w][np.isfinite(tpot[w])]
    return SimulationResult(
        scheduler=scheduler, step_cost=step_cost.label, max_batch=max_batch, period_s=period_s,
        kv_capacity_tokens=kv_cap, prefill_chunk_tokens=chunk, arrival_s=a, queue_s=queue, ttft_s=ttft,
        tpot_s=tpot, e2e_s=e2e, n_requests=n, ttft_p50_s=t50, ttft_p90_s=t90, ttft_p99_s=t99,
        tpot_p50_s=p50, tpot_p90_s=p90, tpot_p99_s=p99, e2e_p50_s=e50, e2e_p90_s=e90, e2e_p99_s=e99,
        mean_ttft_s=float(ttft[w].mean()), mean_tpot_s=float(tp.mean()) if tp.size else math.nan,
        mean_e2e_s=float(e2e[w].mean()), n_steps=int(n_steps), busy_time_s=float(busy), simulated_time_s=span,
        peak_kv_tokens=float(peak_kv), closed_loop_concurrency=seats if closed_loop else None,
        latency_window=_window_dict(lo, hi, n, window, rates), **_rate_fields(rates))


def _wait_area(send, admit, ta: float | None, tb: float | None) -> float:
    """Request-seconds spent between send and admission (the client's latency, the engine's queue) inside the
    window [ta, tb]: each request's [send, admit] clipped to it. An edge not yet known (None) lies beyond every
    admission given (a streamed run folds finished requests before the window's last admission)."""
    if ta is None:
        return 0.0
    hi = admit if tb is None else np.minimum(admit, tb)
    return float(np.clip(hi - np.maximum(send, ta), 0, None).sum())


def _array_rates(admit, finish, P, O, lo, hi, span, busy, step_sum, n_steps, dec_sum, pf_sum, steady: bool = True,
                 first=None) -> dict:
    """Window rates from the per-request arrays over the time between the admissions of the window's first and last
    requests: completions in it; tokens made in it (with `first`, each request's first token and prompt at its first
    token, its other tokens spread evenly to its finish: counting every finished request's tokens whole put the
    lecture's batch train at 129,542 tokens/s against the 128,000 its seats can emit); requests in the engine as the
    overlap of each [admit, finish] with it."""
    if steady and hi - lo >= 2 and admit[hi - 1] > admit[lo]:
        ta, tb = float(admit[lo]), float(admit[hi - 1])
        dt = tb - ta
        area = float(np.clip(np.minimum(finish, tb) - np.maximum(admit, ta), 0, None).sum())
        if first is not None:
            made = (first >= ta) & (first <= tb)
            rest = np.clip(np.minimum(finish, tb) - np.maximum(first, ta), 0, None)
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(finish > first, rest / (finish - first), 0.0)
            out_tokens = float(made.sum() + ((O - 1) * share).sum())
            in_tokens = float(P[made].sum())
            # requests served: the tokens made over the window's requests' mean output (a steady state's requests/s
            # x tokens per request = tokens/s), not the finishes, which came in whole at its edges (1,295 requests/s
            # of the lecture's train where its seats serve 1,280)
            completed = out_tokens / float(np.mean(O[lo:hi]))
        else:
            done = (finish >= ta) & (finish <= tb)
            out_tokens, in_tokens, completed = float(O[done].sum()), float(P[done].sum()), int(done.sum())
        # the run's busy time, steps, riders, decoding and prefill tokens pro-rated to the window alike: their ratios
        # (the mean step, the mean batch) are the run's (a window's busy time over the whole run's steps put a train
        # of constant 16 ms steps at a 13.5 ms mean step)
        f = dt / span
        return {"start_s": ta, "end_s": tb, "completed": completed, "out_tokens": out_tokens,
                "in_tokens": in_tokens, "area": area, "busy": busy * f, "steps": n_steps * f,
                "step_sum": step_sum * f, "dec_sum": dec_sum * f, "pf_sum": pf_sum * f}
    return {"start_s": float(admit[0]), "end_s": float(admit[0]) + span, "completed": len(finish),
            "out_tokens": float(O.sum()), "in_tokens": float(P.sum()), "area": float((finish - admit).sum()),
            "busy": busy, "steps": n_steps, "step_sum": step_sum, "dec_sum": dec_sum, "pf_sum": pf_sum}


def _rate_fields(r: dict) -> dict:
    dt = r["end_s"] - r["start_s"]
    dt = dt if dt > 0 else float("nan")
    return {"requests_per_s": r["completed"] / dt, "output_tokens_per_s": r["out_tokens"] / dt,
            "input_tokens_per_s": r["in_tokens"] / dt, "mean_concurrency": r["area"] / dt,
            "mean_in_flight": (r["area"] + r.get("wait_area", 0.0)) / dt,
            "utilisation": min(r["busy"] / dt, 1.0), "mean_batch": r["step_sum"] / r["steps"] if r["steps"] else
            math.nan, "mean_decode_batch": r["dec_sum"] / r["steps"] if r["steps"] else math.nan,
            "mean_prefill_tokens_per_step": r["pf_sum"] / r["steps"] if r["steps"] else math.nan,
            "mean_step_s": r["busy"] / r["steps"] if r["steps"] else math.nan}


def _window_dict(lo, hi, n, window, r) -> dict:
    return {"kind": window, "first_request": lo, "last_request": hi - 1, "requests": hi - lo,
            "warmup_requests": lo, "cooldown_requests": n - hi, "start_s": r["start_s"], "end_s": r["end_s"],
            "basis": "percentiles over the requests sent in [first, last]; rates over the time between their "
                     "admissions"}


def overload(result: SimulationResult) -> dict | None:
    """Whether arrivals outran the replica: the wait for the first token grows through the run instead of settling.

    Overloaded when the median wait (arrival -> first token: the queue for a seat and, once admitted, for the
    prompt's prefill) of the last fifth of arrivals exceeds 3x that of the first fifth and 5% of the arrival window
    (a stable queue's wait does not grow with the run's length). The admission queue alone misses a backlog that
    waits inside the engine: with a large batch cap every arrival is admitted at once and queues for its prefill
    chunk (DeepSeek-R1 on DEP32 at 40 requests/s: TTFT p50 132 s, no admission wait). Returns the offered and served
    request rates (both over the steady-state window's requests) and both waits, or None when the queue settled. A
    streamed run keeps no per-request waits: it is judged on the waits of its first and last fifth it kept in
    histograms (`SimulationResult.stream_waits`).
    """
    a, q = result.arrival_s, result.ttft_s if result.ttft_s is not None else result.queue_s
    if a is None or q is None:
        return _stream_overload(result)
    grew = wait_growth(a, q)
    if grew is None:
        return None
    n, (q_first, q_last, window) = a.size, grew
    offered = (n - 1) / window
    w = result.latency_window or {}
    if w.get("requests", 0) > 1:  # over the requests the served rate counts (a trace's rate varies through it)
        lo, hi = int(w["first_request"]), int(w["last_request"])
        if 0 <= lo < hi < n and a[hi] > a[lo]:
            offered = (hi - lo) / float(a[hi] - a[lo])
    return {"offered_requests_per_s": offered, "served_requests_per_s": result.requests_per_s,
            "median_wait_first_fifth_s": q_first, "median_wait_last_fifth_s": q_last, "arrival_window_s": window}


#: A window whose requests in flight and Little's law (requests/s x mean time in system) differ by more than this is
#: not a steady state (`steady_gap`)
STEADY_GAP = 0.10


#: A closed loop's steady window has settled when its mean TTFT over the window's first half and over its second half
#: are within this share of each other (or within half a mean step: a TTFT of a few steps moves by steps).
SETTLED_TOLERANCE = 0.05


def wait_growth(arrival_s, wait_s) -> tuple[float, float, float] | None:
    """(median wait of the first fifth of arrivals, of the last fifth, arrival window) where the wait grows through
    the run (`overload`'s test: the last fifth's median over 3x the first's and over 5% of the window), else None.
    `arrival_s` in arrival order, `wait_s` each request's wait (arrival -> first token)."""
    a, q = np.asarray(arrival_s, dtype=float), np.asarray(wait_s, dtype=float)
    n = a.size
    window = float(a[-1] - a[0]) if n > 1 else 0.0
    if n < 20 or window <= 0:
        return None
    k = max(n // 5, 1)
    q_first, q_last = float(np.median(q[:k])), float(np.median(q[-k:]))
    return (q_first, q_last, window) if _wait_grew(q_first, q_last, window) else None


def _wait_grew(q_first: float, q_last: float, window: float) -> bool:
    """`overload`'s test on the median waits of a run's first and last fifth: the last over 3x the first and over
    5% of the arrival window (a stable queue's wait does not grow with the run's length)."""
    return q_last > 3 * q_first and q_last > 0.05 * window


def _stream_overload(result: SimulationResult) -> dict | None:
    """`overload` for a streamed run, from the waits it kept (`SimulationResult.stream_waits`): the same test (QA
    2026-11-28: past 1e6 requests a run 17% over capacity was called a steady state, with a 48-minute TTFT p50)."""
    w = result.stream_waits
    if not w or result.n_requests < 20 or not w["arrival_window_s"] > 0:
        return None
    q_first, q_last, window = w["median_wait_first_fifth_s"], w["median_wait_last_fifth_s"], w["arrival_window_s"]
    if not _wait_grew(q_first, q_last, window):
        return None
    return {"offered_requests_per_s": w["offered_requests_per_s"], "served_requests_per_s": result.requests_per_s,
            "median_wait_first_fifth_s": q_first, "median_wait_last_fifth_s": q_last, "arrival_window_s": window}


def settling(result) -> tuple[float, float] | None:
    """(mean TTFT over the first half of the steady window's requests, over its second half): a closed loop's first
    wave leaves its seats in step for many rounds, and the window's TTFT drifts down while they fall out of step
    (DeepSeek-V3 DP8/EP8 on H200 at 256 in flight: 0.70 s then 0.59 s over a 32-round replay; 1.03 s over 4
    rounds, 0.59 s over 128). None where the run kept no per-request times or its window is under 20 requests."""
    w, t = result.latency_window or {}, getattr(result, "ttft_s", None)
    if t is None or w.get("kind") != "steady" or w.get("requests", 0) < 20:
        return None
    x = np.asarray(t, dtype=float)[int(w["first_request"]):int(w["last_request"]) + 1]
    h = x.size // 2
    return float(np.mean(x[:h])), float(np.mean(x[h:]))


def settled(result) -> bool:
    """Whether a steady window has settled (`settling`): its halves' mean TTFT within SETTLED_TOLERANCE of each
    other or within half a mean step; True where it cannot be told."""
    s = settling(result)
    if s is None:
        return True
    a, b = s
    step = getattr(result, "mean_step_s", math.nan)
    return abs(a - b) <= max(SETTLED_TOLERANCE * max(a, b), 0.5 * step if math.isfinite(step) else 0.0)


def steady_gap(result) -> float | None:
    """How far the window is from a steady state: requests in flight (measured) over requests/s x mean end-to-end
    time, less 1 (0 in a steady state, by Little's law); None where either is not a finite number. A queue that builds
    and drains inside the window (a trace whose rate outruns the replica for part of it) opens the gap: DeepSeek-R1
    on a GB200 NVL72 replaying Mooncake's conversation trace 8x sped up held 2,244 in flight against 1,744 without
    its wait growing from the first fifth of arrivals to the last."""
    n, x, w = (getattr(result, k, None) for k in ("mean_in_flight", "requests_per_s", "mean_e2e_s"))
    if not all(isinstance(v, (int, float, np.floating)) and math.isfinite(v) for v in (n, x, w)) or x * w <= 0:
        return None
    return float(n / (x * w) - 1.0)


def _check_requests(requests, stream: bool = False):
    if isinstance(requests, Requests) or (stream and hasattr(requests, "chunks") and hasattr(requests, "__len__")):
        return requests
    raise InputError(f"requests must be a Requests (poisson_arrivals, load_trace)"
                     f"{' or a PoissonStream' if stream else ''}, got {type(requests).__name__}")


# ----------------------------------------------------------------------------------------- the train
def _boarding_ticks(k: np.ndarray, out: np.ndarray, seats: int, closed_form: bool | None = None) -> np.ndarray:
    """Tick each request boards: FCFS on `seats` seats, request i ready at tick k[i], riding out[i] ticks.

    Equal rides: r_i = max(k_i, r_{i-B} + o), a cummax along each stride-B chain. Otherwise a heap of
    the ticks the seats free up at (G/G/c FCFS: take the earliest free seat).
    """
    n = k.size
    if closed_form is None:
        closed_form = bool(np.all(out == out[0]))
    if closed_form:
        o, m = int(out[0]), -(-n // seats)
        kk = np.concatenate([k, np.full(m * seats - n, k[-1])]).reshape(m, seats)
        shift = (np.arange(m, dtype=np.int64) * o)[:, None]
        return (np.maximum.accumulate(kk - shift, axis=0) + shift).reshape(-1)[:n]
    free, ride = [0] * min(seats, n), np.empty(n, dtype=np.int64)
    kl, ol = k.tolist(), out.tolist()
    for i in range(n):
        r = kl[i] if kl[i] > free[0] else free[0]
        heapq.heapreplace(free, r + ol[i])
        ride[i] = r
    return ride


def simulate_train(requests: Requests, step_cost: StepCost, period_s: float, max_batch: int) -> SimulationResult:
    """The lecture's fixed timetable: a batch departs every `period_s`, whoever is aboard.

    Departures are at k * period_s. A request boards the first departure at or after its arrival
    with a free seat (FCFS) and rides `output_len` successive trains: its first ride prefills the
    prompt and yields the first token, each later one decodes a token. A token is out when its
    train's step ends. Raises InputError if a step would outlast the period (the timetable breaks).
    """
    req = _check_requests(requests)
    T = positive("period_s", period_s)
    B = positive("max_batch", max_batch, integer=True)
    P, O = req.input_len, req.output_len
    k_abs = np.ceil(req.arrival_s / T).astype(np.int64)  # first departure at/after arrival, exactly:
    k_abs -= (k_abs - 1) * T >= req.arrival_s  # 0.04 / 0.02 rounds to 2.0000000000000004
    k_abs += k_abs * T < req.arrival_s
    k0 = int(k_abs[0])
    k = k_abs - k0
    ride = _boarding_ticks(k, O, B)
    last = ride + O - 1
    K = int(last.max()) + 1
    if K > 20_000_000:  # ~10 arrays of K floats: 20M departures is ~1.6 GB
        raise InputError(f"the trace spans {K} departures of {T} s; use a longer period or a shorter trace")
    n_pf = np.bincount(ride, weights=P, minlength=K)
    att = np.bincount(ride, weights=P * (P + 1) / 2.0, minlength=K)
    dec = O > 1
    lo, hi, c0 = ride[dec] + 1, ride[dec] + O[dec], (P[dec] - 1 - ride[dec]).astype(float)
    n_dec = np.cumsum(np.bincount(lo, minlength=K + 1) - np.bincount(hi, minlength=K + 1))[:K]
    s0 = np.cumsum(np.bincount(lo, weights=c0, minlength=K + 1) - np.bincount(hi, weights=c0, minlength=K + 1))[:K]
    ctx = s0 + np.arange(K) * n_dec  # sum over decoding riders of (prompt + tokens so far - 1)
    riders = n_dec + np.bincount(ride, minlength=K)
    used = riders > 0
    d = np.zeros(K)
    d[used] = step_cost.step_time_s(n_dec[used], ctx[used], n_pf[used], att[used])
    if d.max() > T * (1 + 1e-9):
        j = int(np.argmax(d))
        raise InputError(f"a step with {int(riders[j])} riders takes {d[j] * 1e3:.3g} ms, longer than the "
                         f"{T * 1e3:.3g} ms period; raise period_s or lower max_batch")
    admit = (k0 + ride) * T
    first = admit + d[ride]
    finish = (k0 + last) * T + d[last]
    peak_kv = float((ctx + n_dec + n_pf).max())  # cached tokens at the end of each step
    return _result("train", req, admit, first, finish, n_steps=int(used.sum()), busy=float(d.sum()),
                   dec_sum=float(n_dec[used].sum()), pf_sum=float(n_pf[used].sum()),
                   step_sum=float(riders.sum()), peak_kv=peak_kv, step_cost=step_cost, max_batch=B, period_s=T)


# ----------------------------------------------------------------------------------------- continuous
class _DecodeRun:
    """Steps j = 0, 1, ... of a fixed decode batch: duration max(c0 + c1 j, m0 + m1 j) (overhead folded in).

    Both lines grow as the contexts do; the max switches line at most once, so the time of the first
    k steps is two arithmetic series and the step count reaching a time is a quadratic's root.
    """

    __slots__ = ("a0", "a1", "b0", "b1", "switch")

    def __init__(self, c0: float, c1: float, m0: float, m1: float):
        (self.a0, self.a1), (self.b0, self.b1) = ((c0, c1), (m0, m1)) if c0 >= m0 else ((m0, m1), (c0, c1))
        # the second line leads from step `switch` on (never if it grows no faster)
        self.switch = math.inf if self.b1 <= self.a1 else max(0, math.ceil((self.a0 - self.b0) / (self.b1 - self.a1)))

    @staticmethod
    def _series(k, g0, g1):
        return k * g0 + g1 * k * (k - 1) * 0.5

    def time_s(self, k: int) -> float:
        """Duration of the first k steps."""
        s = self.switch
        if k <= s:
            return self._series(k, self.a0, self.a1)
        return self._series(s, self.a0, self.a1) + self._series(k, self.b0, self.b1) - self._series(s, self.b0, self.b1)

    def steps_to_reach(self, x: float) -> int:
        """Smallest k >= 1 whose first k steps last at least x seconds."""
        s = self.switch
        if s == math.inf or self.time_s(s) >= x:
            g0, g1, base, k_lo = self.a0, self.a1, 0.0, 0
        else:
            g0, g1, base, k_lo = self.b0, self.b1, self.time_s(s) - self._series(s, self.b0, self.b1), s
        # k g0 + g1 k(k-1)/2 = x - base, stable root of the quadratic
        b, y = g0 - 0.5 * g1, x - base
        k = max(1, k_lo, math.ceil(2 * y / (b + math.sqrt(b * b + 2 * g1 * y))))
        while k > 1 and self.time_s(k - 1) >= x:
            k -= 1
        while self.time_s(k) < x:
            k += 1
        return k


def _capacity(v) -> float:
    try:
        cap = float(v)
    except (TypeError, ValueError):
        raise InputError(f"kv_capacity_tokens must be a number, got {v!r}") from None
    if not cap > 0:  # NaN fails too
        raise InputError(f"kv_capacity_tokens must be positive (math.inf: unlimited), got {v!r}")
    return cap


#: Requests the event loop reads (and, streaming, folds into its histograms) at a time.
CHUNK_REQUESTS = 65_536


#: Waits a streamed run keeps per fifth of its requests for `overload`'s medians (`_Stream`), at most about.
WAIT_SAMPLES = 65_536


class _Stream:
    """Where a streamed run's finished requests go: window latencies into log histograms, nothing per request."""

    def __init__(self, lo: int, hi: int, whole: bool = False, n: int = 0):
        from chalk.analyses.traffic.log_histogram import LogHistogram

        self.lo, self.hi, self.whole = lo, hi, whole  # whole: the run is its window (`window='all'`)
        self.h = {k: LogHistogram() for k in ("ttft", "tpot", "e2e")}
        # what `overload` reads of a run that keeps no arrays: the waits (send -> first token) of the first and
        # last fifth of the n requests, and the sends of requests 0, lo, hi - 1 and n - 1
        self.n, self.fifth = n, max(n // 5, 1)
        # every `stride`-th request of a fifth: at most ~65k of them, all below 327,680 requests (a median needs no
        # more; 1e8 requests folding every wait cost 12% of the run)
        self.stride = max(1, self.fifth // WAIT_SAMPLES)
        self.waits = (LogHistogram(), LogHistogram())
        self.sends: dict = {}
        self.first_arrival = math.inf
        self.last_finish = 0.0
        self.ta = self.tb = None  # the window's edges (admissions of requests lo and hi - 1), once reached
        self.wait_area = 0.0  # request-seconds between send and admission inside the window (`_wait_area`)

    def fold(self, g0, send, admit, first, finish, O):
        """Requests g0 .. g0 + len - 1, all finished."""
        self.first_arrival = min(self.first_arrival, float(send.min()))
        self.last_finish = max(self.last_finish, float(finish.max()))
        self.wait_area += _wait_area(send, admit, -math.inf if self.whole else self.ta, self.tb)
        for j in (0, self.lo, self.hi - 1, self.n - 1):
            if 0 <= j - g0 < send.size:
                self.sends[j] = float(send[j - g0])
        for h, (a, b) in zip(self.waits, ((0, self.fifth), (self.n - self.fifth, self.n))):
            s, e = max(a - g0, 0), min(b - g0, send.size)
            s += (-(g0 + s)) % self.stride  # global indices that are multiples of the stride
            if e > s:
                h.add(first[s:e:self.stride] - send[s:e:self.stride])
        s, e = max(self.lo - g0, 0), min(self.hi - g0, send.size)
        if e <= s:
            return
        send, first, finish, O = send[s:e], first[s:e], finish[s:e], O[s:e]
        self.h["ttft"].add(first - send)
        self.h["e2e"].add(finish - send)
        dec = O > 1
        self.h["tpot"].add((finish[dec] - first[dec]) / (O[dec] - 1))


def simulate_continuous(requests, step_cost: StepCost, max_batch: int,
                        kv_capacity_tokens: float | None = None,
                        prefill_chunk_tokens: int | None = None, closed_loop: bool = False,
                        client_latency_s: float = 0.0, concurrency: int | None = None, window: str = "steady",
                        keep_requests: bool | None = None, loop: str = "auto",
                        prefill_pool: tuple | None = None, warmup_s: float = 0.0) -> SimulationResult:
    """Continuous batching (Orca/vLLM) with optional chunked prefill (Sarathi-Serve).

    At each step start, waiting requests are admitted FCFS while fewer than `max_batch` run and
    their whole KV (prompt + output tokens) fits in what is left of `kv_capacity_tokens` (None: the
    step cost's HBM-derived capacity; math.inf: unlimited); the head of the queue blocks the rest.
    Admitted prompts are prefilled FCFS, at most `prefill_chunk_tokens` prompt tokens per step (None:
    whole prompts in their admission step), in the same step as one decode token for every running
    sequence; a prompt's `cached_len` tokens come from the prefix cache (read as KV, not computed). The step that
    ends a prompt's prefill yields its first token (TTFT); the request leaves at the end of the step yielding its
    `output_len`-th token, freeing its slot and KV.
    `closed_loop`: the requests are a benchmark client's queue: `concurrency` of them (default `max_batch`) are in
    flight, each sent when one before it finishes, `client_latency_s` after (HTTP, tokenisation, the client's
    turn-around: the seat is held but nothing decodes); the engine runs at most `max_batch` of them, the rest wait
    in its queue. Latencies count on the client's clock, from the send: TTFT and end-to-end include the latency.
    `window`: 'steady' (default) measures the steady state (`steady_window`), 'all' every request.
    `requests`: a `Requests` (held) or a `PoissonStream` (generated as the run goes); `keep_requests` (default: when
    held) keeps the per-request arrays; a run without them keeps only the requests in flight and the histograms.
    `loop`: 'python' (the reference loop), 'compiled' (the same loop compiled with numba, `chalk[fast]`; identical
    answers) or 'auto' (compiled for runs of at least COMPILED_MIN_REQUESTS requests when numba is installed).
    `prefill_pool`: a disaggregated deployment's closed loop (servers, prompt tokens/s per server, seconds per
    prompt token of a prompt alone): each request, once it reaches the engines (`client_latency_s` after its send),
    is prefilled first-come first-served on the earliest free of `servers` prefill servers, holding it P / rate and
    done after max(P / rate, P x lone) (`fleet.replay`'s rule for an open loop), and only then joins this engine,
    whose step cost should then charge nothing for prompt tokens (`fleet.decode_only`); TTFT counts the pool's wait
    and prefill. The reference loop runs it.
    `warmup_s`: a cold engine's first step takes this much longer (kernels compiled on first use, first-shape
    graphs and memory pools set up while the first batch waits): every request the first step's delay reaches (the
    first wave of a closed loop, the first arrivals of an open one) waits that much longer; a run measured whole
    (`window='all'`) counts it, a steady window excludes the requests it reaches. 0 by default (a warm engine).
    """
    req = _check_requests(requests, stream=True)
    B = positive("max_batch", max_batch, integer=True)
    cap = step_cost.kv_capacity_tokens if kv_capacity_tokens is None else _capacity(kv_capacity_tokens)
    chunk = None if prefill_chunk_tokens is None else positive("prefill_chunk_tokens", prefill_chunk_tokens,
                                                               integer=True)
    n = len(req)
    lat = float(positive("client_latency_s", client_latency_s, allow_zero=True, scalar=True))
    warm = float(positive("warmup_s", warmup_s, allow_zero=True, scalar=True))
    seats = None
    if closed_loop:
        seats = B if concurrency is None else int(positive("concurrency", concurrency, integer=True, scalar=True))
    elif concurrency is not None:
        raise InputError("concurrency is a closed loop's: pass closed_loop=True")
    keep = isinstance(req, Requests) if keep_requests is None else bool(keep_requests)
    if cap <= 0:
        raise InputError(f"no HBM is left for the KV cache ({step_cost.label}); use more chips or lower precision")
    pool = None
    if prefill_pool is not None:
        if not closed_loop:
            raise InputError("prefill_pool is a closed loop's (an open loop's prefill delays are known up front: "
                             "fleet.replay)")
        servers, mu, lone = prefill_pool
        pool = ([0.0] * positive("prefill servers", servers, integer=True, scalar=True),
                float(positive("prefill tokens/s", mu, scalar=True)),
                float(positive("prefill seconds per token", lone, allow_zero=True, scalar=True)))
        loop = "python"
    lo, hi = steady_window(n, seats, window)
    wa, wb = (lo, hi - 1) if window == "steady" else (-1, -1)
    sc = step_cost
    inv_pk, inv_bw = 1.0 / sc.peak_flops_per_s, 1.0 / sc.bandwidth_bytes_per_s
    f_tok, f_ctx, f_seq, f_att = (sc.flops_per_token * inv_pk, sc.attn_flops_per_context_token * inv_pk,
                                  sc.attn_flops_per_sequence * inv_pk, sc.prefill_attn_flops_per_pair * inv_pk)
    m_dense, m_exp, l1k = sc.weight_dense_bytes * inv_bw, sc.expert_bytes_all * inv_bw, sc.log1m_expert_fraction
    m_ctx, m_seq, m_w = (sc.kv_read_bytes_per_context_token * inv_bw, sc.kv_read_bytes_per_sequence * inv_bw,
                         sc.kv_write_bytes_per_token * inv_bw)
    ovh, moe, expm1 = sc.overhead_s, sc.expert_bytes_all > 0, math.expm1
    common = dict(step_cost=sc, max_batch=B, kv_cap=cap, chunk=chunk, closed_loop=closed_loop,
                  client_latency_s=lat if closed_loop else 0.0, window=window, seats=seats)
    if _compiled(loop, n):
        from chalk.analyses.traffic.simulate_compiled import run_compiled

        consts = (f_tok, f_ctx, f_seq, f_att, m_dense, m_exp, l1k, m_ctx, m_seq, m_w, ovh)
        # batch, chunk and seats past n (or 2^62) act as n would: clamped to fit the loop's 64-bit integers
        out = run_compiled(req.chunks(CHUNK_REQUESTS), n, min(B, n), cap,
                           None if chunk is None else min(chunk, 1 << 62), closed_loop,
                           None if seats is None else min(seats, n), lat, wa, wb, consts, moe, CHUNK_REQUESTS,
                           _check_chunk, None if keep else _Stream(lo, hi, window == "all", n), warm)
        return _continuous_result(lo, hi, n, common, **out)

    # requests are read CHUNK_REQUESTS at a time: global index i lives at i - base in the lists below; a run that
    # keeps no arrays folds each chunk into `stream` once all its requests have finished, and drops it
    source = req.chunks(CHUNK_REQUESTS)
    arr, P, O, need, cch = [], [], [], [], []
    snd = []  # each request's send on the client's clock (an arrival less the latency, or before its prefill pool)
    admit, first, finish = [], [], []
    left, sizes = deque(), deque()  # unfinished requests, and requests, per chunk held
    kept = []  # (arrival, P, O, cached) arrays of the chunks read, when keeping them
    stream = None if keep else _Stream(lo, hi, window == "all", n)
    base = loaded = 0
    cached_total = prompt_total = 0

    def load():
        nonlocal loaded
        a_, p_, o_, c_ = next(source)
        _check_chunk(p_, o_, cap)
        k = len(a_)
        al = a_.tolist()
        if closed_loop:  # the first `seats` requests are sent at t = 0, each later one when a seat frees
            al = [0.0 if loaded + j < seats else math.inf for j in range(k)]
        snd.extend([a - send_lag for a in al])
        if pool is not None:  # the first wave reaches the prefill pool at t = 0, in order
            pl = p_.tolist()
            al = [_prefilled(0.0, pl[j]) if loaded + j < seats else math.inf for j in range(k)]
        arr.extend(al)
        P.extend(p_.tolist())
        O.extend(o_.tolist())
        need.extend((p_ + o_).tolist())
        cch.extend(c_.tolist())
        admit.extend([0.0] * k)
        first.extend([0.0] * k)
        finish.extend([0.0] * k)
        left.append(k)
        sizes.append(k)
        if keep:
            kept.append((a_, p_, o_, c_))
        loaded += k

    def _prefilled(reach: float, p: float) -> float:
        """When a prompt of p tokens that reaches the prefill pool at `reach` is prefilled: FCFS on the earliest free
        server, which it holds p / rate (the pool's rate, prompts batched); it is done no sooner than a prompt alone
        takes (`fleet.replay`'s rule)."""
        free, mu, lone = pool
        start = reach if reach > free[0] else free[0]
        heapq.heapreplace(free, start + p / mu)
        return start + max(p / mu, p * lone)

    def fold():
        nonlocal base, held0
        left.popleft()
        k = sizes.popleft()
        held0 += k
        if stream is not None:
            ad = np.array(admit[:k])
            stream.fold(base, np.array(snd[:k]), ad, np.array(first[:k]), np.array(finish[:k]),
                        np.array(O[:k]))
            for lst in (arr, snd, P, O, need, cch, admit, first, finish):
                del lst[:k]
            base += k

    held0 = 0  # global index of the first request of the first chunk in `left`
    # a closed loop's request reaches the engine `lat` after its client sent it: latencies count from the send
    send_lag = lat if closed_loop else 0.0
    t, step, head, sent = 0.0, 0, 0, 0
    n_run = n_dec = 0
    sum_ctx = reserved = kv_used = peak_kv = 0
    busy = step_sum = area = dec_sum = pf_sum = 0.0
    n_done, tok_out, tok_in = 0, 0, 0
    snap_a = snap_b = None
    pf = deque()  # [request, prompt tokens cached so far], FCFS
    fin, fin_heap = {}, []  # finishing step -> requests; heap of those steps
    done_pf = []
    if closed_loop:
        sent = min(seats, n)
    while True:
        while True:  # admissions
            if head == loaded:
                if loaded >= n:
                    break
                load()
            j = head - base
            if not (arr[j] <= t and n_run < B and reserved + need[j] <= cap):
                break
            admit[j] = t
            reserved += need[j]
            n_run += 1
            c0 = cch[j]
            kv_used += c0
            cached_total += c0
            prompt_total += P[j]
            pf.append([head, c0])
            if head == wa or head == wb:
                s = (t, n_done, tok_out, tok_in, area, step, step_sum, busy, dec_sum, pf_sum)
                if head == wa:
                    snap_a = s
                if head == wb:
                    snap_b = s
                if stream is not None:
                    stream.ta, stream.tb = (snap_a and snap_a[0]), (snap_b and snap_b[0])
            head += 1
        if n_run == 0:
            if head >= n:
                break
            t = arr[head - base]  # idle: jump to the next arrival
            continue
        n_pf = prior = 0
        att = 0.0
        if pf:
            budget = chunk if chunk is not None else 1 << 62
            for e in pf:
                i, a = e
                c = P[i - base] - a
                if c > budget:
                    c = budget
                n_pf += c
                att += c * a + c * (c + 1) * 0.5
                prior += a
                e[1] = a + c
                budget -= c
                if e[1] == P[i - base]:
                    done_pf.append(i)
                if budget == 0:
                    break
        elif fin_heap and fin_heap[0] - step > 2:
            # pure decode until the next completion or admissible arrival: jump the steps in between
            kc = fin_heap[0] - step - 1
            w = m_dense + m_exp * -expm1(n_dec * l1k) if moe else m_dense
            run = _DecodeRun((f_tok + f_seq) * n_dec + f_ctx * sum_ctx + ovh, f_ctx * n_dec,
                             w + m_seq * n_dec + m_ctx * sum_ctx + ovh, m_ctx * n_dec)
            k = kc
            # (a closed loop's next request may not be sent yet: its arrival is infinite); time_s grows with k, so
            # the arrival cuts the run short only if the first kc - 1 steps reach it (kc >= 2)
            if head < loaded and n_run < B and reserved + need[head - base] <= cap and arr[head - base] < math.inf:
                x = arr[head - base] - t
                if run.time_s(kc - 1) >= x:
                    k = run.steps_to_reach(x)
            span = run.time_s(k)
            t += span
            step += k
            busy += span
            area += n_run * span
            step_sum += n_run * k
            dec_sum += n_dec * k
            sum_ctx += n_dec * k
            kv_used += n_dec * k
            if kv_used > peak_kv:
                peak_kv = kv_used
            continue
        tokens = n_dec + n_pf
        comp = f_tok * tokens + f_ctx * sum_ctx + f_seq * n_dec + f_att * att
        mem = m_dense + m_ctx * (sum_ctx + prior) + m_seq * n_dec + m_w * n_pf
        if moe:
            mem -= m_exp * expm1(tokens * l1k)
        dt = (comp if comp > mem else mem) + ovh
        if step == 0:  # a cold engine's first step (`warmup_s`)
            dt += warm
        t += dt
        step += 1
        busy += dt
        area += n_run * dt
        step_sum += n_run
        dec_sum += n_dec
        pf_sum += n_pf
        kv_used += tokens
        if kv_used > peak_kv:
            peak_kv = kv_used
        sum_ctx += n_dec
        ended = None
        if done_pf:
            for i in done_pf:
                pf.popleft()
                j = i - base
                first[j] = t
                if O[j] == 1:
                    if ended is None:
                        ended = []
                    ended.append(i)
                    kv_used -= P[j]  # one token out, no decode step: its prompt's KV leaves
                    n_run -= 1
                    reserved -= need[j]
                else:
                    n_dec += 1
                    sum_ctx += P[j]
                    f = step + O[j] - 1
                    lst = fin.get(f)
                    if lst is None:
                        fin[f] = [i]
                        heapq.heappush(fin_heap, f)
                    else:
                        lst.append(i)
            done_pf.clear()
        if fin_heap and fin_heap[0] == step:
            heapq.heappop(fin_heap)
            ending = fin.pop(step)
            for i in ending:
                j = i - base
                c = need[j] - 1
                n_dec -= 1
                sum_ctx -= c
                kv_used -= c
                n_run -= 1
                reserved -= need[j]
            ended = ending if ended is None else ended + ending
        if ended is not None:
            for i in ended:
                j = i - base
                finish[j] = t
                n_done += 1
                tok_out += O[j]
                tok_in += P[j]
                if closed_loop and sent < n:  # the freed seat sends the next request `lat` later
                    if sent == loaded:
                        load()
                    reach = t + lat
                    arr[sent - base] = reach if pool is None else _prefilled(reach, P[sent - base])
                    snd[sent - base] = reach - send_lag
                    sent += 1
                left[(i - held0) // CHUNK_REQUESTS] -= 1
            while left and left[0] == 0:
                fold()
    while left and left[0] == 0:
        fold()

    send = np.array(snd) if keep else None
    return _continuous_result(lo, hi, n, common, snap_a=snap_a, snap_b=snap_b, cached_total=cached_total,
                              prompt_total=prompt_total, step=step, busy=busy, step_sum=step_sum, area=area,
                              dec_sum=dec_sum, pf_sum=pf_sum, n_done=n_done, tok_out=tok_out, tok_in=tok_in,
                              peak_kv=peak_kv, kept=kept, admit=admit, first=first, finish=finish, send=send,
                              stream=stream)


def _check_chunk(p_, o_, cap):
    if int((p_ + o_).max()) > cap:
        j = int(np.argmax(p_ + o_))
        raise InputError(f"a request needs {int(p_[j] + o_[j])} KV tokens but the capacity is {cap:.0f}; "
                         "raise it (kv_capacity_tokens, --kv-capacity-tokens), give the replica more GPUs, or "
                         "shorten the request")


#: Shortest run `simulate_continuous(loop='auto')` hands to the compiled loop when numba is installed: below it,
#: importing numba and loading the compiled loop (~0.5 s) costs more than the Python loop would take.
COMPILED_MIN_REQUESTS = 200_000


def _compiled(loop: str, n: int) -> bool:
    if loop not in ("auto", "python", "compiled"):
        raise InputError(f"loop must be 'auto', 'python' or 'compiled', got {loop!r}")
    if loop == "python" or (loop == "auto" and n < COMPILED_MIN_REQUESTS):
        return False
    try:
        import chalk.analyses.traffic.simulate_compiled  # noqa: F401  (imports numba; compiles on first call, or loads)
    except (ImportError, RuntimeError, OSError) as e:  # numba absent, or it cannot load here
        if loop == "compiled":
            raise InputError(f"loop='compiled' needs numba: pip install 'chalk[fast]' ({e})") from None
        return False
    return True


def loop_for(total_requests: int) -> str:
    """`simulate_continuous`'s `loop` for a caller about to replay `total_requests` in all over several runs (a
    search bisecting for a rate): past COMPILED_MIN_REQUESTS in all, the compiled loop where numba loads (its load
    is paid once for every run), else 'auto' (each run decides alone)."""
    return "compiled" if total_requests >= COMPILED_MIN_REQUESTS and _compiled("auto", COMPILED_MIN_REQUESTS) \
        else "auto"


def _continuous_result(lo, hi, n, common, *, snap_a, snap_b, cached_total, prompt_total, step, busy, step_sum, area,
                       dec_sum, pf_sum, n_done, tok_out, tok_in, peak_kv, kept, admit, first, finish, send, stream):
    """The result of a continuous-batching run from its loop's totals (either loop)."""
    rates = None
    if snap_a is not None and snap_b is not None and snap_b[0] > snap_a[0]:
        rates = {"start_s": snap_a[0], "end_s": snap_b[0], "completed": snap_b[1] - snap_a[1],
                 "out_tokens": snap_b[2] - snap_a[2], "in_tokens": snap_b[3] - snap_a[3], "area": snap_b[4] - snap_a[4],
                 "steps": snap_b[5] - snap_a[5], "step_sum": snap_b[6] - snap_a[6], "busy": snap_b[7] - snap_a[7],
                 "dec_sum": snap_b[8] - snap_a[8], "pf_sum": snap_b[9] - snap_a[9]}
    hit = cached_total / prompt_total if prompt_total else None
    if stream is None:
        held = Requests(*(np.concatenate([c[k] for c in kept]) for k in range(3)),
                        np.concatenate([c[3] for c in kept]))
        res = _result("continuous", held, np.asarray(admit, dtype=float), np.asarray(first, dtype=float),
                      np.asarray(finish, dtype=float), n_steps=step, busy=busy, step_sum=step_sum, peak_kv=peak_kv,
                      rates=rates, send=send, dec_sum=dec_sum, pf_sum=pf_sum, **common)
        res = dataclasses.replace(res, prefix_hit_rate=hit)
    else:
        res = _stream_result(stream, lo, hi, n, rates, step=step, busy=busy, step_sum=step_sum, area=area,
                             dec_sum=dec_sum, pf_sum=pf_sum, n_done=n_done, tok_out=tok_out, tok_in=tok_in,
                             peak_kv=peak_kv, hit=hit, **common)
    return _closed_loop_rates(res) if common["closed_loop"] and common["window"] == "steady" else res


def _closed_loop_rates(res: SimulationResult) -> SimulationResult:
    """A closed loop's steady-state rates by Little's law: every seat holds one request from its send to its finish,
    so requests/s = seats / the window's mean time in system (client clock), and tokens/s that times the window's
    tokens per request. Counting the requests admitted between the window's first and last admission instead
    overstated the rate where the seats still ran in waves (DeepSeek-V3 on a GB200 NVL72 at 4,096 in flight, 200 in /
    2,000 out: 142k output tokens/s, where 4,096 seats over 72.3 s per request allow 113k; a 400,000-request run of
    the same deployment: 113k)."""
    e2e = res.mean_e2e_s
    if not (res.closed_loop_concurrency and e2e and math.isfinite(e2e) and e2e > 0 and res.requests_per_s > 0):
        return res
    f = res.closed_loop_concurrency / e2e / res.requests_per_s
    w = dict(res.latency_window or {})
    if w:
        w["basis"] = ("percentiles over the requests sent in [first, last]; rates by Little's law: the seats over "
                      "those requests' mean time in system, as tokens per request of the window")
    return dataclasses.replace(res, requests_per_s=res.requests_per_s * f,
                               output_tokens_per_s=res.output_tokens_per_s * f,
                               input_tokens_per_s=res.input_tokens_per_s * f, latency_window=w or None)


def _stream_result(stream: _Stream, lo, hi, n, rates, *, step, busy, step_sum, area, dec_sum, pf_sum, n_done, tok_out, tok_in,
                   peak_kv, hit, step_cost, max_batch, kv_cap, chunk, closed_loop, client_latency_s, window,
                   seats) -> SimulationResult:
    span = stream.last_finish - stream.first_arrival
    span = span if span > 0 else float("nan")
    if rates is None:
        rates = {"start_s": stream.first_arrival, "end_s": stream.first_arrival + span, "completed": n_done,
                 "out_tokens": tok_out, "in_tokens": tok_in, "area": area, "busy": busy, "steps": step,
                 "step_sum": step_sum, "dec_sum": dec_sum, "pf_sum": pf_sum}
    rates = {**rates, "wait_area": stream.wait_area}
    h = stream.h
    q = {k: tuple(x.quantile(p) for p in (0.5, 0.9, 0.99)) for k, x in h.items()}
    return SimulationResult(
        scheduler="continuous", step_cost=step_cost.label, max_batch=max_batch, period_s=None,
        kv_capacity_tokens=kv_cap, prefill_chunk_tokens=chunk, arrival_s=None, queue_s=None, ttft_s=None,
        tpot_s=None, e2e_s=None, n_requests=n, ttft_p50_s=q["ttft"][0], ttft_p90_s=q["ttft"][1],
        ttft_p99_s=q["ttft"][2], tpot_p50_s=q["tpot"][0], tpot_p90_s=q["tpot"][1], tpot_p99_s=q["tpot"][2],
        e2e_p50_s=q["e2e"][0], e2e_p90_s=q["e2e"][1], e2e_p99_s=q["e2e"][2], mean_ttft_s=h["ttft"].mean,
        mean_tpot_s=h["tpot"].mean, mean_e2e_s=h["e2e"].mean, n_steps=int(step), busy_time_s=float(busy),
        simulated_time_s=span, peak_kv_tokens=float(peak_kv), closed_loop_concurrency=seats if closed_loop else None,
        latency_window=_window_dict(lo, hi, n, window, rates), prefix_hit_rate=hit, stream_waits=_stream_waits(stream),
        **_rate_fields(rates))


def _stream_waits(stream: _Stream) -> dict | None:
    """A streamed run's median waits of its first and last fifth of requests and its arrival edges (`overload`)."""
    s, (w0, w1) = stream.sends, stream.waits
    if not (w0.count and w1.count) or 0 not in s or stream.n - 1 not in s:
        return None
    out = {"median_wait_first_fifth_s": w0.quantile(0.5), "median_wait_last_fifth_s": w1.quantile(0.5),
           "arrival_window_s": s[stream.n - 1] - s[0], "offered_requests_per_s": None}
    lo, hi = stream.lo, stream.hi - 1
    if lo in s and hi in s and hi > lo and s[hi] > s[lo]:
        out["offered_requests_per_s"] = (hi - lo) / (s[hi] - s[lo])
    elif out["arrival_window_s"] > 0:
        out["offered_requests_per_s"] = (stream.n - 1) / out["arrival_window_s"]
    return out


#: Spread of a length given only as a mean in a closed-loop replay: uniform over [8/9, 10/9] of the mean, the spread
#: of serving benchmarks' `--random-range-ratio 0.8` (lengths uniform in [0.8 L, L], mean 0.9 L).
MEAN_LENGTH_SPREAD = (8 / 9, 10 / 9)


def _draw_lengths(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` lengths for a replay: a mean (uniform over MEAN_LENGTH_SPREAD of it) or a
    `chalk.specs.lengths.LengthDistribution` (sampled)."""
    if hasattr(spec, "sample"):
        return spec.sample(n, rng)
    m = float(positive("length", spec, scalar=True))
    # uniform over the spread, each draw rounded down or up with the odds that keep its expectation (so the lengths'
    # mean is the mean asked for: whole numbers between floor and round of the ends fell ~0.5 token short, a quarter
    # of the output at --output-len 2; QA 2026-11-28); at least one token: the spread narrows to stay at or above one
    # token, so none is clipped up (--output-len 1 drew 1.03 tokens per request on average; QA 2026-11-28)
    lo, hi = m * MEAN_LENGTH_SPREAD[0], m * MEAN_LENGTH_SPREAD[1]
    half = max(min((hi - lo) / 2.0, m - 1.0), 0.0)
    x = rng.uniform(m - half, m + half, n)
    return np.maximum(np.floor(x + rng.random(n)), 1).astype(np.int64)


def closed_loop_requests(concurrency: int, n: int, input_len, output_len, seed: int = 0) -> Requests:
    """A benchmark client's queue for `simulate_continuous(..., closed_loop=True)`: `n` requests at t = 0 (the
    client keeps `concurrency` of them in flight). A length is a mean (uniform over MEAN_LENGTH_SPREAD of it) or a
    `chalk.specs.lengths.LengthDistribution` (sampled)."""
    positive("concurrency", concurrency, integer=True)
    n = int(positive("requests", n, integer=True, maximum=MAX_REQUESTS, scalar=True))
    rng = np.random.default_rng(seed)
    return Requests.from_arrays(np.zeros(n), _draw_lengths(input_len, n, rng), _draw_lengths(output_len, n, rng))


def on_client_clock(result: SimulationResult, latency_s: float) -> SimulationResult:
    """An open loop's `result` as its benchmark client measures it: `latency_s` spent outside the engine's steps
    (HTTP, tokenisation: in an open loop it holds no seat) added to every request's TTFT and end-to-end time. A
    constant added to every request moves each percentile and mean by it; TPOT and the rates are unchanged."""
    lat = float(positive("latency_s", latency_s, allow_zero=True, scalar=True))
    if lat == 0.0:
        return result
    moved = {k: getattr(result, k) + lat for k in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "e2e_p50_s",
                                                    "e2e_p90_s", "e2e_p99_s", "mean_ttft_s", "mean_e2e_s")}
    # each request is in flight `lat` longer: requests_per_s x lat more on average (Little's law for a fixed delay)
    moved["mean_in_flight"] = result.mean_in_flight + result.requests_per_s * lat
    moved.update({k: getattr(result, k) + lat for k in ("ttft_s", "e2e_s") if getattr(result, k) is not None})
    w = result.latency_window
    if w and w.get("kind") == "all" and math.isfinite(w.get("end_s", math.nan) - w.get("start_s", math.nan)):
        # a run measured whole spans the client's clock, from the first send (`lat` before the engine saw it) to the
        # last finish: its rates and time averages are over that longer span (one request of a 1-request trace was
        # 1.09 in flight on average over the engine's span alone; QA 2026-11-28)
        span = w["end_s"] - w["start_s"]
        f = span / (span + lat) if span > 0 else 1.0
        for k in ("requests_per_s", "output_tokens_per_s", "input_tokens_per_s", "mean_concurrency", "utilisation"):
            moved[k] = getattr(result, k) * f
        moved["mean_in_flight"] *= f
        moved["latency_window"] = {**w, "start_s": w["start_s"] - lat}
    return dataclasses.replace(result, **moved)


def poisson_requests(rate_per_s: float, n: int, input_len, output_len, seed: int = 0) -> Requests:
    """`n` requests arriving as a Poisson process at `rate_per_s` (what a server benchmark such as MLPerf's Server
    scenario, or production traffic, sends), with lengths drawn as `closed_loop_requests` draws them (a mean or a
    length distribution), so an open-loop replay and a closed-loop one of the same deployment see the same prompts."""
    return poisson_arrivals(rate_per_s, n, length_sampler(input_len), length_sampler(output_len), seed)


def length_sampler(spec):
    """`f(rng, k)` drawing `k` lengths as every replay draws them (a mean spread uniformly over MEAN_LENGTH_SPREAD
    of it, or a length distribution sampled): the length argument of `poisson_arrivals` and `PoissonStream`."""
    return lambda rng, k: _draw_lengths(spec, k, rng)

