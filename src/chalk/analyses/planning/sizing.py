"""Sizing one candidate for a demand (`chalk plan`'s engine room): the cheapest layout x concurrency (x precision,
speculation) per serving mode that meets the latency targets, its replicas, GPUs and dollars; then the fleet
replayed in the request simulator and bumped up until the measured p99s meet the targets.

One code path with `throughput`: the layout search shortlists (`serving.throughput` with the per-user speed
floor at each deployment size, every size from one search: `serving.throughput_by_size`), and each shortlisted
replica is sized with the fixed-deployment prediction (`serving.fixed_deployment`): the most requests in flight per
replica whose predicted TPOT (and p99 TTFT) still meet the targets. Shortlisted layouts are sized cheapest-bound
first and the search stops when the bound passes the best found.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np

from chalk.analyses.step.calibration import calibration
from chalk.analyses.step.parallel import engine_overhead_s, layout_spec
from chalk.analyses.traffic import fleet
from chalk.analyses.traffic.serving import (FixedCurve, Speculation, _fixed_setup, _serving_setup,
                                            draft_counts, engine_rank_chunk, fixed_deployment,
                                            model_speculation,
                                            p99_prompt_ratio, prefill_piece,
                                            prefill_step_tokens, replica_chunk_tokens, search_sizes,
                                            settled_replay, throughput_by_size)
from chalk.analyses.traffic.simulate import MAX_REQUESTS, StepCost
from chalk.equations import fleet as F
from chalk.errors import FitError
from chalk.specs.demand import Demand
from chalk.specs.hardware import System

MODES = ("aggregated", "disaggregated")
#: Most times a plan that misses its targets in the replay is bumped up before it is reported unmet.
MAX_BUMPS = 5
#: Most replicas one replay simulates (more are represented by that many, fed their share of arrivals).
MAX_SIMULATED_REPLICAS = 256
#: Concurrency search tolerance: the most requests per replica is found to within 2%.
CONCURRENCY_TOLERANCE = 0.02


@dataclass(frozen=True)
class Ask:
    """What every candidate is asked: the model, lengths (means or distributions), the demand to size for
    (the peak hour's), targets and the options a plan may choose from."""

    model: object
    input_len: object
    output_len: object
    I: float
    O: float
    demand: Demand
    precisions: tuple
    kv_precision: str | None
    speculative: Speculation | None
    engine: str | None
    ideal: bool
    sim_requests: int
    seed: int
    eplb: str | None = None  # the expert-load balancer of MoE layouts ('auto', 'on', 'off'; None: auto)
    #: speculative='auto' on a model shipping several draft layers: the shortlist searches each draft count
    #: (`serving.draft_counts`) and a candidate sizes with the count its answer used; `speculative` is the default
    draft_search: bool = False
    #: a trace's requests as recorded (`trace_demand.TraceArrivals`): the fleet's verifying replays feed them,
    #: around the trace's busiest window, in place of Poisson arrivals at the sized rate
    trace: object = None
    #: mean output tokens of the requests the demand counts where they differ from the lengths' mean (a trace's
    #: busiest window): the output tokens/s the fleet serves at the demand, and its cost per token, are theirs
    O_served: float | None = None


def _one_replica(label: str) -> str:
    """A layout's label without its replica count (' x4 replicas'; 'TP8 EP8 x4 replicas' -> 'TP8 EP8')."""
    return re.sub(r" x\d+ replicas$", "", label)


def _replica(par: dict) -> dict:
    return {k: int(par.get(k, 1)) for k in ("tp", "ep", "pp", "attn_dp", "etp")} | {"dp": 1}


# ----------------------------------------------------------------------------------------------- shortlist
def shortlist(ask: Ask, system: System, mode: str, precision) -> tuple[list, str | None]:
    """The best layout at each deployment size meeting the per-user speed floor and the p99 TTFT (at the p99 prompt,
    as `_meets` holds it; QA 2026-11-28: screened as a mean, an 8B's TP1 passed at every size on 85k-token p99
    prompts, which TP1 prefills in 3.2 s against a 2 s target, and plan answered that no aggregated layout met it,
    where TP4 does): [(bound $/h, result)], cheapest bound first, one per distinct replica layout; and the last reason
    a size had no answer."""
    tpot = ask.demand.tpot_target_s
    kw = dict(input_len=ask.input_len, output_len=ask.output_len, precision=precision,
              kv_precision=ask.kv_precision, min_user_tps=None if tpot is None else 1.0 / tpot,
              ttft_p99_s=ask.demand.ttft_p99_s, disaggregated=mode == "disaggregated", ideal=ask.ideal,
              engine=ask.engine, eplb=ask.eplb)
    seen, out, why = set(), [], None
    # the sizes a search spans: one scale-up domain, or the fewest that hold the weights (`search_sizes`); each
    # size's best layout as `throughput(gpus=n)` answers it, from one search over them all; a model shipping several
    # draft layers (`draft_search`) shortlists each draft count's answers as candidates of their own: the count that
    # serves most at the screen is not always the cheapest once sized for the demand
    *_, cal, _, costs, _ = _serving_setup(ask.model, system, ask.input_len, ask.output_len, precision,
                                         ask.kv_precision, ask.ideal, None, ask.engine, None, ask.eplb)
    sizes = search_sizes(system, costs, cal)
    specs = [model_speculation(ask.model, k) for k in draft_counts(ask.model)] if ask.draft_search else \
        [ask.speculative]
    for n, r in [a for spec in specs for a in throughput_by_size(ask.model, system, sizes, speculative=spec, **kw)]:
        if isinstance(r, FitError):
            why = str(r)
            continue
        used = bool(r["speculative"] and r["speculative"]["used"])
        key = (tuple(sorted(_replica(r["parallelism"]).items())),
               r.get("prefill", {}).get("layout"), used, r["speculative"]["draft_tokens"] if used else None)
        if key in seen:
            continue
        seen.add(key)
        out.append((_bound_usd_per_hour(ask, system, r), r))
    out.sort(key=lambda x: x[0])
    return out, why


def _bound_usd_per_hour(ask: Ask, system: System, r) -> float:
    """A rough lower bound on a layout's $/h: the demand's output tokens/s over its tokens/s per GPU."""
    d = ask.demand
    tokens = d.rate * ask.O if d.kind == "rate" else d.users * float(r["user_tokens_per_s"])
    return tokens / float(r["output_tokens_per_s_per_gpu"]) * system.chip.price_usd_per_hour


# ----------------------------------------------------------------------------------------------- sizing
#: fixed-deployment predictions kept across one plan's sizing, bisection and bumps (`_fixed`), forgotten all at
#: once past 4096
_FIXED_KEPT: dict = {}


def _fixed(ask: Ask, system: System, c: dict, n: int):
    """`fixed_deployment` of candidate `c` at `n` requests in flight per replica (closed form). The same question
    comes back within a plan (the kept candidate's cost at its operating point, the replay's bumps and step cost):
    its answer is kept, keyed by the very ask and system objects (held with the answer, so their ids stay theirs)
    and the candidate's layout; a kept answer is the one a fresh call gives (the prediction is deterministic)."""
    spec = c["speculative"]
    key = (id(ask), id(system), id(spec), c["mode"], c["layout_text"], c["replica_gpus"], c["precision"], int(n))
    hit = _FIXED_KEPT.get(key)
    if hit is not None and hit[0] is ask and hit[1] is system and hit[2] is spec:
        return hit[3]
    res = _fixed_deployment(ask, system, c, n)
    if len(_FIXED_KEPT) >= 4096:
        _FIXED_KEPT.clear()
    _FIXED_KEPT[key] = (ask, system, spec, res)
    return res


def _fixed_args(ask: Ask, c: dict) -> dict:
    """`fixed_deployment`'s arguments for candidate `c` (one replica; a disaggregated one decodes on all of it)."""
    G = c["replica_gpus"]
    kw = dict(gpus=G, decode_gpus=G) if c["mode"] == "disaggregated" else {}
    return dict(layout=c["layout_text"], input_len=ask.input_len, output_len=ask.output_len,
                precision=c["precision"], kv_precision=ask.kv_precision, ideal=ask.ideal,
                speculative=c["speculative"], engine=ask.engine, eplb=ask.eplb, **kw)


def _fixed_deployment(ask: Ask, system: System, c: dict, n: int):
    """`_fixed`'s answer worked out afresh (not kept)."""
    return fixed_deployment(ask.model, system, concurrency=int(n), simulate=False, **_fixed_args(ask, c))


def _meets(ask: Ask, c: dict, res) -> bool:
    """Whether a closed-form operating point meets the demand's p99 targets: its p99 TPOT (the p99 request's share
    of chunk-carrying steps, `serving.p99_request_step`; QA 2026-11-28: held to the mean TPOT, a B200 replica's cap
    was set at 105 in flight, where its replayed p99 TPOT missed the 50 ms target) and, aggregated, its p99 TTFT."""
    tpot, ttft = ask.demand.tpot_target_s, ask.demand.ttft_p99_s
    if tpot is not None and res["tpot_p99_s"] > tpot:
        return False
    if ttft is not None and c["mode"] == "aggregated" and res["ttft_p99_s"] > ttft:
        return False
    return True


def _curve(ask: Ask, system: System, c: dict) -> FixedCurve:
    """Candidate `c`'s fixed-deployment closed form, set up once and asked at any concurrency."""
    return FixedCurve(ask.model, system, **_fixed_args(ask, c))


def _at(curve: FixedCurve, n: int) -> dict:
    """The closed form at `n` requests in flight per replica, as numbers (what `_meets` and `_cost` read): the
    figures `fixed_deployment(..., simulate=False)` gives at n."""
    return {k: float(v[0]) for k, v in curve([n]).items()}


def _max_concurrency(ask: Ask, system: System, c: dict, guess: float, curve: FixedCurve | None = None):
    """The most requests in flight per replica whose predicted TPOT (and p99 TTFT) meet the targets, within
    the replica's batch cap (scheduler and KV memory): (n, the closed form at n: `_at`) or None.

    Starts from the layout search's batch (`guess`), which meets the speed floor: TPOT need not fall as the
    batch shrinks below it (a few sequences leave attention-DP ranks idle), so the search walks down from there
    only when the guess misses, and bisects upward between a point that meets and one that does not. Each point
    is the candidate's closed form (`FixedCurve`: set up once, one step-time lookup per point).
    """
    curve = curve or _curve(ask, system, c)
    cap = max(int(math.floor(curve.batch_cap_per_replica)), 1)
    g = min(max(int(round(guess)), 1), cap)
    r_g = _at(curve, g)
    if _meets(ask, c, r_g):
        lo, r_lo = g, r_g
        if cap == g:
            return lo, r_lo
        r_cap = _at(curve, cap)
        if _meets(ask, c, r_cap):
            return cap, r_cap
        hi = cap
    else:
        hi, x, r_lo = g, g, None
        while x > 1:
            x = max(1, int(x / 1.5))
            r = _at(curve, x)
            if _meets(ask, c, r):
                lo, r_lo = x, r
                break
            hi = x
        if r_lo is None:
            return None
    while hi - lo > max(1, int(lo * CONCURRENCY_TOLERANCE)):
        mid = int(round(math.sqrt(lo * hi))) if hi > 4 * lo else (lo + hi) // 2
        mid = min(max(mid, lo + 1), hi - 1)
        r = _at(curve, mid)
        if _meets(ask, c, r):
            lo, r_lo = mid, r
        else:
            hi = mid
    return lo, r_lo


def _per_replica_rate(res, G: int, O: float) -> float:
    """Requests per second one replica completes at a fixed-deployment point."""
    return float(res["output_tokens_per_s_per_gpu"]) * G / O


def replicas_for(d_value: float, kind: str, c: dict) -> tuple[int, int]:
    """(decode or aggregated replicas, prefill replicas) that carry `d_value` users in flight or requests/s at
    the candidate's concurrency cap, with Poisson headroom (equations.fleet.peak_in_flight)."""
    if d_value <= 0:
        return 0, 0
    n_mean = d_value if kind == "users" else float(F.requests_in_flight(d_value, c["e2e_at_cap_s"]))
    R = max(int(F.replicas_needed(F.peak_in_flight(n_mean), c["cap"])), 1)
    P = 0
    if c["mode"] == "disaggregated":
        P = prefill_replicas(d_value / c["e2e_at_cap_s"] if kind == "users" else d_value, c)
    return R, P


def prefill_replicas(rate_per_s: float, c: dict) -> int:
    """Prefill replicas that keep the prompt queue of `rate_per_s` requests under the utilisation ceiling."""
    return max(int(F.utilisation_bound_servers(rate_per_s * c["prompt_tokens"], c["prefill_tokens_per_s"],
                                               fleet.PREFILL_MAX_UTILISATION)), 1)


def size(ask: Ask, system: System, mode: str, precision, r) -> dict | None:
    """One shortlisted layout sized for the demand: replicas, GPUs, $/h, at the most requests per replica the
    targets allow; None when not even one request per replica meets them."""
    spec = ask.speculative if (r["speculative"] and r["speculative"]["used"]) else None
    if spec is not None and ask.draft_search and r["speculative"]["draft_tokens"] != spec.draft_tokens:
        spec = model_speculation(ask.model, int(r["speculative"]["draft_tokens"]))  # the count its answer used
    par = _replica(r["parallelism"])
    G = par["tp"] * par["attn_dp"] * par["pp"]
    c = {"mode": mode, "precision": precision, "speculative": spec, "parallelism": par, "replica_gpus": G,
         "layout_text": layout_spec(par), "layout": _one_replica(r["layout"]), "prefill": None,
         "prompt_tokens": ask.I}
    if mode == "disaggregated":
        p = r["prefill"]
        pp = _replica(p["parallelism"])
        Gp = pp["tp"] * pp["attn_dp"] * pp["pp"]
        c["prefill"] = {"layout": _one_replica(p["layout"]), "parallelism": pp, "replica_gpus": Gp,
                        "lone_prompt_s": float(p["ttft_s"])}
        c["prefill_tokens_per_s"] = float(p["input_tokens_per_s_per_gpu"]) * Gp
    curve = _curve(ask, system, c)
    found = _max_concurrency(ask, system, c, float(r["batch_per_replica"]), curve)
    if found is None:
        return None
    cap, at_cap = found
    c["cap"] = cap
    c["e2e_at_cap_s"] = cap / _per_replica_rate(at_cap, G, ask.O)
    R, P = replicas_for(ask.demand.value, ask.demand.kind, c)
    op_at = partial(_at, curve)
    s = _cost(ask, system, c, R, P, op_at)
    if mode == "disaggregated":  # size the prefill pool for the rate the decode replicas actually serve
        P2 = prefill_replicas(s["requests_per_s"], c)
        if P2 != P:
            s = _cost(ask, system, c, R, P2, op_at)
    return s


def _ttft(c: dict, op, lat: float, p99_ratio: float = 1.0):
    """(mean TTFT, p99 TTFT) that candidate `c` predicts at operating point `op` (numbers, or arrays over a curve):
    aggregated, the closed form's (its prefill chunks and queue, the request latency included); disaggregated, one
    prompt alone on the prefill pool with its KV transfer, one decode step, and the request latency `lat` outside
    the engines (as the replay counts it, `replay`'s client_latency_s); its p99 the p99 prompt's, the lone prompt's
    time scaled by `p99_ratio` (`serving.p99_prompt_ratio`, p99 prompt / mean prompt: prefill time grows at least
    linearly with the prompt; the plan's p99 read the mean prompt, 0.21 s against a replayed 1.47 s on Azure's
    conversation trace)."""
    if c["mode"] == "aggregated":
        return op["ttft_s"], op["ttft_p99_s"]
    lone = c["prefill"]["lone_prompt_s"]
    t = lone + op["tpot_s"] + lat
    return t, t + lone * (p99_ratio - 1.0)


def _in_flight_for_rate(ask: Ask, system: System, c: dict, rate: float) -> float:
    """Requests in flight per replica at which one replica serves `rate` requests/s: Little's law at that load's own
    end-to-end time, N = rate x e2e(N), e2e = TTFT + (O - 1) x TPOT as the candidate predicts them at N (`_ttft`; the
    closed form). N - rate x e2e(N) grows with N while the replica keeps up, so N is found between the whole numbers
    (1 to the candidate's cap) where it turns positive (linear between them); below one request, rate x e2e(1).
    Where even the cap does not keep up (the replicas carry the rate with Poisson headroom, so only by rounding),
    the cap's latency answers: rate x e2e(cap), as the replica count was sized."""
    cap = max(int(c["cap"]), 1)
    n = np.arange(1, cap + 1, dtype=float)
    op = _curve(ask, system, c)(n)
    e2e = np.asarray(_ttft(c, op, calibration(ask.ideal, system.chip).request_latency_s)[0], dtype=float) \
        + (ask.O - 1) * np.asarray(op["tpot_s"], dtype=float)
    g = n - rate * e2e
    k = int(np.argmax(g >= 0)) if np.any(g >= 0) else cap
    if k >= cap:
        return float(F.requests_in_flight(rate, c["e2e_at_cap_s"]))
    if k == 0:
        return float(F.requests_in_flight(rate, e2e[0]))
    return float(k + (0.0 - g[k - 1]) / (g[k] - g[k - 1]))


def _cost(ask: Ask, system: System, c: dict, R: int, P: int, op_at=None) -> dict:
    """The candidate at R replicas (and P prefill replicas): its operating point, GPUs and dollars.
    `op_at(n)`: the operating point at n requests in flight per replica (default: the whole fixed-deployment
    answer, `_fixed`); `size` ranks candidates on the closed form's numbers alone (`_at`, the same figures), and
    `best` asks the whole answer for the one it keeps (`lite` marks a candidate costed so)."""
    d = ask.demand
    G = c["replica_gpus"]
    n_mean = d.users / R if d.kind == "users" else _in_flight_for_rate(ask, system, c, d.rate / R)
    n_op = max(int(round(n_mean)), 1)
    op = op_at(n_op) if op_at is not None else _fixed(ask, system, c, n_op)
    x = _per_replica_rate(op, G, ask.O)
    served = R * x if d.kind == "users" else d.rate
    gpus = R * G + (P * c["prefill"]["replica_gpus"] if c["prefill"] else 0)
    price = system.chip.price_usd_per_hour
    usd_h = float(F.fleet_usd_per_hour(gpus, price))
    cap_units = c["cap"] if d.kind == "users" else c["cap"] / c["e2e_at_cap_s"]
    bound = "decode replica"
    # spare capacity as the fleet was sized: the mean in flight whose Poisson p99 fills R caps (`replicas_for`), not
    # every seat busy (QA 2026-11-28: 63.9% headroom claimed where 50% more demand already sized a fourth replica)
    held = float(F.mean_in_flight_at_peak(R * c["cap"]))
    spare = float(F.headroom(1, held if d.kind == "users" else held / c["e2e_at_cap_s"], d.value))
    if c["prefill"] and P:  # the prefill pool's prompts/s bound the fleet too (in users: that rate x e2e at the cap)
        prompts = c["prefill_tokens_per_s"] / c["prompt_tokens"]
        # and a replica's capacity: its share of the pool's prompts (QA 2026-11-28: 8.75 requests/s stated per
        # decode replica whose 2 prefill workers admit 6.1, beside a headroom that already counted them)
        pool = P * prompts / R * (c["e2e_at_cap_s"] if d.kind == "users" else 1.0)
        if pool < cap_units:
            cap_units, bound = pool, "prefill pool"
        spare = min(spare, float(F.headroom(P, prompts * (c["e2e_at_cap_s"] if d.kind == "users" else 1.0),
                                            d.value)))
    ttft_mean, ttft = (float(t) for t in _ttft(c, op, calibration(ask.ideal, system.chip).request_latency_s,
                                                p99_prompt_ratio(ask.input_len, ask.I)))
    return {**c, "lite": op_at is not None, "replicas": R, "prefill_replicas": P, "gpus": gpus, "op": op,
            "sized_for": float(d.value), "requests_per_s": served,
            "in_flight_per_replica": n_mean, "capacity_per_replica": cap_units, "capacity_bound": bound,
            "headroom": spare, "usd_per_gpu_hour": price,
            "usd_per_hour": usd_h, "output_tokens_per_s": served * (ask.O_served or ask.O),
            "usd_per_mtok_output": float(F.usd_per_mtok(usd_h, served * (ask.O_served or ask.O))),
            "predicted": {"tpot_s": float(op["tpot_s"]), "ttft_s": ttft_mean, "ttft_p99_s": ttft,
                          "user_tokens_per_s": float(op["user_tokens_per_s"])}}


def best(ask: Ask, system: System, mode: str) -> tuple[dict | None, str | None]:
    """The cheapest sized candidate of one mode on one system across the allowed precisions, or (None, why)."""
    cands, why = [], None
    for prec in ask.precisions:
        try:
            sl, w = shortlist(ask, system, mode, prec)
        except FitError as e:
            sl, w = [], str(e)
        why = why or w
        cands += [(b, prec, r) for b, r in sl]
    cands.sort(key=lambda x: x[0])
    top = None
    for bound, prec, r in cands:
        if top is not None and bound * 0.85 > top["usd_per_hour"]:
            break
        s = size(ask, system, mode, prec, r)
        # cheapest per hour, then fewest GPUs, then (users served faster) the least per output token
        if s is not None and (top is None or (s["usd_per_hour"], s["gpus"], s["usd_per_mtok_output"]) <
                              (top["usd_per_hour"], top["gpus"], top["usd_per_mtok_output"])):
            top = s
    if top is not None and top["lite"]:
        top = _cost(ask, system, top, top["replicas"], top["prefill_replicas"])
    if top is None:
        why = why or (f"no {mode} layout on {system.chip.id} meets the targets at even one request per replica"
                      if cands else f"no {mode} layout of the model fits {system.chip.id}")
    return top, why


# ----------------------------------------------------------------------------------------------- the replay
def _step_cost(ask: Ask, system: System, s: dict) -> StepCost:
    """The simulator's step cost for one speculating replica of `s` at its operating point (the step model's
    tangent at the speculative pace); plans that do not speculate replay through `serving.settled_replay`."""
    _, _, I, O, L, _, cal, eng, costs, kern = _serving_setup(ask.model, system, ask.input_len, ask.output_len,
                                                             s["precision"], ask.kv_precision, ask.ideal, None,
                                                             ask.engine, None, ask.eplb)
    op = s["op"]
    B = max(float(op["decoding_per_replica"]), 1.0)
    e = s["speculative"].tokens_per_step if s["speculative"] is not None else 1.0
    ovh = engine_overhead_s(eng, cal)
    pf = 0.0 if s["mode"] == "disaggregated" else B * e * I / O  # prompt tokens per step, on average
    # the secant through a pure decode step and a step carrying a chunk (`prefill_step_tokens`): at the average
    # prompt load it gives fixed mode's mean step
    a = op["parallelism"]["attn_dp"]
    piece = prefill_piece(I, engine_rank_chunk(eng, a))
    c_step, _, c_rank = (0.0, 0.0, None) if s["mode"] == "disaggregated" else \
        (float(v) for v in prefill_step_tokens(B, e, I, O, piece, a, cal.dp_prefill_alignment))
    sc = StepCost.from_step_model(ask.model, system, s["layout_text"], batch=B, context=L, prompt_len=max(I, 1.0),
                                  prefill_tokens=c_step, prefill_rank_tokens=c_rank, precision=s["precision"],
                                  kv_precision=costs.kv_precision, cal=cal, overhead_s=ovh, kernels=kern)
    n_op = max(int(round(s["in_flight_per_replica"])), 1)
    plain_s = s if s["speculative"] is None else {**s, "speculative": None}
    t0 = float(op["tpot_s"]) if s["speculative"] is None else float(_fixed(ask, system, plain_s, n_op)["tpot_s"])
    t_lin = float(sc.step_time_s(B, B * L, pf))
    if t_lin > 1.02 * t0:
        # the step time bends up at the operating point (a compute or communication knee): the tangent's
        # intercept would be negative. Use the chord from half the batch instead (or from zero, if that too
        # would cross zero), so the simulated step still takes t0 at the operating point.
        half = _fixed(ask, system, plain_s, max(n_op // 2, 1))
        bh = max(float(half["decoding_per_replica"]), 0.5)
        th = float(half["tpot_s"])
        slope = (t0 - th) / max(B - bh, 1e-9) if B > bh else t0 / B
        icept = t0 - slope * B
        if icept < 0:
            slope, icept = t0 / B, 0.0
        k = slope * B / max(t_lin - sc.overhead_s, 1e-12)
        # both lines' variable terms scale (the step model's tangent is on the memory line, its burst side on the
        # compute line: `StepCost.from_step_model`), so the operating point's step is icept + slope * B = t0
        sc = dataclasses.replace(sc, overhead_s=max(icept, 1e-9), **{f: getattr(sc, f) * k for f in (
            "flops_per_token", "attn_flops_per_context_token", "attn_flops_per_sequence", "weight_dense_bytes",
            "expert_bytes_all", "kv_read_bytes_per_context_token", "kv_read_bytes_per_sequence",
            "kv_write_bytes_per_token", "prefill_attn_flops_per_pair")})
    if s["speculative"] is not None:  # one simulated step = one token per sequence, at the speculative pace:
        # every term of the step, on whichever line `from_step_model` wrote it (compute, or memory where a prompt
        # token costs more than a decoding sequence: always under attention DP), runs k times as long
        k = float(op["tpot_s"]) / t0
        sc = dataclasses.replace(sc, peak_flops_per_s=sc.peak_flops_per_s / k,
                                 bandwidth_bytes_per_s=sc.bandwidth_bytes_per_s / k, overhead_s=sc.overhead_s * k)
    return fleet.decode_only(sc) if s["mode"] == "disaggregated" else sc


#: A demand of concurrent users is replayed at the Poisson rate that holds them in flight (`replay`): to
#: USERS_TOLERANCE, in at most USERS_REPLAYS more replays.
USERS_TOLERANCE, USERS_REPLAYS = 0.05, 6


def replay(ask: Ask, system: System, s: dict, n_requests: int | None = None, workers=None) -> fleet.FleetReplay:
    """Replay the sized fleet: Poisson arrivals at the served rate, the length distributions, a least-loaded
    router over the replicas (a represented subset when there are many); TTFT on the client's clock (the calibrated
    request latency outside the engines added, as `throughput` and `chalk simulate` count it). A demand of
    concurrent users is replayed at the rate that holds them in flight: the sizing's rate comes from the closed
    form's time per request, and a replay that serves requests faster held fewer (Llama-3.1-8B, 2,000 users on three
    H100s: 460 in flight per replica where 667 were sized), passing a p99 TTFT target the users would miss."""
    sim = _replay(ask, system, s, n_requests, workers)
    if ask.demand.kind != "users":
        return sim
    # the requests a replay holds in flight grow with its rate, steeply near the replicas' capacity (a 25% higher
    # rate took 320 in flight to 660): the rate is bisected on a log scale between one that holds too few and one
    # that holds too many, after Little's law's first guess, until the replay holds the users to USERS_TOLERANCE
    want, rate = ask.demand.users / s["replicas"], s["requests_per_s"]
    lo = hi = None  # (rate, replay) holding too few / too many
    for _ in range(USERS_REPLAYS):
        held = float(sim.mean_in_flight_per_replica)
        if not (math.isfinite(held) and held > 0) or abs(held / want - 1.0) <= USERS_TOLERANCE:
            return sim
        if held < want:
            lo = (rate, sim)
        else:
            hi = (rate, sim)
        rate = math.sqrt(lo[0] * hi[0]) if lo and hi else rate * want / held
        sim = _replay(ask, system, {**s, "requests_per_s": rate}, n_requests, workers)
    held = float(sim.mean_in_flight_per_replica)
    if held < want * (1 - USERS_TOLERANCE) and hi is not None:
        return hi[1]  # the nearest replay holding at least the users: a target it meets, they meet
    return sim


def _replay(ask: Ask, system: System, s: dict, n_requests: int | None = None, workers=None) -> fleet.FleetReplay:
    """`replay` at `s`'s served rate."""
    n_fl = max(float(s["in_flight_per_replica"]), 1.0)
    want = int(n_requests or ask.sim_requests)
    k = int(min(s["replicas"], max(1, want // int(5 * n_fl + 1)), MAX_SIMULATED_REPLICAS))
    n = int(min(MAX_REQUESTS, max(want, math.ceil(6 * k * n_fl))))
    op = s["op"]
    x = _per_replica_rate(op, s["replica_gpus"], ask.O)
    prefill = None
    if s["mode"] == "disaggregated":
        prefill = {"servers": s["prefill_replicas"], "tokens_per_s": s["prefill_tokens_per_s"],
                   "lone_prompt_s": s["prefill"]["lone_prompt_s"]}
    kw = dict(replicas=s["replicas"], max_batch=max(int(s["cap"]), 1), rate_per_s=s["requests_per_s"], n_requests=n,
              input_len=ask.input_len, output_len=ask.output_len, est_ttft_s=s["predicted"]["ttft_s"],
              est_tpot_s=float(op["tpot_s"]), simulate_replicas=k, warmup_s=2.0 * n_fl / x, seed=ask.seed,
              prefill=prefill, workers=workers, loop=replay_loop(),
              client_latency_s=calibration(ask.ideal, system.chip).request_latency_s)
    if ask.trace is not None:  # the trace's own requests around its peak, on every replica (the stretch is the
        # whole fleet's work however many replicas share it), the p99s over the busiest window
        kw["arrivals"], kw["measure_window"] = ask.trace.around_peak(most=MAX_REQUESTS)
        kw["simulate_replicas"] = s["replicas"]
    if s["speculative"] is None:
        # each replica is the engine model throughput and chalk simulate replay (`serving.open_loop_replay`): the
        # engine's prefill chunk per attention-DP rank (a disaggregated decode replica: prompt tokens free, as
        # throughput's disaggregated tail replays it), the step cost linear around the batch the replay settles at
        fx = _fixed_setup(ask.model, system, layout=s["layout_text"], input_len=ask.input_len,
                          output_len=ask.output_len, precision=s["precision"], kv_precision=ask.kv_precision,
                          ideal=ask.ideal, engine=ask.engine, eplb=ask.eplb)
        dis = s["mode"] == "disaggregated"
        chunk = None if dis else replica_chunk_tokens(fx)
        return settled_replay(fx, lambda sc: fleet.replay(fleet.decode_only(sc) if dis else sc, prefill_chunk=chunk,
                                                          kv_capacity_tokens=fx.kv_tokens, **kw),
                              s["requests_per_s"] / s["replicas"])[0]
    chunk = None
    if s["mode"] == "aggregated":  # speculating: the step cost at the speculative pace (`_step_cost`)
        from chalk.specs.engine import load_engine

        # each attention-DP rank has its own chunk budget (`prefill_step_tokens`); no engine named: the budget
        # engines default to, as throughput's (`default_chunk_tokens`)
        a = op["parallelism"]["attn_dp"]
        chunk = engine_rank_chunk(load_engine(ask.engine) if ask.engine is not None else None, a) * a
    return fleet.replay(_step_cost(ask, system, s), prefill_chunk=chunk, **kw)


#: The module whose import loads the compiled simulator loop (`warm_replay_loop`).
_COMPILED_MODULE = "chalk.analyses.traffic.simulate_compiled"


def replay_loop() -> str:
    """The simulator loop a plan's replays run: 'compiled' once the compiled loop is loaded in this process
    (`warm_replay_loop`: a portfolio, which replays hundreds of candidates, loads it first), else 'auto' (the
    compiled loop for long replays only, `simulate.COMPILED_MIN_REQUESTS`).

    A plan replays only its finalists (`verify_finalists`): one to a few replays of a few thousand requests each,
    which the Python loop runs in less CPU than importing numba and loading the compiled loop takes (~0.6 CPU-s:
    the README's 4-chip plans as one CLI command fell from 2.3 to 1.2 CPU-s). Both loops give identical answers
    (tests/test_simulate_compiled.py), so the plan does too."""
    return "compiled" if _COMPILED_MODULE in sys.modules else "auto"


@lru_cache(maxsize=1)
def warm_replay_loop() -> str:
    """Load the compiled simulator loop where numba loads (`chalk[fast]`), for a process about to replay many
    candidates (~0.2 CPU-s to import, ~0.5 s to load the cached machine code on first use, repaid several times
    over by tens of replays); the loop `replay_loop` now picks ('compiled', or 'auto' without numba)."""
    try:
        import chalk.analyses.traffic.simulate_compiled  # noqa: F401  (imports numba; loads the cached loop)
    except (ImportError, RuntimeError, OSError):
        return "auto"
    return replay_loop()


def sim_meets(ask: Ask, sim: fleet.FleetReplay) -> bool:
    tpot, ttft = ask.demand.tpot_target_s, ask.demand.ttft_p99_s
    ok = True
    if tpot is not None and not math.isnan(sim.tpot_p99_s):  # NaN: no request had a second token to time
        ok &= sim.tpot_p99_s <= tpot
    if ttft is not None:
        ok &= math.isfinite(sim.ttft_p99_s) and sim.ttft_p99_s <= ttft
    return bool(ok)


def verify(ask: Ask, system: System, s: dict) -> dict:
    """Replay `s`; while the measured p99s miss a target, add replicas (prefill replicas for a disaggregated
    TTFT miss that the prefill queue causes), up to MAX_BUMPS times, then back to the fewest between the last miss and
    the first pass that meet them (`_trim`). Adds 'simulated', 'meets_targets', 'bumps'."""
    tpot, ttft = ask.demand.tpot_target_s, ask.demand.ttft_p99_s
    bumps, miss = 0, None
    while True:
        sim = replay(ask, system, s)
        if sim_meets(ask, sim) or bumps >= MAX_BUMPS:
            break
        bumps += 1
        miss = (s["replicas"], s["prefill_replicas"])
        over_tpot = sim.tpot_p99_s / tpot if tpot and math.isfinite(sim.tpot_p99_s) else 0.0
        over_ttft = sim.ttft_p99_s / ttft if ttft and math.isfinite(sim.ttft_p99_s) else 0.0
        over = max(over_tpot, over_ttft, 1.0)
        R, P = s["replicas"], s["prefill_replicas"]
        # grow by twice the miss, and by at least 5%, 10%, 20%, ... as misses persist: a p99 driven by the
        # spread of prefill stalls falls slowly with the load, so small steps would stall below the target
        step = min(max(2.0 * (over - 1.0), 0.05 * 2 ** (bumps - 1)), 0.5)
        grow = lambda n: max(n + 1, int(math.ceil(n * (1.0 + step))))  # noqa: E731
        if s["mode"] == "disaggregated" and over_ttft > 1.0 and over_ttft >= over_tpot:
            P = grow(P)
        else:
            R = grow(R)
        s = _cost(ask, system, s, R, P)
    if miss is not None and sim_meets(ask, sim):
        s, sim = _trim(ask, system, s, sim, miss)
    R0, P0 = replicas_for(ask.demand.value, ask.demand.kind, s)
    return {**s, "simulated": sim, "meets_targets": sim_meets(ask, sim), "bumps": bumps,
            "bump_replicas": s["replicas"] / max(R0, 1), "bump_prefill": s["prefill_replicas"] / max(P0, 1)}


def _trim(ask: Ask, system: System, s: dict, sim, miss: tuple) -> tuple:
    """(candidate, replay) with the fewest replicas between a replay that missed (`miss`: its replicas and prefill
    replicas) and `s`, which meets the targets one bump later: a bump grows by up to half, so it can overshoot (800
    users of Llama-3.1-8B on H100s went from 3 replicas, missing, to 5, where 4 meet: 5 GPUs against 900 users' 4).
    Bisected on the pool the last bump grew."""
    R1, P1 = s["replicas"], s["prefill_replicas"]
    grew_r = miss[0] != R1
    lo, hi = (miss[0], R1) if grew_r else (miss[1], P1)  # lo misses, hi meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t = _cost(ask, system, s, mid, P1) if grew_r else _cost(ask, system, s, R1, mid)
        m = replay(ask, system, t)
        if sim_meets(ask, m):
            hi, s, sim = mid, t, m
        else:
            lo = mid
    return s, sim


def verify_finalists(jobs: list, every: bool = False) -> list:
    """`verify` the sized candidates `jobs` [(ask, system, s)] that can still be the cheapest; the others are not
    replayed. The cheapest is the least ($/h, GPUs, place in `jobs`) among the replayed candidates that meet the
    targets (`plan` sorts its options so). Candidates are replayed in that order of their sized figures, and one is
    skipped once a replayed candidate that meets the targets comes before it: a replay only adds replicas (`verify`
    bumps, and trims back no further than a replay that missed), so its replayed figures would come later still,
    and it cannot be the cheapest. Nothing is skipped until some candidate meets the targets (a plan that meets none
    replays all). `every`: replay them all.
    Returns each candidate verified, or None where it was skipped, in the order given.

    The answer is the one replaying everything gives: the replays that run are the same replays (each is
    deterministic: its own seed, no state shared between candidates), and the cheapest option is among them."""
    out: list = [None] * len(jobs)
    bar = None  # ($/h, GPUs, place) of the first replayed candidate that meets the targets
    for i in sorted(range(len(jobs)), key=lambda i: (jobs[i][2]["usd_per_hour"], jobs[i][2]["gpus"], i)):
        ask, system, s = jobs[i]
        if not every and bar is not None and (s["usd_per_hour"], s["gpus"], i) > bar:
            break  # so is every later one: they come in order of the same key
        v = out[i] = verify(ask, system, s)
        if v["meets_targets"]:
            bar = min(bar, (v["usd_per_hour"], v["gpus"], i)) if bar is not None else (v["usd_per_hour"], v["gpus"], i)
    return out


def fleet_for(demand_value: float, kind: str, s: dict) -> tuple[int, int, int]:
    """(replicas, prefill replicas, GPUs) the verified candidate needs at another demand: the same layout and
    concurrency cap, scaled by the bumps its replay needed, and never more demand per replica (or prefill replica)
    than the candidate was sized and replayed at (`sized_for`; QA 2026-11-28: a diurnal hour at 89% of the peak got
    4 of the peak's 5 replicas from the closed form, 11% more per replica than the replay checked, and missed the
    p99 TPOT target when replayed)."""
    d = float(demand_value)
    R, P = replicas_for(d, kind, s)
    R = int(math.ceil(R * s.get("bump_replicas", 1.0) - 1e-9))
    P = int(math.ceil(P * s.get("bump_prefill", 1.0) - 1e-9))
    load = s.get("sized_for")
    if load:
        R = max(R, int(math.ceil(d * s["replicas"] / load - 1e-9)))
        P = max(P, int(math.ceil(d * s["prefill_replicas"] / load - 1e-9))) if s["prefill"] else P
    return R, P, R * s["replica_gpus"] + (P * s["prefill"]["replica_gpus"] if s["prefill"] else 0)
