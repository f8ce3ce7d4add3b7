"""Public API price sheets read through the roofline, and serving margins against them.

Per sheet: the output/input price ratio read as decode vs prefill MFU; the long-context cliff read
through eq. 6 as implied KV bytes per token; the cache-read discount against chalk's own cost of
loading a token's KV from a storage tier versus recomputing it; cache-retention windows matched
to the storage tier whose drain time is closest; fast / priority modes read on the cost-vs-batch
hyperbola of a reference model. `pricing_margin` sets chalk's predicted serving cost against a
sheet; `deepseek_published_margin` reproduces DeepSeek's 545% from its published figures.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import numpy as np

from chalk.analyses.records.claims import Claim
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.analyses.step.roofline import step as aggregate_bound
from chalk.equations import pricing as P
from chalk.equations import prefix_cache as PC
from chalk.errors import InputError
from chalk.specs.catalog import as_model, as_system, load_model, resolve_hardware
from chalk.specs.precision import canonical
from chalk.specs.prices import (MTOK, PriceMode, PriceSheet, StorageTier, load_price_sheet,
                                load_price_sheets, load_storage_tiers)
from chalk.specs.workload import MAX_GPUS, count, fraction, positive

MINUTE_S, HOUR_S = 60.0, 3600.0
#: The lecture's two cache-retention tiers (Anthropic: 5-minute and 1-hour cache writes).
RETENTION_WINDOWS_S = {"5 min": 5 * MINUTE_S, "1 h": HOUR_S}
#: Prefill tokens per chip per step in DeepSeek's profile (SGLang blog table, 16,384 tokens/device).
PREFILL_TOKENS_PER_CHIP = 16384


@dataclass(frozen=True)
class Assumptions:
    """What turns a price sheet into numbers. All settable; defaults are the lecture's or stated."""

    active_params: float = 100e9          # eq. 6's N_active for a frontier model (lecture: 100B)
    multiplies_per_byte: float = P.LECTURE_MULTIPLIES_PER_BYTE
    ratio_source: str = "lecture: ~300 multiplies per byte"
    ref_model: str = "deepseek-v3"        # cache load-vs-recompute and fast-mode reference model
    ref_hardware: str = "h100-sxm"        # one chip of it for load-vs-recompute
    cache_context: float = 32768          # "a mid-size context" for recompute FLOPs per token
    kv_precision: str = "bf16"
    mode_hardware: str = "gb200-nvl72"    # the lecture's rack for the cost-vs-batch hyperbola
    mode_context: float = 4096

    def to_dict(self) -> dict:
        return asdict(self)


def assumptions(active_params: float | None = None, hardware: str | None = None, precision: str = "fp8",
                multiplies_per_byte: float | None = None, **kw) -> Assumptions:
    """Build Assumptions; `hardware` takes eq. 6's ratio from a chip: (FLOPs at `precision` / 2) / HBM bw."""
    a = Assumptions(**kw)
    if active_params is not None:
        a = replace(a, active_params=float(positive("active params", active_params, scalar=True)))
    if multiplies_per_byte is not None:
        a = replace(a, multiplies_per_byte=float(positive("ratio", multiplies_per_byte, scalar=True)),
                    ratio_source="given")
    elif hardware is not None:
        chip = resolve_hardware(hardware).chip
        cp = chip.compute_precision(canonical(precision))
        r = float(P.multiplies_per_byte(chip.flops_per_s[cp], chip.hbm_bandwidth_bytes_per_s))
        a = replace(a, multiplies_per_byte=r, ratio_source=f"{chip.id} at {cp}: (FLOPs/2) / HBM bandwidth")
    positive("cache context", a.cache_context)
    positive("mode context", a.mode_context)
    return a


DEFAULT = Assumptions()


# ----------------------------------------------------------------------------- storage tiers
def match_storage_tier(window_s: float, tiers: list[StorageTier] | None = None) -> dict:
    """The storage tier whose drain time (capacity / bandwidth) is closest to `window_s` in log space.

    Also the nearest tier of each kind (HBM, DRAM, flash, disk), so a reader sees the runners-up.
    """
    positive("retention window", window_s)
    tiers = tiers or load_storage_tiers()
    dist = [float(P.log_distance(t.drain_time_s, window_s)) for t in tiers]
    best = tiers[int(np.argmin(dist))]
    by_kind = {}
    for t, d in zip(tiers, dist):
        if t.kind not in by_kind or d < by_kind[t.kind][1]:
            by_kind[t.kind] = (t, d)
    return {"window_s": float(window_s), "tier": best.id, "tier_name": best.name, "kind": best.kind,
            "drain_time_s": best.drain_time_s, "drain_over_window": best.drain_time_s / window_s,
            "nearest_by_kind": {k: {"tier": t.id, "drain_time_s": t.drain_time_s,
                                    "drain_over_window": t.drain_time_s / window_s}
                                for k, (t, _) in sorted(by_kind.items(), key=lambda kv: kv[1][0].kind_rank)}}


def _retention_windows(sheet: PriceSheet) -> list[dict]:
    """Retention windows a sheet prices, each matched to a storage tier, with its storage price."""
    t, out = sheet.base_tier, []
    for label, field in (("5 min", "cache_write_5m_usd_per_token"), ("1 h", "cache_write_1h_usd_per_token")):
        w = getattr(t, field)
        if w is not None:
            window = RETENTION_WINDOWS_S[label]
            s = float(P.implied_storage_usd_per_token_s(w, t.input_usd_per_token, window))
            out.append({"label": label, "basis": f"{field[:-14]} price", **match_storage_tier(window),
                        "storage_usd_per_mtok_hour": s * MTOK * HOUR_S})
    s = sheet.cache_storage_usd_per_token_s
    if s and t.cache_read_usd_per_token is not None:
        window = float(P.cache_breakeven_retention_s(t.input_usd_per_token, t.cache_read_usd_per_token, s))
        if window > 0:
            out.append({"label": "storage break-even", "basis": "(input - cache read) / storage price",
                        **match_storage_tier(window), "storage_usd_per_mtok_hour": s * MTOK * HOUR_S})
    return out


# ----------------------------------------------------------------------------- cache: load vs recompute
def cache_economics(a: Assumptions = DEFAULT) -> dict:
    """One token's KV on the reference model and chip: recompute time vs load time from each tier.

    Tiers: the reference chip's own HBM, then the catalog's DRAM, flash and disk tiers (one tier
    device per chip; the catalog's HBM rows of other chips are left out).
    """
    return copy.deepcopy(_cache_economics(a))


@lru_cache(maxsize=32)
def _cache_economics(a: Assumptions) -> dict:
    sz = ModelSizes(load_model(a.ref_model))
    chip = resolve_hardware(a.ref_hardware).chip
    prec = chip.compute_precision(sz.default_precision())
    peak = chip.flops_per_s[prec]
    L = float(a.cache_context)
    flops_tok = float(sz.prefill_flops(L)) / L
    kv = float(sz.kv_bytes_per_token(a.kv_precision))
    t_re = float(P.kv_recompute_time_s(flops_tok, peak))
    hbm = {"id": f"hbm-{chip.id}", "kind": "hbm", "bandwidth_bytes_per_s": chip.hbm_bandwidth_bytes_per_s}
    tiers = [hbm] + [{"id": t.id, "kind": t.kind, "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s}
                     for t in load_storage_tiers() if t.kind != "hbm"]
    for t in tiers:
        t["load_time_s"] = float(P.kv_load_time_s(kv, t["bandwidth_bytes_per_s"]))
        t["load_over_recompute"] = t["load_time_s"] / t_re
    return {"model": sz.model.id, "chip": chip.id, "compute_precision": prec, "context": L,
            "kv_precision": a.kv_precision, "kv_bytes_per_token": kv, "recompute_flops_per_token": flops_tok,
            "recompute_time_s": t_re, "hbm_recompute_over_load": t_re / tiers[0]["load_time_s"], "tiers": tiers}


def _cache_reading(frac: float | None, a: Assumptions) -> dict:
    if frac is None or frac <= 0:
        return {"cache_load_breakeven_bandwidth_bytes_per_s": None, "cache_load_tier": None}
    ce = _cache_economics(a)
    bw = float(P.breakeven_load_bandwidth_bytes_per_s(ce["kv_bytes_per_token"], ce["recompute_time_s"], frac))
    fast = [t for t in ce["tiers"] if t["bandwidth_bytes_per_s"] >= bw]
    slowest = min(fast, key=lambda t: t["bandwidth_bytes_per_s"])["id"] if fast else None
    return {"cache_load_breakeven_bandwidth_bytes_per_s": bw, "cache_load_tier": slowest}


# ----------------------------------------------------------------------------- modes: cost-vs-batch
@lru_cache(maxsize=32)
def mode_curve(a: Assumptions = DEFAULT) -> dict:
    """Step time over batch on the reference model/rack; the baseline is the cost-optimal batch.

    Baseline: the critical batch with KV at `mode_context` (compute = memory), or eq. 5's
    critical batch when the KV read alone outweighs compute; capped by what fits in HBM. The lecture's
    aggregate bound (`roofline.step`: the whole rack as one chip, peak rates, no calibration), as the
    lecture draws its hyperbola, and said so (`view`): the readings are ratios, which efficiency mostly cancels.
    """
    model, system = load_model(a.ref_model), resolve_hardware(a.mode_hardware)
    r = aggregate_bound(model, system, 1.0, a.mode_context, kv_precision=a.kv_precision)
    b0 = r.critical_batch_with_kv if np.isfinite(r.critical_batch_with_kv) else r.critical_batch
    if r.max_batch_fit >= 1:
        b0 = min(b0, float(r.max_batch_fit))
    hi = b0 * 64 if r.max_batch_fit < 1 else max(b0, float(r.max_batch_fit))
    grid = np.unique(np.concatenate([np.geomspace(1.0, hi, 3001), [b0]]))
    T = np.asarray(aggregate_bound(model, system, grid, a.mode_context, kv_precision=a.kv_precision).step_time_s)
    t0 = float(T[np.searchsorted(grid, b0)])
    T.setflags(write=False)
    grid.setflags(write=False)
    return {"model": model.id, "hardware": system.id, "context": a.mode_context, "view": "aggregate",
            "baseline_batch": float(b0),
            "baseline_step_s": t0, "batch": grid, "step_s": T,
            "speedup": t0 / T, "cost_multiple": P.cost_multiple(T, grid, t0, b0)}


def read_mode(mode: PriceMode, a: Assumptions = DEFAULT) -> dict:
    """A fast / priority / off-peak mode on the reference hyperbola.

    With a claimed speed-up s: the smaller batch that runs s times faster per user, and the cost
    multiple that costs. Without one: the batch at which cost rises (or falls) by the price
    multiple, and the speed-up that buys. None where the roofline cannot reach the target.
    """
    c = mode_curve(a)
    B, s, cm, b0 = c["batch"], c["speedup"], c["cost_multiple"], c["baseline_batch"]
    out = {"name": mode.name, "price_multiple": mode.price_multiple, "speedup_claimed": mode.speedup,
           "baseline_batch": b0, "implied_batch": None, "implied_batch_reduction": None,
           "implied_cost_multiple": None, "implied_speedup": None, "price_over_cost": None, "note": ""}
    lo = B <= b0
    logB = np.log(B)
    if mode.speedup is not None:
        if mode.speedup > s[0]:
            out["note"] = f"beyond the roofline: at batch 1 the speed-up is only {s[0]:.3g}x"
            return out
        b1 = float(np.exp(np.interp(mode.speedup, s[lo][::-1], logB[lo][::-1])))
    elif mode.price_multiple >= 1:
        if mode.price_multiple > cm[0]:
            out["note"] = f"beyond the roofline: batch 1 costs only {cm[0]:.3g}x"
            return out
        b1 = float(np.exp(np.interp(mode.price_multiple, cm[lo][::-1], logB[lo][::-1])))
    else:
        hi = B >= b0
        floor = float(cm[hi].min())
        if mode.price_multiple < floor:
            out["note"] = f"below the roofline's cost floor ({floor:.3g}x at larger batch): idle capacity, not batch"
            return out
        b1 = float(np.exp(np.interp(mode.price_multiple, cm[hi][::-1], logB[hi][::-1])))
    idx = np.interp(np.log(b1), logB, np.arange(B.size))
    cost = float(np.interp(idx, np.arange(B.size), cm))
    out.update(implied_batch=b1, implied_batch_reduction=b0 / b1, implied_cost_multiple=cost,
               implied_speedup=float(np.interp(idx, np.arange(B.size), s)),
               price_over_cost=mode.price_multiple / cost)
    return out


# ----------------------------------------------------------------------------- per sheet
def analyze_sheet(sheet: PriceSheet | str, a: Assumptions = DEFAULT) -> dict:
    """Every reading of one sheet (see the module docstring); cliff fields None without a cliff."""
    if isinstance(sheet, str):
        sheet = load_price_sheet(sheet)
    t, lc = sheet.base_tier, sheet.long_context_tier
    r = sheet.output_input_ratio
    d = {"id": sheet.id, "provider": sheet.provider, "model": sheet.model, "date": sheet.date,
         "source": sheet.source, "confidence": sheet.confidence, "mode_of": sheet.mode_of,
         "input_usd_per_mtok": t.per_mtok("input_usd_per_token"),
         "output_usd_per_mtok": t.per_mtok("output_usd_per_token"),
         "cache_read_usd_per_mtok": t.per_mtok("cache_read_usd_per_token"),
         "output_input_ratio": r,
         "implied_decode_mfu_fraction": float(P.implied_decode_mfu_fraction(r)) if math.isfinite(r) else None,
         "cache_read_discount": t.cache_read_fraction}
    d.update(_cache_reading(t.cache_read_fraction, a))
    cliff = {"cliff_context_tokens": None, "cliff_input_multiple": None, "cliff_output_multiple": None,
             "implied_kv_bytes_per_token": None, "implied_kv_bytes_per_token_refined_output": None,
             "implied_kv_bytes_per_token_refined_input": None}
    if lc is not None:
        L, n, ratio = lc.min_context_tokens, a.active_params, a.multiplies_per_byte
        mi, mo = sheet.long_context_input_multiple, sheet.long_context_output_multiple
        cliff.update(
            cliff_context_tokens=L, cliff_input_multiple=mi, cliff_output_multiple=mo,
            implied_kv_bytes_per_token=float(P.kv_bytes_per_token_at_cliff(n, L, ratio)),
            implied_kv_bytes_per_token_refined_output=None if mo is None else
            float(P.kv_bytes_per_token_from_price_multiple(n, L, mo, ratio)),
            implied_kv_bytes_per_token_refined_input=None if mi is None else
            float(P.kv_bytes_per_token_from_price_multiple(n, L, mi, ratio)))
    d.update(cliff)
    d["cache_retention"] = _retention_windows(sheet)
    d["modes"] = [read_mode(m, a) for m in sheet.modes]
    d["notes"] = sheet.notes
    return d


def pricing_report(a: Assumptions = DEFAULT, sheets: list[PriceSheet] | None = None):
    """`chalk pricing --json`: every sheet's readings, the assumptions and the shared references, as a
    `PricingReport` (a dict with `.to_dict()` and `.to_frame()`)."""
    from chalk.analyses.records.results import PricingReport

    sheets = sheets if sheets is not None else load_price_sheets()
    curve = mode_curve(a)
    return PricingReport({"sheets": [analyze_sheet(s, a) for s in sheets],
            "assumptions": a.to_dict(),
            "retention_tiers": {k: match_storage_tier(v) for k, v in RETENTION_WINDOWS_S.items()},
            "cache_economics": cache_economics(a),
            "mode_reference": {k: curve[k] for k in ("model", "hardware", "context", "view", "baseline_batch",
                                                      "baseline_step_s")}})


# ----------------------------------------------------------------------------- margin
@dataclass(frozen=True)
class DeepSeekDay:
    """DeepSeek's published 24-hour serving figures (V3 + R1, 2025-02-27/28)."""

    nodes: float = 226.75
    gpus_per_node: int = 8
    usd_per_gpu_hour: float = 2.0
    input_tokens: float = 608e9
    cache_hit_fraction: float = 0.563
    output_tokens: float = 168e9
    published_cost_usd: float = 87072.0
    published_revenue_usd: float = 562027.0
    published_margin: float = 5.45
    decode_chips: int = 144             # one decode unit: 18 nodes, EP144
    decode_batch_per_chip: float = 128  # LMSYS's reading of DeepSeek's profile
    kv_length: float = 4989             # average KV length per output token
    source: str = ("https://github.com/deepseek-ai/open-infra-index/blob/main/202502OpenSourceWeek/"
                   "day_6_one_more_thing_deepseekV3R1_inference_system_overview.md (via reference "
                   "measurements-public.csv)")


DEEPSEEK = DeepSeekDay()


def deepseek_published_margin(sheet: str = "deepseek-r1", day: DeepSeekDay = DEEPSEEK) -> dict:
    """DeepSeek's theoretical margin from its published fleet and token counts at the sheet's prices."""
    t = load_price_sheet(sheet).base_tier
    cost = float(P.fleet_cost_usd(day.nodes * day.gpus_per_node, day.usd_per_gpu_hour))
    rev = float(P.daily_revenue_usd(day.input_tokens, day.cache_hit_fraction, t.input_usd_per_token,
                                    t.cache_read_usd_per_token, day.output_tokens, t.output_usd_per_token))
    return {"sheet": sheet, "gpus": day.nodes * day.gpus_per_node, "cost_usd_per_day": cost,
            "revenue_usd_per_day": rev, "margin": float(P.margin(rev, cost)),
            "published_cost_usd_per_day": day.published_cost_usd,
            "published_revenue_usd_per_day": day.published_revenue_usd,
            "published_margin": day.published_margin,
            "margin_from_published_revenue": float(P.margin(day.published_revenue_usd, cost)),
            "source": day.source}


def pricing_margin(model, hardware, sheet: str = "deepseek-r1", *, batch: float | None = None,
                   batch_per_chip: float = DEEPSEEK.decode_batch_per_chip, chips: int | None = None,
                   context: float | None = None, prompt_len: float | None = None,
                   input_tokens: float | None = None, output_tokens: float | None = None,
                   input_len: float | None = None, output_len: float | None = None,
                   cache_hit_fraction: float = DEEPSEEK.cache_hit_fraction, precision: str | None = None,
                   kv_precision: str = "bf16", efficiency=None, ideal: bool = False) -> dict:
    """Revenue at a sheet's prices against chalk's predicted cost for the same tokens, as a margin.

    Tokens: per day (DeepSeek's mix by default: 608B input, 56.3% cache hits, 168B output) or one
    request of `input_len` / `output_len`. Decode runs `batch` sequences (default `batch_per_chip`
    per chip, capped by what fits in HBM) at `context` KV tokens (default DeepSeek's 4,989, or input_len + output_len / 2);
    prefill runs prompts of `prompt_len` (default `context`, or input_len) at 16,384 tokens per chip.
    Cache hits: only each prompt's uncached suffix is prefilled, still attending to the cached
    prefix (equations.prefix_cache: cost per input token c(P) - h c(hP), not (1 - h) c(P)); loading
    the cached KV from storage is not charged. Efficiency: chalk's
    calibrated one unless `ideal` (or an explicit Efficiency).
    """
    per = "day"
    if input_len is not None or output_len is not None:
        if input_len is None or output_len is None:
            raise InputError("give both input_len and output_len (tokens per request)")
        input_tokens, output_tokens, per = positive("input_len", input_len), positive("output_len", output_len), \
            "request"
        context = input_len + output_len / 2 if context is None else context
        prompt_len = input_len if prompt_len is None else prompt_len
    input_tokens = positive("input tokens", DEEPSEEK.input_tokens if input_tokens is None else input_tokens,
                            allow_zero=True)
    output_tokens = positive("output tokens", DEEPSEEK.output_tokens if output_tokens is None else output_tokens,
                             allow_zero=True)
    h = 0.0 if cache_hit_fraction == 0 else fraction("cache-hit fraction", cache_hit_fraction)
    context = positive("context", DEEPSEEK.kv_length if context is None else context)
    prompt_len = positive("prompt length", context if prompt_len is None else prompt_len)
    m, system = as_model(model), as_system(hardware)
    n = count("chips", system.chips if chips is None else chips, MAX_GPUS)
    # one replica of the one step model: attention-DP + EP over the chips for a MoE (DeepSeek's deployment), the
    # smallest TP group that holds the weights for a dense model
    from chalk.analyses.step.estimate import layout_estimate

    if efficiency is not None:
        raise InputError("pricing margin takes its step times from the step model; pass ideal=True for peak rates")
    lay = (f"tp=1,attn_dp={min(n, m.num_experts)}" if m.is_moe else None)
    B = positive("batch", batch if batch is not None else batch_per_chip * (min(n, m.num_experts) if m.is_moe
                                                                            else 1))
    kw = dict(precision=precision, kv_precision=kv_precision, ideal=ideal, gpus=n)
    dec = layout_estimate(m, system, B, context, phase="decode", layout=lay, **kw)
    if not m.is_moe and batch is None:  # dense: batch_per_chip on each GPU of the chosen replica
        B = positive("batch", batch_per_chip * dec.chips)
        dec = layout_estimate(m, system, B, context, phase="decode", layout=dec.layout, **kw)
    notes = list(dec.notes)
    if batch is None and not dec.fits and dec.max_batch_fit >= 1:
        notes.append(f"{B:.0f} sequences do not fit in HBM at context {context:.0f}; decode batch capped at "
                     f"{dec.max_batch_fit:.0f}")
        B = float(dec.max_batch_fit)
        dec = layout_estimate(m, system, B, context, phase="decode", layout=dec.layout, **kw)
    if not dec.fits:
        notes.append(f"decode does not fit in HBM ({dec.memory_needed_bytes / 1e9:.0f} GB needed, "
                     f"{dec.hbm_bytes / 1e9:.0f} GB on {dec.chips} chips): the cost is a lower bound")
    G = dec.chips
    pre = layout_estimate(m, system, max(1.0, round(G * PREFILL_TOKENS_PER_CHIP / prompt_len)), prompt_len,
                          phase="prefill", layout=dec.layout, **kw)
    s = load_price_sheet(sheet)
    tier = s.tier_for(int(prompt_len))
    hit = tier.cache_read_usd_per_token if tier.cache_read_usd_per_token is not None else tier.input_usd_per_token
    rev = float(P.daily_revenue_usd(input_tokens, h, tier.input_usd_per_token, hit, output_tokens,
                                    tier.output_usd_per_token))
    c_in, c_out = float(pre.cost_per_mtok_usd) / MTOK, float(dec.cost_per_mtok_usd) / MTOK
    c_in_eff = c_in
    if h > 0 and h * prompt_len >= 1:  # prefill only the uncached suffix, attending to the whole prompt
        hit_len = h * prompt_len
        pre_hit = layout_estimate(m, system, max(1.0, round(G * PREFILL_TOKENS_PER_CHIP / hit_len)), hit_len,
                                  phase="prefill", layout=dec.layout, **kw)
        c_in_eff = float(PC.cached_prefill_cost_per_token(c_in, float(pre_hit.cost_per_mtok_usd) / MTOK, h))
    elif h > 0:
        c_in_eff = (1 - h) * c_in
    cost = input_tokens * c_in_eff + output_tokens * c_out
    price_h = system.chip.price_usd_per_hour
    return {"model": m.id, "hardware": system.id, "chips": n, "sheet": s.id, "tier": tier.name, "per": per,
            "efficiency": "ideal" if ideal else "calibrated", "layout": dec.layout["label"],
            "parallelism": {k: dec.layout[k] for k in ("tp", "ep", "etp", "pp", "attn_dp")},
            "precision": dec.precision, "kv_precision": dec.kv_precision,
            "decode_batch": float(B), "context": float(context),
            "prompt_len": float(prompt_len), "input_tokens": float(input_tokens),
            "output_tokens": float(output_tokens), "cache_hit_fraction": h,
            "input_usd_per_mtok": tier.input_usd_per_token * MTOK,
            "cache_read_usd_per_mtok": hit * MTOK, "output_usd_per_mtok": tier.output_usd_per_token * MTOK,
            "cost_input_usd_per_mtok": c_in * MTOK, "cost_input_effective_usd_per_mtok": c_in_eff * MTOK,
            "cost_output_usd_per_mtok": c_out * MTOK,
            "margin_input": float(P.margin(tier.input_usd_per_token, c_in)) if c_in else None,
            "margin_output": float(P.margin(tier.output_usd_per_token, c_out)) if c_out else None,
            "revenue_usd": rev, "cost_usd": cost, "margin": float(P.margin(rev, cost)) if cost else None,
            "chip_hours": cost / price_h if price_h else None,
            "decode_user_tokens_per_s": float(dec.user_tokens_per_s), "decode_bound": str(dec.bound),
            "fits": bool(dec.fits), "notes": notes}


#: chalk "reproduces" DeepSeek's published day when its cost for the day's tokens is within this factor of the
#: published cost (and so its margin near 545%). Outside it the margin command says by how much it misses.
REPRODUCE_FACTOR = 1.25


def deepseek_chalk_margin(model: str = "deepseek-v3", hardware: str = "h800", efficiency=None,
                          ideal: bool = False, day: DeepSeekDay = DEEPSEEK) -> dict:
    """Chalk's own cost for DeepSeek's published day on H800, and the margin it implies.

    Configuration (fixed, whatever the question): `day.decode_chips` chips (one EP144 decode unit),
    `day.decode_batch_per_chip` sequences per chip at `day.kv_length` KV tokens, the day's token counts. Cost
    basis: the chip-hours those tokens need at the catalog price per chip-hour (H800: $2.00, DeepSeek's own
    figure), while the published cost is the whole average fleet for 24 h. `reproduces` says whether chalk's cost
    lands within REPRODUCE_FACTOR of the published one; `gap` says by how much and why when it does not.
    """
    pub = deepseek_published_margin(day=day)
    r = pricing_margin(model, hardware, "deepseek-r1", chips=day.decode_chips,
                       batch_per_chip=day.decode_batch_per_chip, context=day.kv_length,
                       input_tokens=day.input_tokens, output_tokens=day.output_tokens,
                       cache_hit_fraction=day.cache_hit_fraction, efficiency=efficiency, ideal=ideal)
    r["cost_over_published"] = r["cost_usd"] / pub["cost_usd_per_day"]
    r["margin_over_published"] = r["margin"] / pub["margin"] if r["margin"] else None
    r["average_gpus"] = r["chip_hours"] / 24 if r["chip_hours"] else None
    r["published_gpus"] = pub["gpus"]
    ratio = r["cost_over_published"]
    r["reproduces"] = bool(1 / REPRODUCE_FACTOR <= ratio <= REPRODUCE_FACTOR)
    r["gap"] = None if r["reproduces"] else (
        f"chalk's margin {r['margin'] * 100:.0f}% misses the published {day.published_margin * 100:.0f}% "
        f"(chalk's cost is {ratio:.2f}x the published cost): chalk counts only the chip time the day's tokens need "
        f"at full decode batches ({r['average_gpus']:,.0f} GPUs on average), while DeepSeek paid for its whole fleet "
        f"({pub['gpus']:,.0f} GPUs on average, sized for the peak, prefill nodes and idle night capacity included)"
        if ratio < 1 else
        f"chalk's margin {r['margin'] * 100:.0f}% misses the published {day.published_margin * 100:.0f}% "
        f"(chalk's cost is {ratio:.2f}x the published cost): chalk's modelled throughput is below what DeepSeek's "
        f"fleet reached")
    r["configuration"] = (f"{r['model']} on {r['chips']} x {r['hardware']} (one EP{day.decode_chips} decode unit), "
                          f"{day.decode_batch_per_chip:g} sequences per GPU at {day.kv_length:,.0f} KV tokens")
    return r


def claims(a: Assumptions = DEFAULT) -> list[Claim]:
    """The four pricing deductions of the lecture, each computed from the catalogs."""
    sheets = load_price_sheets(include_mode_sheets=False)
    ratios = [s.output_input_ratio for s in sheets]
    r_med = statistics.median(ratios)
    gem = load_price_sheet("gemini-2.5-pro")
    L = gem.long_context_threshold_tokens
    kv = float(P.kv_bytes_per_token_at_cliff(100e9, L, P.LECTURE_MULTIPLIES_PER_BYTE))
    m5, m1 = (match_storage_tier(w) for w in RETENTION_WINDOWS_S.values())
    ce = cache_economics(a)
    disk = min(t.drain_time_s for t in load_storage_tiers() if t.kind == "disk")

    def said(mt):
        return f"{mt['kind']} ({mt['tier']}, drain {mt['drain_time_s'] / 60:.0f} min)"

    return [
        Claim("decode_vs_prefill_mfu", float(P.implied_decode_mfu_fraction(r_med)), "fraction of prefill MFU", 0.2,
              f"median output/input price ratio over {len(sheets)} standard sheets = {r_med:g} "
              f"(range {min(ratios):.3g}-{max(ratios):.3g}); price proportional to chip-seconds per token",
              "Both phases do 2 N_active FLOPs per token, so a price ratio r means decode gets 1/r of "
              "prefill's MFU: it waits on weight and KV reads while prefill amortises them over the prompt.",
              (0.15, 0.25), "pricing"),
        Claim("cache_tier_drain_time", f"5 min ~ {said(m5)}; 1 h ~ {said(m1)}", "storage tier",
              "5 min ~ flash, 1 h ~ disk",
              "storage catalog drain times (capacity / sequential read bandwidth per device); nearest in log time",
              f"5 min lands on NVMe flash as the lecture says. 1 h lands on the largest, slowest flash class "
              f"(30.7 TB at 7 GB/s drains in ~73 min); today's 24-28 TB hard disks drain in "
              f"{disk / 3600:.0f}+ h, so the lecture's '1 h ~ disk' fits only a ~1 TB disk at ~285 MB/s.",
              None, "pricing"),
        Claim("recompute_vs_load_kv", ce["hbm_recompute_over_load"], "x (recompute time / HBM load time)", ">> 1",
              f"{ce['model']} on one {ce['chip']} ({ce['compute_precision']} peak), context "
              f"{ce['context']:.0f}: prefill FLOPs per token / peak vs {ce['kv_bytes_per_token']:.0f} "
              f"{ce['kv_precision']} KV bytes per token / HBM bandwidth",
              "Recomputing a token's KV reruns its forward pass (~2 N_active FLOPs plus attention over the "
              "context); loading it moves tens of KB. Even from NVMe flash the load is cheaper than the "
              "recompute, which is why cache reads are sold at ~10% of the input price.",
              (10.0, 1e9), "pricing"),
        Claim("kv_bytes_per_token_at_cliff", kv, "bytes per token", 1700,
              f"eq. 6 with N_active = 100B, L = {L:,} (Gemini 2.5 Pro's cliff), ratio 300 multiplies per byte",
              "At the cliff a sequence's KV read time equals its compute time: L kv / bw = N_active / F_mult, "
              "so kv = N_active / (300 L). Real dense-attention models hold far more (Llama-3.1-70B 320 KB, "
              "DeepSeek-V3 MLA 70 KB), so the cliff implies heavy KV compression or sparse attention.",
              (1500.0, 2100.0), "pricing"),
    ]
