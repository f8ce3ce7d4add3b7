"""`chalk plan`: from demand and latency targets to GPUs, layout, replicas, dollars, and the commands that launch it.

For each candidate chip and serving mode (aggregated; disaggregated prefill/decode pools) `analyses.sizing`
finds the cheapest deployment that meets the targets: the layout search shortlists, the fixed-deployment
prediction sizes the requests in flight per replica, and replicas = ceil(peak requests in flight / that).
Latency is then checked, not assumed: the fleet is replayed in the request simulator (Poisson arrivals, the
length distributions, a least-loaded router over the replicas) and bumped up while the measured p99s miss; only
the options that can still be the cheapest are replayed (`sizing.verify_finalists`), the others are listed as sized.
The options come back cheapest first, each with why it loses to the cheapest, and the launch commands.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from chalk.analyses.planning import sizing as S
from chalk.analyses.traffic.fleet import FleetReplay
from chalk.analyses.step.calibration import calibration, eplb_mode
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.analyses.records.results import PlanResult
from chalk.analyses.traffic.serving import (Speculation, _length, cut_lengths, duration_text as _ms,
                                            draft_counts, resolve_speculation, throughput)
from chalk.equations import fleet as F
from chalk.errors import ChalkError, FitError, InputError
from chalk.specs.catalog import as_model, as_system
from chalk.specs.demand import Demand, candidate_list, parse_prices, read_diurnal
from chalk.specs.precision import canonical
from chalk.specs.validate import list_items, single_line
from chalk.specs.workload import count, positive

#: Requests each option's replay simulates by default (more when a replica holds many in flight).
DEFAULT_SIM_REQUESTS = 12_000


def engines_for_vendor(vendor: str) -> tuple:
    """The engines chalk sizes and launches on a vendor's chips: each catalog engine whose profile runs there
    (`EngineProfile.vendors`, with its source), in `ENGINES` order."""
    from chalk.specs.engine import ENGINES, load_engine

    return tuple(e for e in ENGINES if load_engine(e).runs_on(vendor) is None)


def plan(model, hardware=None, *, input_len=None, output_len=None, users=None, rate=None, min_user_tps=None,
         ttft_p99_s=None, tpot_p99_s=None, diurnal=None, prices=None, engine=None, precision=None,
         kv_precision="auto", speculative: Speculation | str | None = "auto", draft_model: str | None = None,
         modes=S.MODES, ideal: bool = False, sim_requests: int = DEFAULT_SIM_REQUESTS, seed: int = 0,
         curves: bool = True, eplb: str | None = None, trace=None, speedup: float = 1.0,
         checkpoint: str | None = None, replay_all: bool = False) -> PlanResult:
    """The cheapest deployment on each candidate that serves the demand within the latency targets.

    Demand: `users` concurrent users (requests in flight), or `rate` requests/s; `input_len` / `output_len`
    as in `throughput` (means or distributions). Targets: `ttft_p99_s`, `tpot_p99_s`, `min_user_tps` (p99 TPOT
    <= 1 / min_user_tps). `hardware`: chips or systems (a list or 'h100-sxm,h200'; default every catalog chip
    with a price); `prices`: {'h100-sxm': 2.5} or 'h100-sxm=2.5' overrides in $/GPU-hour. `diurnal`: 24 hourly
    multipliers of the demand (a CSV path or numbers): the fleet is sized for the peak hour and the day is
    costed with and without autoscaling. `precision`: one or several weight precisions to choose from (None:
    the checkpoint's; 'explore': the checkpoint's and each narrower one a candidate chip runs natively,
    `explored_precisions`, the default of the CLI and the API); `speculative`: allow speculative decoding / MTP
    ('auto', the default: the model's own MTP draft layers where its config ships them; None: none); `modes`:
    'aggregated', 'disaggregated'.
    `eplb`: whether MoE layouts run an expert-load balancer ('auto' (default): from the calibrated EP width; 'on';
    'off'), for the search, the sizing and the replay alike.
    `trace`: a request trace file (`chalk.analyses.planning.trace_demand`) giving the rate (its busiest minute) and the
    length distributions instead of `rate` / `users` and `input_len` / `output_len`; `speedup` scales its rate.
    `engine`: size (and launch) with that engine only; None: size each engine that runs on the chip's vendor
    (`engines_for_vendor`) with its own profile, one option per chip, mode and engine.
    `checkpoint`: the user's own checkpoint (a repo id or folder) for the launch commands, loaded as given.
    `replay_all`: replay every option. By default an option is replayed only while it can still be the cheapest
    (`sizing.verify_finalists`): one whose sized cost already exceeds that of a replayed option meeting the targets
    (or ties with it, listed after it) is listed as sized, `replayed` False, its `meets_targets` and simulated p99s
    None. The cheapest option, and
    every option that is replayed, are the same either way.
    Raises FitError naming the best reachable latency when no candidate meets the targets.
    """
    eplb = eplb_mode(eplb)  # checked before any work
    if draft_model is not None:
        single_line(draft_model, "draft_model")  # it is printed into a launch command
    from_trace = None
    if trace is not None:
        if users is not None or rate is not None or input_len is not None or output_len is not None:
            raise InputError("a trace gives the demand and the lengths: drop --users/--rate and "
                             "--input-len/--output-len, or drop --trace")
        from chalk.analyses.planning.trace_demand import demand_from_trace

        from_trace = demand_from_trace(trace, as_model(model), speedup=speedup)
        rate, input_len, output_len = from_trace["rate"], from_trace["input_len"], from_trace["output_len"]
    elif speedup != 1.0:
        raise InputError("speedup scales a trace's arrival rate: give a trace (or scale --rate)")
    if input_len is None or output_len is None:
        raise InputError("give the lengths as --input-len and --output-len (or a --trace)")
    demand = Demand(users=users, rate=rate, min_user_tps=min_user_tps, ttft_p99_s=ttft_p99_s, tpot_p99_s=tpot_p99_s)
    curve = read_diurnal(diurnal) if diurnal is not None else None
    modes = _modes(modes)
    precisions = _precisions(precision, model, hardware)
    exploring = isinstance(precision, str) and precision.strip().lower() == "explore"
    sim_requests = count("sim_requests", sim_requests, maximum=1_000_000)
    seed = int(positive("seed", seed, integer=True, allow_zero=True, maximum=2**32))
    if speculative is not None and not isinstance(speculative, (Speculation, str)):
        raise InputError(f"speculative must be a Speculation(draft_tokens, acceptance), got {speculative!r}")
    engine_spec = None  # the engine asked for as sized and launched: its id, with the release where one was named
    if engine is not None:
        from chalk.specs.engine import load_engine

        prof = load_engine(engine)
        engine_spec = f"{prof.id}@{prof.release}" if "@" in str(engine) else prof.id
        engine = prof.id
    if checkpoint is not None:
        from chalk.specs.checkpoints import user_checkpoint

        checkpoint = user_checkpoint(checkpoint)
    m = as_model(model)
    draft_search = isinstance(speculative, str) and len(draft_counts(m)) > 1  # each draft count searched
    speculative = resolve_speculation(speculative, m)
    # sized for what the replicas serve: lengths past the context cut to it, as every door cuts them; a trace's are
    # cut already, pair by pair (`demand_from_trace`): cut again as two unpaired distributions, a long prompt drawn
    # beside an unrelated output crossed the context and the trace's lengths were replaced by a resample of them
    # (QA 2026-11-28: 14,715 prompt tokens sized where the trace holds 15,189)
    input_len, output_len, ctx = cut_lengths(m, input_len, output_len, cut=from_trace is None)
    I, din = _length("input_len", input_len)
    O, dout = _length("output_len", output_len)
    names = candidate_list(hardware)
    systems = [as_system(h) for h in names]  # unknown names fail here, before any work
    given_prices = parse_prices(prices)
    systems = _priced(systems, given_prices)
    peak = float(curve.max()) if curve is not None else 1.0
    ask = S.Ask(model=m, input_len=din if din is not None else I, output_len=dout if dout is not None else O,
                I=I, O=O, demand=demand.scaled(peak), precisions=precisions,
                kv_precision=kv_precision, speculative=speculative, engine=engine, ideal=ideal,
                sim_requests=sim_requests, seed=seed, eplb=eplb, draft_search=draft_search,
                trace=from_trace["arrivals"] if from_trace is not None and curve is None else None,
                O_served=from_trace["peak_output_len"] if from_trace is not None else None)
    jobs, unavailable = [], []  # (hardware name, the ask with its engine, system, sized candidate)
    n_refused = 0  # unavailable candidates that cannot run at all: the engine refuses the checkpoint or the chip
    methods = _checkpoint_methods(m, checkpoint)  # read once: the user's folder's config.json and the model's own
    for name, system in zip(names, systems):
        refused = _refusals(system, methods)
        runs = tuple(e for e in _engines(system) if e not in refused)
        if engine is not None and engine not in runs:
            why = refused.get(engine) or \
                f"{engine} does not run on {system.chip.vendor} chips (chalk launches {', '.join(runs)} there)"
            unavailable += [{"hardware": _name(name), "mode": mode, "engine": engine, "why": why} for mode in modes]
            n_refused += len(modes)
            continue
        if engine is None and refused:  # engines that cannot load the checkpoint: said, not sized
            unavailable += [{"hardware": _name(name), "mode": mode, "engine": e, "why": w}
                            for e, w in refused.items() for mode in modes]
            n_refused += len(refused) * len(modes)
        # exploring: each chip tries the precisions it has a native rate for (an H100 beside a B200 is not sized at
        # FP4 because the B200 runs it), besides the checkpoint's own
        ask_s = ask if not exploring else dataclasses.replace(ask, precisions=tuple(
            p for p in ask.precisions if p is None or p in system.chip.flops_per_s))
        for eng in (engine,) if engine is not None else runs:
            ask_e = dataclasses.replace(ask_s, engine=engine_spec or eng)
            for mode in modes:
                # a release without the KV connector the pools are launched with: said, not sized (QA: vllm@0.6
                # was launched with vLLM V1's NixlConnector)
                why = _no_pools(ask_e.engine) if mode == "disaggregated" else None
                if why:
                    unavailable.append({"hardware": _name(name), "mode": mode, "engine": eng, "why": why})
                    n_refused += 1
                    continue
                try:
                    s, why = S.best(ask_e, system, mode)
                except FitError as e:
                    s, why = None, str(e)
                if s is None:
                    unavailable.append({"hardware": _name(name), "mode": mode, "engine": eng, "why": why})
                    continue
                jobs.append((name, ask_e, system, s))
    if not jobs and unavailable and n_refused == len(unavailable):  # no engine asked for runs the model here
        raise FitError(_cannot_serve(m.id, unavailable))
    # replayed: the candidates that can still be the cheapest (all of them with replay_all)
    replayed = S.verify_finalists([(a, system, s) for _, a, system, s in jobs], every=replay_all)
    options, sized = [], []
    for (name, ask_e, system, s), v in zip(jobs, replayed):
        if v is None:  # sized, not replayed: the sizing as it stands, its latencies unmeasured
            v = {**s, "simulated": None, "meets_targets": None, "bumps": None}
        o = _option(ask_e, _name(name), system, v, model, draft_model, curve, demand, checkpoint)
        o["price"] = _price(system, given_prices)
        options.append(o)
        sized.append(v)
    if not any(o["meets_targets"] for o in options):
        raise FitError(_unmet(ask, systems, options, unavailable))
    # met in the replay, cheapest first; then those not replayed, then those that missed
    rank = {True: 0, None: 1, False: 2}
    order = sorted(range(len(options)), key=lambda i: (rank[options[i]["meets_targets"]], options[i]["usd_per_hour"],
                                                       options[i]["gpus"]))
    options, sized = [options[i] for i in order], [sized[i] for i in order]
    _why(options)
    res = PlanResult(model=m.id, demand={"kind": demand.kind, "value": demand.value, "unit": demand.unit,
                                         "peak_multiplier": peak, "planned_for": demand.value * peak},
                     targets=_targets(demand), input_len=I, output_len=O,
                     input_dist=getattr(din, "label", None), output_dist=getattr(dout, "label", None), options=options,
                     unavailable=unavailable, engine=engine, sim_requests=sim_requests,
                     engines=sorted({o["engine"] for o in options}),
                     efficiency=options[0]["efficiency"],
                     notes=_notes(options, systems, curve, trace=ask.trace is not None))
    res["trace"] = None if from_trace is None else from_trace["derived"]
    # what the verifying replays fed the fleet: the trace's own requests around its busiest window, or Poisson
    # arrivals at the sized rate (a diurnal curve scales the rate: Poisson then)
    res["replay_arrivals"] = "trace" if ask.trace is not None else "poisson"
    own = ModelSizes(m).default_precision()
    res["precisions_explored"] = list(dict.fromkeys(f"{own} (checkpoint)" if p is None or p == own else p
                                                    for p in precisions))
    if from_trace is not None:
        res["notes"] = from_trace["notes"] + res["notes"]
    if ctx:
        res["notes"] = [ctx] + res["notes"]
    if curves:
        res["curves"] = _curves(ask, systems, names, options, sized, demand)
    return res


def _name(h) -> str:
    return str(getattr(h, "id", h))


def _engines(system) -> tuple:
    """The engines chalk sizes and launches on `system`'s chips (`engines_for_vendor`; `_refusals` says which of them
    cannot load the checkpoint)."""
    return engines_for_vendor(system.chip.vendor)


def _checkpoint_methods(model, checkpoint: str | None = None) -> tuple:
    """The quantisation methods an engine must load: the user's own `checkpoint` folder's (which the launch loads)
    and `model`'s own checkpoint's; None where either declares none."""
    from chalk.specs.checkpoints import checkpoint_quant_method

    fmt = getattr(model, "weight_format", None)
    return checkpoint_quant_method(checkpoint), fmt.method if fmt is not None else None


def _refusals(system, methods: tuple) -> dict:
    """engine -> why it cannot load a checkpoint quantised with one of `methods` on `system`'s chips, for each engine
    chalk runs there that refuses (`EngineProfile.refuses`)."""
    from chalk.specs.engine import load_engine

    out = {}
    for e in _engines(system):
        eng = load_engine(e)
        why = next((w for w in (eng.refuses(m, system.chip.vendor) for m in methods) if w), None)
        if why:
            out[e] = why
    return out


def _no_pools(engine: str) -> str | None:
    """Why `engine` (an id or id@release) cannot run disaggregated prefill/decode pools, or None
    (`EngineProfile.refuses_disaggregation`)."""
    from chalk.specs.engine import load_engine

    return load_engine(engine).refuses_disaggregation()


def _price(system, given: dict) -> dict:
    """The $/GPU-hour an option is costed at, with its source and date, or marked as given with --price."""
    chip = system.chip
    if chip.id in given:
        return {"usd_per_gpu_hour": float(chip.price_usd_per_hour), "given": True, "source": "given with --price",
                "date": None, "assumption": False}
    return {"usd_per_gpu_hour": float(chip.price_usd_per_hour), "given": False,
            "source": chip.sources.get("price_usd_per_hour") or chip.price_note or None, "date": chip.price_date,
            "assumption": bool(chip.price_is_assumption)}


def _modes(modes) -> tuple:
    ms = tuple(m.strip().lower() for m in (modes.split(",") if isinstance(modes, str) else modes))
    alias = {"agg": "aggregated", "disagg": "disaggregated", "pd": "disaggregated"}
    ms = tuple(dict.fromkeys(alias.get(m, m) for m in ms))
    bad = [m for m in ms if m not in S.MODES]
    if bad or not ms:
        raise InputError(f"modes must be among {', '.join(S.MODES)}, got {', '.join(bad) or 'none'}")
    return ms


#: The weight precisions `plan` explores by default, narrowest last (precision='explore').
SERVING_PRECISIONS = ("bf16", "fp8", "fp4")


def explored_precisions(model, hardware) -> list:
    """plan's default `precision` ('explore', every door): the checkpoint's own (None) and each narrower
    SERVING_PRECISIONS entry some candidate chip has a native rate for (plan then sizes each chip at those of them
    it has a native rate for, besides the checkpoint's own)."""
    from chalk.specs.catalog import as_model, resolve_hardware
    from chalk.specs.demand import candidate_list
    from chalk.specs.precision import bytes_per_element

    own = ModelSizes(as_model(model)).default_precision()
    native = set()
    for h in candidate_list(hardware):
        native |= set((h if hasattr(h, "chip") else resolve_hardware(str(h).strip())).chip.flops_per_s)
    try:
        own_bytes = bytes_per_element(own)
    except ChalkError:  # a format without a plain element size: keep the checkpoint's only
        return [None]
    return [None, *(p for p in SERVING_PRECISIONS if p in native and bytes_per_element(p) < own_bytes)]


def _precisions(precision, model=None, hardware=None) -> tuple:
    if precision is None:
        return (None,)
    if isinstance(precision, str) and precision.strip().lower() == "explore":
        return tuple(explored_precisions(model, hardware))
    items = list_items(precision, "precision") if isinstance(precision, str) else list(precision)
    out = tuple(dict.fromkeys(canonical(p.strip()) if isinstance(p, str) and p.strip() not in ("", "default")
                              else None for p in items))
    return out or (None,)


def _priced(systems, prices: dict):
    known = {s.chip.id for s in systems}
    extra = [c for c in prices if c not in known]
    if extra:
        raise InputError(f"--price names {', '.join(extra)}, which is not among the candidates "
                         f"({', '.join(sorted(known))})")
    out = []
    for s in systems:
        p = prices.get(s.chip.id, s.chip.price_usd_per_hour)
        if not p > 0:
            raise InputError(f"{s.chip.id} has no price: give one with --price {s.chip.id}=USD_PER_HOUR")
        if s.chip.id in prices:
            chip = dataclasses.replace(s.chip, price_usd_per_hour=float(p), price_is_assumption=False,
                                       price_note="given with --price")
            s = dataclasses.replace(s, chip=chip)
        out.append(s)
    return out


def _targets(d: Demand) -> dict:
    return {"ttft_p99_s": d.ttft_p99_s, "tpot_p99_s": d.tpot_target_s, "min_user_tps": d.min_user_tps}


# ----------------------------------------------------------------------------------------------- options
def _option(ask, name, system, v, model_arg, draft_model, curve, demand, checkpoint=None) -> dict:
    from chalk.analyses.step.parallel import engine_provenance
    from chalk.specs.engine import load_engine

    sim = v["simulated"]  # None: not replayed (`sizing.verify_finalists`)
    par = v["parallelism"]
    prof = load_engine(ask.engine) if ask.engine else None
    # which framework version the option's step times come from, as estimate, throughput and simulate say it
    kp = engine_provenance(system.chip, calibration(ask.ideal, system.chip), prof, ask.model)
    o = {"hardware": name, "chip": system.chip.id, "system": system.id, "mode": v["mode"],
         "engine": prof.id if prof else None, "engine_release": prof.release if prof else None,
         "engine_version": prof.version if prof else None, "kernels": kp["kernels"], "kernel_notes": kp["notes"],
         "gpus": int(v["gpus"]), "replicas": int(v["replicas"]), "layout": _label(v), "parallelism": par,
         "replica_layout": v["layout"], "domain_chips": system.chips, "host_chips": system.chips_per_host,
         "replica_domains": -(-int(v["replica_gpus"]) // system.chips), "domains": _domains(v, system.chips),
         "replica_gpus": v["replica_gpus"], "concurrency_per_replica": float(v["in_flight_per_replica"]),
         "max_concurrency_per_replica": int(v["cap"]), "capacity_per_replica": float(v["capacity_per_replica"]),
         "capacity_bound": v.get("capacity_bound", "decode replica"),
         "demand": ask.demand.value, "demand_unit": ask.demand.unit, "headroom": max(v["headroom"], 0.0),
         "precision": v["op"]["precision"], "kv_precision": v["op"]["kv_precision"],
         "speculative": v["op"]["speculative"], "usd_per_gpu_hour": float(v["usd_per_gpu_hour"]),
         "usd_per_hour": float(v["usd_per_hour"]), "usd_per_day": 24.0 * float(v["usd_per_hour"]),
         "usd_per_mtok_output": float(v["usd_per_mtok_output"]),
         "output_tokens_per_s": float(v["output_tokens_per_s"]), "requests_per_s": float(v["requests_per_s"]),
         "predicted": v["predicted"],
         "simulated": {**sim.to_dict(), "ttft_p99_s": sim.ttft_p99_s, "tpot_p99_s": sim.tpot_p99_s} if sim is not None
         else dict.fromkeys(_REPLAY_FIELDS), "replayed": sim is not None, "targets": _targets(ask.demand),
         "meets_targets": None if sim is None else bool(v["meets_targets"]),
         "bumps": None if sim is None else int(v["bumps"]),
         "efficiency": v["op"]["efficiency"], "prefill": None}
    if v["prefill"] is not None:
        p = v["prefill"]
        o["prefill"] = {"layout": p["layout"], "parallelism": p["parallelism"], "replicas": int(v["prefill_replicas"]),
                        "gpus": int(v["prefill_replicas"] * p["replica_gpus"]),
                        "input_tokens_per_s_per_replica": float(v["prefill_tokens_per_s"]),
                        "lone_prompt_ttft_s": p["lone_prompt_s"]}
    o["launch"], o["launch_notes"], o["checkpoint"], o["launch_steps"], o["launch_refused"] = _launch(
        ask, system, v, model_arg, draft_model, checkpoint)
    if curve is not None:
        o["diurnal"] = _diurnal(ask, demand, curve, v)
    return o


#: The keys of an option's `simulated` (`fleet.FleetReplay.to_dict`), None where the option was not replayed.
_REPLAY_FIELDS = tuple(f.name for f in dataclasses.fields(FleetReplay))


def _domains(v, chips: int) -> int:
    """Scale-up domains (nodes) the option's fleet takes: replicas smaller than a domain share domains (per pool),
    larger ones span whole domains each."""
    def pool(G: int, R: int) -> int:
        return R * -(-G // chips) if G >= chips else -(-G * R // chips)
    n = pool(int(v["replica_gpus"]), int(v["replicas"]))
    if v["prefill"] is not None:
        n += pool(int(v["prefill"]["replica_gpus"]), int(v["prefill_replicas"]))
    return n


def _label(v) -> str:
    base = f"{v['layout']} x{v['replicas']}"
    if v["prefill"] is None:
        return base
    return f"prefill {v['prefill']['layout']} x{v['prefill_replicas']} + decode {base}"


def _why(options) -> None:
    """Each option's one-line reason for losing to the cheapest (what it costs more, and where that comes from)."""
    best = options[0]
    for o in options:
        if o is best:
            o["why"] = "cheapest"
            continue
        if o["meets_targets"] is None:
            o["why"] = f"{o['usd_per_hour'] / best['usd_per_hour']:.2f}x cost as sized: not replayed (a replay only " \
                       "adds replicas)"
            continue
        if not o["meets_targets"]:
            sim, t = o["simulated"], o["targets"]
            miss = [f"p99 {k.upper()} {_ms(sim[f'{k}_p99_s'])} > {_ms(t[f'{k}_p99_s'])}"
                    for k in ("ttft", "tpot") if t[f"{k}_p99_s"] and (sim[f"{k}_p99_s"] or math.inf) > t[f"{k}_p99_s"]]
            o["why"] = "misses in the replay: " + ", ".join(miss)
            continue
        ratio = o["usd_per_hour"] / best["usd_per_hour"]
        g, p = o["gpus"] / best["gpus"], o["usd_per_gpu_hour"] / best["usd_per_gpu_hour"]
        parts = []
        if abs(g - 1) > 0.005:
            parts.append(f"{g:.2f}x GPUs")
        if abs(p - 1) > 0.005:
            parts.append(f"{p:.2f}x $/GPU-h")
        o["why"] = f"{ratio:.2f}x cost: " + (", ".join(parts) or "same GPUs and price")


def _diurnal(ask, demand: Demand, curve, v) -> dict:
    """Replicas per hour of the day and the day's cost, fixed at the peak fleet and autoscaled hour by hour."""
    hours = []
    for mult in curve:  # (no hour loads a replica more than the peak's replay verified: `fleet_for`)
        R, P, g = S.fleet_for(demand.value * float(mult), demand.kind, v)
        R, P = min(R, v["replicas"]), min(P, v["prefill_replicas"])
        g = R * v["replica_gpus"] + (P * v["prefill"]["replica_gpus"] if v["prefill"] else 0)
        hours.append((R, P, g))
    gpus = [h[2] for h in hours]
    price = float(v["usd_per_gpu_hour"])
    fixed = F.daily_usd([v["gpus"]] * 24, price)
    auto = F.daily_usd(gpus, price)
    mean_mult = float(np.mean(curve))
    tokens_day = float(v["output_tokens_per_s"]) / (ask.demand.value or 1.0) * demand.value * mean_mult * 86400
    return {"multipliers": [float(x) for x in curve], "replicas_per_hour": [h[0] for h in hours],
            "prefill_replicas_per_hour": [h[1] for h in hours] if v["prefill"] else None,
            "gpus_per_hour": gpus, "peak_replicas": int(v["replicas"]), "peak_gpus": int(v["gpus"]),
            "average_replicas": float(np.mean([h[0] for h in hours])), "average_gpus": float(np.mean(gpus)),
            "usd_per_day_fixed": fixed, "usd_per_day_autoscaled": auto, "autoscaling_saving": 1 - auto / fixed,
            "usd_per_mtok_output_fixed": fixed / tokens_day * 1e6 if tokens_day > 0 else None,
            "usd_per_mtok_output_autoscaled": auto / tokens_day * 1e6 if tokens_day > 0 else None}


# ----------------------------------------------------------------------------------------------- launch
def _launch(ask, system, v, model_arg, draft_model, checkpoint=None) -> tuple[dict, list, dict, dict, dict]:
    """Engine -> launch text for this option on the engine that sized it (`plan` sizes every option on one, among
    those that can load the checkpoint), the notes, engine -> the checkpoint it loads (`Checkpoint.to_dict`),
    engine -> its per-node commands (`launch_steps`), and engine -> why it has no launch (`launch_refused`)."""
    from chalk.specs.engine import load_engine
    from chalk.specs.launch import (Deployment, Speculation as LaunchSpec, nodes_to_launch, render_launch,
                                    router_launch)

    engines = (ask.engine,)  # as sized: an id, or id@release (its release's profile)
    mid = model_arg if isinstance(model_arg, str) else ask.model.id
    spec = None
    if v["speculative"] is not None:
        mtp = ask.model.mtp_layers > 0  # the checkpoint ships draft layers
        spec = LaunchSpec("mtp", v["speculative"].draft_tokens) if mtp or not draft_model else \
            LaunchSpec("eagle", v["speculative"].draft_tokens, draft_model=draft_model)
    mml = _max_model_len(ask)
    kvp = v["op"]["kv_precision"]
    # the expert-load balancer the sizing assumed (the step model's rule, `Calibration.balances_experts`)
    cal = calibration(ask.ideal, system.chip, ask.eplb)

    def dep(par, seqs, role, rank=0):  # a prefill pool drafts nothing: speculation is a decode-side setting
        return Deployment(mid, tp=par["tp"], pp=par["pp"], ep=par["ep"], attn_dp=par["attn_dp"], dp=1,
                          max_num_seqs=seqs, max_model_len=mml, kv_cache_dtype=kvp,
                          speculative=None if role == "prefill" else spec,
                          eplb=bool(ask.model.is_moe and cal.balances_experts(par["ep"], par["attn_dp"])),
                          precision=v["op"]["precision"], checkpoint=checkpoint,
                          role=None if role == "replica" else role, nodes=_nodes(par, system), node_rank=rank,
                          vendor=system.chip.vendor.lower())

    pools = [("decode" if v["prefill"] else "replica", v["parallelism"], int(v["cap"]), v["replicas"])]
    if v["prefill"] is not None:
        pools.insert(0, ("prefill", v["prefill"]["parallelism"], None, v["prefill_replicas"]))
    out, notes, loads, steps, refused = {}, [], {}, {}, {}
    for asked in engines:
        e = load_engine(asked).id
        parts, mine = [], []
        try:
            for role, par, seqs, n in pools:
                prof, note = _profile(load_engine(asked), system, par, spec is not None and role != "prefill")
                if note and note not in notes:
                    notes.append(f"{e} {role}: {note}")
                d0 = dep(par, seqs, role)
                head = f"# {role}: run {n} of these" + ("" if role == "prefill" else " (decode pool)" if
                                                            role == "decode" else " behind a least-loaded router")
                if d0.nodes > 1:
                    head += f", each over {d0.nodes} nodes"
                for rank in range(nodes_to_launch(e, d0)):
                    cmd = render_launch(e, dep(par, seqs, role, rank), prof)
                    loads[e] = cmd.checkpoint.to_dict()
                    mine.append({"role": role, "replicas": int(n), "gpus_per_replica": _gpus(par),
                                 "nodes": d0.nodes, "node_rank": rank, "argv": list(cmd.argv),
                                 "config_file": cmd.config_file if cmd.config_yaml is not None else None,
                                 "config_yaml": cmd.config_yaml})
                    node = f"\n# node {rank + 1} of {d0.nodes}" if d0.nodes > 1 else ""
                    parts.append((head if rank == 0 else "") + node + "\n" + cmd.text)
            if v["prefill"] is not None:  # the router/proxy that sends each request to a prefill then a decode replica
                parts.append(router_launch(e, v["prefill_replicas"], v["replicas"]))
        except ChalkError as err:
            notes.append(f"{e}: not rendered ({err})")
            refused[e] = str(err)
            continue
        out[e] = "\n".join(parts).lstrip("\n")
        steps[e] = mine
    return out, notes, loads, steps, refused


def _gpus(par) -> int:
    return int(par["tp"] * par["attn_dp"] * par["pp"])


def _nodes(par, system) -> int:
    """Nodes (hosts) one replica of layout `par` spans: its GPUs over a host's (`System.chips_per_host`: an NVL72
    rack's compute tray holds 4; QA 2026-11-28: a TP8 replica on GB200 NVL72 was launched as one 8-GPU node)."""
    G = par["tp"] * par["attn_dp"] * par["pp"]
    return max(-(-G // max(system.chips_per_host, 1)), 1)


def _profile(prof, system, par, speculative: bool):
    """(the engine's defaults for this layout on the chip, a note or None). The memory fraction stays the one the
    sizing read (`serving`: the engine's defaults on the chip, `for_gpu` at TP 1), so the launch gives the engine the
    weights-and-KV memory the plan was sized on; where the engine's own default for the layout is lower (SGLang
    reserves graph memory per DP-attention rank: 0.28 of an H100 at DP16), the note says so."""
    hbm, chip = system.chip.hbm_bytes, system.chip.id
    try:
        sized = prof.for_gpu(hbm, chip=chip)
    except ChalkError:
        return prof, None
    try:
        mine = prof.for_gpu(hbm, tp=par["tp"] * par["attn_dp"], pp=par["pp"], dp=par["attn_dp"],
                            attn_dp=par["attn_dp"] > 1, speculative=speculative, chip=chip)
    except ChalkError:
        mine = sized
    f, own = float(sized.kv_cache_memory_fraction), float(mine.kv_cache_memory_fraction)
    note = None if own >= f - 1e-9 else (
        f"the launch sets the memory fraction the plan was sized on ({f:.3f} of each GPU for weights and KV cache); "
        f"{prof.name}'s own default for this layout, {own:.3f}, would hold {own * hbm / 1e9:.1f} GB of the "
        f"{f * hbm / 1e9:.1f} GB sized; lower it only with fewer sequences per replica")
    return dataclasses.replace(mine, kv_cache_memory_fraction=f), note


def _max_model_len(ask) -> int:
    """Longest request the launch admits, rounded up to 1,024 and at most the model's context: the longest prompt
    plus the longest output where the lengths are bounded (a trace's, an empirical distribution's), else their
    99.9th percentiles (an engine refuses a longer request: a trace's longest must pass)."""
    def hi(spec, mean):
        q = getattr(spec, "quantile", None)
        if not q:
            return float(mean)
        v = float(q(1.0))
        v = v if math.isfinite(v) else float(q(0.999))
        return v if math.isfinite(v) else float(mean) * 10
    n = int(math.ceil((hi(ask.input_len, ask.I) + hi(ask.output_len, ask.O)) / 1024.0) * 1024)
    limit = getattr(ask.model, "max_context", None)
    return int(min(n, limit)) if limit else n


# ----------------------------------------------------------------------------------------------- curves, notes
def _curves(ask, systems, names, options, sized, demand) -> dict:
    """For the plot and the explorer: per chip, $ per M output tokens against per-user speed (the serving
    frontier of the chosen mode and precision); and the GPUs each option needs as the demand grows."""
    grid = demand.value * np.geomspace(0.1, 10.0, 21)
    out = {"demand": grid.tolist(), "demand_unit": demand.unit, "gpus_vs_demand": {}, "cost_vs_speed": {}}
    for o, v in zip(options, sized):
        if o["meets_targets"] is not False:  # those not replayed: their fleet as sized
            key = f"{o['hardware']} {o['mode']}" + (f" {o['engine']}" if o["engine"] else "") + \
                ("" if o["replayed"] else " (as sized)")
            out["gpus_vs_demand"][key] = [int(S.fleet_for(x, demand.kind, v)[2]) for x in grid]
    for name, system in zip(names, systems):
        mine = [o for o in options if o["hardware"] == _name(name)]
        if not mine:
            continue
        o = mine[0]
        try:
            r = throughput(ask.model, system, input_len=ask.input_len, output_len=ask.output_len,
                           precision=o["precision"], kv_precision=ask.kv_precision, ideal=ask.ideal, pareto=True,
                           disaggregated=o["mode"] == "disaggregated", engine=o["engine"], eplb=ask.eplb,
                           replay_latency=False)
        except ChalkError:
            continue
        front = sorted(r["frontier"], key=lambda f: f["user_tokens_per_s"])
        price_ratio = o["usd_per_gpu_hour"] / system.chip.price_usd_per_hour if system.chip.price_usd_per_hour else 1
        out["cost_vs_speed"][_name(name)] = {
            "user_tokens_per_s": [f["user_tokens_per_s"] for f in front],
            "usd_per_mtok_output": [f["cost_per_mtok_output_usd"] * price_ratio for f in front],
            "chosen": [o["predicted"]["user_tokens_per_s"], o["usd_per_mtok_output"]]}
    return out


def _notes(options, systems, curve, trace=False) -> list[str]:
    from chalk.analyses.planning.trace_demand import PEAK_LEAD_WINDOWS, PEAK_TAIL_WINDOWS, PEAK_WINDOW_S

    n = [f"latencies are checked in a replay: the trace's own requests from {PEAK_LEAD_WINDOWS * PEAK_WINDOW_S:g} s "
         f"before its busiest {PEAK_WINDOW_S:g} s to {PEAK_TAIL_WINDOWS * PEAK_WINDOW_S:g} s after, over the "
         f"replicas behind a least-loaded router; p99s over that busiest window" if trace else
         "latencies are checked in a replay: Poisson arrivals over the replicas behind a least-loaded router; "
         "p99s over the steady-state window"]
    for s in systems:
        if s.chip.price_is_assumption:
            n.append(f"{s.chip.id} price ${s.chip.price_usd_per_hour:.2f}/h is an assumption: {s.chip.price_note}")
    if any(o["replayed"] and o["simulated"]["replicas_simulated"] < o["replicas"] for o in options):
        n.append("fleets of many replicas are replayed on a represented subset fed its share of the arrivals")
    skipped = sum(not o["replayed"] for o in options)
    if skipped:
        n.append(f"{skipped} of {len(options)} options were not replayed: sized, each already cost more than an "
                 "option that met the targets in its replay (or as much, listed after it), and a replay only adds "
                 "replicas (the Python API's chalk.plan(..., replay_all=True) replays them too)")
    if curve is not None:
        n.append("sized for the peak hour; autoscaled hours keep the layout and concurrency cap")
    return n


def _cannot_serve(model_id: str, unavailable) -> str:
    """One line: no candidate can serve the model, with the first three distinct reasons."""
    why = "; ".join(list(dict.fromkeys(f"{u['hardware']}: {u['why']}" for u in unavailable))[:3])
    return f"no candidate can serve {model_id}: {why}"


def _unmet(ask, systems, options, unavailable) -> str:
    """One line: no candidate meets the targets; the best reachable per-user speed / TTFT, and where."""
    t = ask.demand
    want = []
    if t.tpot_target_s:
        want.append(f"p99 TPOT <= {_ms(t.tpot_target_s)} ({1 / t.tpot_target_s:.0f} tok/s per user)")
    if t.ttft_p99_s:
        want.append(f"p99 TTFT <= {_ms(t.ttft_p99_s)}")
    best_speed, best_ttft = (0.0, None), (math.inf, None)
    for s in systems:
        for p in ask.precisions:
            try:
                r = throughput(ask.model, s, input_len=ask.input_len, output_len=ask.output_len, precision=p,
                               kv_precision=ask.kv_precision, ideal=ask.ideal, pareto=True,
                               speculative="auto" if ask.draft_search else ask.speculative, engine=ask.engine,
                               eplb=ask.eplb, replay_latency=False)
            except ChalkError:
                continue
            fr = r["frontier"]
            u = max(f["user_tokens_per_s"] for f in fr)
            tt = min(f["ttft_s"] for f in fr)
            best_speed = max(best_speed, (u, s.chip.id))
            best_ttft = min(best_ttft, (tt, s.chip.id))
    if options:  # sized, replayed and bumped, still missing: say what the replay measured at best
        o = min(options, key=lambda o: (o["simulated"]["tpot_p99_s"] or math.inf, o["simulated"]["ttft_p99_s"]))
        sim = o["simulated"]
        return (f"no candidate meets {' and '.join(want) or 'the targets'} in the replay, even after adding "
                f"replicas: best measured p99 TPOT {_ms(sim['tpot_p99_s'])}, p99 TTFT {_ms(sim['ttft_p99_s'])} "
                f"on {o['hardware']} ({o['mode']}, {o['layout']})")
    if best_speed[1] is None:
        return _cannot_serve(ask.model.id, unavailable)
    msg = f"no candidate meets {' and '.join(want) or 'the targets'}: at the mean lengths the best reachable is " \
          f"{best_speed[0]:.1f} tok/s per user (mean TPOT {_ms(1 / best_speed[0])}) on {best_speed[1]}"
    if best_ttft[1] is not None and t.ttft_p99_s:
        msg += f", mean TTFT {_ms(best_ttft[0])} on {best_ttft[1]}"
    if t.tpot_target_s or t.ttft_p99_s:  # the means may pass where the p99s (the long prompts' tail) do not
        msg += "; the targets are p99s, over the prompt distribution's tail and the replay's queueing"
    return msg
