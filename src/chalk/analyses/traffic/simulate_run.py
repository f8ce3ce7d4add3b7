"""What `chalk simulate` and `chalk.simulate` run: one replica, its requests, the simulator, and what was assumed.

The replica: the layout given, or the one `throughput` picks for the same model, chip, GPUs, lengths and
precision (the most output tokens/s per GPU; its replica, dp = 1), timed by the step model on that layout
(`simulation_step_cost`: the one place a simulation's step cost is chosen, for the CLI and the API), never the
whole box as one chip. The requests: Poisson arrivals, a closed loop,
or a trace in any format `chalk.specs.traces` reads (arrival times scaled by `speedup`); lengths are numbers or
distributions as `throughput` takes them, and any request longer than the model's context is cut to fit
(`simulate.truncate_to_context`, noted). A trace with prefix-block ids (Mooncake) gets its prefix-cache hits
replayed through an LRU cache of the KV memory left on the replica (`analyses.prefix_hits`), and each request's
cached prompt tokens go to the simulator (no prefill compute for them; their KV is still read).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from chalk.errors import InputError
from chalk.specs.workload import positive

SCHEDULERS = ("continuous", "train")


@dataclass(frozen=True, eq=False)
class SimulateRun:
    """A simulation (`result`, a `chalk.analyses.traffic.simulate.SimulationResult`, whose fields read through) and its
    setup: model, chip, replica layout and GPUs, precisions, the trace and prefix cache, truncation, notes."""

    result: object
    setup: dict
    notes: list = field(default_factory=list)
    #: the StepCost the simulation ran on (`simulation_step_cost`; None for a closed loop, which replays through
    #: `serving.fixed_deployment`'s own). `step_cost` reads the simulation's label of it.
    replica_step_cost: object = None

    def __getattr__(self, name):  # the setup's keys, then the simulation's own fields (ttft_p99_s, to_frame, ...)
        if name.startswith("__"):
            raise AttributeError(name)
        setup = self.__dict__.get("setup", {})
        return setup[name] if name in setup else getattr(self.result, name)

    def summary(self) -> dict:
        return {**self.setup, **self.result.summary(), "notes": list(self.notes)}

    def to_dict(self, per_request: bool = False) -> dict:
        return {**self.setup, **self.result.to_dict(per_request=per_request), "notes": list(self.notes)}

    def to_frame(self):
        df = self.result.to_frame()
        df.attrs.update({k: v for k, v in self.setup.items() if not isinstance(v, dict)})
        return df


def client_latency_s(client_latency: float | None, ideal: bool) -> float:
    """The time each request spends outside the engine's steps (HTTP, tokenisation): the one given, else the
    calibrated request latency (0 for the ideal roofline). A closed loop's seat is held for it; an open loop adds it
    to each request's TTFT and end-to-end time."""
    if client_latency is not None:
        return float(positive("client latency (s)", client_latency, allow_zero=True, scalar=True))
    from chalk.analyses.step.calibration import calibration

    return calibration(ideal).request_latency_s


def _length(name: str, spec):
    """A number (kept: a closed loop spreads a mean, Poisson repeats it) or a LengthDistribution."""
    if isinstance(spec, (int, float, np.integer, np.floating)) and not isinstance(spec, bool):
        return float(positive(name, spec, scalar=True))
    from chalk.specs.lengths import parse_lengths

    if isinstance(spec, str):
        try:
            return float(positive(name, float(spec), scalar=True))
        except ValueError:
            pass
    return parse_lengths(spec)


def _replica_layout(m, system, layout, gpus, I, O, prec, kvp, ideal, engine=None) -> tuple[str, str]:
    """(layout text, where it came from): the one given, or `throughput`'s pick on `gpus` (its replica)."""
    if isinstance(layout, dict):  # kept as given, but numpy numbers as plain ones: the setup goes to JSON as it is
        return {k: v.item() if isinstance(v, np.generic) else v for k, v in layout.items()}, "given"
    if layout is not None:
        return layout, "given"
    from chalk.analyses.step.parallel import layout_spec
    from chalk.analyses.traffic.serving import throughput

    r = throughput(m, system, input_len=I, output_len=O, gpus=gpus, precision=prec, kv_precision=kvp, ideal=ideal,
                   engine=engine, replay_latency=False)
    p = r["parallelism"]
    text = layout_spec(p)
    on = f"{gpus} GPUs" if gpus is not None else f"deployments of 1 to {system.chips} GPUs"
    return text, (f"chosen as throughput does: the most output tokens/s per GPU over {on} is {r['layout']}; "
                  "--layout sets it")


def simulation_step_cost(model, hardware, *, layout=None, gpus: int | None = None, batch: float | None, input_len,
                         output_len, precision: str | None = None, kv_precision="auto", ideal: bool = False,
                         engine: str | None = None) -> tuple:
    """The one place a simulation's step cost is chosen (`chalk simulate` and `chalk.simulate` alike):
    (StepCost, Layout, layout text, where the layout came from, the deployment's setup `serving._fixed_setup`).

    The replica: `layout`, else the one `throughput` picks for these lengths on `gpus` (`_replica_layout`); its
    setup: the one `throughput --layout` answers from (the engine's scheduler cap and KV room, prefill chunk, step
    overhead, the calibrated request latency); its step: the step model on that replica
    (`serving.open_loop_step_cost`, the tangent at `batch` decoding sequences of I + O / 2 tokens, default the
    engine's cap), so a pure decode step of the simulation at that point takes what `estimate --layout` says.
    Never the aggregate bound (`roofline.aggregate_step_cost`).
    """
    from chalk.analyses.step.estimate import make_layout
    from chalk.analyses.step.parallel import precisions
    from chalk.analyses.traffic.serving import _fixed_setup, engine_kv_precision, open_loop_step_cost
    from chalk.specs.catalog import as_model, as_system

    m, system = as_model(model), as_system(hardware)
    prec, kvp = precisions(m, system, precision, engine_kv_precision(engine, kv_precision, m, precision))
    lay_text, lay_source = _replica_layout(m, system, layout, gpus, input_len, output_len, prec, kvp, ideal, engine)
    lay = make_layout(m, lay_text)
    fx = _fixed_setup(m, system, layout=lay_text, input_len=input_len, output_len=output_len, precision=prec,
                      kv_precision=kvp, ideal=ideal, engine=engine)
    sc = open_loop_step_cost(fx, max(float(fx.cap if batch is None else batch), 1.0))
    return sc, lay, lay_text, lay_source, fx


#: Requests a simulation replays when neither --requests nor a trace says how many (at least; see STEADY_ROUNDS).
DEFAULT_REQUESTS = 10_000
#: Requests an open-loop simulation settles its step cost on (`serving.settled_replay`) before a longer run.
SETTLE_REQUESTS = 16_000
#: A default Poisson run replays at least STEADY_ROUNDS times the requests the closed form holds in flight at its
#: rate (and settles on SETTLE_STEADY_ROUNDS times them): fewer never leave the warm-up.
STEADY_ROUNDS, SETTLE_STEADY_ROUNDS = 10, 4


def simulate_requests(model, hardware, **kw) -> SimulateRun:
    """Requests on one replica (`_simulate_requests`, its arguments), the run's checks beside its figures: whether
    arrivals outran the replica (`overload`), how far its window is from Little's law (`steady_state_gap`), and its
    rates per replica and per GPU, so the library's answer carries what the command's JSON does (QA 2026-11-28)."""
    from chalk.analyses.traffic import simulate as sim

    # what the command refuses, the library refuses too (it dropped a rate beside a closed loop in silence)
    given = {k for k in ("rate", "input_len", "output_len") if kw.get(k) is not None}
    if "rate" in given and kw.get("trace") is not None:
        raise InputError("rate sets a Poisson rate, but a trace brings its own arrival times: give speedup X to "
                         "replay it X times faster")
    if kw.get("trace") is not None and given & {"input_len", "output_len"}:
        raise InputError("a trace brings each request's own lengths: drop input_len / output_len")
    if "rate" in given and kw.get("concurrency") is not None:
        raise InputError("concurrency runs a closed loop (a request sent as each one finishes): rate is an open "
                         "loop's Poisson rate; give one of the two")
    run = _simulate_requests(model, hardware, **{k: v for k, v in kw.items()
                                                 if v is not None or k not in ("rate", "input_len", "output_len")})
    r, g = run.result, run.setup["replica_gpus"]
    # no request finished inside the measured window while requests were in flight: the run is shorter than a
    # request's life, and its window rates (counted at finishes) are not a steady state's (QA 2026-11-28: DeepSeek-V3
    # at 50 requests/s for 5,000 requests, each 65 s long, printed 0 tokens/s and no warning)
    short_run = bool(r.requests_per_s == 0 and (r.mean_in_flight or 0) > 0)
    run.setup.update({"overload": sim.overload(r), "steady_state_gap": sim.steady_gap(r),
                      "shorter_than_a_request": short_run})
    w = r.latency_window or {}
    gap = run.setup["steady_state_gap"]
    if w.get("kind") == "steady":
        why = None
        if run.setup["overload"] is not None:
            # arrivals outran the replica: the window's requests queue longer the longer the run, no steady state to
            # measure (QA 2026-11-28: the JSON said 'steady' where the table said there was none)
            kind, why = "overloaded", ("arrivals outran the replica: the queue grows through the run, so its "
                                       "latencies grow with the run's length (see overload)")
        elif short_run or (gap is not None and abs(gap) > sim.STEADY_GAP):
            # the CLI's warnings, in the answer too (QA 2026-11-28: from Python a run serving 0 requests/s with
            # 1,080 in flight, or 24% off Little's law, read as a steady state)
            kind, why = "not steady", ("no request finished inside the window: the run is shorter than a request's "
                                       "life" if short_run else f"its requests in flight are {gap:+.0%} off Little's "
                                       "law on its rate and latency (steady_state_gap): a queue built or drained "
                                       "inside it")
        if why is not None:
            r = dataclasses.replace(r, latency_window={
                **w, "kind": kind, "basis": f"the steady-state window's requests, but {why}"})
            run = dataclasses.replace(run, result=r)
    for k in ("output_tokens_per_s", "input_tokens_per_s", "requests_per_s"):  # the run is one replica's
        v = getattr(r, k, None)
        if v is not None:
            run.setup.update({f"{k}_per_replica": v, f"{k}_per_gpu": v / g})
    return run


def _simulate_requests(model, hardware, *, rate: float = 100.0, requests: int | None = None, input_len=512,
                      output_len=128, trace=None, speedup: float = 1.0, layout=None, gpus: int | None = None,
                      concurrency: int | None = None, max_batch: int | None = None, kv_capacity_tokens=None,
                      prefill_chunk: int | None = None, precision: str | None = None, kv_precision="auto",
                      ideal: bool = False, seed: int = 0, client_latency: float | None = None,
                      scheduler: str = "continuous", period_s: float = 0.02, prefix_cache: bool = True,
                      engine: str | None = None) -> SimulateRun:
    """Requests on one replica of `model` on `hardware`: Poisson arrivals at `rate` (`requests` of them, default
    10,000), a closed loop of `concurrency` in flight, or a `trace` file (its first `requests`, default all;
    arrivals divided by `speedup`). See the module docstring for the layout, lengths, truncation and prefix cache.
    The engine's limits apply (`serving.open_loop_replay`, the replay `throughput` answers from) where
    `max_batch`, `kv_capacity_tokens` and `prefill_chunk` are not given: `engine`'s profile (`--engine vllm@0.11`),
    else chalk's fitted scheduler."""
    from chalk.analyses.step.parallel import precisions
    from chalk.analyses.traffic import simulate as sim
    from chalk.analyses.traffic.serving import (SETTLE_ROUNDS, engine_kv_precision, open_loop_replay,
                                                replica_chunk_tokens, settled_replay)
    from chalk.specs.catalog import as_model, as_system
    from chalk.specs.lengths import empirical
    from chalk.specs.traces import read_trace

    if scheduler not in SCHEDULERS:
        raise InputError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    if trace is not None and concurrency is not None:
        raise InputError("a trace sets its own arrivals: give --trace or --concurrency, not both")
    if max_batch is not None:
        max_batch = int(positive("max_batch", max_batch, integer=True, scalar=True))
    cap_given = max_batch  # (a closed loop's seats take max_batch's place below; the cap given still binds)
    if concurrency is not None:
        max_batch = int(positive("concurrency", concurrency, integer=True, scalar=True))
    n = None if requests is None else int(positive("requests", requests, integer=True, scalar=True))
    if n is not None and concurrency is not None and n < max_batch:
        raise InputError(f"a closed loop of {max_batch:,} requests in flight needs at least that many requests, got "
                         f"-n {n:,}")
    if n is not None and n > sim.MAX_STREAMED_REQUESTS:
        raise InputError(f"at most {sim.MAX_STREAMED_REQUESTS:,} requests per simulation (streamed: about 8 "
                         f"CPU-minutes here), got {n:,}")
    stream = trace is None and concurrency is None and n is not None and n > sim.MAX_REQUESTS
    if n is not None and n > sim.MAX_REQUESTS and not stream:
        raise InputError(f"at most {sim.MAX_REQUESTS:,} requests from a trace or a closed loop, got {n:,} (longer "
                         "Poisson runs stream: give --rate)")
    if stream and scheduler != "continuous":
        raise InputError(f"more than {sim.MAX_REQUESTS:,} requests stream through the continuous scheduler only")
    lat = client_latency_s(client_latency, ideal)
    m, system = as_model(model), as_system(hardware)
    prec, kvp = precisions(m, system, precision, engine_kv_precision(engine, kv_precision, m, precision))
    notes = []

    tr, cut_up_front = None, 0.0
    if trace is not None:
        tr = read_trace(trace, speedup=speedup)
        if n is not None and n > len(tr):  # said, not silent (QA 2026-11-28)
            notes.append(f"-n {n:,} asks for more requests than the trace holds: its {len(tr):,} replayed once")
        if n is not None:
            tr = tr.head(n)
        # cut to the context once, before anything is sized: the replica is sized for, and replays, what it serves
        trace_cut = (sim.truncate_to_context(tr.input_len, tr.output_len, m.max_context) if m.max_context
                     else (tr.input_len, tr.output_len, 0))
        din, dout = empirical(trace_cut[0], "trace prompts"), empirical(trace_cut[1], "trace outputs")
    else:
        if speedup != 1.0:
            raise InputError("--speedup scales a trace's arrival times: give --trace (or raise --rate)")
        from chalk.analyses.traffic.serving import within_context

        raw = _length("input_len", input_len), _length("output_len", output_len)
        din, dout, cut_up_front = within_context(m, *raw, seed)
        if cut_up_front:
            notes.append(f"lengths reach past {m.id}'s {m.max_context:,}-token context: sized and replayed as cut to "
                         "it (the output first, the prompt only where it alone fills the context)")
        if concurrency is None:
            positive("rate", rate, scalar=True)

    sc, lay, lay_text, lay_source, fx = simulation_step_cost(m, system, layout=layout, gpus=gpus,
                                                             batch=concurrency or max_batch, input_len=din,
                                                             output_len=dout, precision=prec, kv_precision=kvp,
                                                             ideal=ideal, engine=engine)
    if layout is None:
        notes.append(f"layout {lay.label()} ({lay.replica_gpus} GPU{'s' if lay.replica_gpus > 1 else ''}) "
                     + lay_source)

    if concurrency is not None and scheduler == "continuous" and kv_capacity_tokens is None:
        return _closed_loop(m, system, lay, lay_text, lay_source, prec, kvp, ideal, concurrency, n, din, dout, seed,
                            lat, notes, engine, fx, cap_given, cut_up_front, prefill_chunk)
    settle = SETTLE_REQUESTS
    if tr is None and concurrency is None and n is None and scheduler == "continuous":
        # the default run is long enough to reach a steady state: STEADY_ROUNDS times the requests the closed form
        # holds in flight at this rate (10,000 requests of 1,000 tokens at 20/s on DEP32 all finished after the
        # last arrival: every request was warm-up, the window's rates read 0)
        in_flight = float(np.interp(float(rate), fx.x_grid, fx.held)) if float(rate) < fx.x_grid[-1] else \
            float(fx.held[-1])
        n = int(min(max(DEFAULT_REQUESTS, math.ceil(STEADY_ROUNDS * in_flight)), sim.MAX_REQUESTS))
        settle = int(min(max(SETTLE_REQUESTS, math.ceil(SETTLE_STEADY_ROUNDS * in_flight)), n))
        if n > DEFAULT_REQUESTS:
            notes.append(f"{n:,} requests replayed ({STEADY_ROUNDS}x the ~{in_flight:,.0f} the closed form holds in "
                         "flight at this rate, so the run reaches its steady state; --requests sets it)")
    total = n or (len(tr) if tr is not None else DEFAULT_REQUESTS)  # requests replayed in all: the run, its settling
    limits = dict(max_batch=max_batch, prefill_chunk=prefill_chunk, kv_capacity_tokens=kv_capacity_tokens,
                  client_latency_s=lat, loop=sim.loop_for(total + SETTLE_ROUNDS * min(total, settle)))
    if scheduler == "continuous" and concurrency is None:
        notes.append(_engine_note(fx, max_batch, prefill_chunk, kv_capacity_tokens, lat))
    if stream:  # generated as the run goes, truncated as generated: memory holds the requests in flight
        return _streamed(sim, m, system, lay, lay_text, lay_source, prec, kvp, fx, notes, rate, n, din, dout, seed,
                         limits)
    if tr is not None:  # on the clock of its first request: a trace stamped in epoch seconds replays as one from 0
        # (QA 2026-11-28: arrivals at 1.7e9 s were refused as 'past 30 years', where plan sized the same file)
        arrivals, (i_len, o_len, cut) = tr.arrival_s - tr.arrival_s[0], trace_cut
    elif concurrency is not None:
        r0 = sim.closed_loop_requests(max_batch, n or DEFAULT_REQUESTS, din, dout, seed)
        arrivals, i_len, o_len = r0.arrival_s, r0.input_len, r0.output_len
    else:  # lengths drawn as throughput's open loop draws them (a mean spread as a closed loop spreads it)
        r0 = sim.poisson_requests(rate, n or DEFAULT_REQUESTS, din, dout, seed)
        arrivals, i_len, o_len = r0.arrival_s, r0.input_len, r0.output_len
    if tr is None:  # drawn lengths (a mean spreads past it) cut as a trace's were
        i_len, o_len, cut = (sim.truncate_to_context(i_len, o_len, m.max_context) if m.max_context
                             else (i_len, o_len, 0))
        # requests cut up front (`within_context`: a mean past the context, every request; a distribution's tail,
        # its share) count as cut though their drawn lengths fit (QA 2026-11-28: 55 of 100 said where all were)
        cut = max(cut, int(round(cut_up_front * i_len.size)))
    if cut and not cut_up_front:
        notes.append(f"{cut:,} of {i_len.size:,} requests longer than {m.id}'s {m.max_context:,}-token context "
                     f"{'was' if cut == 1 else 'were'} cut to fit it (the output first, the prompt only where it "
                     "alone fills the context)")

    cap_tokens = sc.kv_capacity_tokens if kv_capacity_tokens is None else float(kv_capacity_tokens)
    if kv_capacity_tokens is not None and math.isfinite(cap_tokens) and cap_tokens > sc.kv_capacity_tokens:
        # said, not silent: a cache the replica cannot hold serves hits it would miss (QA 2026-11-28: 20M tokens,
        # 2.6 TB of KV on one H200, read as its memory: 31.8% of prompt tokens hit where its memory gives 4.6%)
        notes.append(f"--kv-capacity-tokens {cap_tokens:,.0f} is {cap_tokens / sc.kv_capacity_tokens:,.1f}x the "
                     f"{sc.kv_capacity_tokens:,.0f} tokens of KV this replica's memory holds beside its weights: a "
                     "hypothetical cache")
    hits = None
    cached = None
    if tr is not None and tr.has_blocks and prefix_cache:
        from chalk.analyses.traffic.prefix_hits import capacity_blocks_for, trace_prefix_hits

        hits = trace_prefix_hits(tr, capacity_blocks_for(cap_tokens, tr.block_tokens), input_len=i_len)
        cached = hits.cached_tokens
        notes.append(f"prefix cache: {hits.hit_rate:.1%} of prompt tokens hit an LRU cache of "
                     f"{hits.capacity_blocks:,.0f} blocks of {hits.block_tokens} tokens ("
                     + ("the replica's KV memory" if kv_capacity_tokens is None else "the KV capacity given") + "), "
                     "replayed from the trace's block ids; hits skip prefill compute, their KV is still read")
        if scheduler == "train":
            notes.append("the train scheduler prefills every prompt in full: the prefix hits are reported, "
                         "not applied")
    elif tr is not None and tr.has_blocks:
        notes.append("prefix cache off: every prompt token is prefilled")

    def held(k=None):  # the run's requests (its first k)
        cut_k = slice(None) if k is None else slice(0, k)
        return sim.Requests.from_arrays(arrivals[cut_k], i_len[cut_k], o_len[cut_k],
                                        **({} if cached is None else {"cached_len": cached[cut_k]}))

    cap_b = max_batch or max(int(fx.cap), 1)
    ref = float(concurrency or max_batch or fx.cap)
    if scheduler == "train":
        res = sim.simulate_train(held(), sc, period_s=period_s, max_batch=cap_b)
    elif concurrency is not None:  # a closed loop with the caller's KV capacity or prefill chunk
        # the engine runs at most its cap of the seats (the cap given, else its scheduler's; the KV room is the
        # caller's capacity where given, else the engine's at the mean lengths), the rest wait in its queue
        seats = int(concurrency)
        engine_cap = cap_given or (fx.scheduler_cap if kv_capacity_tokens is not None else fx.cap)
        res = sim.simulate_continuous(held(), sc, max_batch=max(int(min(engine_cap, seats)), 1), concurrency=seats,
                                      kv_capacity_tokens=kv_capacity_tokens, closed_loop=True, client_latency_s=lat,
                                      prefill_chunk_tokens=prefill_chunk if prefill_chunk is not None
                                      else replica_chunk_tokens(fx))
    else:
        k = min(len(i_len), settle)
        at = rate if tr is None else len(i_len) / max(float(arrivals[-1] - arrivals[0]), 1e-9)  # requests/s
        res, sc, ref = settled_replay(fx, lambda c: open_loop_replay(fx, held(k), c, **limits), at)
        if len(i_len) < sim.MIN_STEADY_REQUESTS:  # too short for a steady state: the run measured whole
            res = open_loop_replay(fx, held(), sc, **{**limits, "window": "all"})
        elif k < len(i_len):
            res = open_loop_replay(fx, held(), sc, **limits)
    if concurrency is None:
        notes.append("arrivals go to this one replica: the rate is one replica's share")
    setup = _setup(m, system, lay, lay_text, lay_source, prec, kvp, fx, notes)
    setup.update({"input_len_mean": float(np.mean(i_len)), "output_len_mean": float(np.mean(o_len)),
                  "truncated_requests": cut, "client_latency_s": lat if scheduler == "continuous" else 0.0,
                  "step_cost_reference_batch": ref,
                  "trace": None if tr is None else {"path": tr.source, "format": tr.format, "requests": len(tr),
                                                     "prefix_blocks": bool(tr.has_blocks),
                                                     "speedup": tr.speedup, "span_s": tr.span_s,
                                                     "mean_rate_per_s": _finite(tr.mean_rate_per_s)},
                  "prefix_cache": None if hits is None else hits.to_dict(),
                  "prefix_cache_hit_rate": None if hits is None else hits.hit_rate})
    if hits is None and not res.prefix_hit_rate:  # no prefix cache replayed: no hit rate, not a 0% one
        res = dataclasses.replace(res, prefix_hit_rate=None)
    return SimulateRun(res, setup, notes, sc)


def _engine_note(fx, max_batch, prefill_chunk, kv_capacity_tokens, lat) -> str:
    from chalk.analyses.traffic.serving import replica_chunk_tokens

    eng = fx.eng.id if fx.eng is not None else "chalk's fitted scheduler"
    cap = (f"at most {max_batch} sequences in flight (given)" if max_batch else
           f"at most {int(fx.cap):,} sequences in flight ({eng} cap and the KV room at the mean lengths)")
    chunk = (f"prefill chunks of {prefill_chunk:,} tokens (given)" if prefill_chunk else
             f"prefill chunks of {replica_chunk_tokens(fx):,} tokens" if fx.chunk else "whole prompts per step")
    kv = "" if kv_capacity_tokens is None else f", KV capacity {float(kv_capacity_tokens):,.0f} tokens (given)"
    return (f"the engine model throughput answers from: {cap}, {chunk}{kv}; the step cost is linear around the "
            f"batch the run settles at; TTFT and end-to-end include {lat * 1e3:.0f} ms per request outside the "
            "engine's steps (HTTP, tokenisation; --client-latency sets it)")


def _closed_loop(m, system, lay, lay_text, lay_source, prec, kvp, ideal, concurrency, n, din, dout, seed, lat,
                 notes, engine, fx, max_batch=None, cut_share: float = 0.0, prefill_chunk=None) -> SimulateRun:
    """A closed loop replayed through the very replay `throughput --layout --concurrency` answers from
    (`serving.fixed_deployment`): the same engine cap (scheduler and KV room), step cost and requests, so the same
    deployment gets the same latencies through both doors. `max_batch`: the replica's cap on sequences, given (as
    `throughput --max-seqs` gives it per scheduler: split over the replica's attention-DP schedulers);
    `prefill_chunk`: the replica's prompt tokens per step, given (as `throughput --max-tokens` gives it per
    scheduler; QA 2026-11-28: replayed apart, a 100-token chunk at 3,000 in flight ran 4.04 ms steps, below the
    batch's own weight read, on a step cost linearised at the 3,000 seats)."""
    from chalk.analyses.traffic.serving import fixed_deployment

    per_rank = lambda v: None if v is None else max(math.ceil(v / max(int(lay.attn_dp), 1)), 1)  # noqa: E731
    res = fixed_deployment(m, system, layout=lay_text, concurrency=int(concurrency), input_len=din, output_len=dout,
                           precision=prec, kv_precision=kvp, ideal=ideal, engine=engine, max_seqs=per_rank(max_batch),
                           max_tokens=per_rank(prefill_chunk),
                           replay={"requests": n, "client_latency_s": lat, "seed": seed, "result_only": True})
    notes.append(f"closed loop of {int(concurrency)} requests in flight, replayed as throughput --layout "
                 f"--concurrency replays it: the engine runs at most {res.max_batch} of them (its scheduler cap and "
                 "KV room), the rest wait in its queue")
    from chalk.analyses.traffic import simulate as sim

    if not sim.settled(res):  # a run the caller sized, too short for its seats to fall out of step
        a, b = sim.settling(res)
        notes.append(f"not settled: the window's mean TTFT moved from {a * 1e3:,.0f} ms (its first half) to "
                     f"{b * 1e3:,.0f} ms (its second) as the first wave's seats fell out of step; more requests "
                     "(-n) reach the steady state throughput --layout --concurrency replays to")
    setup = _setup(m, system, lay, lay_text, lay_source, prec, kvp, fx, notes)
    mean = lambda d: float(getattr(d, "mean", d))  # noqa: E731
    setup.update({"input_len_mean": mean(din), "output_len_mean": mean(dout),
                  "truncated_requests": int(round(cut_share * res.n_requests)),  # cut up front (`within_context`)
                  "client_latency_s": lat, "trace": None, "prefix_cache": None, "prefix_cache_hit_rate": None})
    return SimulateRun(res, setup, notes)


def _setup(m, system, lay, lay_text, lay_source, prec, kvp, fx, notes: list) -> dict:
    """The run's setup; `notes` gets the kernel tables' note where they are another version's than the engine
    asked for, as throughput says it."""
    from chalk.analyses.step.parallel import engine_provenance

    eng = fx.eng
    # which framework version the step times' kernel tables come from, as throughput and estimate say it
    kp = engine_provenance(system.chip, fx.cal, eng, m)
    notes += kp["notes"]
    kernels = kp["kernels"]
    return {"model": m.id, "hardware": system.id, "chip": system.chip.id, "layout": lay.label(),
            # the engine as throughput and plan name it: its id, the release --engine NAME@RELEASE picks, and the
            # versions that release covers (QA 2026-11-28: simulate alone put the version text in `engine`)
            "engine": None if eng is None else eng.id, "engine_release": None if eng is None else eng.release,
            "engine_version": None if eng is None else eng.version, "kernels": kernels,
            "layout_text": lay_text, "layout_source": lay_source, "replica_gpus": lay.replica_gpus,
            "parallelism": {"tp": lay.tp, "ep": lay.ep, "pp": lay.pp, "attn_dp": lay.attn_dp},
            "precision": prec, "kv_precision": kvp, "max_context": m.max_context}


def _streamed(sim, m, system, lay, lay_text, lay_source, prec, kvp, fx, notes, rate, n, din, dout, seed,
              limits) -> SimulateRun:
    """A Poisson run too long to hold (`simulate.PoissonStream`): lengths drawn (as `poisson_requests` draws them)
    and cut at the context as the run goes, statistics kept as it goes; its step cost settled on a held replay of
    its first SETTLE_REQUESTS (`serving.settled_replay`)."""
    from chalk.analyses.traffic.serving import open_loop_replay, settled_replay

    held = sim.poisson_requests(rate, SETTLE_REQUESTS, din, dout, seed)
    sc, ref = settled_replay(fx, lambda c: open_loop_replay(fx, held, c, **limits), rate)[1:]
    reqs = sim.PoissonStream(rate, n, sim.length_sampler(din), sim.length_sampler(dout), seed,
                             max_tokens=m.max_context or None)
    res = open_loop_replay(fx, reqs, sc, **limits)
    notes.append(f"{n:,} requests streamed: generated as the run goes (lengths cut at the model's context as "
                 "they are drawn), latencies kept as histograms")
    notes.append("arrivals go to this one replica: the rate is one replica's share")
    setup = _setup(m, system, lay, lay_text, lay_source, prec, kvp, fx, notes)
    setup.update({"input_len_mean": None, "output_len_mean": None, "truncated_requests": None,
                  "client_latency_s": limits["client_latency_s"], "step_cost_reference_batch": ref,
                  "trace": None, "prefix_cache": None,
                  "prefix_cache_hit_rate": None})
    return SimulateRun(res, setup, notes, sc)


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None
