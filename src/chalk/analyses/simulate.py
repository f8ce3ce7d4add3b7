"""Event-driven simulation of requests served by one replica: the lecture's train and continuous batching.

Every step's duration comes from `StepCost` (chalk.analyses.step_cost), a linearised roofline (max(compute, weight + KV read)
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

Measured on the 2-core dev machine (`benchmarks/bench_simulate.py`; llama-3.1-8b on 8 x H100,
1M Poisson requests, prompt 512, output 128): continuous, max batch 256, 600 req/s (96 % of the
625 req/s it sustains in overload): 2.2 s (~450K req/s); with 512-token prefill chunks 2.1-2.3 s;
in overload 0.7 s; at 20 req/s (67M decode steps, mostly jumped) 5-6 s. Train, T = 20 ms, 2048
seats, 200 req/s: 0.15 s (equal outputs), 0.4-0.5 s (outputs 64-192, heap).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, fields

import numpy as np

from chalk.errors import InputError, SpecError
from chalk.analyses.step_cost import StepCost  # noqa: F401  (re-exported: part of simulate's API)
from chalk.specs.workload import positive

#: Most requests one simulation takes: about 250 bytes and 10 us of stepping each (1e6: ~10 s, ~250 MB).
MAX_REQUESTS = 1_000_000
#: Latest arrival time: at 1e9 s float64 still resolves 1e-7 s, so a step of microseconds advances the clock.
MAX_ARRIVAL_S = 1e9


# ----------------------------------------------------------------------------------------- requests
@dataclass(frozen=True, eq=False)
class Requests:
    """Requests sorted by arrival: arrival time (s), prompt and output lengths (tokens)."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    @classmethod
    def from_arrays(cls, arrival_s, input_len, output_len) -> Requests:
        """Validated, stably sorted by arrival; scalar lengths broadcast to every request."""
        a = np.atleast_1d(np.asarray(arrival_s, dtype=float))
        if a.ndim != 1 or a.size == 0:
            raise InputError("arrival_s must be a non-empty 1-D array")
        if a.size > MAX_REQUESTS:
            raise InputError(f"at most {MAX_REQUESTS:,} requests per simulation, got {a.size:,}")
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
        return cls(a[order], lens[0][order], lens[1][order])

    def __len__(self) -> int:
        return int(self.arrival_s.size)


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


_TRACE_COLUMNS = ("arrival_s", "input_len", "output_len")


def load_trace(path) -> Requests:
    """Requests from a CSV with header `arrival_s,input_len,output_len` (extra columns ignored)."""
    import csv

    where = str(path)
    try:
        with open(path, newline="") as f:
            rows = [(n, row) for n, row in _csv_rows(csv.reader(f, skipinitialspace=True))]
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file") from None
    except (csv.Error, UnicodeDecodeError, OSError) as e:
        raise SpecError(f"{where}: malformed CSV ({e.__class__.__name__})") from None
    if not rows:
        raise SpecError(f"{where}: empty trace (expected header {','.join(_TRACE_COLUMNS)})")
    header = [str(c).strip() for c in rows[0][1]]
    missing = [c for c in _TRACE_COLUMNS if c not in header]
    if missing:
        raise SpecError(f"{where}: missing column(s) {', '.join(missing)}; "
                        f"expected header {','.join(_TRACE_COLUMNS)}")
    data = rows[1:]
    if not data:
        raise SpecError(f"{where}: no requests after the header")
    for line, row in data:
        if len(row) > len(header):
            raise SpecError(f"{where}: malformed CSV (line {line}: expected {len(header)} fields, saw {len(row)})")
    out = []
    for col in _TRACE_COLUMNS:
        j = header.index(col)
        raw = [row[j].strip() if j < len(row) else "" for _, row in data]
        x = np.array([_number(v) for v in raw], dtype=float)
        bad = ~np.isfinite(x)
        if col == "arrival_s":
            bad |= x < 0
            want = "a finite time >= 0"
        else:
            bad |= (x <= 0) | (x != np.floor(x))
            want = "a positive integer"
        if bad.any():
            i = int(np.argmax(bad))
            raise SpecError(f"{where}: line {data[i][0]}: {col} must be {want}, got {raw[i]!r}")
        out.append(x)
    return Requests.from_arrays(*out)


def _csv_rows(reader):
    """(file line number, fields) of each non-blank CSV row."""
    for row in reader:
        if any(c.strip() for c in row):
            yield reader.line_num, row


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


# ----------------------------------------------------------------------------------------- results
@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Per-request latencies (arrival order) and their summary. Times in s, rates per s."""

    scheduler: str
    step_cost: str
    max_batch: int
    period_s: float | None
    kv_capacity_tokens: float | None
    prefill_chunk_tokens: int | None
    arrival_s: np.ndarray
    queue_s: np.ndarray  # arrival -> admitted to the batch (boards a train)
    ttft_s: np.ndarray  # arrival -> first output token
    tpot_s: np.ndarray  # mean time per output token after the first (NaN for 1-token outputs)
    e2e_s: np.ndarray  # arrival -> last output token
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
    mean_e2e_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    requests_per_s: float
    mean_batch: float  # sequences held per step, averaged over steps
    mean_concurrency: float  # sequences held, averaged over the simulated time
    utilisation: float  # busy fraction of the simulated time
    n_steps: int
    busy_time_s: float
    simulated_time_s: float  # first arrival -> last completion
    peak_kv_tokens: float

    _ARRAYS = ("arrival_s", "queue_s", "ttft_s", "tpot_s", "e2e_s")

    def summary(self) -> dict:
        """Scalar fields only."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in self._ARRAYS}

    def to_dict(self, per_request: bool = False) -> dict:
        """JSON-ready summary; with `per_request`, the latency arrays as lists (NaN -> None)."""
        d = self.summary()
        if per_request:
            d.update({k: [_plain(v) for v in getattr(self, k).tolist()] for k in self._ARRAYS})
        return d

    def to_frame(self):
        """One row per request (arrival, queue, TTFT, TPOT, end-to-end, in s) as a pandas DataFrame, the summary in
        `.attrs`; pandas is an optional extra."""
        from chalk.analyses.results import _frame

        df = _frame({k: getattr(self, k) for k in self._ARRAYS})
        df.attrs.update(self.summary())
        return df


def _plain(v):
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v.item() if isinstance(v, np.generic) else v


def _result(scheduler, req: Requests, admit, first, finish, *, n_steps, busy, step_sum, peak_kv,
            step_cost: StepCost, max_batch, period_s=None, kv_cap=None, chunk=None,
            closed_loop: bool = False, client_latency_s: float = 0.0) -> SimulationResult:
    # a closed-loop client sends a request when one of its seats frees: latencies count from that send, the
    # client latency before the engine's admission
    a, out = (admit - client_latency_s if closed_loop else req.arrival_s), req.output_len
    queue, ttft, e2e = admit - a, first - a, finish - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    span = float(finish.max() - a[0])
    span = span if span > 0 else float("nan")

    def pct(x):
        x = x[np.isfinite(x)]
        return tuple(float(v) for v in np.percentile(x, (50, 90, 99))) if x.size else (math.nan,) * 3

    t50, t90, t99 = pct(ttft)
    p50, p90, p99 = pct(tpot)
    e50, e90, e99 = pct(e2e)
    return SimulationResult(
        scheduler=scheduler, step_cost=step_cost.label, max_batch=max_batch, period_s=period_s,
        kv_capacity_tokens=kv_cap, prefill_chunk_tokens=chunk, arrival_s=a, queue_s=queue, ttft_s=ttft,
        tpot_s=tpot, e2e_s=e2e, n_requests=len(req), ttft_p50_s=t50, ttft_p90_s=t90, ttft_p99_s=t99,
        tpot_p50_s=p50, tpot_p90_s=p90, tpot_p99_s=p99, e2e_p50_s=e50, e2e_p90_s=e90, e2e_p99_s=e99,
        mean_ttft_s=float(ttft.mean()), mean_e2e_s=float(e2e.mean()),
        output_tokens_per_s=float(out.sum()) / span, input_tokens_per_s=float(req.input_len.sum()) / span,
        requests_per_s=len(req) / span, mean_batch=step_sum / n_steps if n_steps else math.nan,
        mean_concurrency=float((finish - admit).sum()) / span, utilisation=busy / span, n_steps=int(n_steps),
        busy_time_s=float(busy), simulated_time_s=span, peak_kv_tokens=float(peak_kv))


def overload(result: SimulationResult) -> dict | None:
    """Whether arrivals outran the replica: the queue grows through the run instead of settling.

    Overloaded when the median wait of the last fifth of arrivals exceeds 3x that of the first fifth and 5% of the
    arrival window (a stable queue's wait does not grow with the run's length). Returns the offered and served
    request rates and both waits, or None when the queue settled.
    """
    a, q = result.arrival_s, result.queue_s
    n = a.size
    window = float(a[-1] - a[0]) if n > 1 else 0.0
    if n < 20 or window <= 0:
        return None
    k = max(n // 5, 1)
    q_first, q_last = float(np.median(q[:k])), float(np.median(q[-k:]))
    if not (q_last > 3 * q_first and q_last > 0.05 * window):
        return None
    return {"offered_requests_per_s": (n - 1) / window, "served_requests_per_s": result.requests_per_s,
            "median_wait_first_fifth_s": q_first, "median_wait_last_fifth_s": q_last, "arrival_window_s": window}


def _check_requests(requests) -> Requests:
    if not isinstance(requests, Requests):
        raise InputError(f"requests must be a Requests (poisson_arrivals, load_trace), got {type(requests).__name__}")
    return requests


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


def simulate_continuous(requests: Requests, step_cost: StepCost, max_batch: int,
                        kv_capacity_tokens: float | None = None,
                        prefill_chunk_tokens: int | None = None, closed_loop: bool = False,
                        client_latency_s: float = 0.0) -> SimulationResult:
    """Continuous batching (Orca/vLLM) with optional chunked prefill (Sarathi-Serve).

    At each step start, waiting requests are admitted FCFS while fewer than `max_batch` run and
    their whole KV (prompt + output tokens) fits in what is left of `kv_capacity_tokens` (None: the
    step cost's HBM-derived capacity; math.inf: unlimited); the head of the queue blocks the rest.
    Admitted prompts are prefilled FCFS, at most `prefill_chunk_tokens` prompt tokens per step (None:
    whole prompts in their admission step), in the same step as one decode token for every running
    sequence. The step that ends a prompt's prefill yields its first token (TTFT); the request leaves
    at the end of the step yielding its `output_len`-th token, freeing its slot and KV.
    `closed_loop`: the requests are a benchmark client's queue (all at t = 0, `max_batch` seats = its concurrency),
    so each request is sent when a seat frees and its TTFT and end-to-end time count from that send.
    `client_latency_s` (closed loop only): time a seat spends outside the engine's steps between one request's
    last token and the next one reaching the scheduler (HTTP, tokenisation, detokenisation, the client's own
    turn-around): the seat is held but nothing decodes, so fewer than `max_batch` run. Latencies count on the
    client's clock: TTFT and end-to-end time include it (as `fixed_deployment` adds `request_latency_s` to TTFT).
    """
    req = _check_requests(requests)
    B = positive("max_batch", max_batch, integer=True)
    cap = step_cost.kv_capacity_tokens if kv_capacity_tokens is None else _capacity(kv_capacity_tokens)
    chunk = None if prefill_chunk_tokens is None else positive("prefill_chunk_tokens", prefill_chunk_tokens,
                                                               integer=True)
    n = len(req)
    arr, P, O = req.arrival_s.tolist(), req.input_len.tolist(), req.output_len.tolist()
    lat = float(positive("client_latency_s", client_latency_s, allow_zero=True, scalar=True))
    relay = closed_loop and lat > 0  # the k-th request to finish hands its seat to request B + k, `lat` later
    if relay:
        arr[B:] = [math.inf] * max(n - B, 0)
    sent = min(B, n)
    need = (req.input_len + req.output_len).tolist()
    worst = max(need)
    if cap <= 0:
        raise InputError(f"no HBM is left for the KV cache ({step_cost.label}); use more chips or lower precision")
    if worst > cap:
        raise InputError(f"a request needs {worst} KV tokens but the capacity is {cap:.0f}; "
                         "raise kv_capacity_tokens or shorten the request")
    sc = step_cost
    inv_pk, inv_bw = 1.0 / sc.peak_flops_per_s, 1.0 / sc.bandwidth_bytes_per_s
    f_tok, f_ctx, f_seq, f_att = (sc.flops_per_token * inv_pk, sc.attn_flops_per_context_token * inv_pk,
                                  sc.attn_flops_per_sequence * inv_pk, sc.prefill_attn_flops_per_pair * inv_pk)
    m_dense, m_exp, l1k = sc.weight_dense_bytes * inv_bw, sc.expert_bytes_all * inv_bw, sc.log1m_expert_fraction
    m_ctx, m_seq, m_w = (sc.kv_read_bytes_per_context_token * inv_bw, sc.kv_read_bytes_per_sequence * inv_bw,
                         sc.kv_write_bytes_per_token * inv_bw)
    ovh, moe, expm1 = sc.overhead_s, sc.expert_bytes_all > 0, math.expm1

    admit, first, finish = [0.0] * n, [0.0] * n, [0.0] * n
    t, step, head = 0.0, 0, 0
    n_run = n_dec = 0
    sum_ctx = reserved = kv_used = peak_kv = 0
    busy = step_sum = 0.0
    pf = deque()  # [request, prompt tokens cached so far], FCFS
    fin, fin_heap = {}, []  # finishing step -> requests; heap of those steps
    done_pf = []
    while True:
        while head < n and arr[head] <= t and n_run < B and reserved + need[head] <= cap:
            admit[head] = t
            reserved += need[head]
            n_run += 1
            pf.append([head, 0])
            head += 1
        if n_run == 0:
            if head >= n:
                break
            t = arr[head]  # idle: jump to the next arrival
            continue
        n_pf = prior = 0
        att = 0.0
        if pf:
            budget = chunk if chunk is not None else 1 << 62
            for e in pf:
                i, a = e
                c = P[i] - a
                if c > budget:
                    c = budget
                n_pf += c
                att += c * a + c * (c + 1) * 0.5
                prior += a
                e[1] = a + c
                budget -= c
                if e[1] == P[i]:
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
            if head < n and n_run < B and reserved + need[head] <= cap:
                k = min(kc, run.steps_to_reach(arr[head] - t))
            span = run.time_s(k)
            t += span
            step += k
            busy += span
            step_sum += n_run * k
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
        t += dt
        step += 1
        busy += dt
        step_sum += n_run
        kv_used += tokens
        if kv_used > peak_kv:
            peak_kv = kv_used
        sum_ctx += n_dec
        if done_pf:
            for i in done_pf:
                pf.popleft()
                first[i] = t
                if O[i] == 1:
                    finish[i] = t
                    if relay and sent < n:
                        arr[sent] = t + lat
                        sent += 1
                    n_run -= 1
                    reserved -= need[i]
                    kv_used -= P[i]
                else:
                    n_dec += 1
                    sum_ctx += P[i]
                    f = step + O[i] - 1
                    lst = fin.get(f)
                    if lst is None:
                        fin[f] = [i]
                        heapq.heappush(fin_heap, f)
                    else:
                        lst.append(i)
            done_pf.clear()
        if fin_heap and fin_heap[0] == step:
            heapq.heappop(fin_heap)
            for i in fin.pop(step):
                finish[i] = t
                if relay and sent < n:
                    arr[sent] = t + lat
                    sent += 1
                c = need[i] - 1
                n_dec -= 1
                sum_ctx -= c
                kv_used -= c
                n_run -= 1
                reserved -= need[i]
    return _result("continuous", req, np.array(admit), np.array(first), np.array(finish), n_steps=step,
                   busy=busy, step_sum=step_sum, peak_kv=peak_kv, step_cost=sc, max_batch=B,
                   kv_cap=cap, chunk=chunk, closed_loop=closed_loop, client_latency_s=lat if closed_loop else 0.0)


#: Spread of a length given only as a mean in a closed-loop replay: uniform over [8/9, 10/9] of the mean, the spread
#: of serving benchmarks' `--random-range-ratio 0.8` (lengths uniform in [0.8 L, L], mean 0.9 L).
MEAN_LENGTH_SPREAD = (8 / 9, 10 / 9)


def closed_loop_requests(concurrency: int, n: int, input_len, output_len, seed: int = 0) -> Requests:
    """A benchmark client's queue for `simulate_continuous(..., closed_loop=True)`: `n` requests at t = 0 (the
    client keeps `concurrency` of them in flight). A length is a mean (uniform over MEAN_LENGTH_SPREAD of it) or a
    `chalk.specs.lengths.LengthDistribution` (sampled)."""
    positive("concurrency", concurrency, integer=True)
    n = int(positive("requests", n, integer=True, maximum=MAX_REQUESTS, scalar=True))
    rng = np.random.default_rng(seed)

    def draw(spec):
        if hasattr(spec, "sample"):
            return spec.sample(n, rng)
        m = float(positive("length", spec, scalar=True))
        lo, hi = max(int(m * MEAN_LENGTH_SPREAD[0]), 1), max(int(round(m * MEAN_LENGTH_SPREAD[1])), 1)
        return rng.integers(lo, hi + 1, n)

    return Requests.from_arrays(np.zeros(n), draw(input_len), draw(output_len))

