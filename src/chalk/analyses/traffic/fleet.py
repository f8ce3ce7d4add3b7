"""Replaying a fleet: Poisson arrivals over R replicas behind a least-loaded router, each replica a
continuous-batching simulation (`simulate.simulate_continuous`) with step times from the step model.

Route first, then simulate. The router sees what a real one sees at arrival time: the requests it has sent
each replica that have not finished yet, finishing times estimated from the plan's predicted TTFT and TPOT;
it sends each request to the replica holding the fewest (join-the-shortest-queue, vLLM router's and Envoy's
"least request"). Routing is one tight loop (a heap of estimated departures and count buckets, O(1) per
request); the replicas are then independent and are simulated one by one, or in worker processes when the
replay is large.

Disaggregated: prompts go to the prefill pool first, an FCFS pool of `prefill_servers` replicas each draining
prompt tokens at its prefill rate (a prompt goes to the replica free first: M/G/c); a lone prompt takes at
least the pool's one-prompt TTFT. The prompt's KV then joins a decode replica, routed as above, whose steps
cost pure decode (prompt tokens are free there: the prefill pool computed them).

Measured on the 2-core dev machine (`benchmarks/bench_plan.py`): 1e6 requests of llama-3.1-70b on 24 x TP8
H100 replicas (2000 in / 500 out, ~42 in flight each) replay in 5.4-5.8 s with two worker processes
(routing ~1 s of it).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from chalk.analyses.traffic.simulate import (MAX_REQUESTS, Requests, StepCost, poisson_requests,
                                             simulate_continuous, steady_window, wait_growth)
from chalk.errors import InputError
from chalk.specs.workload import positive

#: Prefill pool utilisation ceiling (disaggregated): keeps the prompt queue short. `plan` sizes its prefill pools
#: under it and `throughput`'s p99 replays serve no rate above it (a pool near 100% has no steady-state queue: its
#: TTFT in a replay grows with the replay's length).
PREFILL_MAX_UTILISATION = 0.8
#: Replays of at least this many requests use worker processes (one per core, at most 8).
PARALLEL_MIN_REQUESTS = 200_000


@dataclass(frozen=True)
class FleetReplay:
    """What the simulator measured over the fleet: latency percentiles over the steady-state window (the
    requests arriving after the warm-up and before the last 5% of arrivals), throughput and the run's size."""

    n_requests: int
    n_measured: int
    replicas: int
    replicas_simulated: int
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    e2e_p99_s: float
    mean_in_flight_per_replica: float
    max_in_flight_per_replica: float
    output_tokens_per_s_per_replica: float
    requests_clipped: int
    wall_s: float
    mean_batch: float = 0.0  # sequences per step on a replica, averaged over the simulated replicas
    mean_ttft_s: float = math.nan  # over the window, as the percentiles
    mean_tpot_s: float = math.nan
    latency_window: dict | None = None  # which requests the figures are over (as `SimulationResult`'s)
    # where the wait for the first token grows through the replay (`simulate.wait_growth`: arrivals outran the
    # prefill pool or the replicas): the median waits of the first and last fifth of arrivals; None when it settled
    overload: dict | None = None

    def to_dict(self) -> dict:
        return {f.name: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}


# --------------------------------------------------------------------------------------------- routing
def route_least_loaded(arrival_s, est_finish_s, replicas: int) -> np.ndarray:
    """Replica of each request (arrival order): the one holding the fewest unfinished requests at its arrival,
    a request counting until its estimated finish time. Ties go to any of the least-loaded replicas."""
    R = int(replicas)
    a = np.asarray(arrival_s, dtype=float).tolist()
    f = np.asarray(est_finish_s, dtype=float).tolist()
    out = [0] * len(a)
    if R == 1:
        return np.zeros(len(a), dtype=np.int64)
    cnt = [0] * R
    buckets = [set(range(R))]  # buckets[c]: replicas holding c requests
    lo = 0
    dep: list = []  # (estimated finish, replica)
    push, pop = heapq.heappush, heapq.heappop
    for i, t in enumerate(a):
        while dep and dep[0][0] <= t:
            r = pop(dep)[1]
            c = cnt[r]
            buckets[c].discard(r)
            buckets[c - 1].add(r)
            cnt[r] = c - 1
            if c - 1 < lo:
                lo = c - 1
        while not buckets[lo]:
            lo += 1
        r = buckets[lo].pop()
        c = lo + 1
        if c == len(buckets):
            buckets.append(set())
        buckets[c].add(r)
        cnt[r] = c
        out[i] = r
        push(dep, (f[i], r))
    return np.asarray(out, dtype=np.int64)


def route_earliest_free(arrival_s, service_s, servers: int) -> np.ndarray:
    """FCFS over `servers` identical servers, each request to the server free first: start time of each
    (arrival order). Returns the start times (the wait is start - arrival)."""
    a = np.asarray(arrival_s, dtype=float).tolist()
    s = np.asarray(service_s, dtype=float).tolist()
    free = [0.0] * int(servers)
    start = [0.0] * len(a)
    rep = heapq.heapreplace
    for i, t in enumerate(a):
        b = free[0] if free[0] > t else t
        rep(free, b + s[i])
        start[i] = b
    return np.asarray(start)


# --------------------------------------------------------------------------------------------- requests
def _clip(P, O, cap):
    """Lengths trimmed so that one request's KV (prompt + output) fits the replica: (P, O, how many trimmed)."""
    if not math.isfinite(cap):
        return P, O, 0
    cap = int(cap)
    over = P + O > cap
    if not over.any():
        return P, O, 0
    O = np.where(over, np.minimum(O, max(cap // 4, 1)), O)
    P = np.where(P + O > cap, np.maximum(cap - O, 1), P)
    return P, O, int(over.sum())


# --------------------------------------------------------------------------------------------- replay
def _run(job):
    reqs, sc, max_batch, chunk, loop, kv = job
    # the engine model of `serving.open_loop_replay`: the cap (scheduler and KV room at the mean lengths) bounds
    # what runs, and each request's whole KV the room it may take (`kv`: the replica's KV tokens, or unbounded)
    return simulate_continuous(reqs, sc, max_batch=max_batch, kv_capacity_tokens=kv, prefill_chunk_tokens=chunk,
                               loop=loop)


def _simulate_all(jobs, workers: int | None):
    total = sum(len(j[0]) for j in jobs)
    w = workers if workers is not None else min(os.cpu_count() or 1, 8, len(jobs))
    if w <= 1 or total < PARALLEL_MIN_REQUESTS or len(jobs) < 2:
        return [_run(j) for j in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:  # pragma: no cover - no fork on this platform
        return [_run(j) for j in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0]))  # biggest first balances the workers
    with ProcessPoolExecutor(max_workers=w, mp_context=ctx) as ex:
        done = dict(zip(order, ex.map(_run, [jobs[i] for i in order], chunksize=1)))
    return [done[i] for i in range(len(jobs))]


def replay(step_cost: StepCost, *, replicas: int, max_batch: int, rate_per_s: float, n_requests: int,
           input_len, output_len, est_ttft_s: float, est_tpot_s: float, prefill_chunk: int | None = None,
           simulate_replicas: int | None = None, warmup_s: float = 0.0, seed: int = 0,
           prefill: dict | None = None, workers: int | None = None, loop: str = "auto",
           client_latency_s: float = 0.0, kv_capacity_tokens: float = math.inf,
           arrivals: tuple | None = None, measure_window: tuple[float, float] | None = None) -> FleetReplay:
    """Replay `n_requests` Poisson arrivals at `rate_per_s` over `replicas` replicas behind a least-loaded router.

    `simulate_replicas` (k < R): simulate k replicas fed k/R of the arrivals (replicas are interchangeable
    behind the router; fewer of them pool less, so this errs slow). `prefill`: a disaggregated fleet's prefill
    pool, {'servers', 'tokens_per_s' (per server), 'lone_prompt_s' (one prompt of the mean length alone)};
    `step_cost` is then the decode replicas' (prompt tokens free). `warmup_s`: arrivals in the first
    `warmup_s` seconds are simulated but not measured. `loop`: each replica's simulator loop
    (`simulate_continuous`: 'auto', 'python', 'compiled'; identical answers). `client_latency_s`: time each request
    spends outside the engines (HTTP, tokenisation), added to its TTFT and end-to-end time: latencies on the
    client's clock, as `throughput` and `chalk simulate` report them (`simulate.on_client_clock`).
    `kv_capacity_tokens`: each replica's KV tokens (a request is admitted only when its whole KV fits beside the
    others, as `serving.open_loop_replay` admits it); default unbounded.
    `arrivals`: the fleet's requests as (arrival_s, input_len, output_len) arrays, in place of `n_requests` Poisson
    arrivals at `rate_per_s` (a trace's, bursts as recorded): the k simulated replicas get the requests a
    round-robin share gives them (every request whose place in arrival order, mod R, is below k), so each burst
    reaches them at k/R of its size. `measure_window`: (start, end) on the arrivals' clock (from the first request):
    the percentiles and means are over the requests arriving in it alone (a trace's busiest window), in place of the
    steady-state window.
    """
    t0 = time.perf_counter()
    lat = float(positive("client_latency_s", client_latency_s, allow_zero=True, scalar=True))
    R = int(replicas)
    k = min(R, int(simulate_replicas or R))
    if arrivals is not None:
        a_all = np.asarray(arrivals[0], dtype=float)
        P_all, O_all = (np.rint(np.asarray(x, dtype=float)).astype(np.int64) for x in arrivals[1:])
        share = (np.arange(a_all.size) % R) < k
        a, P, O = a_all[share], P_all[share], O_all[share]
        if a.size:
            a = a - a[0]
        n_requests = a.size
    n = int(n_requests)
    if not 1 <= n <= MAX_REQUESTS:
        raise InputError(f"a replay takes 1 to {MAX_REQUESTS:,} requests, got {n}")
    if arrivals is None:
        lam = float(rate_per_s) * k / R
        # the requests every open-loop replay draws (a mean length spread as they spread it), so a plan's replay of
        # one replica and `throughput`'s or `chalk simulate`'s of it see the same prompts
        r0 = poisson_requests(lam, n, input_len, output_len, seed)
        a, P, O = r0.arrival_s, r0.input_len, r0.output_len
    P, O, clipped = _clip(P, O, step_cost.kv_capacity_tokens)
    pre = np.zeros(n)
    if prefill is not None:
        servers = max(int(math.ceil(prefill["servers"] * k / R)), 1)
        mu = float(prefill["tokens_per_s"])
        floor = float(prefill["lone_prompt_s"]) / max(float(np.mean(P)), 1.0)  # per prompt token, alone
        start = route_earliest_free(a, P / mu, servers)
        pre = (start - a) + np.maximum(P / mu, P * floor)
    arrive = a + pre
    order = np.argsort(arrive, kind="stable")
    arrive, P, O, pre, a = arrive[order], P[order], O[order], pre[order], a[order]
    where = route_least_loaded(arrive, arrive + est_ttft_s + O * est_tpot_s, k)
    jobs, idx = [], []
    for r in range(k):
        sel = np.flatnonzero(where == r)
        if sel.size == 0:
            continue
        idx.append(sel)
        jobs.append((Requests(arrive[sel], P[sel], O[sel]), step_cost, int(max_batch), prefill_chunk, loop,
                     kv_capacity_tokens))
    results = _simulate_all(jobs, workers)
    ttft, tpot, e2e = np.empty(n), np.empty(n), np.empty(n)
    conc, out_rate, batch = [], [], []
    for sel, res in zip(idx, results):
        batch.append(res.mean_batch)
        ttft[sel] = res.ttft_s + pre[sel] + lat
        tpot[sel] = res.tpot_s
        e2e[sel] = res.e2e_s + pre[sel] + lat
        # requests in flight on the client's clock: the replica's own (its queue and engine, measured) and those
        # on their way to it (the prefill pool, the client latency), by Little's law at the replica's rate
        conc.append(res.mean_in_flight + res.requests_per_s * (float(np.mean(pre[sel])) + lat))
        out_rate.append(res.output_tokens_per_s)
    # the steady-state window `chalk simulate` and `throughput` measure (`simulate.steady_window`, in arrival order),
    # and no request arriving in the first `warmup_s` where that still leaves the window a fifth of the run
    first, last = steady_window(n)
    rank = np.empty(n, dtype=np.int64)
    by_arrival = np.argsort(a, kind="stable")  # (`a` is in arrival order at the prefill pool's exit, not its own)
    rank[by_arrival] = np.arange(n)
    keep = (rank >= first) & (rank < last)
    warm = a >= float(np.min(a)) + max(float(warmup_s), 0.0)
    if measure_window is not None:
        keep = (a >= float(measure_window[0])) & (a <= float(measure_window[1]))
        if not keep.any():
            raise InputError("the measured window holds no request of the replay")
    elif (keep & warm).sum() >= max(n // 5, 1):
        keep &= warm
    lo, hi = float(np.min(a[keep])), float(np.max(a[keep]))
    span = float(measure_window[1]) - float(measure_window[0]) if measure_window is not None else 0.0
    if span > 0:
        # in flight and served over the window the percentiles are over (QA 2026-11-28: a trace's busiest minute
        # printed 38 in flight, each replica's own steady window over the quiet hour around it, where the minute's
        # own rate and latency hold 81): Little's law on the window's arrivals, per simulated replica
        conc = [float(keep.sum()) / span / k * float(np.mean(e2e[keep]))]
        out_rate = [float(np.sum(O[keep])) / span]
    # Poisson arrivals only: a trace's own rate moves through it, and its waits with it
    grew = None if arrivals is not None else wait_growth(a[by_arrival], ttft[by_arrival])
    over = None if grew is None else {"median_wait_first_fifth_s": grew[0], "median_wait_last_fifth_s": grew[1],
                                      "arrival_window_s": grew[2]}

    def q(x, p):
        x = x[keep]
        x = x[np.isfinite(x)]
        return float(np.percentile(x, p)) if x.size else math.nan

    def mean(x):
        x = x[keep]
        x = x[np.isfinite(x)]
        return float(np.mean(x)) if x.size else math.nan

    return FleetReplay(n_requests=n, n_measured=int(keep.sum()), replicas=R, replicas_simulated=k,
                       ttft_p50_s=q(ttft, 50), ttft_p99_s=q(ttft, 99), tpot_p50_s=q(tpot, 50),
                       tpot_p99_s=q(tpot, 99), e2e_p99_s=q(e2e, 99),
                       mean_in_flight_per_replica=float(np.mean(conc)) if conc else 0.0,
                       max_in_flight_per_replica=float(np.max(conc)) if conc else 0.0,
                       output_tokens_per_s_per_replica=float(np.sum(out_rate)) / k if out_rate else 0.0,
                       requests_clipped=clipped, wall_s=time.perf_counter() - t0,
                       mean_batch=float(np.mean(batch)) if batch else 0.0, mean_ttft_s=mean(ttft),
                       mean_tpot_s=mean(tpot), overload=over, latency_window={
                           "kind": "peak" if measure_window is not None else "overloaded" if over else "steady",
                           "requests": int(keep.sum()),
                           "warmup_requests": int((a < lo).sum()),
                           "cooldown_requests": int((a > hi).sum()), "start_s": float(lo), "end_s": float(hi),
                           "basis": "percentiles over the requests in the steady-state window of `chalk simulate` "
                                    "(the first 10% and last 5% of arrivals left out) that arrive after the warm-up "
                                    "(warmup_s)" if measure_window is None else
                                    "percentiles over the requests arriving in the trace's busiest window, the "
                                    "requests before and after it replayed around it"})


def decode_only(step_cost: StepCost) -> StepCost:
    """A step-model StepCost whose prompt tokens cost nothing (a disaggregated decode replica: the prefill pool
    computed them). On the compute line the per-token slope moves to the per-decoding-sequence term, so decode
    steps cost the same; on the memory line (where `StepCost.from_step_model` writes its tangent) the prompt term
    goes."""
    return dataclasses.replace(step_cost, flops_per_token=0.0,
                               attn_flops_per_sequence=step_cost.attn_flops_per_sequence + step_cost.flops_per_token,
                               kv_write_bytes_per_token=0.0, label=step_cost.label + "; decode only")
