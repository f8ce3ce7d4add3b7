"""Serving throughput: a vectorised search over layouts x batch for the most output tokens/s per GPU that
fits memory and meets the latency constraints; aggregated or disaggregated; the latency-cost frontier and
the price of fast and slow modes.

Aggregated serving (prefill and decode share GPUs, chunked prefill): every decode step of B sequences also
carries B * I / O prompt tokens on average, so prompts cost compute inside the decode step. Decode context
averages I + O / 2. Disaggregated: a decode pool runs pure decode steps; a prefill pool, sized by the ratio
of work, runs prompt chunks; output per GPU counts both pools.
"""

from __future__ import annotations

import numpy as np

from chalk.analyses.calibration import Calibration, calibration
from chalk.analyses.claims import Claim
from chalk.analyses.model_sizes import ModelSizes
from chalk.analyses.parallel import (Layout, check_reach, enumerate_layouts, layout_arrays, memory_per_chip,
                                     model_costs, resolve_kv_precision, stage_step)
from chalk.equations import parallel as P
from chalk.errors import FitError
from chalk.specs.catalog import as_model, as_system
from chalk.specs.hardware import System
from chalk.specs.precision import canonical
from chalk.specs.workload import MAX_GPUS, count, positive, tokens

#: Prompt tokens per prefill step per attention rank in a disaggregated prefill pool (SGLang's large-scale
#: EP blog runs 16,384 tokens per device).
PREFILL_CHUNK_TOKENS = 16384
SPEEDUPS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)


def deployment_sizes(system: System) -> list[int]:
    """Deployment sizes searched when none is given: powers of two and the whole scale-up domain."""
    d = system.chips
    return sorted({n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= d} | {d})


#: Geometric step of the batch grid (sequences per scheduler): 15% apart, from 1 to the scheduler cap.
BATCH_GRID_STEP = 1.15


def _grid(layouts: list[Layout], cap: int, points: int | None = None):
    """Flattened (layout, batch) grid: batch per replica = s * attn_dp * pp, s per scheduler micro-batch."""
    points = points or max(40, int(np.ceil(np.log(max(cap, 2)) / np.log(BATCH_GRID_STEP))) + 1)
    s = np.unique(np.round(np.geomspace(1, cap, points)))
    la = layout_arrays(layouts)
    n, k = len(layouts), len(s)
    idx = np.repeat(np.arange(n), k)
    g = {key: v[idx] for key, v in la.items()}
    g["idx"] = idx
    g["B"] = np.tile(s, n) * g["attn_dp"] * g["pp"]
    return g


def _evaluate(costs, system: System, g: dict, I: float, O: float, cal: Calibration, disaggregated: bool):
    """Per-point metrics of the flattened grid (arrays)."""
    L = I + O / 2
    B = g["B"]
    tp, a, pp, ep, G = g["tp"], g["attn_dp"], g["pp"], g["ep"], g["replica_gpus"]
    w, kv = memory_per_chip(costs, tp, a, pp, ep, B, L)
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    fits = (w + kv) <= usable
    c = np.zeros_like(B) if disaggregated else B * I / O
    dec = stage_step(costs, system, tp, a, pp, ep, B, c, L, I, cal)
    tpot = P.pipeline_token_latency_s(dec["stage_time_s"], pp)
    out = {"fits": fits, "tpot_s": tpot, "user_tokens_per_s": 1 / tpot, "output_per_gpu": B / tpot / G,
           "weight_bytes_per_gpu": w, "kv_bytes_per_gpu": kv, "overlap": dec["overlap"], "step": dec}
    if disaggregated:
        out["ttft_s"] = np.zeros_like(B)  # filled by the prefill pool
        out["prefill_share"] = np.zeros_like(B)
    else:
        pure = stage_step(costs, system, tp, a, pp, ep, B, 0.0, L, I, cal)["stage_time_s"]
        share = np.clip(1 - pure / dec["stage_time_s"], 0.0, 1.0)
        first = stage_step(costs, system, tp, a, pp, ep, B, I, L, I, cal)["stage_time_s"]
        out["ttft_s"] = P.pipeline_token_latency_s(first, pp)
        out["prefill_share"] = share
    return out


def _prefill_pool(costs, system: System, layouts: list[Layout], I: float, cal: Calibration, max_ttft_s):
    """Best prefill layout: input tokens/s per GPU, TTFT of one prompt, and the layout."""
    la = layout_arrays(layouts)
    tp, a, pp, ep, G = la["tp"], la["attn_dp"], la["pp"], la["ep"], la["replica_gpus"]
    chunk = np.maximum(PREFILL_CHUNK_TOKENS * a, I * a)
    seqs = chunk / I
    w, kv = memory_per_chip(costs, tp, a, pp, ep, seqs, I)
    fits = (w + kv) <= system.chip.hbm_bytes * (1 - cal.memory_reserve)
    t = stage_step(costs, system, tp, a, pp, ep, 0.0, chunk, I, I, cal)["stage_time_s"]
    rate = chunk / pp / t / G
    one = P.pipeline_token_latency_s(stage_step(costs, system, tp, a, pp, ep, 0.0, I, I, I, cal)["stage_time_s"], pp)
    # the prompt's KV goes to the decode pool: over NVLink inside a rack-scale domain, else over the NIC
    chip = system.chip
    link = chip.scaleup_bandwidth_bytes_per_s if system.kind == "rack" else chip.scaleout_bandwidth_bytes_per_s
    link = link or chip.scaleup_bandwidth_bytes_per_s or chip.hbm_bandwidth_bytes_per_s
    ttft = one + float(costs.kv_bytes(I)) / (link * cal.link)
    ok = fits & (ttft <= (max_ttft_s if max_ttft_s else np.inf))
    if not np.any(ok):
        return None
    i = int(np.argmax(np.where(ok, rate, -np.inf)))
    return {"layout": layouts[i], "input_tokens_per_s_per_gpu": float(rate[i]), "ttft_s": float(ttft[i])}


def _pareto(user, thr):
    """Indices of the points not beaten on both per-user speed and throughput per GPU."""
    order = np.argsort(-user, kind="stable")
    best = -np.inf
    keep = []
    for i in order:
        if thr[i] > best * (1 + 1e-9):
            keep.append(i)
            best = thr[i]
    return np.array(keep[::-1], dtype=int)


def throughput(model, hardware, *, input_len: float, output_len: float, gpus: int | None = None,
               precision: str | None = None, kv_precision: str | None = "auto", min_user_tps: float | None = None,
               max_ttft_s: float | None = None, disaggregated: bool = False, pareto: bool = False,
               ideal: bool = False, calibration_override: Calibration | None = None) -> dict:
    """Highest output tokens/s per GPU over layouts x batch that fits and meets the constraints.

    `calibration_override` replaces the efficiency constants (used when fitting them).
    """
    m, system = as_model(model), as_system(hardware)
    I, O = tokens("input_len", input_len), tokens("output_len", output_len)
    if min_user_tps is not None:
        positive("min_user_tps", min_user_tps)
    if max_ttft_s is not None:
        positive("max_ttft_s", max_ttft_s)
    if gpus is not None:
        gpus = count("gpus", gpus, MAX_GPUS)
        check_reach(system, gpus)
    cal = calibration_override or calibration(ideal)
    sz = ModelSizes(m)
    prec = canonical(precision) if precision is not None else sz.default_precision()
    kvp = resolve_kv_precision(kv_precision, prec, system)
    costs = model_costs(m, precision, kvp)
    sizes = [gpus] if gpus else deployment_sizes(system)
    layouts = [lay for n in sizes for lay in enumerate_layouts(m, n, system.chips)]
    if not layouts:
        raise FitError(f"no valid layout of {m.id} on {sizes} x {system.chip.id}")
    g = _grid(layouts, cal.max_seqs_per_scheduler)
    ev = _evaluate(costs, system, g, I, O, cal, disaggregated)
    pool = None
    if disaggregated:
        pool = _prefill_pool(costs, system, layouts, I, cal, max_ttft_s)
        if pool is None:
            raise FitError(f"no prefill layout of {m.id} on {system.chip.id} fits"
                           + (f" with TTFT <= {max_ttft_s} s" if max_ttft_s else ""))
        ratio = ev["output_per_gpu"] * I / O / pool["input_tokens_per_s_per_gpu"]
        per_gpu = ev["output_per_gpu"] / (1 + ratio)
        ev["ttft_s"] = np.full_like(per_gpu, pool["ttft_s"])
    else:
        ratio = np.zeros_like(ev["output_per_gpu"])
        per_gpu = ev["output_per_gpu"]
    ok = ev["fits"].copy()
    if not np.any(ok):
        total = costs.dense_weight_bytes + costs.expert_weight_bytes
        raise FitError(f"{m.id} ({total / 1e9:.0f} GB of {costs.precision} weights) does not fit any layout on "
                       f"{'/'.join(map(str, sizes))} x {system.chip.id} "
                       f"({system.chip.hbm_bytes * (1 - cal.memory_reserve) / 1e9:.0f} GB usable per chip)")
    feasible = ok.copy()
    if min_user_tps:
        ok &= ev["user_tokens_per_s"] >= min_user_tps
    if max_ttft_s:
        ok &= ev["ttft_s"] <= max_ttft_s
    if not np.any(ok):
        best_speed = float(np.max(np.where(feasible, ev["user_tokens_per_s"], 0)))
        raise FitError(f"no layout of {m.id} on {system.chip.id} meets the constraints "
                       f"(fastest that fits: {best_speed:.1f} tokens/s per user"
                       + (f"; TTFT <= {max_ttft_s} s asked" if max_ttft_s else "") + ")")
    i = int(np.argmax(np.where(ok, per_gpu, -np.inf)))
    res = _point(i, g, ev, per_gpu, ratio, layouts, system, costs, cal, I, O, pool, disaggregated)
    res.update(model=m.id, hardware=system.id, precision=costs.precision, kv_precision=costs.kv_precision,
               input_len=I, output_len=O, efficiency=cal.label, min_user_tps=min_user_tps, max_ttft_s=max_ttft_s,
               notes=_notes(system, cal))
    idx = np.flatnonzero(feasible & ((ev["ttft_s"] <= max_ttft_s) if max_ttft_s else True))
    front = idx[_pareto(ev["user_tokens_per_s"][idx], per_gpu[idx])]
    res["modes"] = _modes(front, ev, per_gpu, layouts, g, res, system)
    if pareto:
        res["frontier"] = [_frontier_point(j, g, ev, per_gpu, layouts, system) for j in front]
    return res


def _cost_per_mtok(system: System, per_gpu_rate):
    with np.errstate(divide="ignore"):
        return system.chip.price_usd_per_s / np.asarray(per_gpu_rate, dtype=float) * 1e6


def _point(i, g, ev, per_gpu, ratio, layouts, system, costs, cal, I, O, pool, disaggregated) -> dict:
    lay = layouts[int(g["idx"][i])]
    out_gpu = float(per_gpu[i])
    in_gpu = out_gpu * I / O
    share = float(ev["prefill_share"][i])
    price = system.chip.price_usd_per_s
    if disaggregated:
        cost_out = float(_cost_per_mtok(system, ev["output_per_gpu"][i]))
        cost_in = float(_cost_per_mtok(system, pool["input_tokens_per_s_per_gpu"]))
        gpus = lay.gpus * (1 + float(ratio[i]))
    else:
        cost_out = price * (1 - share) / out_gpu * 1e6
        cost_in = price * share / in_gpu * 1e6 if share > 0 else 0.0
        gpus = lay.gpus
    low, high = out_gpu * np.exp(cal.residual_low), out_gpu * np.exp(cal.residual_high)
    step = {k: float(np.asarray(v)[i]) for k, v in ev["step"].items()
            if k.endswith("_s") or k.endswith("_bytes") or k == "flops"}
    d = {"output_tokens_per_s_per_gpu": out_gpu, "input_tokens_per_s_per_gpu": in_gpu,
         "user_tokens_per_s": float(ev["user_tokens_per_s"][i]), "ttft_s": float(ev["ttft_s"][i]),
         "tpot_s": float(ev["tpot_s"][i]), "concurrency": float(g["B"][i] * lay.dp), "gpus": gpus,
         "parallelism": {"tp": lay.tp, "ep": lay.ep, "pp": lay.pp, "dp": lay.dp, "attn_dp": lay.attn_dp},
         "layout": lay.label(), "mode": "disaggregated" if disaggregated else "aggregated",
         "overlap": str(ev["overlap"][i]), "batch_per_replica": float(g["B"][i]),
         "cost_per_mtok_output_usd": cost_out, "cost_per_mtok_input_usd": cost_in,
         "range": {"output_tokens_per_s_per_gpu": [float(low), float(high)]},
         "weight_bytes_per_gpu": float(ev["weight_bytes_per_gpu"][i]),
         "kv_bytes_per_gpu": float(ev["kv_bytes_per_gpu"][i]), "step": step,
         "prefill_time_share": share}
    if disaggregated:
        d["prefill"] = {"layout": pool["layout"].label(), "parallelism": pool["layout"].to_dict(),
                        "input_tokens_per_s_per_gpu": pool["input_tokens_per_s_per_gpu"],
                        "gpus_per_decode_gpu": float(ratio[i]), "ttft_s": pool["ttft_s"]}
    return d


def _frontier_point(j, g, ev, per_gpu, layouts, system) -> dict:
    lay = layouts[int(g["idx"][j])]
    return {"user_tokens_per_s": float(ev["user_tokens_per_s"][j]), "output_tokens_per_s_per_gpu": float(per_gpu[j]),
            "cost_per_mtok_output_usd": float(_cost_per_mtok(system, per_gpu[j])), "layout": lay.label(),
            "parallelism": {"tp": lay.tp, "ep": lay.ep, "pp": lay.pp, "dp": lay.dp},
            "concurrency": float(g["B"][j] * lay.dp), "ttft_s": float(ev["ttft_s"][j])}


def speed_price_multiples(user, per_gpu, base_user, base_per_gpu, speedups=SPEEDUPS):
    """Price multiple that buys k x the per-user speed of a base point: cheapest point at least k x as fast.

    Formula: multiple(k) = (cost per token of the cheapest point with speed >= k * s0) / (cost at s0)
             = throughput per GPU at s0 / best throughput per GPU at >= k * s0
    Ref: the lecture ("fast mode: 6x the price for 2.5x the speed"); cost eq. 4.
    Assumes: price proportional to GPU-seconds per token (same $/GPU-h at every speed).
    """
    out = []
    for k in speedups:
        sel = user >= k * base_user * (1 - 1e-9)
        if not np.any(sel):
            out.append({"speedup": k, "user_tokens_per_s": k * base_user, "price_multiple": None})
            continue
        j = int(np.argmax(np.where(sel, per_gpu, -np.inf)))
        out.append({"speedup": k, "user_tokens_per_s": float(user[j]),
                    "price_multiple": float(base_per_gpu / per_gpu[j]), "index": j})
    return out


def _modes(front, ev, per_gpu, layouts, g, res, system) -> list[dict]:
    user, thr = ev["user_tokens_per_s"][front], per_gpu[front]
    rows = speed_price_multiples(user, thr, res["user_tokens_per_s"], res["output_tokens_per_s_per_gpu"])
    for r in rows:
        j = r.pop("index", None)
        if j is not None:
            r["layout"] = layouts[int(g["idx"][front[j]])].label()
            r["cost_per_mtok_output_usd"] = float(_cost_per_mtok(system, thr[j]))
    return rows


def _notes(system: System, cal: Calibration) -> list[str]:
    n = []
    if system.chip.price_is_assumption:
        n.append(f"{system.chip.id} price ${system.chip.price_usd_per_hour}/h is an assumption: "
                 f"{system.chip.price_note}")
    if cal.label == "ideal":
        n.append("ideal: peak FLOP/s, HBM and link bandwidth, no overhead: an upper bound real engines miss by 1.5-3x")
    return n


# --------------------------------------------------------------------------- lecture claim
def claims() -> list[Claim]:
    """`fast_mode_price_for_2_5x_speed`: DeepSeek-V3 on a GB200 NVL72 rack."""
    def multiple(base):
        r = throughput("deepseek-v3", "gb200-nvl72", input_len=2000, output_len=1000, min_user_tps=base)
        return r, next(m for m in r["modes"] if m["speedup"] == 2.5)

    base_speed = 40.0
    r, fast = multiple(base_speed)
    _, slow_base = multiple(20.0)
    value = fast["price_multiple"]
    return [Claim(
        id="fast_mode_price_for_2_5x_speed", value=value, unit="x price for 2.5x per-user speed",
        lecture_value=6, lecture_range=(3.0, 12.0), section="Batch size, latency and cost",
        assumptions=f"DeepSeek-V3 (FP8) on one GB200 NVL72 rack, 2,000-token prompts and 1,000-token answers, "
                    f"calibrated efficiency; base = the cheapest layout and batch serving >= {base_speed:.0f} "
                    f"tokens/s per user (a frontier API's speed); fast = the cheapest point at >= 2.5x the base "
                    f"point's speed; price proportional to GPU-seconds per token.",
        explanation=(f"The base runs {r['layout']} at {r['user_tokens_per_s']:.0f} tokens/s per user and "
                     f"{r['output_tokens_per_s_per_gpu']:.0f} tokens/s per GPU; 2.5x that speed "
                     f"({fast['user_tokens_per_s']:.0f} tokens/s) needs smaller batches per GPU "
                     f"({fast.get('layout', 'n/a')}) and costs {value:.1f}x per token. The multiple depends on "
                     f"where the base sits: from a 20 tokens/s base it is "
                     f"{slow_base['price_multiple']:.1f}x, and it explodes near the rack's latency floor, where "
                     "the weight read can no longer be amortised: the lecture's 'you cannot pay 100x to go much "
                     "faster'.") if value is not None else "No layout reaches 2.5x the base speed on this rack.")]
