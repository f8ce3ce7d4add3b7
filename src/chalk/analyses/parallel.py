"""Parallel layouts on a system: TP, EP (with attention-DP), PP and DP; memory per chip; step time with
communication on the right link; the MoE rack layout and the pipeline analysis.

A *replica* runs one copy of the model on tp * attn_dp * pp chips; dp replicas serve side by side.
Inside a stage, attention is split TP-ways within each of attn_dp data-parallel groups; a MoE layer's
routed experts are spread over all ep = tp * attn_dp chips of the stage (attention-DP + EP as DeepSeek
and SGLang deploy it; with attn_dp = 1 the experts are simply sharded over the TP group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from chalk.analyses.calibration import Calibration, calibration
from chalk.analyses.claims import Claim
from chalk.analyses.model_sizes import ModelSizes
from chalk.equations import moe as MOE
from chalk.equations import parallel as P
from chalk.errors import FitError, InputError
from chalk.specs.hardware import System
from chalk.specs.model import ModelSpec
from chalk.specs.precision import bytes_per_element, canonical
from chalk.specs.workload import MAX_GPUS, count, positive

ACTIVATION_BYTES = 2.0  # activations travel in BF16 (TP all-reduce, PP sends, MoE combine)


@dataclass(frozen=True)
class Layout:
    """One parallel layout. gpus = tp * attn_dp * pp * dp; ep = tp * attn_dp for MoE models (else 1)."""

    tp: int
    attn_dp: int
    pp: int
    dp: int
    moe: bool

    @property
    def ep(self) -> int:
        return self.tp * self.attn_dp if self.moe else 1

    @property
    def replica_gpus(self) -> int:
        return self.tp * self.attn_dp * self.pp

    @property
    def gpus(self) -> int:
        return self.replica_gpus * self.dp

    def label(self) -> str:
        s = f"TP{self.tp}"
        if self.moe and self.attn_dp > 1:
            s = f"DP-attn{self.attn_dp}" + (f"xTP{self.tp}" if self.tp > 1 else "") + f" EP{self.ep}"
        elif self.moe and self.ep > 1:
            s += f" (experts TP-sharded x{self.ep})"
        if self.pp > 1:
            s += f" PP{self.pp}"
        if self.dp > 1:
            s += f" x{self.dp} replicas"
        return s

    def to_dict(self) -> dict:
        return {"tp": self.tp, "ep": self.ep, "pp": self.pp, "dp": self.dp, "attn_dp": self.attn_dp,
                "gpus": self.gpus, "label": self.label()}


@dataclass(frozen=True)
class ModelCosts:
    """What the step model needs from a model at given weight and KV precisions (all from ModelSizes)."""

    sizes: ModelSizes
    precision: str
    kv_precision: str
    dense_weight_bytes: float
    expert_weight_bytes: float
    dense_read_bytes: float
    gemm_flops_per_token: float
    expert_flops_per_token: float
    kv_bytes_per_token: float
    head_shardable: bool

    @property
    def model(self) -> ModelSpec:
        return self.sizes.model

    def expert_read_bytes(self, tokens):
        """Routed-expert bytes a step over `tokens` tokens reads (expected distinct experts)."""
        t = np.asarray(tokens, dtype=float)
        return self.sizes.weight_bytes_read(t, self.precision) - self.dense_read_bytes

    def attention_flops(self, context):
        return self.sizes.attention_flops_per_token(context)

    def prefill_attention_flops_per_token(self, prompt_len):
        p = np.maximum(np.asarray(prompt_len, dtype=float), 1.0)
        return self.sizes.prefill_attention_flops(p) / p

    def kv_read_bytes(self, context):
        return self.sizes.kv_read_bytes_per_sequence(context, self.kv_precision)

    def kv_bytes(self, context):
        return self.sizes.kv_bytes_per_sequence(context, self.kv_precision)


@lru_cache(maxsize=128)
def model_costs(model: ModelSpec, precision: str | None, kv_precision: str) -> ModelCosts:
    sz = ModelSizes(model)
    prec = canonical(precision) if precision is not None else sz.default_precision()
    wp = precision and prec  # None keeps the checkpoint's own mix (e.g. gpt-oss: bf16 + mxfp4 experts)
    kvp = canonical(kv_precision)
    total = sz.weight_bytes(wp)
    dense_read = float(sz.weight_bytes_read(0.0, wp))
    expert = sz.routed_expert_params * sz._precisions(wp)[1]
    return ModelCosts(sizes=sz, precision=wp or prec, kv_precision=kvp, dense_weight_bytes=total - expert,
                      expert_weight_bytes=expert, dense_read_bytes=dense_read,
                      gemm_flops_per_token=2 * sz.active_matmul_params,
                      expert_flops_per_token=2 * model.n_moe_layers * model.experts_per_token * sz.params_per_expert,
                      kv_bytes_per_token=sz.kv_bytes_per_token(kvp), head_shardable=model.attention != "mla")


def resolve_kv_precision(kv_precision: str | None, weight_precision: str, system: System) -> str:
    """'auto' (or None): an 8-bit KV cache when weights run at 8 bits or fewer on a chip with an FP8 rate
    (TensorRT-LLM's ModelOpt FP8/FP4 checkpoints and MLPerf submissions do this), else BF16."""
    if kv_precision and str(kv_precision).lower() != "auto":
        return canonical(kv_precision)
    narrow = bytes_per_element(weight_precision) <= 1
    return "fp8" if narrow and "fp8" in system.chip.flops_per_s else "bf16"


# --------------------------------------------------------------------------- layouts
def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def check_reach(system: System, gpus: int) -> None:
    """More GPUs than one scale-up domain need a scale-out network: refuse a chip whose YAML gives none."""
    if gpus > system.chips and system.chip.scaleout_bandwidth_bytes_per_s <= 0:
        raise InputError(f"{gpus} GPUs span more than one {system.chips}-chip scale-up domain, but "
                         f"{system.chip.id} has no scale-out network (scaleout_gbit_per_s is 0 or missing)")


def _divisors_upto(n: int, limit: int) -> list[int]:
    """Divisors of n no larger than limit, ascending (O(sqrt n), not a loop over every integer up to n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({x for d in small for x in (d, n // d) if x <= limit})


def enumerate_layouts(model: ModelSpec, gpus: int, domain: int) -> list[Layout]:
    """Every sensible layout of `gpus` chips: TP within the scale-up domain dividing the heads (and the KV
    heads, or divided by them); attention-DP only for MoE; PP up to 8 stages dividing into the layers."""
    gpus = count("gpus", gpus, MAX_GPUS)
    moe = model.is_moe
    out = []
    for tp in _pow2_upto(min(gpus, domain, model.num_heads)):
        if model.num_heads % tp:
            continue
        kv = model.num_kv_heads
        if model.attention == "gqa" and not (kv % tp == 0 or tp % kv == 0):
            continue
        for pp in (1, 2, 4, 8):
            if pp > model.num_layers or gpus % (tp * pp):
                continue
            rest = gpus // (tp * pp)
            for a in _divisors_upto(rest, max(model.num_experts, 1) // tp) if moe else [1]:
                out.append(Layout(tp=tp, attn_dp=a, pp=pp, dp=rest // a, moe=moe))
    return out


def layout_arrays(layouts: list[Layout]) -> dict[str, np.ndarray]:
    return {k: np.array([getattr(l, k) for l in layouts], dtype=float)
            for k in ("tp", "attn_dp", "pp", "dp", "ep", "replica_gpus")}


# --------------------------------------------------------------------------- memory per chip
def memory_per_chip(costs: ModelCosts, tp, attn_dp, pp, ep, sequences, context):
    """(weight bytes, KV bytes) per chip for `sequences` in flight per replica at `context` tokens."""
    w = P.weight_bytes_per_chip(costs.dense_weight_bytes, costs.expert_weight_bytes, tp, ep, pp)
    shard = P.kv_shard_fraction(costs.model.num_kv_heads, tp, costs.head_shardable)
    per_stage = np.asarray(sequences, dtype=float) / np.asarray(pp, dtype=float)
    kv = P.kv_bytes_per_chip(costs.kv_bytes(context), per_stage, attn_dp, pp, shard)
    return w, kv


# --------------------------------------------------------------------------- one stage step
def _expert_slowdown(m: ModelSpec, tokens, attn_dp, ep, cal: Calibration):
    """Factor (>= 1) on the routed-expert FLOPs of a stage step: grouped expert GEMMs with few tokens per expert
    run below dense-GEMM efficiency, and under expert parallelism the chip holding the busiest experts sets the
    pace (balls in bins over the EP chips). 1 for dense models and for the ideal calibration."""
    if not m.is_moe:
        return 1.0
    copies = np.asarray(tokens, dtype=float) * m.experts_per_token  # routed token copies in the step
    eta = MOE.grouped_gemm_efficiency(copies / max(m.num_experts, 1), cal.moe_gemm_half_tokens)
    bins = np.where(np.asarray(attn_dp, dtype=float) > 1, ep, 1.0)  # TP-sharded experts: every chip sees every token
    imbalance = MOE.max_load_factor(copies, bins) if cal.moe_load_imbalance else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(eta > 0, imbalance / np.maximum(eta, 1e-300), 1.0)


def stage_step(costs: ModelCosts, system: System, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context,
               prompt_len, cal: Calibration, *, overlap: str = "auto"):
    """Time of one pipeline-stage step of a replica (arrays broadcast together), and its parts.

    A step carries `decode_seqs / pp` decode tokens (one micro-batch per stage) plus `prefill_tokens / pp`
    chunked-prefill tokens. Calibrated: GEMMs and attention are separate kernels, each its own roofline,
    summed with communication and overhead; routed-expert FLOPs take longer by `_expert_slowdown` (grouped GEMMs
    with few tokens per expert, the busiest EP chip). Ideal (`cal.label == 'ideal'`): one roofline for the step.
    """
    chip, m = system.chip, costs.model
    tp, a, pp, ep = (np.asarray(x, dtype=float) for x in (tp, attn_dp, pp, ep))
    B = np.asarray(decode_seqs, dtype=float)
    c = np.asarray(prefill_tokens, dtype=float)
    tokens = (B + c) / pp
    stage_gpus = tp * a
    ideal = cal.label == "ideal"

    v_c, v_m = cal.vendor_factors(chip.vendor)
    peak_g = chip.peak_flops_per_s(costs.precision) * v_c
    peak_a = chip.peak_flops_per_s("bf16") * v_c  # attention matmuls run at 16 bits even over an FP8 cache
    bw = chip.hbm_bandwidth_bytes_per_s * v_m
    # Attention-DP ranks meet at every MoE layer, so the rank holding a whole prompt chunk sets the pace:
    # its prefill tokens are min(c, max(c / DP_attn, prompt)) per stage step, not the mean c / DP_attn.
    c_rank = np.where(a > 1, np.minimum(c / pp, np.maximum(c / (pp * a), np.asarray(prompt_len, dtype=float))),
                      c / (pp * a))
    f_dense = (B / (pp * a) + c_rank) * (costs.gemm_flops_per_token - costs.expert_flops_per_token) / (pp * tp)
    f_exp = tokens * costs.expert_flops_per_token / (pp * stage_gpus)  # experts: spread evenly over EP
    f_gemm = f_dense + f_exp
    f_gemm_eff = f_dense + f_exp * _expert_slowdown(m, tokens, a, ep, cal)  # the time the expert FLOPs take
    f_attn = ((B / (pp * a)) * costs.attention_flops(context)
              + c_rank * costs.prefill_attention_flops_per_token(prompt_len)) / (pp * tp)
    w_dense = costs.dense_read_bytes / (tp * pp)
    w_bytes = w_dense + costs.expert_read_bytes(tokens) / (ep * pp)
    if m.is_moe:  # routed copies gathered into expert order and scattered back (TP ranks each shuffle all)
        copies = tokens * m.experts_per_token / np.where(a > 1, ep, 1.0)
        w_bytes = w_bytes + copies * m.n_moe_layers / pp * cal.moe_shuffle_passes * m.hidden_size * ACTIVATION_BYTES
    shard = P.kv_shard_fraction(m.num_kv_heads, tp, costs.head_shardable)
    kv_bytes = ((B / pp) / a * costs.kv_read_bytes(context) + (c / pp) / a * costs.kv_bytes_per_token) * shard / pp

    # communication on the right link
    H, up, out = m.hidden_size, chip.scaleup_bandwidth_bytes_per_s, chip.scaleout_bandwidth_bytes_per_s
    domain = system.chips
    eta, a_up, a_out = cal.link, cal.scaleup_latency_s, cal.scaleout_latency_s
    up_eff = up if up > 0 else out  # a chip without a scale-up fabric talks over its NIC
    layers_stage = m.num_layers / pp
    n_ar = np.where(a > 1, 1.0, 2.0) * layers_stage * (tp > 1)
    t_ar = n_ar * P.ring_allreduce_time_s(tokens / a * H * ACTIVATION_BYTES, tp, up_eff, a_up, eta)
    t_a2a = np.zeros_like(t_ar)
    if m.is_moe:
        narrow = bytes_per_element(costs.precision) <= 1 and "fp8" in chip.flops_per_s
        b_elem = (1.0 if narrow else ACTIVATION_BYTES) + ACTIVATION_BYTES  # FP8 dispatch + BF16 combine
        k = m.experts_per_token
        intra, _ = P.ep_remote_fractions(ep, domain)
        sent = P.alltoall_bytes_per_chip(tokens / ep, k, H, b_elem)
        lat = 2 * (cal.alltoall_latency_s + np.where(ep > domain, a_out, 0.0))  # dispatch + combine
        one = P.alltoall_time_s(sent * intra, sent * P.remote_domain_copies(k, ep, domain) / k, up_eff, out, lat,
                                eta)
        t_a2a = np.where(a > 1, one * m.n_moe_layers / pp, 0.0)
    cross = tp * a * pp > domain
    hop = P.p2p_time_s(tokens * H * ACTIVATION_BYTES / (tp * a), np.where(cross, out, up_eff),
                       np.where(cross, a_out, a_up), eta)
    t_pp = np.where(pp > 1, hop, 0.0)
    t_comm = t_ar + t_a2a + t_pp
    t_ovh = np.full_like(t_comm, cal.overhead_s(layers_stage))

    if ideal:
        t_c = f_gemm_eff / peak_g + f_attn / peak_a
        t_m = (w_bytes + kv_bytes) / bw
        t_gemm, t_attn = np.maximum(t_c, t_m), np.zeros_like(t_c)
        t = t_gemm + t_comm
        mode = np.full(np.shape(t), "none", dtype=object)
    else:
        ec, em = cal.compute, cal.memory
        t_gemm = np.maximum(f_gemm_eff / (peak_g * ec), w_bytes / (bw * em))
        t_attn = np.maximum(f_attn / (peak_a * ec), kv_bytes / (bw * em))
        t_none = t_gemm + t_attn + t_comm + t_ovh
        t = t_none
        mode = np.full(np.shape(t), "none", dtype=object)
        if m.is_moe and overlap in ("auto", "two-microbatch"):
            w_half = w_bytes - (costs.expert_read_bytes(tokens) - costs.expert_read_bytes(tokens / 2)) / (ep * pp)
            f_half = f_dense / 2 + f_exp / 2 * _expert_slowdown(m, tokens / 2, a, ep, cal)
            gemm2 = 2 * np.maximum(f_half / (peak_g * ec), w_half / (bw * em))
            t_tbo = P.overlapped_time_s(gemm2 + t_attn, t_comm, cal.overlap) + t_ovh
            use = (a > 1) & ((t_tbo < t_none) | (overlap == "two-microbatch"))
            t = np.where(use, t_tbo, t_none)
            mode = np.where(use, "two-microbatch", mode)
    t = t * (1 + cal.pipeline_bubble * (pp - 1))  # micro-batch imbalance and stage syncs, per extra stage
    bound = np.where(f_gemm / peak_g >= w_bytes / bw, "compute", "memory")
    return {"stage_time_s": t, "gemm_time_s": t_gemm, "attention_time_s": t_attn, "allreduce_time_s": t_ar,
            "alltoall_time_s": t_a2a, "pp_transfer_time_s": t_pp, "comm_time_s": t_comm,
            "overhead_s": t_ovh, "overlap": mode, "gemm_bound": bound, "weight_read_bytes": w_bytes,
            "kv_read_bytes": kv_bytes, "flops": f_gemm + f_attn}


# --------------------------------------------------------------------------- reports
def layout_step_report(model: ModelSpec, system: System, layout: Layout, batch_per_replica: float, context: float,
                       precision: str | None = None, kv_precision: str | None = "auto", ideal: bool = False) -> dict:
    """Decode step of one layout at a batch: time breakdown, memory per chip, fit."""
    cal = calibration(ideal)
    sz = ModelSizes(model)
    prec = canonical(precision) if precision is not None else sz.default_precision()
    costs = model_costs(model, precision, resolve_kv_precision(kv_precision, prec, system))
    r = stage_step(costs, system, layout.tp, layout.attn_dp, layout.pp, layout.ep, batch_per_replica, 0.0, context,
                   1.0, cal)
    w, kv = memory_per_chip(costs, layout.tp, layout.attn_dp, layout.pp, layout.ep, batch_per_replica, context)
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    tpot = float(P.pipeline_token_latency_s(r["stage_time_s"], layout.pp))
    d = {k: (v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v) for k, v in r.items()}
    d.update(layout.to_dict())
    d.update(weight_bytes_per_gpu=float(w), kv_bytes_per_gpu=float(kv), usable_hbm_bytes_per_gpu=usable,
             fits=bool(w + kv <= usable), tpot_s=tpot, user_tokens_per_s=1 / tpot,
             output_tokens_per_s_per_gpu=batch_per_replica / tpot / layout.replica_gpus)
    return d


def moe_rack_layout(model: ModelSpec, system: System, precision: str | None = None, batch_per_gpu: float = 128,
                    context: float = 4096, kv_precision: str | None = "auto", ideal: bool = False) -> dict:
    """The lecture's MoE rack layout: the largest EP inside one scale-up domain, against spilling the same
    EP group across two domains over the scale-out network."""
    if not model.is_moe:
        return {"applies": False, "reason": f"{model.id} is dense: no expert parallelism"}
    if system.chip.scaleout_bandwidth_bytes_per_s <= 0:
        return {"applies": False, "reason": f"{system.chip.id} has no scale-out network to spill EP over"}
    D = system.chips
    chip = system.chip
    cal = calibration(ideal)
    ep_in = max(e for e in _pow2_upto(D) + [D] if e <= min(D, model.num_experts))
    rows = []
    for ep in sorted({ep_in, min(2 * ep_in, model.num_experts)}):
        lay = Layout(tp=1, attn_dp=ep, pp=1, dp=1, moe=True)
        rows.append(layout_step_report(model, system, lay, batch_per_gpu * ep, context, precision, kv_precision,
                                       ideal))
    inside, spill = rows[0], rows[-1]
    ratio = chip.scaleup_bandwidth_bytes_per_s / chip.scaleout_bandwidth_bytes_per_s
    return {"applies": True, "domain_chips": D, "ep_inside_domain": ep_in, "ep_spilled": spill["ep"],
            "scaleup_bytes_per_s_one_way": chip.scaleup_bandwidth_bytes_per_s,
            "scaleout_bytes_per_s_one_way": chip.scaleout_bandwidth_bytes_per_s,
            "scaleout_slowdown": ratio, "batch_per_gpu": batch_per_gpu, "context": context,
            "inside": inside, "spilled": spill,
            "alltoall_slowdown_when_spilled": (spill["alltoall_time_s"] / inside["alltoall_time_s"]
                                               if inside["alltoall_time_s"] > 0 else None),
            "step_slowdown_when_spilled": spill["stage_time_s"] / inside["stage_time_s"],
            "efficiency": cal.label}


def pipeline_analysis(model: ModelSpec, system: System, precision: str | None = None, tp: int | None = None,
                      batch_per_stage: float = 64, context: float = 8192, stages=(1, 2, 4, 8),
                      microbatches: int = 8, kv_precision: str | None = "auto", ideal: bool = False) -> dict:
    """Weights per chip fall as 1/PP while KV per chip stays constant (PP micro-batches in flight); the
    inference latency penalty; training bubbles (PP-1)/(M+PP-1), plain and interleaved."""
    cal = calibration(ideal)
    sz = ModelSizes(model)
    prec = canonical(precision) if precision is not None else sz.default_precision()
    costs = model_costs(model, precision, resolve_kv_precision(kv_precision, prec, system))
    tp = count("tp", tp, MAX_GPUS) if tp is not None else max(t for t in _pow2_upto(min(system.chips, model.num_heads, 8)) if model.num_heads % t == 0
                   and (model.attention == "mla" or model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0))
    moe = model.is_moe
    rows = []
    reach = system.chips if system.chip.scaleout_bandwidth_bytes_per_s <= 0 else float("inf")
    for p in stages:
        if p > model.num_layers or tp * p > reach:  # no scale-out network: stay in the domain
            continue
        lay = Layout(tp=tp, attn_dp=1, pp=p, dp=1, moe=moe)
        w, kv = memory_per_chip(costs, tp, 1, p, lay.ep, batch_per_stage * p, context)
        r = stage_step(costs, system, tp, 1, p, lay.ep, batch_per_stage * p, 0.0, context, 1.0, cal)
        stage_t = float(r["stage_time_s"])
        tok = float(P.pipeline_token_latency_s(stage_t, p, float(r["pp_transfer_time_s"])))
        rows.append({"pp": p, "gpus": tp * p, "sequences_in_flight": batch_per_stage * p,
                     "weight_bytes_per_gpu": float(w), "kv_bytes_per_gpu": float(kv), "stage_time_s": stage_t,
                     "token_latency_s": tok, "output_tokens_per_s_per_gpu": batch_per_stage * p / tok / (tp * p),
                     "training_bubble": float(P.pipeline_bubble_fraction(p, microbatches)),
                     "training_bubble_interleaved_2": float(P.pipeline_bubble_fraction(p, microbatches, 2))})
    base = rows[0]["token_latency_s"]
    for r in rows:
        r["latency_penalty"] = r["token_latency_s"] / base - 1
    return {"tp": tp, "batch_per_stage": batch_per_stage, "context": context, "microbatches": microbatches,
            "rows": rows, "efficiency": cal.label}


def layout_report(model: ModelSpec, system: System, gpus: int | None = None, precision: str | None = None,
                  kv_precision: str | None = "auto", context: float = 4096, ideal: bool = False) -> dict:
    """Everything `chalk layout` shows: feasible layouts with memory per chip, the MoE rack layout and the
    pipeline analysis."""
    n = system.chips if gpus is None else count("gpus", gpus, MAX_GPUS)
    check_reach(system, n)
    context = float(positive("context", context))
    cal = calibration(ideal)
    sz = ModelSizes(model)
    prec = canonical(precision) if precision is not None else sz.default_precision()
    costs = model_costs(model, precision, resolve_kv_precision(kv_precision, prec, system))
    layouts = enumerate_layouts(model, n, system.chips)
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    table = []
    for lay in layouts:
        w, _ = memory_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, lay.ep, 0.0, context)
        kv1 = float(memory_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, lay.ep, lay.pp * lay.attn_dp, context)[1])
        per_stage_max = float(P.max_sequences_fit(usable, w, kv1)) if kv1 > 0 else float("inf")
        table.append({**lay.to_dict(), "weight_bytes_per_gpu": float(w), "fits_weights": bool(w < usable),
                      "kv_bytes_per_sequence_per_gpu": kv1,
                      "max_sequences_per_replica": per_stage_max * lay.pp * lay.attn_dp})
    if not any(r["fits_weights"] for r in table):
        raise FitError(f"{model.id} does not fit on {n} x {system.chip.id} in any layout: weights need "
                       f"{costs.dense_weight_bytes / 1e9 + costs.expert_weight_bytes / 1e9:.0f} GB, "
                       f"{n} chips hold {n * usable / 1e9:.0f} GB usable")
    return {"model": model.id, "hardware": system.id, "gpus": n, "precision": costs.precision,
            "kv_precision": costs.kv_precision, "context": context, "efficiency": cal.label,
            "usable_hbm_bytes_per_gpu": usable, "layouts": table,
            "moe_rack_layout": moe_rack_layout(model, system, precision, context=context, ideal=ideal),
            "pipeline": pipeline_analysis(model, system, precision, ideal=ideal)}


# --------------------------------------------------------------------------- lecture claims
def claims() -> list[Claim]:
    """`scale_out_slowdown`, `pipeline_kv_per_gpu_constant`, `pipeline_training_bubble` (and, from
    `chalk.analyses.serving`, `fast_mode_price_for_2_5x_speed`)."""
    from chalk.specs.catalog import load_model, load_system

    out = []
    nvl = load_system("gb200-nvl72")
    c = nvl.chip
    ratio = c.scaleup_bandwidth_bytes_per_s / c.scaleout_bandwidth_bytes_per_s
    out.append(Claim(
        id="scale_out_slowdown", value=ratio, unit="x (one-way NVLink per GPU / one-way NIC per GPU)",
        lecture_value=8, lecture_range=(8.0, 20.0), section="MoE rack layout",
        assumptions=f"GB200 NVL72: NVLink5 {c.scaleup_bandwidth_bytes_per_s_bidir / 1e9:.0f} GB/s bidirectional = "
                    f"{c.scaleup_bandwidth_bytes_per_s / 1e9:.0f} GB/s one way per GPU; NIC "
                    f"{c.scaleout_bandwidth_bytes_per_s * 8 / 1e9:.0f} Gb/s = "
                    f"{c.scaleout_bandwidth_bytes_per_s / 1e9:.0f} GB/s one way per GPU (catalog: ConnectX-7).",
        explanation=f"Both figures one way (the ratio is the same bidirectional): {ratio:.0f}x. With an "
                    f"800 Gb/s ConnectX-8 per GPU it is {c.scaleup_bandwidth_bytes_per_s / 100e9:.0f}x; the "
                    "lecture's ~8x is that generation's rounder figure. Either way an EP group that spills out "
                    "of the rack sends most of its all-to-all over a link an order of magnitude slower."))
    # pipeline: KV per GPU constant, weights 1/PP
    m405 = load_model("llama-3.1-405b")
    sys8 = load_system("hgx-h200")
    pa = pipeline_analysis(m405, sys8, precision="fp8", tp=8, batch_per_stage=64, context=8192,
                           kv_precision="bf16")
    kv = [round(r["kv_bytes_per_gpu"] / 1e9, 3) for r in pa["rows"]]
    w = [round(r["weight_bytes_per_gpu"] / 1e9, 2) for r in pa["rows"]]
    out.append(Claim(
        id="pipeline_kv_per_gpu_constant", value=kv, unit="GB of KV per GPU at PP = 1, 2, 4, 8",
        lecture_value="constant", lecture_range=None, section="Pipeline parallelism",
        assumptions="Llama-3.1-405B, FP8 weights, BF16 KV, TP8 per stage on H200, 64 sequences per stage "
                    "micro-batch at 8,192 tokens; PP stages keep PP micro-batches in flight.",
        explanation=f"Weights per GPU fall as 1/PP ({w} GB) but each stage holds its layers' KV for all PP "
                    f"micro-batches in flight, so KV per GPU stays {kv[0]} GB: pipelining solves weight "
                    "capacity, not KV capacity."))
    b = float(P.pipeline_bubble_fraction(4, 8))
    bi = float(P.pipeline_bubble_fraction(4, 8, 2))
    out.append(Claim(
        id="pipeline_training_bubble", value=b, unit="fraction of the step idle", lecture_value="3/11",
        lecture_range=(3 / 11 - 1e-9, 3 / 11 + 1e-9), section="Pipeline parallelism",
        assumptions="PP = 4 stages, M = 8 micro-batches, equal stage times (GPipe / 1F1B schedule).",
        explanation=f"(PP-1)/(M+PP-1) = 3/11 = {b:.3f}; interleaving 2 model chunks per GPU cuts it to "
                    f"3/19 = {bi:.3f}. Inference has no bubble (micro-batches keep flowing) but pays latency."))
    return out

