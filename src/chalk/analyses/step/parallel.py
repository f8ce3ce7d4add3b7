"""Parallel layouts on a system: TP, EP (with attention-DP), PP and DP; memory per chip; step time with
communication on the right link; the MoE rack layout and the pipeline analysis.

A *replica* runs one copy of the model on tp * attn_dp * pp chips; dp replicas serve side by side.
Inside a stage, attention is split TP-ways within each of attn_dp data-parallel groups; a MoE layer's
routed experts are spread over all tp * attn_dp chips of the stage (attention-DP + EP as DeepSeek
and SGLang deploy it; with attn_dp = 1 the experts are simply sharded over the TP group): ep groups of
etp chips, each expert's weights split etp ways inside its group (expert tensor parallelism, SGLang's
and TensorRT-LLM's MoE TP), so ep * etp = tp * attn_dp; etp = 1 by default.

A replica may span several scale-up domains (HGX nodes): pipeline stages over nodes, or an EP group wider than
the domain; what crosses a domain is timed on the scale-out network (`chalk.analyses.step.step_model`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from chalk.analyses.step.calibration import Calibration, calibration
from chalk.analyses.step.model_sizes import NARROWED_KEEPS, ModelSizes, sizes
from chalk.analyses.step.step_model import stage_ops
from chalk.equations import parallel as P
from chalk.equations.num import flt, maximum
from chalk.errors import FitError, InputError
from chalk.memo import by_identity
from chalk.specs.hardware import System
from chalk.specs.model import ModelSpec
from chalk.specs.precision import bytes_per_element, canonical, weight_only
from chalk.specs.workload import MAX_GPUS, count, positive

ACTIVATION_BYTES = 2.0  # activations travel in BF16 (TP all-reduce, PP sends, MoE combine)


@dataclass(frozen=True)
class Layout:
    """One parallel layout. gpus = tp * attn_dp * pp * dp; for MoE models ep * etp = tp * attn_dp (the stage's
    chips): ep expert-parallel groups of etp chips each, every routed expert split etp ways (default etp = 1,
    ep = tp * attn_dp); dense models have ep = etp = 1."""

    tp: int
    attn_dp: int
    pp: int
    dp: int
    moe: bool
    etp: int = 1

    def __post_init__(self) -> None:
        ranks = self.tp * self.attn_dp
        if self.etp < 1 or ranks % self.etp or (self.etp > 1 and not self.moe):
            raise InputError(f"expert tensor parallelism etp={self.etp} must divide the stage's tp x attn_dp = "
                             f"{ranks} GPUs of a MoE model")

    @property
    def ep(self) -> int:
        return self.tp * self.attn_dp // self.etp if self.moe else 1

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
        elif self.moe and self.ep > 1:  # the experts spread over the TP ranks (each GPU holds 1/ep of them)
            s += f" EP{self.ep}"
        if self.etp > 1:
            s += f" ETP{self.etp}"
        if self.pp > 1:
            s += f" PP{self.pp}"
        if self.dp > 1:
            s += f" x{self.dp} replicas"
        return s

    def to_dict(self) -> dict:
        return {"tp": self.tp, "ep": self.ep, "etp": self.etp, "pp": self.pp, "dp": self.dp,
                "attn_dp": self.attn_dp, "gpus": self.gpus, "label": self.label()}

    def replica_domains(self, domain_chips: int) -> int:
        """Scale-up domains (nodes of `domain_chips` chips) one replica spans."""
        return -(-self.replica_gpus // domain_chips)

    def domains(self, domain_chips: int) -> int:
        """Scale-up domains all dp replicas take: replicas smaller than a domain share domains, larger ones do not."""
        if self.replica_gpus >= domain_chips:
            return self.dp * self.replica_domains(domain_chips)
        return -(-self.gpus // domain_chips)


def layout_spec(par: dict) -> str:
    """The `--layout` text of one replica from its parallelism (`Layout.to_dict()`, an answer's `parallelism`):
    tp, pp and attention DP, and etp where experts are split (ep follows: tp x attn_dp / etp)."""
    etp = int(par.get("etp") or 1)
    return f"tp={par['tp']},pp={par['pp']},attn_dp={par.get('attn_dp', 1)}" + (f",etp={etp}" if etp > 1 else "")


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
    dense_precision: str = "bf16"   # non-expert weights (the checkpoint's own when no precision is asked)
    expert_precision: str = "bf16"  # routed-expert weights
    own_mix: bool = False  # no precision asked: the checkpoint's own, groups it keeps unquantised at 16 bits

    def stored_precision(self, group: str) -> str:
        """The precision a parameter group's weights are read at (`chalk.specs.quantisation.GROUPS`): the one
        asked, else the checkpoint's own, whose 16-bit dtype for a group it keeps (mostly) unquantised."""
        fmt = self.sizes.model.weight_format
        if self.own_mix and fmt is not None and fmt.fraction(group) >= 0.5:
            return canonical(fmt.dense_dtype)
        if not self.own_mix and group in NARROWED_KEEPS and self.sizes.narrowed(self.precision):
            return self.sizes.wide_dtype()  # a what-if quantisation keeps these 16-bit (`NARROWED_KEEPS`)
        return self.expert_precision if group == "experts" else self.dense_precision

    @property
    def model(self) -> ModelSpec:
        return self.sizes.model

    def expert_read_bytes(self, tokens):
        """Routed-expert bytes a step over `tokens` tokens reads (expected distinct experts), at the precisions
        `dense_read_bytes` was read at: the checkpoint's own mix (`own_mix`, e.g. MXFP4 experts beside BF16
        attention) or every weight at `precision`."""
        t = np.asarray(tokens, dtype=float)
        return self.sizes.weight_bytes_read(t, None if self.own_mix else self.precision) - self.dense_read_bytes

    def attention_flops(self, context):
        return self.sizes.attention_flops_per_token(context)

    def prefill_attention_flops_per_token(self, prompt_len):
        p = maximum(flt(prompt_len), 1.0)
        return self.sizes.prefill_attention_flops(p) / p

    def kv_read_bytes(self, context):
        return self.sizes.kv_read_bytes_per_sequence(context, self.kv_precision)

    def kv_bytes(self, context):
        return self.sizes.kv_bytes_per_sequence(context, self.kv_precision)


@by_identity(maxsize=256)
def model_costs(model: ModelSpec, precision: str | None, kv_precision: str) -> ModelCosts:
    """What the step model needs from `model` at these precisions; kept per model (found by the spec's identity
    first: hashing a ModelSpec reads every field)."""
    return _model_costs(model, precision, kv_precision)


@lru_cache(maxsize=128)
def _model_costs(model: ModelSpec, precision: str | None, kv_precision: str) -> ModelCosts:
    sz = sizes(model)
    prec = canonical(precision) if precision is not None else sz.default_precision()
    # None keeps the checkpoint's own mix (e.g. gpt-oss: bf16 + mxfp4 experts), and so does asking for the
    # checkpoint's own precision by name (`ModelSizes.as_stored`)
    wp = sz.as_stored(prec) if precision is not None else None
    kvp = canonical(kv_precision)
    if weight_only(kvp):  # QA 2026-11-28: --kv-precision w4a16 sized a "w4a16-int-g128 KV"
        raise InputError(f"KV precision {kv_precision!r} is a weight-only GEMM format (weights stored narrow, math at "
                         "16 bits), not a KV-cache dtype: give bf16, fp16, fp8 or fp4")
    total = sz.weight_bytes(wp)
    dense_read = float(sz.weight_bytes_read(0.0, wp))
    expert = sz.routed_expert_params * sz._precisions(wp)[1]
    return ModelCosts(sizes=sz, precision=wp or prec, kv_precision=kvp, dense_weight_bytes=total - expert,
                      expert_weight_bytes=expert, dense_read_bytes=dense_read,
                      gemm_flops_per_token=2 * sz.active_matmul_params,
                      expert_flops_per_token=2 * model.n_moe_layers * model.experts_per_token * sz.params_per_expert,
                      kv_bytes_per_token=sz.kv_bytes_per_token(kvp), head_shardable=model.attention != "mla",
                      dense_precision=canonical(wp or model.native_precision),
                      expert_precision=canonical(wp or model.expert_precision or model.native_precision),
                      own_mix=wp is None)


def resolve_kv_precision(kv_precision: str | None, weight_precision: str, system: System | None = None) -> str:
    """'auto' (or None): an 8-bit KV cache when weights run at 8 bits or fewer on a chip with an FP8 rate
    (TensorRT-LLM's ModelOpt FP8/FP4 checkpoints and MLPerf submissions do this), else BF16. Without a system
    (a model on its own), the chip is taken to have an FP8 rate."""
    if kv_precision is not None and not str(kv_precision).strip():  # "" is a slip, not a request for 'auto'
        raise InputError("kv_precision must name a precision or 'auto', got ''")
    if kv_precision and str(kv_precision).lower() != "auto":
        return canonical(kv_precision)
    narrow = bytes_per_element(weight_precision) <= 1 and not weight_only(weight_precision)  # W4A16: 16-bit math
    return "fp8" if narrow and (system is None or "fp8" in system.chip.flops_per_s) else "bf16"


def precisions(model: ModelSpec, system: System, precision: str | None, kv_precision: str | None) -> tuple[str, str]:
    """(weight precision, KV precision) of `model` on `system`: `precision` canonical, else the checkpoint's
    own; `kv_precision` as `resolve_kv_precision` reads it ('auto' or None: from the weights and the chip)."""
    prec = canonical(precision) if precision is not None else sizes(model).default_precision()  # '' is refused
    return prec, resolve_kv_precision(kv_precision, prec, system)


def step_costs(model: ModelSpec, system: System, precision: str | None,
               kv_precision: str | None) -> tuple[str, str, "ModelCosts"]:
    """(weight precision, KV precision, the step model's `ModelCosts`) of `model` on `system`: the setup every
    caller of the step model starts from (`precisions`, then `model_costs`; precision None keeps the checkpoint's
    own mix of weight formats)."""
    prec, kvp = precisions(model, system, precision, kv_precision)
    return prec, kvp, model_costs(model, precision, kvp)


# --------------------------------------------------------------------------- layouts
def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def valid_tp(model: ModelSpec, tp: int) -> bool:
    """Whether `tp` ranks can split the attention heads (and the KV heads, or be divided by them)."""
    if tp < 1 or model.num_heads % tp:
        return False
    kv = model.num_kv_heads
    return not (model.attention == "gqa" and not (kv % tp == 0 or tp % kv == 0))


def check_reach(system: System, gpus: int) -> None:
    """More GPUs than one scale-up domain need a scale-out network: refuse a chip whose YAML gives none."""
    if gpus > system.chips and system.chip.scaleout_bandwidth_bytes_per_s <= 0:
        raise InputError(f"{gpus} GPUs span more than one {system.chips}-chip scale-up domain, but "
                         f"{system.chip.id} has no scale-out network (scaleout_gbit_per_s is 0 or missing)")


#: Most scale-up domains (nodes) a model is laid out over on its own when its weights do not fit one.
MAX_DOMAINS = 64


def domains_to_hold(system: System, weight_bytes: float, usable_bytes_per_chip: float) -> int:
    """Fewest scale-up domains (1, 2, 4, ... up to `MAX_DOMAINS`) whose usable memory holds `weight_bytes`: the
    nodes a model needs before any KV cache (DeepSeek-R1's 671 GB of FP8 on 8 x 72 GB usable H100s: 2). 1 when the
    chip has no scale-out network to span domains with."""
    per = system.chips * usable_bytes_per_chip
    if system.chip.scaleout_bandwidth_bytes_per_s <= 0:
        return 1
    k = 1
    while weight_bytes > k * per and k < MAX_DOMAINS:
        k *= 2
    return k


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
        if not valid_tp(model, tp):
            continue
        for pp in (1, 2, 4, 8):
            if pp > model.num_layers or gpus % (tp * pp):
                continue
            rest = gpus // (tp * pp)
            for a in _divisors_upto(rest, max(model.num_experts, 1) // tp) if moe else [1]:
                out.append(Layout(tp=tp, attn_dp=a, pp=pp, dp=rest // a, moe=moe))
    return out


def replica_candidates(model: ModelSpec, most: int = 128) -> list[Layout]:
    """The one-replica layouts `chalk estimate` chooses among by default, fewest GPUs first (up to `most`): each
    tensor-parallel group that splits the heads (for a MoE model, no wider than its experts), and for a MoE model
    attention data parallelism with expert parallelism over the same GPUs (tp=1, attn_dp = ep = GPUs; what engines
    deploy for throughput: each rank keeps its own sequences' KV, so a latent KV that TP cannot split is not
    replicated on every rank). Which of them answers is the estimate's objective's choice."""
    moe = model.is_moe
    out = []
    for g in _pow2_upto(most):
        if valid_tp(model, g) and (not moe or g <= model.num_experts):
            out.append(Layout(tp=g, attn_dp=1, pp=1, dp=1, moe=moe))
        if moe and 1 < g <= model.num_experts:
            out.append(Layout(tp=1, attn_dp=g, pp=1, dp=1, moe=True))
    return out


def layout_arrays(layouts: list[Layout]) -> dict[str, np.ndarray]:
    return {k: np.array([getattr(l, k) for l in layouts], dtype=float)
            for k in ("tp", "attn_dp", "pp", "dp", "ep", "replica_gpus")}


# --------------------------------------------------------------------------- memory per chip
def expert_tp(model: ModelSpec, tp, attn_dp, ep):
    """Expert tensor parallelism of a layout given as (tp, attn_dp, ep): etp = tp * attn_dp / ep for a MoE model
    (the stage's chips are ep groups of etp), 1 for a dense one. Numbers or arrays."""
    if not model.is_moe:
        return 1.0
    return flt(tp) * flt(attn_dp) / maximum(flt(ep), 1.0)


def memory_per_chip(costs: ModelCosts, tp, attn_dp, pp, ep, sequences, context):
    """(weight bytes, KV bytes) per chip for `sequences` in flight per replica at `context` tokens; routed experts
    are split over ep * etp = tp * attn_dp chips (`expert_tp`)."""
    return (weights_per_chip(costs, tp, pp, ep, expert_tp(costs.model, tp, attn_dp, ep)),
            kv_per_chip(costs, tp, attn_dp, pp, sequences, costs.kv_bytes(context)))


def weights_per_chip(costs: ModelCosts, tp, pp, ep, etp=1.0):
    """Weight bytes per chip of a layout (`memory_per_chip`'s first part)."""
    return P.weight_bytes_per_chip(costs.dense_weight_bytes, costs.expert_weight_bytes, tp, ep, pp, etp)


def kv_per_chip(costs: ModelCosts, tp, attn_dp, pp, sequences, kv_seq):
    """KV bytes per chip for `sequences` in flight per replica, each holding `kv_seq` bytes
    (`costs.kv_bytes(context)`; `memory_per_chip`'s second part)."""
    shard = P.kv_shard_fraction(costs.model.num_kv_heads, tp, costs.head_shardable)
    per_stage = flt(sequences) / flt(pp)
    return P.kv_bytes_per_chip(kv_seq, per_stage, attn_dp, pp, shard)


# --------------------------------------------------------------------------- one stage step
def stage_step(costs: ModelCosts, system: System, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context,
               prompt_len, cal: Calibration, *, overlap: str = "auto", kernels=None, overhead_s=None,
               query_tokens=1.0, prefill_rank_tokens=None):
    """Time of one pipeline-stage step of a replica (arrays broadcast together), its parts and its ops.

    The one step model (`chalk.analyses.step.step_model.stage_ops`); see there. `kernels` defaults to the chip's
    measured kernel profile when chalk has one (`default_kernels`)."""
    if kernels is None:
        kernels = default_kernels(system.chip, cal)
    return stage_ops(costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len, cal,
                     overlap=overlap, kernels=kernels or None, overhead_s=overhead_s, query_tokens=query_tokens,
                     prefill_rank_tokens=prefill_rank_tokens)


def default_kernels(chip, cal: Calibration, framework: str | None = None, version: str | None = None):
    """The kernel profile the step model times ops with: measured tables (or their curve family) unless the
    calibration is ideal or asks for the plain roofline; False when none applies. `version`: the engine release
    whose tables to prefer (None: the main tables)."""
    if cal.label == "ideal" or not cal.use_kernel_tables:
        return False
    try:
        from chalk.analyses.step.kernels import kernel_profile
    except ImportError:
        return False
    return kernel_profile(chip, framework, version)


def engine_kernels(chip, cal: Calibration, engine=None):
    """`default_kernels` for `engine`'s framework and release (an engine profile; None: chalk's main tables)."""
    return default_kernels(chip, cal, getattr(engine, "kernel_framework", None),
                           getattr(engine, "kernel_version", None))


def engine_overhead_s(engine, cal: Calibration) -> float | None:
    """The host time per step `engine` runs with (its profile's `step_overhead_s`); None without an engine or under
    the ideal calibration (the calibration's own overhead applies)."""
    return getattr(engine, "step_overhead_s", None) if engine is not None and cal.label != "ideal" else None


def kernel_provenance(kernels, model=None, engine=None) -> dict:
    """{'kernels': which framework and version the kernel tables come from (one line), 'notes': [...]} for the
    families `model` uses (all when None); {'kernels': 'roofline (no kernel tables)', 'notes': []} without
    tables. `engine` (a profile): where it is its engine's newest release and the tables are another version's, a
    note says so, in every answer alike (estimate said nothing where throughput did; QA 2026-11-28)."""
    if not kernels:
        return {"kernels": "roofline (no kernel tables)", "notes": []}
    fams = None
    if model is not None:
        fams = ("gemm", "mla_decode" if model.attention == "mla" else "mha_decode") + (("moe",) if model.is_moe
                                                                                      else ())
    kp = kernels.provenance(fams)
    if engine is not None and engine.newest and not kp["notes"] and not kp["kernels"].startswith(
            f"{engine.kernel_framework} {engine.release}"):
        kp = {**kp, "notes": [f"{engine.label}'s defaults (scheduler cap, memory fraction, chunk) with the kernel "
                              f"tables of {kp['kernels']}: the newest its framework was measured at"]}
    return kp


def engine_provenance(chip, cal: Calibration, engine, model=None) -> dict:
    """`kernel_provenance` of the tables a step under `engine` (a profile, or None) is timed with on `chip`
    (`engine_kernels`), its engine's note included: what every answer says of its kernels."""
    return kernel_provenance(engine_kernels(chip, cal, engine), model, engine)


# --------------------------------------------------------------------------- reports
def layout_step_report(model: ModelSpec, system: System, layout: Layout, batch_per_replica: float, context: float,
                       precision: str | None = None, kv_precision: str | None = "auto", ideal: bool = False,
                       overlap: str = "auto") -> dict:
    """Decode step of one layout at a batch: time breakdown, memory per chip, fit. `overlap`: 'none' reports the
    communication before two-micro-batch overlap hides any of it."""
    cal = calibration(ideal)
    costs = step_costs(model, system, precision, kv_precision)[2]
    r = stage_step(costs, system, layout.tp, layout.attn_dp, layout.pp, layout.ep, batch_per_replica, 0.0, context,
                   1.0, cal, overlap=overlap)
    w, kv = memory_per_chip(costs, layout.tp, layout.attn_dp, layout.pp, layout.ep, batch_per_replica, context)
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    tpot = float(P.pipeline_token_latency_s(r["stage_time_s"], layout.pp))
    from chalk.analyses.step.step_model import ops_table

    d = {k: (v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v) for k, v in r.items() if k != "ops"}
    d["ops"] = ops_table(r["ops"])
    d.update(layout.to_dict())
    d.update(weight_bytes_per_gpu=float(w), kv_bytes_per_gpu=float(kv), usable_hbm_bytes_per_gpu=usable,
             fits=bool(w + kv <= usable), tpot_s=tpot, user_tokens_per_s=1 / tpot,
             output_tokens_per_s_per_gpu=batch_per_replica / tpot / layout.replica_gpus)
    return d


def moe_rack_layout(model: ModelSpec, system: System, precision: str | None = None, batch_per_gpu: float = 128,
                    context: float = 4096, kv_precision: str | None = "auto", ideal: bool = False) -> dict:
    """The lecture's MoE rack layout: the largest EP inside one scale-up domain, against spilling the same
    EP group across two domains over the scale-out network."""
    batch_per_gpu = float(positive("batch per GPU", batch_per_gpu, scalar=True))
    context = float(positive("context", context, scalar=True))
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
    # the all-to-all itself, before two-micro-batch overlap hides part of it (what crossing the NIC costs)
    raw = [layout_step_report(model, system, Layout(tp=1, attn_dp=r["ep"], pp=1, dp=1, moe=True),
                              batch_per_gpu * r["ep"], context, precision, kv_precision, ideal,
                              overlap="none")["alltoall_time_s"] for r in (inside, spill)]
    ratio = chip.scaleup_bandwidth_bytes_per_s / chip.scaleout_bandwidth_bytes_per_s
    return {"applies": True, "domain_chips": D, "ep_inside_domain": ep_in, "ep_spilled": spill["ep"],
            "scaleup_bytes_per_s_one_way": chip.scaleup_bandwidth_bytes_per_s,
            "scaleout_bytes_per_s_one_way": chip.scaleout_bandwidth_bytes_per_s,
            "scaleout_slowdown": ratio, "batch_per_gpu": batch_per_gpu, "context": context,
            "inside": inside, "spilled": spill,
            "alltoall_slowdown_when_spilled": raw[1] / raw[0] if raw[0] > 0 else None,
            "step_slowdown_when_spilled": spill["stage_time_s"] / inside["stage_time_s"],
            "efficiency": cal.label}


def pipeline_analysis(model: ModelSpec, system: System, precision: str | None = None, tp: int | None = None,
                      batch_per_stage: float = 64, context: float = 8192, stages=(1, 2, 4, 8),
                      microbatches: int = 8, kv_precision: str | None = "auto", ideal: bool = False) -> dict:
    """Weights per chip fall as 1/PP while KV per chip stays constant (PP micro-batches in flight); the
    inference latency penalty; training bubbles (PP-1)/(M+PP-1), plain and interleaved."""
    batch_per_stage = float(positive("batch per stage", batch_per_stage, scalar=True))
    context = float(positive("context", context, scalar=True))
    microbatches = count("micro-batches", microbatches)
    cal = calibration(ideal)
    costs = step_costs(model, system, precision, kv_precision)[2]
    tp = count("tp", tp, MAX_GPUS) if tp is not None else max(
        t for t in _pow2_upto(min(system.chips, model.num_heads, 8)) if model.num_heads % t == 0
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
    context = float(positive("context", context, scalar=True))
    cal = calibration(ideal)
    costs = step_costs(model, system, precision, kv_precision)[2]
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    # by default one scale-up domain, or the fewest that hold the weights
    n = system.chips * domains_to_hold(system, costs.dense_weight_bytes + costs.expert_weight_bytes, usable) \
        if gpus is None else count("gpus", gpus, MAX_GPUS)
    check_reach(system, n)
    layouts = enumerate_layouts(model, n, system.chips)
    table = []
    for lay in layouts:
        w, _ = memory_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, lay.ep, 0.0, context)
        kv1 = float(memory_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, lay.ep, lay.pp * lay.attn_dp, context)[1])
        per_stage_max = float(P.max_sequences_fit(usable, w, kv1)) if kv1 > 0 else float("inf")
        table.append({**lay.to_dict(), "weight_bytes_per_gpu": float(w), "fits_weights": bool(w < usable),
                      # kv1 is one sequence per stage and rank: each GPU holds its stage's layers of pp of them
                      "kv_bytes_per_sequence_per_gpu": kv1 / lay.pp,
                      "max_sequences_per_replica": per_stage_max * lay.pp * lay.attn_dp})
    if not any(r["fits_weights"] for r in table):
        raise FitError(f"{model.id} does not fit on {n} x {system.chip.id} in any layout: weights need "
                       f"{costs.dense_weight_bytes / 1e9 + costs.expert_weight_bytes / 1e9:.0f} GB, "
                       f"{n} chips hold {n * usable / 1e9:.0f} GB usable")
    from chalk.analyses.records.results import LayoutReport

    return LayoutReport({"model": model.id, "hardware": system.id, "gpus": n, "precision": costs.precision,
            "kv_precision": costs.kv_precision, "context": context, "efficiency": cal.label,
            "usable_hbm_bytes_per_gpu": usable, "layouts": table,
            "moe_rack_layout": moe_rack_layout(model, system, precision, context=context, ideal=ideal),
            # at the question's context and KV precision, as the layouts above (QA 2026-11-28: --context was
            # ignored here, the table always at 8,192 tokens)
            "pipeline": pipeline_analysis(model, system, precision, context=context, kv_precision=kv_precision,
                                          ideal=ideal)})


# --------------------------------------------------------------------------- lecture claims
def claims() -> list[Claim]:
    """`scale_out_slowdown`, `pipeline_kv_per_gpu_constant`, `pipeline_training_bubble` (and, from
    `chalk.analyses.traffic.serving`, `fast_mode_price_for_2_5x_speed`)."""
    from chalk.analyses.records.claims import Claim  # here, not at the top: an estimate never needs it
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

