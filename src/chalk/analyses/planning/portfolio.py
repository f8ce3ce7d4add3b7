"""`chalk plan --portfolio`: several models, each with its demand and latency targets, placed on the chips a fleet
can rent at the least total cost within its constraints (GPUs per chip type, a budget, a power envelope, regions
with their own prices and stock).

Two steps. (1) Candidates: every model x chip x allowed precision x engine x mode is one single-model plan
(`chalk.analyses.planning.plan.plan` on that one chip, mode, precision and engine): the cheapest deployment that meets
the model's targets in the replay, or why none does. Candidates are independent, so an executor (`chalk.executor`:
in this process, a process pool, or Ray) runs them side by side, and each finished one is appended to a results
file (JSON lines) at once; `resume` reads that file back and evaluates only what is missing. (2) Assignment: each
model takes one of its candidates that met its targets, in one region; the total $/hour is minimised subject to the
fleet's constraints by an exact branch and bound (`solve`). Then each constraint is dropped in turn and the
assignment solved again: a constraint binds when dropping it makes the fleet cheaper (or possible at all).

Assumes: the fleet is sized for each model's peak hour (its diurnal peak, its trace's busiest minute) and the
constraints hold at that peak; a chip's price scales every layout on it alike, so a candidate sized at the catalog
price keeps its layout at a region's price (only its $/hour changes); power is GPUs x the chip's TDP (an upper
bound, as `chalk.analyses.economics.energy.chip_power_w`) x the fleet's PUE.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from chalk.analyses.planning.portfolio_runs import RESULTS_HEADER, read_results  # noqa: F401 - re-exported
from chalk.analyses.records.results import Result, _frame, jsonable
from chalk.errors import ChalkError, FitError, InputError
from chalk.specs.workload import duration_s

#: Models answered per portfolio, and candidates, at most (a YAML typo must not start a week of work).
MAX_MODELS, MAX_CANDIDATES = 100, 100_000
#: Branch-and-bound nodes visited before the search stops with the best assignment found (then not proven optimal).
NODE_LIMIT = 2_000_000
METHOD = ("exact branch and bound over one candidate per model (per chip and region the one of fewest GPUs that "
          "meets the model's targets: the others cost more of every resource), models by descending cheapest cost, "
          "options cheapest first, bounded by the cost so far plus each remaining model's cheapest option and "
          "pruned where a constraint's use so far plus the remaining models' least use exceeds it")

_MODEL_KEYS = {"name", "model", "users", "rate", "trace", "speedup", "input_len", "output_len", "min_user_tps",
               "ttft_p99", "tpot_p99", "diurnal", "precisions", "engines", "modes", "chips", "kv_precision"}
_TOP_KEYS = {"models", "chips", "fleet", "settings", "prices"}
_FLEET_KEYS = {"gpus", "budget_usd_per_hour", "power_mw", "pue", "regions"}
_REGION_KEYS = {"prices", "gpus", "power_mw", "chips"}


# ----------------------------------------------------------------------------------------------- reading
def load(source) -> dict:
    """A portfolio from a YAML file (or a dict, paths then relative to the working folder), checked before any
    work: unknown keys, models, chips, engines and precisions are one InputError / UnknownNameError line."""
    from chalk.specs.catalog import as_model, as_system, read_yaml
    from chalk.specs.engine import load_engine
    from chalk.specs.precision import canonical

    if isinstance(source, dict):
        data, base, where = source, Path("."), "portfolio"
    else:
        base, where = Path(source).resolve().parent, str(source)
        data = read_yaml(source, where)
    _keys(data, _TOP_KEYS, where)
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise InputError(f"{where}: 'models' must be a list of at least one model")
    if len(models) > MAX_MODELS:
        raise InputError(f"{where}: {len(models)} models, more than {MAX_MODELS}")
    chips = _names(data.get("chips"), f"{where}: chips")
    settings = dict(data.get("settings") or {})
    _keys(settings, {"sim_requests", "seed"}, f"{where}: settings")
    sim = _whole(settings.get("sim_requests", 4000), f"{where}: settings: sim_requests", lo=0)
    seed = _whole(settings.get("seed", 0), f"{where}: settings: seed")
    prices = _prices(data.get("prices"), f"{where}: prices")
    fleet = _fleet(data.get("fleet") or {}, f"{where}: fleet")
    all_chips = set(chips)
    out_models, seen = [], set()
    for i, m in enumerate(models):
        w = f"{where}: models[{i}]"
        if not isinstance(m, dict) or "model" not in m:
            raise InputError(f"{w} must be a mapping with a 'model'")
        _keys(m, _MODEL_KEYS, w)
        spec = as_model(m["model"])  # an unknown model fails here, by name
        name = str(m.get("name") or spec.id)
        if name in seen:
            raise InputError(f"{w}: the name {name!r} is used twice (give each model its own 'name')")
        seen.add(name)
        mine = _names(m.get("chips"), f"{w}: chips") if m.get("chips") is not None else chips
        if not mine:
            raise InputError(f"{w}: no chips to place it on (give 'chips' at the top or on the model)")
        all_chips.update(mine)
        demand = {"input_len": m.get("input_len"), "output_len": m.get("output_len"), "users": m.get("users"),
                  "rate": m.get("rate"), "min_user_tps": m.get("min_user_tps"),
                  "ttft_p99_s": _seconds(m.get("ttft_p99"), f"{w}: ttft_p99"),
                  "tpot_p99_s": _seconds(m.get("tpot_p99"), f"{w}: tpot_p99"),
                  "kv_precision": str(m.get("kv_precision", "auto")), "sim_requests": sim, "seed": seed}
        if m.get("trace") is None:  # the demand checked here, before any candidate runs (QA 2026-11-28: a model
            # with both rate and users failed after all 8 candidates, as 'no chip ... meets its targets')
            from chalk.specs.demand import Demand

            try:
                Demand(users=demand["users"], rate=demand["rate"], min_user_tps=demand["min_user_tps"],
                       ttft_p99_s=demand["ttft_p99_s"], tpot_p99_s=demand["tpot_p99_s"])
            except InputError as e:
                raise InputError(f"{w}: {str(e).replace('--users N', 'users: N').replace('--rate R', 'rate: R')}") \
                    from None
        if m.get("speedup") is not None and m.get("trace") is None:  # as the command line refuses it
            raise InputError(f"{w}: speedup scales a trace's arrival rate: give a trace (or scale its rate)")
        if m.get("trace") is not None:
            demand["trace"] = str(_path(base, m["trace"]))
            demand["speedup"] = _number(m.get("speedup", 1.0), f"{w}: speedup")
            from chalk.analyses.planning.trace_demand import demand_from_trace

            demand_from_trace(demand["trace"], spec, speedup=demand["speedup"])  # a bad trace fails here, once
        if m.get("diurnal") is not None:
            d = m["diurnal"]
            if not isinstance(d, (str, list)):
                raise InputError(f"{w}: diurnal must be a file or a list of 24 hourly multipliers")
            demand["diurnal"] = str(_path(base, d)) if isinstance(d, str) else \
                [_number(x, f"{w}: diurnal[{k}]", lo=-1e-300) for k, x in enumerate(d)]
            from chalk.specs.demand import read_diurnal

            read_diurnal(demand["diurnal"])
        precisions = [None if p in (None, "default") else canonical(str(p)) for p in (m.get("precisions") or [None])]
        engines = [load_engine(e).id for e in _names(m.get("engines"), f"{w}: engines")] or [None]
        modes = _names(m.get("modes"), f"{w}: modes") or ["aggregated", "disaggregated"]
        from chalk.analyses.planning.plan import _modes

        modes = list(_modes(modes))
        # a catalog model by its id; a config.json (or its folder) by its path, which plan() reads again
        given = Path(str(m["model"]).strip())
        ref = str(given.resolve()) if given.exists() else spec.id  # as load_model reads it: a path that exists
        out_models.append({"name": name, "model": ref, "chips": mine, "precisions": list(dict.fromkeys(precisions)),
                           "engines": engines, "modes": modes,
                           "demand": {k: v for k, v in demand.items() if v is not None}})
    systems = {c: as_system(c) for c in sorted(all_chips)}  # an unknown chip fails here, by name
    for r, reg in fleet["regions"].items():
        for c in list(reg["prices"]) + list(reg["gpus"]) + list(reg["chips"] or []):
            if c not in systems:
                raise InputError(f"{where}: fleet: regions: {r} names {c}, which no model may use "
                                 f"({', '.join(systems)})")
    for c in list(fleet["gpus"]) + list(prices):
        if c not in systems:
            raise InputError(f"{where}: {c} is not among the portfolio's chips ({', '.join(systems)})")
    if fleet["power_mw"] is not None or any(r["power_mw"] is not None for r in fleet["regions"].values()):
        for c, s in systems.items():
            if _power_w(s.chip) is None:
                raise InputError(f"{where}: a power envelope is given but {c} has no TDP in the catalog")
    pf = {"source": where, "models": out_models, "chips": sorted(all_chips), "prices": prices, "fleet": fleet,
          "settings": {"sim_requests": sim, "seed": seed}}
    n = len(candidates(pf))
    if n > MAX_CANDIDATES:
        raise InputError(f"{where}: {n:,} candidates, more than {MAX_CANDIDATES:,}")
    return pf


def _keys(d, allowed, where):
    if not isinstance(d, dict):
        raise InputError(f"{where} must be a mapping")
    bad = sorted(str(k) for k in d if k not in allowed)
    if bad:
        raise InputError(f"{where}: unknown key {bad[0]!r} (known: {', '.join(sorted(allowed))})")


def _names(v, where) -> list[str]:
    if v is None:
        return []
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() for x in items):
        raise InputError(f"{where} must be a list of names")
    return list(dict.fromkeys(x.strip() for x in items))


def _path(base: Path, p) -> Path:
    p = Path(str(p)).expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def _seconds(v, where):
    if v is None:
        return None
    s = duration_s(v, where)  # the one reading of a duration, as the command line's time options
    if not (math.isfinite(s) and s > 0):
        raise InputError(f"{where} must be a positive duration, got {str(v)[:40]!r}")
    return s


def _number(v, where, lo=0.0):
    if isinstance(v, bool):
        raise InputError(f"{where} must be a number, got {v!r}")
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where} must be a number, got {str(v)[:40]!r}") from None
    if not (math.isfinite(x) and x > lo):
        raise InputError(f"{where} must be a finite number above {lo:g}, got {str(v)[:40]!r}")
    return x


def _whole(v, where, lo=-1) -> int:
    """A whole number above `lo` (QA 2026-11-28: 'abc' and null raised tracebacks, 1.9 GPUs became 1 in silence)."""
    x = _number(v, where, lo=lo)
    if x != math.floor(x):
        raise InputError(f"{where} must be a whole number, got {str(v)[:40]!r}")
    return int(x)


def _prices(v, where) -> dict:
    if v is None:
        return {}
    _keys(v, set(v) if isinstance(v, dict) else set(), where)
    return {str(c): _number(p, f"{where}: {c}") for c, p in v.items()}


def _gpus(v, where) -> dict:
    if v is None:
        return {}
    _keys(v, set(v) if isinstance(v, dict) else set(), where)
    return {str(c): _whole(n, f"{where}: {c}") for c, n in v.items()}


def _fleet(f, where) -> dict:
    _keys(f, _FLEET_KEYS, where)
    regions = {}
    if f.get("regions") is not None and not isinstance(f["regions"], dict):
        raise InputError(f"{where}: regions must be a mapping of region name to its prices, gpus and power")
    for r, reg in (f.get("regions") or {}).items():
        w = f"{where}: regions: {r}"
        _keys(reg or {}, _REGION_KEYS, w)
        reg = reg or {}
        regions[str(r)] = {"prices": _prices(reg.get("prices"), f"{w}: prices"),
                           "gpus": _gpus(reg.get("gpus"), f"{w}: gpus"),
                           "power_mw": None if reg.get("power_mw") is None else _number(reg["power_mw"], f"{w}: power_mw"),
                           "chips": _names(reg.get("chips"), f"{w}: chips") or None}
    return {"gpus": _gpus(f.get("gpus"), f"{where}: gpus"),
            "budget_usd_per_hour": None if f.get("budget_usd_per_hour") is None else
            _number(f["budget_usd_per_hour"], f"{where}: budget_usd_per_hour"),
            "power_mw": None if f.get("power_mw") is None else _number(f["power_mw"], f"{where}: power_mw"),
            "pue": 1.0 if f.get("pue") is None else _number(f["pue"], f"{where}: pue", lo=0.999999),
            "regions": regions}


def _power_w(chip):
    """One chip's power: measured where the catalog has it, else its TDP (an upper bound)."""
    return getattr(chip, "measured_power_w", None) or chip.tdp_w


# ----------------------------------------------------------------------------------------------- candidates
def candidates(pf) -> list[dict]:
    """Every model x chip x precision x engine x mode, each with a key that changes when anything its answer
    depends on changes (so a resumed run reuses exactly the answers still valid)."""
    from chalk.analyses.planning.plan import engines_for_vendor
    from chalk.specs.catalog import as_system

    out = []
    for m in pf["models"]:
        for chip in m["chips"]:
            runs = engines_for_vendor(as_system(chip).chip.vendor)
            for p in m["precisions"]:
                for e in m["engines"]:
                    if e is not None and e not in runs:
                        continue  # that engine does not run on this vendor's chips
                    for mode in m["modes"]:
                        c = {"name": m["name"], "model": m["model"], "chip": chip, "precision": p, "engine": e,
                             "mode": mode, "demand": m["demand"]}
                        c["key"] = _key(c)
                        out.append(c)
    return out


def _key(c) -> str:
    d = dict(c["demand"])
    for f in ("trace", "diurnal"):
        if isinstance(d.get(f), str):  # the file's bytes, not only its name
            d[f] = [d[f], _digest(d[f])]
    cfg = Path(c["model"]) / "config.json" if Path(c["model"]).is_dir() else Path(c["model"])
    model = [c["model"], _digest(str(cfg))] if cfg.is_file() else c["model"]  # a config's bytes, as a trace's
    body = json.dumps([model, c["chip"], c["precision"], c["engine"], c["mode"], d], sort_keys=True)
    return f"{c['name']}|{c['chip']}|{c['precision'] or 'default'}|{c['engine'] or 'any'}|{c['mode']}|" + \
        hashlib.sha256(body.encode()).hexdigest()[:12]


def _digest(path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def evaluate(c: dict) -> dict:
    """One candidate: the single-model plan on its chip, mode, precision and engine; its cheapest option that meets
    the targets (GPUs, layout, $/hour at the catalog price, the replay's p99s), or why there is none."""
    from chalk.analyses.planning.plan import plan
    from chalk.analyses.planning.sizing import warm_replay_loop

    warm_replay_loop()  # a portfolio replays many candidates: the compiled loop pays for its loading
    d = dict(c["demand"])
    rec = {"key": c["key"], "name": c["name"], "model": c["model"], "chip": c["chip"], "precision": c["precision"],
           "engine": c["engine"], "mode": c["mode"]}
    try:
        r = plan(c["model"], [c["chip"]], precision=c["precision"], engine=c["engine"], modes=(c["mode"],),
                 curves=False, **d)
    except FitError as e:
        return {**rec, "status": "no fit", "why": str(e)}
    except ChalkError as e:
        return {**rec, "status": "error", "why": str(e)}
    o = r["options"][0]
    sim = o["simulated"]
    return {**rec, "status": "ok", "why": None, "option": jsonable({
        "system": o["system"], "mode": o["mode"], "engine": o["engine"], "precision": o["precision"],
        "kv_precision": o["kv_precision"], "gpus": o["gpus"], "replicas": o["replicas"], "layout": o["layout"],
        "usd_per_gpu_hour": o["usd_per_gpu_hour"], "usd_per_hour": o["usd_per_hour"],
        "usd_per_mtok_output": o["usd_per_mtok_output"], "ttft_p99_s": sim["ttft_p99_s"],
        "tpot_p99_s": sim["tpot_p99_s"], "meets_targets": o["meets_targets"], "targets": o["targets"],
        "autoscaled_gpus_mean": (o.get("diurnal") or {}).get("average_gpus")})}


def run_candidates(cands, executor=None, results=None, resume: bool = False, progress=None) -> tuple[dict, dict]:
    """({key: record}, counts): every candidate evaluated (`evaluate`) on `executor` (default this process), each
    finished one appended to the JSON-lines file `results`; with `resume`, only the missing ones run
    (`chalk.analyses.planning.portfolio_runs`)."""
    from chalk.analyses.planning.portfolio_runs import run

    return run(evaluate, cands, executor, results, resume, progress)


# ----------------------------------------------------------------------------------------------- assignment
class PortfolioResult(Result):
    """`chalk plan --portfolio`: the cheapest assignment of models to chips, layouts and regions.

    Keys: models (one per model: name, model, chip, system, region, mode, engine, precision, kv_precision, layout,
    gpus, replicas, usd_per_gpu_hour, usd_per_hour, ttft_p99_s, tpot_p99_s (the replay's), targets, binds, alone
    (its own cheapest option, ignoring the fleet's limits), candidate), total {usd_per_hour, usd_per_day, gpus,
    gpus_by_chip, power_mw}, constraints (each: name, limit, used, unit, binds, usd_per_hour_without), binding
    (the names of the constraints that bind), method, proven_optimal, candidates {total, meeting_targets, ...},
    notes; run {executor, evaluated, reused, results} (how this run went: not part of the answer).
    `.to_frame()`: one row per model."""

    FRAME_KEYS = ("name", "model", "chip", "region", "mode", "engine", "precision", "layout", "gpus", "replicas",
                  "usd_per_gpu_hour", "usd_per_hour", "ttft_p99_s", "tpot_p99_s")

    def to_frame(self):
        df = _frame([{**{k: m.get(k) for k in self.FRAME_KEYS}, "binds": "; ".join(m["binds"])}
                     for m in self["models"]])
        df.attrs.update({"total": self["total"], "binding": self["binding"]})
        return df

    def answer(self) -> dict:
        """The result without `run` (where and how fast it ran): equal whichever executor ran it."""
        return jsonable({k: v for k, v in self.items() if k != "run"})


def _region_options(pf) -> list[tuple]:
    """(region or None, chip, $/GPU-hour, source of that price) for every chip each region offers."""
    from chalk.specs.catalog import as_system

    regions = pf["fleet"]["regions"] or {None: {"prices": {}, "chips": None}}
    out = []
    for r, reg in regions.items():
        for chip in pf["chips"]:
            if reg["chips"] is not None and chip not in reg["chips"]:
                continue
            if chip in reg["prices"]:
                out.append((r, chip, reg["prices"][chip], f"region {r}"))
            elif chip in pf["prices"]:
                out.append((r, chip, pf["prices"][chip], "portfolio prices"))
            else:
                out.append((r, chip, float(as_system(chip).chip.price_usd_per_hour), "catalog"))
    return out


def _constraints(pf) -> list[dict]:
    """Every finite limit: [{name, limit, unit, use(option) -> amount}]."""
    f = pf["fleet"]
    out = []
    for chip, n in sorted(f["gpus"].items()):
        out.append({"name": f"gpus {chip}", "limit": float(n), "unit": "GPUs",
                    "use": lambda o, chip=chip: o["gpus"] if o["chip"] == chip else 0.0})
    for r, reg in sorted(f["regions"].items()):
        for chip, n in sorted(reg["gpus"].items()):
            out.append({"name": f"gpus {chip} in {r}", "limit": float(n), "unit": "GPUs",
                        "use": lambda o, chip=chip, r=r: o["gpus"] if o["chip"] == chip and o["region"] == r else 0.0})
        if reg["power_mw"] is not None:
            out.append({"name": f"power in {r}", "limit": reg["power_mw"] * 1e6, "unit": "W",
                        "use": lambda o, r=r: o["power_w"] if o["region"] == r else 0.0})
    if f["power_mw"] is not None:
        out.append({"name": "power", "limit": f["power_mw"] * 1e6, "unit": "W", "use": lambda o: o["power_w"]})
    if f["budget_usd_per_hour"] is not None:
        out.append({"name": "budget", "limit": f["budget_usd_per_hour"], "unit": "USD/h",
                    "use": lambda o: o["usd_per_hour"]})
    return out


def options_per_model(pf, records: dict) -> dict:
    """{model name: [option]}: per chip and region, the candidate of fewest GPUs that meets the model's targets,
    costed at that region's price."""
    from chalk.specs.catalog import as_system

    power = {c: _power_w(as_system(c).chip) for c in pf["chips"]}
    pue = pf["fleet"]["pue"]
    offered = _region_options(pf)
    out = {m["name"]: [] for m in pf["models"]}
    for m in pf["models"]:
        best: dict = {}
        recs = sorted((r for r in records.values() if r["name"] == m["name"] and r["status"] == "ok"
                       and r["option"]["meets_targets"]), key=lambda r: r["key"])
        for r in recs:
            o = r["option"]
            for region, chip, price, source in offered:
                if chip != r["chip"]:
                    continue
                cand = {"name": m["name"], "candidate": r["key"], "chip": chip, "region": region,
                        "gpus": float(o["gpus"]), "usd_per_gpu_hour": price, "price_source": source,
                        "usd_per_hour": o["gpus"] * price,
                        "power_w": None if power[chip] is None else o["gpus"] * power[chip] * pue, "record": r}
                k = (chip, region)
                if k not in best or (cand["gpus"], cand["candidate"]) < (best[k]["gpus"], best[k]["candidate"]):
                    best[k] = cand
        out[m["name"]] = [best[k] for k in sorted(best, key=lambda k: (k[0], str(k[1])))]
    return out


def assign(pf, records: dict, node_limit: int = NODE_LIMIT) -> dict:
    """The cheapest assignment (see the module's doc) and what binds; FitError (one line) where a model has no
    candidate meeting its targets or no assignment meets every constraint."""
    from chalk.analyses.planning.assign import binding

    opts = options_per_model(pf, records)
    for m in pf["models"]:
        if not opts[m["name"]]:
            mine = [r for r in records.values() if r["name"] == m["name"]]
            why = next((r["why"] for r in sorted(mine, key=lambda r: r["key"]) if r.get("why")), "no candidate")
            raise FitError(f"{m['name']}: no chip, mode, precision or engine meets its targets: {why}")
    names = [m["name"] for m in pf["models"]]
    cons = _constraints(pf)
    costs = [[o["usd_per_hour"] for o in opts[n]] for n in names]
    uses = [[[c["use"](o) for c in cons] for o in opts[n]] for n in names]
    limits = [c["limit"] for c in cons]
    b = binding(costs, uses, limits, [c["name"] for c in cons], node_limit)
    base = b["base"]
    alone = {n: min(range(len(costs[i])), key=lambda j: (costs[i][j], j)) for i, n in enumerate(names)}
    if base["choice"] is None:
        raise FitError(_infeasible(pf, cons, b, costs, names, alone, opts))
    choice = {n: opts[n][j] for n, j in zip(names, base["choice"])}
    table = []
    for k, c in enumerate(cons):
        used = float(sum(c["use"](o) for o in choice.values()))
        w = b["without"].get(c["name"])
        saving = None if w is None or w["cost"] is None else base["cost"] - w["cost"]
        table.append({"name": c["name"], "limit": c["limit"], "used": used, "unit": c["unit"],
                      "binds": bool(saving is not None and saving > 1e-9 * max(base["cost"], 1.0)),
                      "usd_per_hour_without": None if w is None else w["cost"]})
    models = []
    for i, n in enumerate(names):
        o, r = choice[n], choice[n]["record"]
        binds = [t["name"] for t in table if t["binds"] and b["without"][t["name"]]["choice"][i] != base["choice"][i]]
        a = opts[n][alone[n]]
        models.append({"name": n, "model": r["model"], "chip": o["chip"], "system": r["option"]["system"],
                       "region": o["region"], "mode": r["mode"], "engine": r["option"]["engine"],
                       "precision": r["option"]["precision"], "kv_precision": r["option"]["kv_precision"],
                       "layout": r["option"]["layout"], "gpus": int(o["gpus"]), "replicas": r["option"]["replicas"],
                       "usd_per_gpu_hour": o["usd_per_gpu_hour"], "price_source": o["price_source"],
                       "usd_per_hour": o["usd_per_hour"], "power_w": o["power_w"],
                       "ttft_p99_s": r["option"]["ttft_p99_s"], "tpot_p99_s": r["option"]["tpot_p99_s"],
                       "targets": r["option"]["targets"], "candidate": o["candidate"],
                       "binds": binds or ["nothing: its own cheapest option that meets its targets"],
                       "alone": {"chip": a["chip"], "region": a["region"], "usd_per_hour": a["usd_per_hour"]}})
    by_chip: dict = {}
    for m in models:
        by_chip[m["chip"]] = by_chip.get(m["chip"], 0) + m["gpus"]
    powers = [m["power_w"] for m in models]
    total = {"usd_per_hour": base["cost"], "usd_per_day": 24.0 * base["cost"], "gpus": sum(by_chip.values()),
             "gpus_by_chip": dict(sorted(by_chip.items())),
             "power_mw": None if any(p is None for p in powers) else sum(powers) / 1e6,
             "usd_per_hour_unconstrained": float(sum(costs[i][alone[n]] for i, n in enumerate(names)))}
    return {"models": models, "total": total, "constraints": table,
            "binding": [t["name"] for t in table if t["binds"]], "method": METHOD,
            "proven_optimal": bool(base["proven_optimal"]), "nodes": base["nodes"]}


def _infeasible(pf, cons, b, costs, names, alone, opts) -> str:
    """One line: no assignment meets every constraint; which one alone stands in the way, or the least each needs."""
    fixes = [(w["cost"], name) for name, w in b["without"].items() if w["choice"] is not None]
    if fixes:
        cost, name = min(fixes)
        lim = next(c for c in cons if c["name"] == name)
        return (f"no assignment of the {len(names)} models meets every fleet constraint: {name} "
                f"({lim['limit']:g} {lim['unit']}) stands in the way; without it the cheapest costs ${cost:,.2f}/h")
    need = []
    for c in cons:
        least = sum(min(c["use"](o) for o in opts[n]) for n in names)
        if least > c["limit"]:
            need.append(f"{c['name']} needs at least {least:,.6g} {c['unit']} (limit {c['limit']:g})")
    return ("no assignment of the models meets every fleet constraint together"
            + (": " + "; ".join(need) if need else ": no single constraint lifted makes it possible"))


def portfolio(source, *, executor=None, results=None, resume: bool = False, progress=None,
              node_limit: int = NODE_LIMIT) -> PortfolioResult:
    """The cheapest assignment of a portfolio's models to chips, layouts and regions (see the module's doc).

    `source`: a portfolio YAML path (or a dict); `executor`: where candidates run (`chalk.executor.executor(...)`;
    default this process); `results`: a JSON-lines file each finished candidate is appended to; `resume`: reuse
    the candidates already in `results`, evaluate only the rest; `progress(done, total)` as candidates finish."""
    pf = load(source)
    if results is not None:
        from chalk.specs.validate import output_path

        output_path(results, "--results", (".jsonl",))
    cands = candidates(pf)
    records, counts = run_candidates(cands, executor, results, resume, progress)
    a = assign(pf, records, node_limit)
    ok = [r for r in records.values() if r["status"] == "ok" and r["option"]["meets_targets"]]
    notes = ["each candidate is a single-model plan on one chip, mode, precision and engine, its latencies "
             "checked in a replay (Poisson arrivals over the replicas, or a trace's own arrivals, least-loaded "
             "router)",
             "sized for each model's peak (diurnal peak hour, a trace's busiest minute); constraints hold at the peak; "
             "power is GPUs x chip TDP (an upper bound)" + (f" x PUE {pf['fleet']['pue']:g}" if pf["fleet"]["pue"] != 1
                                                           else "")]
    if not a["proven_optimal"]:
        notes.append(f"the search stopped at {node_limit:,} nodes: the best assignment found, not proven optimal")
    res = PortfolioResult(source=pf["source"], **{k: v for k, v in a.items() if k != "nodes"},
                          candidates={"total": len(cands), "meeting_targets": len(ok),
                                      "no_fit": sum(r["status"] != "ok" for r in records.values())},
                          settings=pf["settings"], notes=notes)
    res["run"] = {"executor": (executor.describe() if executor is not None else "in-process"),
                  "evaluated": counts["evaluated"], "reused": counts["reused"],
                  "results": None if results is None else str(results), "search_nodes": a["nodes"]}
    return res
