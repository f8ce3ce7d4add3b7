"""The one step model: a decode or prefill step of one pipeline stage, as a list of timed operations.

Every command that needs a step time (`estimate`, `sweep`, `layout`, `throughput`, `simulate` with or without
`--layout`, `plan`, `report`, `pricing margin`, the web explorer) takes it from `stage_ops`. The one other step time
is the lecture's aggregate bound (`roofline.py`: `estimate --aggregate`, the lecture's claims, the price sheets'
mode curve), named as such wherever it is shown; tests/test_house.py keeps it so. A step of one attention rank of
one stage is:

  attention projections (QKV/O, MLA down/up)  GEMM, m = tokens on the rank
  attention                                   decode (KV read) and prefill (causal), by kernel family
  dense MLP / shared experts / router         GEMMs
  routed experts                              grouped GEMM over the tokens each expert receives
  LM head and sampling                        one logit row per sequence that emits a token
  norms, residuals, activations, MoE permute  memory-bound elementwise kernels
  TP all-reduce, EP all-to-all, PP send        on the link they cross (NVLink inside the domain, NIC outside)
  overhead                                    launches, scheduling, host sync: fixed, per layer, per sequence (fitted)
  pipeline sync                               micro-batch imbalance per extra stage (calibrated)

Each compute op takes max(FLOPs / achieved FLOP/s, bytes / achieved bandwidth) (`equations.roofline.step_time_s`,
the one max rule). Achieved rates come from the measured kernel tables where chalk has them for the chip
(`chalk.analyses.step.kernels`), else from the calibrated fractions of peak; each op says which (`source`). Ops are
numpy arrays broadcast over layouts x batches, so a throughput search times thousands of points in one call; one
question (numbers, not arrays) runs the same code on numpy float64 scalars, whose maximum / minimum / where skip
numpy's per-call cost (`chalk.equations.num`). The op times add up to the stage step time exactly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from chalk.analyses.step.calibration import Calibration
from chalk.equations import moe as MOE
from chalk.equations import ops as O
from chalk.equations import parallel as P
from chalk.equations import roofline as R
from chalk.equations.num import every, flt, maximum, minimum, some, where, zeros_like
from chalk.memo import by_identity
from chalk.specs.precision import bytes_per_element, weight_only

ACTIVATION_BYTES = 2.0  # activations travel in BF16 (TP all-reduce, PP sends, MoE combine)

#: Op kinds, in the order they are reported.
OP_ORDER = ("attn_proj", "attention_decode", "attention_prefill", "mlp", "shared_experts", "router", "experts",
            "lm_head", "sampling", "elementwise", "moe_permute", "allreduce", "alltoall", "pp_send", "overhead",
            "pipeline_sync")


class Op(NamedTuple):
    """One operation of a stage step on one GPU: FLOPs, HBM (or link) bytes, time, what binds, where the time came
    from. Fields are floats or numpy arrays (one value per evaluated point). Immutable (a named tuple: a step makes
    a dozen, cheaply)."""

    name: str
    kind: str  # gemm | attention | moe | elementwise | comm | overhead
    flops: object
    bytes: object
    time_s: object
    bound: object  # compute | memory | link | latency
    source: str  # roofline | calibrated roofline | measured table | fitted curve | fitted
    detail: str = ""

    def at(self, i=None) -> dict:
        """The op as plain floats (point `i` of an array evaluation)."""
        return {"name": self.name, "kind": self.kind, "flops": float(_pick(self.flops, i)),
                "bytes": float(_pick(self.bytes, i)), "time_s": float(_pick(self.time_s, i)),
                "bound": str(_pick(self.bound, i)), "source": self.source, "detail": self.detail}


def _pick(v, i):
    """Point `i` of an op's field: the value itself for one point (a numpy float64 is a float)."""
    if isinstance(v, (float, int, str)):
        return v
    a = np.asarray(v)
    return a.item() if a.ndim == 0 else a.ravel()[i].item()


def _nothing(x) -> bool:
    """`x` is one number and not > 0: `where(x > 0, time, 0.0)` is 0 whatever the time, so it need not be looked up."""
    return isinstance(x, float) and not x > 0


#: The legacy part of `stage_ops`' answer each op's time adds to, and the ops whose FLOPs and bytes are the weight
#: GEMMs' (`gemm_bound`, `weight_read_bytes`, `flops`).
_PART = {"attn_proj": "gemm_time_s", "mlp": "gemm_time_s", "shared_experts": "gemm_time_s",
         "router": "gemm_time_s", "experts": "gemm_time_s", "lm_head": "gemm_time_s", "elementwise": "gemm_time_s",
         "moe_permute": "gemm_time_s", "sampling": "gemm_time_s", "attention_decode": "attention_time_s",
         "attention_prefill": "attention_time_s", "allreduce": "allreduce_time_s", "alltoall": "alltoall_time_s",
         "pp_send": "pp_transfer_time_s", "overhead": "overhead_s", "pipeline_sync": "overhead_s"}
_PARTS = tuple(dict.fromkeys(_PART.values()))
_WEIGHT_GEMMS = frozenset(("attn_proj", "mlp", "shared_experts", "router", "experts", "lm_head"))


class _Timer:
    """Achieved-rate timing of compute ops: measured kernel tables when the chip has them, else the calibrated
    fractions of peak. Both paths return (time, compute-time, memory-time, source)."""

    def __init__(self, system, costs, cal: Calibration, kernels):
        chip = system.chip
        self.ideal = cal.label == "ideal"
        v_c, v_m = (1.0, 1.0) if self.ideal else cal.vendor_factors(chip.vendor)
        self.ec = 1.0 if self.ideal else cal.compute * v_c
        self.em = 1.0 if self.ideal else cal.memory * v_m
        self.dense_dtype = chip.compute_precision(costs.dense_precision)
        self.expert_dtype = chip.compute_precision(costs.expert_precision)
        self.peak_dense = chip.peak_flops_per_s(costs.dense_precision)
        self.peak_expert = chip.peak_flops_per_s(costs.expert_precision)
        self.peak_attn = chip.peak_flops_per_s("bf16")  # attention matmuls run at 16 bits even over an FP8 cache
        self.bw = chip.hbm_bandwidth_bytes_per_s
        # achieved rates of the calibrated roofline (peak x efficiency)
        self.hbm = self.bw * self.em
        self.attn_rate, self.expert_rate = self.peak_attn * self.ec, self.peak_expert * self.ec
        self.kernels = None if self.ideal else kernels
        # a vendor's software stack relative to the tables' (NVIDIA) frameworks: slower compute-bound and
        # memory-bound kernels by the fitted vendor factors (1 for NVIDIA)
        self.k_c, self.k_m = 1.0 / v_c, 1.0 / v_m
        self.vendor = chip.vendor
        self.roofline_source = "roofline (peak)" if self.ideal else \
            f"roofline x calibrated efficiency ({self.ec:.2f} FLOP/s, {self.em:.2f} HBM)"
        #: the category of `roofline_source` (an op's `source`; the description is its `detail`)
        self.roofline_kind = "roofline" if self.ideal else "calibrated roofline"

    def kkind(self, kind: str) -> str:
        """The category of a kernel-table time (`KernelProfile.source_kind`): 'measured table' or 'fitted curve'."""
        return self.kernels.source_kind(kind)

    def ksrc(self, kind: str) -> str:
        """Where a kernel-table time came from, with the vendor software factor when one applies."""
        src = self.kernels.source(kind)
        if self.k_c != 1.0 or self.k_m != 1.0:
            src += f"; x{self.k_c:.2f} compute / x{self.k_m:.2f} memory time for {self.vendor}'s software (fitted)"
        return src

    def vendor_factor(self, compute_s, memory_s):
        """The vendor software factor on a kernel-table time (1 for the tables' own, NVIDIA, stacks): its fitted
        compute factor where the op's roofline is compute-bound, its memory factor where it is memory-bound
        (`R.rate_scaled_time_factor`). `compute_s`, `memory_s`: the op's roofline times at the vendor's rates."""
        if self.k_c == 1.0 and self.k_m == 1.0:
            return 1.0
        return R.rate_scaled_time_factor(compute_s, memory_s, self.k_c, self.k_m)

    def gemm(self, m, shape, flops, bytes_, rate, count=1.0, source=None):
        """`count` identical GEMMs of `m` rows per GPU (e.g. one per layer); `shape`: the weight's kernel shape
        (`KernelProfile.gemm_shape`), None without kernel tables; `rate`: achieved FLOP/s of the roofline (peak x
        efficiency); `source`: `ksrc('gemm')`. `m`, `flops`, `bytes_`: numpy float64 numbers or arrays."""
        c, mm = flops / rate, bytes_ / self.hbm
        if shape is not None:
            tk = flt(shape(maximum(m, 1.0))) * count * self.vendor_factor(c, mm)
            return where(m > 0, tk, 0.0), c, mm, source
        return R.step_time_s(c, mm), c, mm, self.roofline_source

    def elementwise(self, bytes_):
        """Memory-bound kernel time of `bytes_` (numpy float64 numbers or arrays) at the achieved HBM bandwidth."""
        return bytes_ / self.hbm, self.roofline_source


@by_identity(maxsize=64, objects=4)
def _timer(system, costs, cal: Calibration, kernels) -> _Timer:
    """`_Timer(system, costs, cal, kernels)`, kept for the last few such (a Session asks with the same objects every
    time; all four are immutable, or, for the kernel profile, answer the same whenever asked)."""
    return _Timer(system, costs, cal, kernels)


def expert_slowdown(m, tokens, attn_dp, ep, cal: Calibration):
    """Factor (>= 1) on the routed-expert FLOPs of a stage step where no measured MoE table applies: grouped expert
    GEMMs with few tokens per expert run below dense-GEMM efficiency (m / (m + m_half), DeepGEMM's tables), and
    under expert parallelism the chip holding the busiest experts sets the pace (balls in bins over the EP chips).
    1 for dense models and for the ideal calibration."""
    if not m.is_moe or cal.label == "ideal":
        return np.ones_like(flt(tokens)) if m.is_moe else 1.0
    copies = flt(tokens) * m.experts_per_token  # routed token copies in the step
    eta = MOE.grouped_gemm_efficiency(copies / max(m.num_experts, 1), cal.moe_gemm_half_tokens)
    bins = where(flt(attn_dp) > 1, ep, 1.0)  # TP attention (no attention DP): every chip sees every token
    imbalance = MOE.max_load_factor(copies, bins) if cal.moe_load_imbalance else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return where(eta > 0, imbalance / maximum(eta, 1e-300), 1.0)


class _Stage:
    """What the ops of a stage step need that the configuration (model costs, system, calibration, kernel profile)
    and the layout fix, worked out once: op counts per stage, each weight GEMM's shape (and its cut kernel grid),
    attention heads per GPU, link rates, where each time comes from. `stage_ops` evaluates it at a batch."""

    def __init__(self, costs, system, cal: Calibration, kernels, tp, attn_dp, pp, ep):
        chip, m, sz = system.chip, costs.model, costs.sizes
        self.model = m
        self.tp, self.a, self.pp, self.ep = tp, a, pp, ep = flt(tp), flt(attn_dp), flt(pp), flt(ep)
        # a MoE stage's tp * attn_dp chips are ep groups of etp chips, each expert split etp ways (default 1)
        self.ranks = ranks = tp * a
        self.etp = ranks / maximum(ep, 1.0) if m.is_moe else 1.0
        self.ideal = cal.label == "ideal"
        self.tm = tm = _timer(system, costs, cal, kernels)
        kp = tm.kernels
        self.H = H = float(m.hidden_size)
        self.n_layers = n_layers = m.num_layers / pp
        self.n_moe = n_moe = m.n_moe_layers / pp
        n_dense = (m.num_layers - m.n_moe_layers) / pp
        bw_d = bytes_per_element(costs.dense_precision)
        self.bw_e = bytes_per_element(costs.expert_precision)

        # weight GEMMs: (name, n, layers, rows: T_rank or logit rows, achieved FLOP/s of the roofline, bytes per
        # weight, kernel shape)
        self.gemms = []
        gsrc = tm.ksrc("gemm") if kp is not None else None
        self.gemm_kind = tm.kkind("gemm") if kp is not None else None

        def gemm(name, params_per_layer, layers, per_token, dtype, peak, bpe, shard, group=None):
            """A weight GEMM repeated over `layers` layers: params sharded `shard` ways. `group`: its parameter
            group, whose stored precision (`ModelCosts.stored_precision`) sets the bytes per weight; weights stored
            narrower than the math (weight-only quantisation: W4A16, FP8 weights on a chip without an FP8 rate)
            are read at their stored width and multiplied at `dtype` (mixed-input kernels, e.g. Marlin)."""
            if every(flt(params_per_layer) <= 0):
                return
            wp = None
            if group is not None:
                stored = costs.stored_precision(group)
                bpe = bytes_per_element(stored)
                if bpe > bytes_per_element(dtype):  # kept wider than the math (an FP8 checkpoint's BF16 lm_head):
                    # it multiplies at its own width, not at the narrow math's rate and reads (QA 2026-11-28:
                    # DeepSeek-R1's BF16 lm_head on H100, timed from the FP8 table, read 232 MB at 1.3x HBM bandwidth)
                    dtype, peak = stored, system.chip.peak_flops_per_s(stored)
                wp = stored if bpe < bytes_per_element(dtype) else None
            n = params_per_layer / (shard * H)
            shape = kp.gemm_shape(n, H, dtype, wp) if kp is not None else None
            self.gemms.append((name, n, layers, per_token, peak * tm.ec, bpe, shape))

        gemm("attn_proj", sz.attention_params_per_layer, n_layers, True, tm.dense_dtype, tm.peak_dense, bw_d, tp,
             "attention")
        gemm("mlp", sz.dense_mlp_params_per_layer, n_dense, True, tm.dense_dtype, tm.peak_dense, bw_d, tp, "mlp")
        if m.is_moe:
            gemm("shared_experts", sz.shared_expert_params_per_layer, n_moe, True, tm.dense_dtype, tm.peak_dense,
                 bw_d, tp, "shared_experts")
            gemm("router", sz.router_params_per_layer, n_moe, True, "bf16", tm.peak_attn, ACTIVATION_BYTES, 1.0)
        lm = sz.lm_head_params or sz.embedding_params
        gemm("lm_head", lm / pp, 1.0, False, tm.dense_dtype, tm.peak_dense, bw_d, tp, "lm_head")  # last stage; averaged
        self.gemm_source = gsrc

        # attention (per rank; KV heads shard over TP unless MLA)
        self.shard = shard = P.kv_shard_fraction(m.num_kv_heads, tp, costs.head_shardable)
        # each attention op names the table that times it: its kind (MHA/GQA or MLA) and phase (QA 2026-11-28: the
        # prefill op named the decode tables, and MLA's for a GQA model)
        akind = "mla" if m.attention == "mla" else "mha"
        self.attn_source = tm.ksrc(f"{akind}_decode") if kp is not None else None
        self.attn_kind = tm.kkind(f"{akind}_decode") if kp is not None else None
        self.prefill_attn_source = tm.ksrc(f"{akind}_prefill") if kp is not None else None
        self.prefill_attn_kind = tm.kkind(f"{akind}_prefill") if kp is not None else None
        self.decode_attn = self.prefill_attn = None
        if kp is not None:
            kind = akind
            heads = maximum(m.num_heads / tp, 1.0)
            kvh = maximum(m.num_kv_heads * shard, 1.0)
            self.decode_attn = kp.attention_shape("decode", kind, heads, kvh, m.head_dim, costs.kv_precision)
            self.prefill_attn = kp.attention_shape("prefill", kind, heads, kvh, m.head_dim, costs.kv_precision)

        # elementwise kernels and sampling: bytes per token (per logit row)
        width = (m.intermediate_size * (m.num_layers - m.n_moe_layers)
                 + (m.moe_intermediate_size * m.experts_per_token if m.is_moe else 0.0) * m.n_moe_layers) / m.num_layers
        self.elementwise_per_token = O.elementwise_bytes_per_token_layer(H, width / tp)
        self.sampling_per_row = O.sampling_bytes_per_sequence(m.vocab_size)

        # links
        up, out = chip.scaleup_bandwidth_bytes_per_s, chip.scaleout_bandwidth_bytes_per_s
        self.domain = domain = system.chips
        eta, a_up, a_out = cal.link, cal.scaleup_latency_s, cal.scaleout_latency_s
        self.up_eff = up_eff = up if up > 0 else (out if out > 0 else chip.hbm_bandwidth_bytes_per_s)
        self.out_eff = out if out > 0 else up_eff
        self.n_ar = where(a > 1, 1.0, 2.0) * n_layers * (tp > 1)
        self.torus_dims = chip.scaleup_torus_dims
        self.ring_detail = (f"ring all-reduce at {eta:.2f} of one-way link bandwidth + {a_up * 1e6:.0f} us per hop"
                            + (f", ring by ring along a {self.torus_dims}D torus" if self.torus_dims > 1 else ""))
        self.ar_source = kp.allreduce_source() if kp is not None else None
        if m.is_moe:
            narrow = bytes_per_element(costs.expert_precision) <= 1 and "fp8" in chip.flops_per_s \
                and not weight_only(costs.expert_precision)  # W4A16 experts take BF16 activations
            self.a2a_elem = (1.0 if narrow else ACTIVATION_BYTES) + ACTIVATION_BYTES  # FP8 dispatch + BF16 combine
            # destinations are the stage's chips (ep groups of etp): copies for this chip's scale-up domain go over
            # NVLink, copies for other domains over the NIC once per remote domain and are forwarded there over
            # NVLink (which every chip does for the others: `alltoall_scaleup_share`)
            self.a2a_intra = P.alltoall_scaleup_share(ranks, domain)
            self.a2a_lat = 2 * (cal.alltoall_latency_s + where(ranks > domain, a_out, 0.0))  # dispatch + combine
            self.a2a_remote = P.remote_domain_copies(m.experts_per_token, ranks, domain)
            self.a2a_detail = f"EP dispatch + combine at {eta:.2f} of one-way link bandwidth" + (
                "; copies bound for other scale-up domains over the scale-out NIC" if some(ranks > domain) else "")
            self.moe_source = tm.ksrc("moe") if kp is not None else None
            self.moe_kind = tm.kkind("moe") if kp is not None else None
            # weights stored narrower than the math (MXFP4 on Hopper): mixed-input kernels, timed as such
            self.moe_weight_precision = costs.expert_precision if self.bw_e < bytes_per_element(tm.expert_dtype) \
                else None
            # expert loads the kernels see: balanced where the EP group is wide enough to run a load balancer
            self.eplb = cal.balances_experts(ep, a)
            if kp is not None and not kp.moe_balanced_tables(tm.expert_dtype, self.moe_weight_precision):
                self.eplb = False  # no balanced-load tables from the same engine: power-law loads throughout
            if kp is not None:
                n = f"{cal.eplb_min_ep:g}"
                self.moe_source += ("; balanced expert loads (an expert-load balancer from EP " + n + ")"
                                    if every(self.eplb) else "; power-law expert loads of served traffic"
                                    + ("" if not some(self.eplb) else ", balanced from EP " + n))
        cross = tp * a * pp > domain
        self.pp_detail = "point-to-point activation send to the next stage" + (
            " (over the scale-out NIC between scale-up domains)" if some(cross) else "")
        self.pp_link = where(cross, out if out > 0 else up_eff, up_eff)
        self.pp_latency = where(cross, a_out, a_up)
        self.sync_detail = (f"hand-fitted once: {cal.pipeline_bubble:.2f} of the step per extra stage (micro-batch "
                            "imbalance, stage syncs)")
        self.kept = False  # `_stage_on` keeps it: its ops per token count are kept too (`_token_ops_kept`)
        self.no_sync = None  # the pipeline_sync op of a step with nothing to sync (made on first need)


    def moe_time(self, kp, tokens, wide_memory_bound=False):
        """One MoE layer's routed-expert kernel time on one GPU (`KernelProfile.moe_time_s`) at `tokens` entering
        the stage's layer: balanced expert loads where the layout runs a load balancer (`eplb`), else power-law.
        `wide_memory_bound`: where the same experts stored at the math's width would be memory-bound (numbers or an
        array): there weights stored narrower are never slower than those (fewer bytes, the same compute rate)."""
        m = self.model

        def t(balanced):
            narrow = flt(kp.moe_time_s(tokens, self.H, m.moe_intermediate_size / self.etp, m.num_experts,
                                       m.experts_per_token, self.ep, self.tm.expert_dtype,
                                       weight_precision=self.moe_weight_precision, balanced=balanced))
            if self.moe_weight_precision is None or not some(wide_memory_bound):
                return narrow
            # weights stored narrower than the math (MXFP4 on Hopper) read fewer bytes at the same compute rate:
            # where the read binds, never slower than the same experts stored at the math's width (QA 2026-11-28:
            # gpt-oss-120b on H200 TP2 at batch 1, the measured mixed-input MoE kernel read 952 MB in 2.59 ms where
            # the BF16 kernel reads 3.58 GB in 1.96 ms; issue 24). Where the math binds, the mixed-input kernel's
            # dequantisation is compute the wide kernel does not do: its measured time stands (TensorRT-LLM's
            # gpt-oss at 1K / 1K on H200 ran 30% below what the BF16 kernels would give).
            wide = flt(kp.moe_time_s(tokens, self.H, m.moe_intermediate_size / self.etp, m.num_experts,
                                     m.experts_per_token, self.ep, self.tm.expert_dtype, weight_precision=None,
                                     balanced=balanced))
            return where(wide_memory_bound, minimum(narrow, wide), narrow)
        if every(self.eplb) or not some(self.eplb):
            return t(every(self.eplb))
        return where(self.eplb, t(True), t(False))


@by_identity(maxsize=256, objects=4)
def _stage_on(costs, system, cal: Calibration, kernels, tp: float, attn_dp: float, pp: float, ep: float) -> _Stage:
    """`_Stage` of one layout given as numbers, kept for the last few configurations and layouts (all four
    objects are immutable, or, for the kernel profile, answer the same whenever asked)."""
    st = _Stage(costs, system, cal, kernels, tp, attn_dp, pp, ep)
    st.kept = True
    return st


_NUMBER = (int, float, np.integer, np.floating)
_F64 = np.float64


def _stage(costs, system, cal: Calibration, kernels, tp, attn_dp, pp, ep) -> _Stage:
    """The stage plan of a layout: kept when the layout is numbers, worked out afresh for arrays of layouts. The
    numbers go to the memo as given (4 and 4.0 are one key), so a layout asked again with the very same objects is
    the memo's last answer (`by_identity`)."""
    if isinstance(tp, _NUMBER) and isinstance(attn_dp, _NUMBER) and isinstance(pp, _NUMBER) \
            and isinstance(ep, _NUMBER):
        return _stage_on(costs, system, cal, kernels, tp, attn_dp, pp, ep)
    return _Stage(costs, system, cal, kernels, tp, attn_dp, pp, ep)


def _op(name, kind, flops, bytes_, t, c_s, m_s, detail, bound=None, *, source: str) -> Op:
    """One op; a compute op (no `bound` given) is bound by the larger of its compute and memory times (numpy float64
    numbers or arrays). `source`: the category of where its time came from (roofline | calibrated roofline |
    measured table | fitted curve | fitted), set where the time is computed; `detail` says more, in words."""
    if bound is None:
        compute = c_s >= m_s
        bound = _bound_names(compute) if type(compute) is np.ndarray else where(compute, "compute", "memory")
    return Op(name, kind, flops, bytes_, t, bound, source, detail)


#: 'memory' and 'compute' as numpy stores them in a '<U7' array: 7 UTF-32 code units each (row 0 and row 1)
_BOUND_CODES = np.array(["memory", "compute"]).view(np.uint32).reshape(2, 7)


def _bound_names(compute) -> np.ndarray:
    """`np.where(compute, "compute", "memory")` of a bool array, as the same '<U7' array: each point's 28 bytes
    copied as one row of `_BOUND_CODES` (numpy's string `where` copies them a character at a time, ~3x slower:
    ~10% of a decode sweep's CPU time went there)."""
    return np.take(_BOUND_CODES, compute.view(np.uint8), axis=0).view("<U7")[..., 0]


def _token_ops(st: _Stage, costs, cal: Calibration, B, c, I, q, B_rank, c_rank) -> tuple:
    """The ops of a stage step that depend on the tokens it carries and not on the decode context, but its host
    overhead (`_overhead_op`): (weight GEMMs, prompt attention, experts, elementwise, sampling and communication
    as a name -> Op dict, their sums
    (`_add_up`), prompt-attention FLOPs, KV bytes written). See `stage_ops`."""
    m = costs.model
    tp, a, pp, ep = st.tp, st.a, st.pp, st.ep
    ideal = st.ideal
    tm = st.tm
    H = st.H
    kp = tm.kernels
    T_rank = B_rank * q + c_rank                   # tokens through this GPU's attention and dense GEMMs
    T_stage = (B * q + c) / pp                     # tokens through the stage's MoE layers (all ranks)
    rows = B_rank * q + c_rank / I                 # logit rows: every decode query token, one per prompt
    n_layers, n_moe = st.n_layers, st.n_moe

    ops: dict[str, Op] = {}

    def add(name, kind, flops, bytes_, t, c_s, m_s, detail, bound=None, *, source):
        ops[name] = _op(name, kind, flops, bytes_, t, c_s, m_s, detail, bound, source=source)

    # ---- GEMMs of the dense part, the router and the LM head
    for name, n, layers, per_token, rate, bpe, shape in st.gemms:
        rows_ = T_rank if per_token else rows
        f = O.matmul_flops(rows_, H, n) * layers
        by = O.gemm_bytes(rows_, H, n, bpe, ACTIVATION_BYTES) * layers
        t, c_s, m_s, src = tm.gemm(rows_, shape, f, by, rate, count=layers, source=st.gemm_source)
        add(name, "gemm", f, by, t, c_s, m_s, src, source=tm.roofline_kind if shape is None else st.gemm_kind)

    # ---- prompt attention (decode attention, the one op that depends on the context, is `stage_ops`' own)
    shard = st.shard
    if isinstance(c_rank, float) and c_rank == 0.0:  # one decode-only step: no prompt FLOPs or KV writes
        f_ap = kv_write = t_c = t_m = t = zeros_like(c_rank)
        src, how = (tm.roofline_source, tm.roofline_kind) if kp is None else (st.prefill_attn_source,
                                                                             st.prefill_attn_kind)
    else:
        f_ap = c_rank * costs.prefill_attention_flops_per_token(I) / (pp * tp)
        kv_write = c_rank * costs.kv_bytes_per_token * shard / pp
        t_c, t_m = f_ap / tm.attn_rate, kv_write / tm.hbm
        t, src, how = R.step_time_s(t_c, t_m), tm.roofline_source, tm.roofline_kind
    if kp is not None and _nothing(c_rank):  # one step without prompt tokens
        t, src, how = 0.0, st.prefill_attn_source, st.prefill_attn_kind
    elif kp is not None:
        seqs = maximum(c_rank / I, 1e-9)
        tk = flt(st.prefill_attn(seqs, I, I)) * n_layers
        t, src, how = where(c_rank > 0, tk * tm.k_c, 0.0), st.prefill_attn_source, st.prefill_attn_kind
    add("attention_prefill", "attention", f_ap, kv_write, t, t_c, t_m, src, source=how)

    # ---- routed experts: grouped GEMMs; few tokens per expert waste tiles, the busiest EP chip sets the pace
    if m.is_moe:
        sz = costs.sizes
        copies = T_stage * m.experts_per_token           # routed token copies through one MoE layer of the stage
        f_exp = copies * 2 * sz.params_per_expert * n_moe / (tp * a)
        by_exp = costs.expert_read_bytes(T_stage) / (ep * st.etp * pp)
        bins = where(a > 1, ep, 1.0)  # TP attention (no attention DP): every chip sees every token
        imbalance = MOE.max_load_factor(copies, bins) if (cal.moe_load_imbalance and not ideal) else 1.0
        t_m = by_exp / tm.hbm
        if kp is not None:
            t_c = f_exp / tm.expert_rate
            # the busiest chip's experts at its own load (`imbalance` x the mean's tokens): the kernel's time there,
            # not the mean chip's time scaled by the load ratio, which at a few copies per chip multiplied a
            # weight-read-bound kernel by up to the EP width (Qwen3-235B on H200, attention DP 72 / EP 72: one
            # sequence stepped in 65.6 ms, 512 of them in 27.8 ms)
            wide_bound = by_exp * (bytes_per_element(tm.expert_dtype) / st.bw_e) / tm.hbm > t_c
            tk = st.moe_time(kp, maximum(T_stage * imbalance, 1.0), wide_memory_bound=wide_bound)
            # each chip's experts at 1/etp of their width (`moe_time`); the vendor's compute factor: grouped
            # expert GEMMs at few tokens per expert are tile-bound (wasted tiles, not bytes), a compute-side cost
            tk = tk * n_moe * tm.k_c
            t, src, how = where(T_stage > 0, tk, 0.0), st.moe_source, st.moe_kind
        else:
            t_c = f_exp * expert_slowdown(m, T_stage, a, ep, cal) / tm.expert_rate
            t, src, how = R.step_time_s(t_c, t_m), tm.roofline_source + (
                "" if ideal else f"; grouped-GEMM m/(m+{cal.moe_gemm_half_tokens:.0f}), balls-in-bins imbalance"), \
                tm.roofline_kind
        add("experts", "moe", f_exp, by_exp, t, t_c, t_m, src, source=how)
        # permute / unpermute / combine: passes over each routed copy's hidden vector (TP ranks each shuffle all);
        # a measured MoE table already times its own routing (its fitted routing passes), so none is added to it
        if kp is None:
            perm_copies = copies / where(a > 1, ep, 1.0)
            by = perm_copies * n_moe * cal.moe_shuffle_passes * H * ACTIVATION_BYTES
            t, src = tm.elementwise(by)
            add("moe_permute", "elementwise", zeros_like(by), by, t, 0.0, t, src + f"; "
                f"{cal.moe_shuffle_passes:g} passes per routed copy (calibrated)", bound="memory",
                source=tm.roofline_kind)

    # ---- elementwise kernels and sampling (memory-bound)
    by = T_rank * st.elementwise_per_token * n_layers
    t, src = tm.elementwise(by)
    add("elementwise", "elementwise", zeros_like(by), by, t, 0.0, t, src, bound="memory", source=tm.roofline_kind)
    by = rows * st.sampling_per_row / (tp * pp)
    t, src = tm.elementwise(by)
    add("sampling", "elementwise", zeros_like(by), by, t, 0.0, t, src, bound="memory", source=tm.roofline_kind)

    # ---- communication on the right link
    eta, up_eff = cal.link, st.up_eff
    n_ar = st.n_ar
    msg = T_rank * H * ACTIVATION_BYTES
    # a TP group wider than the scale-up domain (TP16 over two 8-GPU hosts) all-reduces hierarchically: a ring in
    # each domain on its link, then across domains on the scale-out NIC (it was timed on NVLink alone; QA 2026-11-28)
    across = tp > st.domain
    t_ring = P.hierarchical_allreduce_time_s(msg, tp, st.domain, up_eff, cal.scaleup_latency_s, st.out_eff,
                                             cal.scaleout_latency_s, eta, st.torus_dims)
    detail = st.ring_detail + ("; a TP group wider than the scale-up domain: the ring in each domain, then across "
                               "domains over the scale-out NIC" if some(across) else "")
    source = "roofline (link)"
    t_one = kp.allreduce_time_s(msg, tp) if kp is not None else None
    if t_one is not None:
        # the system's measured all-reduce kernels (the framework's custom kernels under CUDA graphs) where they
        # are faster: small, latency-bound messages; large ones take the fitted link model, which engines beat
        # the tables' kernels with (NVLink SHARP / multimem, NCCL tuning); measured inside one domain only
        t_one = flt(t_one)
        meas = (t_one < t_ring) & ~across
        t_ring = where(meas, t_one, t_ring)
        if some(meas):
            detail, source = st.ar_source + (f"; where faster: {detail}" if not every(meas) else ""), \
                "measured table"
    t_ar = n_ar * t_ring
    add("allreduce", "comm", zeros_like(t_ar), n_ar * P.allreduce_bytes_per_link(msg, tp), t_ar, 0.0, t_ar,
        detail, bound="link", source=source)
    if m.is_moe:
        k = m.experts_per_token
        # each routed copy goes to the etp chips of its expert's group (tokens per chip T_stage / (ep etp), so
        # k etp copies each); one copy per remote domain crosses the NIC, forwarded inside it over NVLink
        sent = P.alltoall_bytes_per_chip(T_stage / ep, k, H, st.a2a_elem)
        one = P.alltoall_time_s(sent * st.a2a_intra, sent * st.a2a_remote / (k * st.etp), up_eff, st.out_eff,
                                st.a2a_lat, eta)
        t_a2a = where(a > 1, one * m.n_moe_layers / pp, 0.0)
        add("alltoall", "comm", zeros_like(t_a2a), where(a > 1, sent * m.n_moe_layers / pp, 0.0), t_a2a,
            0.0, t_a2a, st.a2a_detail, bound="link", source="roofline (link)")
    pp_bytes = T_stage * H * ACTIVATION_BYTES / (tp * a)
    hop = P.p2p_time_s(pp_bytes, st.pp_link, st.pp_latency, eta)
    t_pp = where(pp > 1, hop, 0.0)
    add("pp_send", "comm", zeros_like(t_pp), where(pp > 1, pp_bytes, 0.0), t_pp, 0.0, t_pp,
        st.pp_detail, bound="link", source="roofline (link)")

    return ops, _add_up(ops.items()), f_ap, kv_write


def _overhead_op(st: _Stage, cal: Calibration, B_rank, c_rank, I, overhead_s, like) -> Op:
    """The step's host overhead, the last of its token ops (`_token_ops`): the calibrated one, or the engine
    profile's (`overhead_s`) plus the fitted per-layer part, plus the fitted host work per sequence; over the shape
    of `like` (the pipeline send's time). Read here, after the kept work (`_stage_core`), so a fit that moves only
    the overhead re-times nothing else."""
    ideal = st.ideal
    n_layers = st.n_layers
    ovh = cal.overhead_s(n_layers) if overhead_s is None else overhead_s + cal.overhead_per_layer_s * n_layers
    per_seq = 0.0 if ideal else cal.overhead_per_seq_s
    if per_seq:  # host work per sequence the rank's scheduler carries: decoding ones and prompts
        ovh = ovh + per_seq * (B_rank + c_rank / I)
    t_ovh = flt(0.0 if ideal else ovh) + zeros_like(like)
    return _op("overhead", "overhead", zeros_like(t_ovh), zeros_like(t_ovh), t_ovh, 0.0, 0.0,
               ("fitted: launches, scheduling, sampling sync" if overhead_s is None else
                "engine profile + fitted per layer")
               + (f" + {per_seq * 1e6:.1f} us per sequence (fitted host work)" if per_seq else ""),
               bound="latency", source="fitted")


def _add_up(ops, acc: tuple | None = None) -> tuple:
    """The step and its legacy parts over (name, Op) pairs, added in their order to `acc` (a previous answer;
    default nothing): (step time, {part: time}, communication time, weight-GEMM bytes, weight-GEMM FLOPs)."""
    if acc is None:
        base = flt(0.0)
        parts = dict.fromkeys(_PARTS, base)
        comm = w_bytes = f_gemm = base
    else:
        base, parts, comm, w_bytes, f_gemm = acc
        parts = dict(parts)  # `acc` may be kept (`_token_ops_kept`): never changed
    for n, o in ops:
        t = o.time_s
        base = base + t
        part = _PART[n]
        parts[part] = parts[part] + t
        if o.kind == "comm":
            comm = comm + t
        elif n in _WEIGHT_GEMMS:
            w_bytes = w_bytes + o.bytes
            f_gemm = f_gemm + o.flops
    return base, parts, comm, w_bytes, f_gemm


#: Token-count answers `_token_ops_kept` keeps (the latest ones, over every kept plan): ~4 kB each, so at most ~4 MB.
TOKEN_OPS_MEMO = 1024
_TOKEN_OPS: OrderedDict = OrderedDict()


def _token_ops_kept(st: _Stage, costs, cal: Calibration, B, c, I, q, B_rank, c_rank, prefill_rank_tokens) -> tuple:
    """`_token_ops` of one question (numbers) on a kept plan, remembered per plan and token counts: the same plan
    (`_stage_on`: one configuration and layout) and the same tokens always give the same ops (immutable named
    tuples of numbers), whatever the context."""
    key = (st, B, c, I, q, prefill_rank_tokens)
    hit = _TOKEN_OPS.get(key)
    if hit is None:
        hit = _token_ops(st, costs, cal, B, c, I, q, B_rank, c_rank)
        while len(_TOKEN_OPS) >= TOKEN_OPS_MEMO:  # the oldest go
            try:
                _TOKEN_OPS.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break
        _TOKEN_OPS[key] = hit
    return hit


def stage_ops(costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len,
              cal: Calibration, *, overlap: str = "auto", kernels=None, overhead_s=None, query_tokens=1.0,
              prefill_rank_tokens=None):
    """The ops of one pipeline-stage step of a replica, on its busiest GPU, and their total.

    tp, attn_dp, pp, ep: the layout (arrays broadcast together with the rest). decode_seqs: sequences decoding in
    the replica (all micro-batches); prefill_tokens: prompt tokens the replica's step carries (chunked prefill);
    context: the decode sequences' context; prompt_len: prompt length of the prefill tokens. A stage step carries
    decode_seqs / pp sequences and prefill_tokens / pp prompt tokens (one micro-batch per stage).
    `overhead_s` replaces the calibrated per-step overhead (an engine profile's). `query_tokens`: tokens each
    decode sequence runs through the model this step (K + 1 when verifying K speculative drafts: K + 1 times the
    GEMM and attention work, one read of the sequence's KV). `prefill_rank_tokens`: prompt tokens on the busiest
    attention-DP rank when the caller knows them (each rank's own prefill chunk, `serving.prefill_step_tokens`);
    by default the rank holding a whole prompt sets the pace. Returns a dict with `ops`
    (name -> Op), `stage_time_s` (the ops' sum) and the legacy parts (gemm/attention/comm/overhead times).
    What the configuration and layout fix comes from their plan (`_Stage`, kept per layout).
    """
    return _stage_finish(_stage_core(costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context,
                                     prompt_len, cal, overlap=overlap, kernels=kernels, overhead_s=overhead_s,
                                     query_tokens=query_tokens, prefill_rank_tokens=prefill_rank_tokens),
                         cal, overhead_s)


def _stage_core_work(costs, system, tp, attn_dp, pp, ep, decode_seqs, prefill_tokens, context, prompt_len,
                     cal: Calibration, *, overlap: str = "auto", kernels=None, overhead_s=None, query_tokens=1.0,
                     prefill_rank_tokens=None) -> dict:
    """The work of `stage_ops` but its host overhead: every op timed, the ideal roofline or the two-micro-batch
    overlap applied, and the token ops' sums (`_add_up`) where neither changed them. What `_stage_finish` needs
    to add the overhead and sum the step. Kept by `work_memo.step_memo` during a fit, by the calibration
    fields it reads (the overhead's are not among them)."""
    st = _stage(costs, system, cal, kernels, tp, attn_dp, pp, ep)
    m = costs.model
    tp, a, pp, ep = st.tp, st.a, st.pp, st.ep
    B = flt(decode_seqs)
    c = flt(prefill_tokens)
    I = maximum(flt(prompt_len), 1.0)
    L = flt(context)
    ideal = st.ideal
    tm = st.tm
    kp = tm.kernels

    # tokens: a stage step carries one micro-batch; attention-DP ranks meet at every MoE layer, so the rank holding
    # a whole prompt chunk sets the pace: its prefill tokens are min(c, max(c / DP_attn, prompt)) per stage step
    q = flt(query_tokens)
    B_rank = B / (pp * a)
    if prefill_rank_tokens is None and type(c) is _F64 and c == 0.0 and isinstance(a, float):
        c_rank = c  # a decode-only step: no prompt tokens on any rank (what the line below gives, without numpy)
    elif prefill_rank_tokens is None:
        c_rank = where(a > 1, minimum(c / pp, maximum(c / (pp * a), I)), c / (pp * a))
    else:
        c_rank = minimum(flt(prefill_rank_tokens), c) / pp
    n_layers = st.n_layers

    # every op but decode attention depends on the tokens the step carries, not on the decode context: one
    # question's are kept per plan and token counts (`_token_ops_kept`), so a sweep over context (or a Session
    # asked new contexts at batches it has seen) works them out once
    if st.kept and type(B) is _F64 and type(c) is _F64 and type(I) is _F64 and type(q) is _F64 \
            and (prefill_rank_tokens is None or type(prefill_rank_tokens) is float):
        token_ops, acc, f_ap, kv_write = _token_ops_kept(st, costs, cal, B, c, I, q, B_rank, c_rank,
                                                         prefill_rank_tokens)
    else:
        token_ops, acc, f_ap, kv_write = _token_ops(st, costs, cal, B, c, I, q, B_rank, c_rank)
    ops: dict[str, Op] = dict(token_ops)  # decode attention joins them last: the step adds it to their sums

    # ---- attention (per rank; KV heads shard over TP unless MLA)
    shard = st.shard
    f_ad = B_rank * q * costs.attention_flops(L) / (pp * tp)
    kv_seq_read = costs.kv_read_bytes(L)  # bytes one sequence reads at its context
    kv_read = B_rank * kv_seq_read * shard / pp
    t_c, t_m = f_ad / tm.attn_rate, kv_read / tm.hbm
    if kp is None:
        t, src, how = R.step_time_s(t_c, t_m), tm.roofline_source, tm.roofline_kind
    elif _nothing(B_rank):  # one step without decode sequences: no kernel time to look up
        t, src, how = 0.0, st.attn_source, st.attn_kind
    else:
        L_eff = kv_seq_read / max(costs.kv_bytes_per_token, 1e-30)  # windows / top-k: tokens read
        tk = flt(st.decode_attn(maximum(B_rank, 1.0), q, maximum(L_eff, 1.0))) * n_layers
        if isinstance(tk, np.ndarray) and every(B_rank > 0):  # every point decodes: the time as is (in place)
            tk *= tm.k_m
            t = tk
        else:
            t = where(B_rank > 0, tk * tm.k_m, 0.0)
        src, how = st.attn_source, st.attn_kind
    att = ops["attention_decode"] = _op("attention_decode", "attention", f_ad, kv_read, t, t_c, t_m, src,
                                        source=how)

    # ---- ideal: one roofline for the compute ops (work overlaps perfectly), communication added
    if type(B) is _F64 and type(L) is _F64 and isinstance(tp, float):  # one point: a 0-d array, made cheaply
        mode = np.array("none", dtype=object)
    else:
        mode = np.broadcast_to(_NONE, np.broadcast_shapes(np.shape(B), np.shape(L), np.shape(tp)))  # read-only
    two = not ideal and m.is_moe and overlap in ("auto", "two-microbatch") and not _nothing(a - 1.0)
    if ideal or two:
        compute_names = [n for n, o in ops.items() if o.kind != "comm" and n != "overhead"]
        comm_names = [n for n, o in ops.items() if o.kind == "comm"]
    if ideal:
        flops = sum(flt(ops[n].flops) for n in compute_names)
        byts = sum(flt(ops[n].bytes) for n in compute_names)
        peak = tm.peak_dense
        step_c, step_m = flops / peak, byts / tm.bw
        whole = R.step_time_s(step_c, step_m)
        naive = sum(flt(ops[n].time_s) for n in compute_names)
        scale = where(naive > 0, whole / where(naive > 0, naive, 1.0), 0.0)
        for n in compute_names:  # attribute the single roofline to the ops in proportion to their own times
            o = ops[n]
            ops[n] = Op(o.name, o.kind, o.flops, o.bytes, flt(o.time_s) * scale, o.bound,
                        "roofline", "peak rates; one roofline for the step's compute ops, shared in proportion")
    elif two:
        # two micro-batches: each runs half the tokens (GEMMs less efficient), communication of one hides behind
        # compute of the other, `cal.overlap` of the shorter hidden; only under attention-DP (`use` below), so one
        # layout without it (a number attn_dp = 1) does not time the half step
        half = _stage_core_work(costs, system, tp, a, pp, ep, B / 2, c / 2, L, I, cal, overlap="none",
                                kernels=kernels, overhead_s=overhead_s, query_tokens=q,
                                prefill_rank_tokens=None if prefill_rank_tokens is None else
                                flt(prefill_rank_tokens) / 2)["ops"]
        comp2 = sum(2 * flt(half[n].time_s) for n in compute_names)
        comm = sum(flt(ops[n].time_s) for n in comm_names)
        comp1 = sum(flt(ops[n].time_s) for n in compute_names)
        tbo = P.overlapped_time_s(comp2, comm, cal.overlap)
        use = (a > 1) & ((tbo < comp1 + comm) | (overlap == "two-microbatch"))
        hidden = comp2 + comm - tbo
        keep = where(comm > 0, (comm - hidden) / where(comm > 0, comm, 1.0), 1.0)
        for n in compute_names:
            o = ops[n]
            ops[n] = Op(o.name, o.kind, o.flops, o.bytes, where(use, 2 * flt(half[n].time_s), o.time_s), o.bound,
                        o.source, o.detail)
        for n in comm_names:
            o = ops[n]
            ops[n] = Op(o.name, o.kind, o.flops, o.bytes, where(use, flt(o.time_s) * keep, o.time_s), o.bound,
                        o.source, o.detail + ("; exposed part under two-micro-batch overlap" if some(use) else ""))
        mode = where(use, "two-microbatch", mode)

    return {"st": st, "ops": ops, "acc": None if (ideal or two) else acc, "mode": mode, "two": two, "pp": pp,
            "B_rank": B_rank, "c_rank": c_rank, "I": I, "f_ad": f_ad, "f_ap": f_ap, "kv_read": kv_read,
            "kv_write": kv_write, "base": acc[0]}


#: The entry `stage_ops` calls for its kept work: `work_memo.step_memo` replaces it while a fit runs.
_stage_core = _stage_core_work


def _stage_finish(core: dict, cal: Calibration, overhead_s) -> dict:
    """`stage_ops`' answer from its kept work (`_stage_core`): the overhead op joins the token ops (the last of
    them, before decode attention, as the step was always added up) and the step, its pipeline sync and its legacy
    parts are summed in the order the ops were made."""
    st, pp = core["st"], core["pp"]
    tm = st.tm
    ideal = st.ideal
    two, mode = core["two"], core["mode"]
    f_ad, f_ap, kv_read, kv_write = core["f_ad"], core["f_ap"], core["kv_read"], core["kv_write"]
    kept = core["ops"]
    ovh = _overhead_op(st, cal, core["B_rank"], core["c_rank"], core["I"], overhead_s, kept["pp_send"].time_s)
    ops: dict[str, Op] = {}
    for n, o in kept.items():  # the token ops, the overhead, then decode attention: the order they were made in
        if n == "attention_decode":
            ops["overhead"] = ovh
        ops[n] = o
    att = ops["attention_decode"]
    # the step and its legacy parts, each adding its ops in the order they were made: the token ops' sums plus
    # decode attention, or, where the ideal roofline or the overlap changed the ops, all of them again
    if ideal or two:
        acc = _add_up(ops.items())
    else:
        acc = _add_up((("attention_decode", att),), _add_up((("overhead", ovh),), core["acc"]))
    base, parts, comm, w_bytes, f_gemm = acc
    bubble = 0.0 if ideal else cal.pipeline_bubble
    if isinstance(base, np.ndarray) and isinstance(pp, float) and bubble * (pp - 1) == 0.0 \
            and np.isfinite(base).all():
        # a grid on one stage (or the ideal roofline): no bubble at any point, zeros viewed over the grid and the
        # step unchanged (what adding `sync` = 0 everywhere gives, without three passes over the grid)
        zero = np.broadcast_to(_F64(0.0), base.shape)
        ops["pipeline_sync"] = _op("pipeline_sync", "overhead", zero, zero, zero, 0.0, 0.0, st.sync_detail,
                                   bound="latency", source="fitted")
        stage = base
    else:
        sync = base * bubble * (pp - 1)
        if type(sync) is _F64 and sync == 0.0:  # one stage (or the ideal roofline): the plan's zero op serves
            if st.no_sync is None:
                st.no_sync = _op("pipeline_sync", "overhead", _F64(0.0), _F64(0.0), _F64(0.0), 0.0, 0.0,
                                 st.sync_detail, bound="latency", source="fitted")
            ops["pipeline_sync"] = st.no_sync
        else:
            ops["pipeline_sync"] = _op("pipeline_sync", "overhead", zeros_like(sync), zeros_like(sync), sync, 0.0,
                                       0.0, st.sync_detail, bound="latency", source="fitted")
        stage = base + sync
        parts["overhead_s"] = parts["overhead_s"] + sync
    gemm_bound = where(f_gemm / tm.peak_dense >= w_bytes / tm.bw, "compute", "memory")
    flops = f_gemm + f_ad + f_ap
    if isinstance(stage, np.ndarray):  # every part over the whole evaluated grid, as the step: read-only views of
        # the parts that vary along fewer dimensions (a batch column's GEMM time over every context), not copies
        grid = stage.shape
        parts = {k: _over(v, grid) for k, v in parts.items()}
        comm, w_bytes, gemm_bound = _over(comm, grid), _over(w_bytes, grid), _over(gemm_bound, grid)
    return {"ops": ops, "stage_time_s": stage, "gemm_time_s": parts["gemm_time_s"],
            "attention_time_s": parts["attention_time_s"], "allreduce_time_s": parts["allreduce_time_s"],
            "alltoall_time_s": parts["alltoall_time_s"], "pp_transfer_time_s": parts["pp_transfer_time_s"],
            "comm_time_s": comm, "overhead_s": parts["overhead_s"], "overlap": mode,
            "gemm_bound": gemm_bound, "weight_read_bytes": w_bytes, "kv_read_bytes": flt(kv_read) + kv_write,
            "flops": flops}


_NONE = np.array("none", dtype=object)


def _over(v, shape):
    """`v` over the grid `shape`: itself when it has that shape, else a read-only broadcast view (no copy)."""
    return v if np.shape(v) == shape else np.broadcast_to(v, shape)


def ops_table(ops: dict, i=None) -> list[dict]:
    """The ops of one evaluated point as plain dicts in report order (zero-time ops that do no work dropped),
    each with its arithmetic intensity."""
    out = []
    for name in OP_ORDER:
        if name not in ops:
            continue
        d = ops[name].at(i)
        if d["time_s"] <= 0 and d["flops"] <= 0 and d["bytes"] <= 0:
            continue
        d["intensity_flops_per_byte"] = d["flops"] / d["bytes"] if d["bytes"] > 0 else None
        out.append(d)
    return out
