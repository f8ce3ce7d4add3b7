"""Calibrated efficiency: how far real serving engines sit below the pure roofline, and why.

A handful of global, physically meaningful constants, each documented with the data it came from.
Kernel ceilings bound them from above (the best a kernel reaches in isolation); the end-to-end values
were then fitted to the project's validation set (`chalk/validation/validation.csv`, `chalk validate`)
by coordinate descent over a coarse grid, minimising median |error| + 0.5 * mean(min(|log error|, log 3))
over all rows at once, never per row. Fitted: COMPUTE, MEMORY, OVERHEAD_*, OVERLAP, PIPELINE_BUBBLE,
MOE_SHUFFLE_PASSES, MAX_SEQS_PER_SCHEDULER; taken from kernel or link figures: LINK, *_LATENCY_S,
MEMORY_RESERVE, VENDOR, MOE_GEMM_HALF_TOKENS; parameter-free: MOE_LOAD_IMBALANCE (balls in bins). The last
refit held out the MLPerf Inference rows (ids `mlperf*`), fitting on the other 59, and reports them separately.
The [low, high] range comes from the spread of held-out residuals (leave-one-family-out, `chalk calibrate`).

The literals below are the starting point and the record of where each came from; the shipped values are the
last `chalk calibrate --write` fit (`catalog/calibration.yaml`, read at import), which also fits the per-sequence
host time, the prefill alignment across attention-DP ranks, the KV reserve, the AMD factors and the request
latency. `chalk validate --cv` judges that fit by leaving out one source at a time.

Nothing here reads a file: the constants are literals, `calibrated_efficiency()` is cached.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from chalk.errors import InputError


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of peak and a fixed per-step overhead. `IDEAL` is the pure roofline."""

    compute: float = 1.0
    memory: float = 1.0
    overhead_s: float = 0.0
    memory_reserve: float = 0.0  # fraction of HBM kept for activations / workspace / fragmentation
    label: str = "ideal"
    #: spread of log(measured / predicted throughput) in the calibration data (p10, p90): the [low, high] range
    residual_low: float = 0.0
    residual_high: float = 0.0

    def __post_init__(self):
        for name in ("compute", "memory"):
            v = getattr(self, name)
            if not (0 < v <= 1):
                raise InputError(f"{name} efficiency must be in (0, 1], got {v!r}")
        if not (0 <= self.overhead_s < 10):
            raise InputError(f"overhead must be in [0, 10) s, got {self.overhead_s!r}")
        if not (0 <= self.memory_reserve < 1):
            raise InputError(f"memory reserve must be in [0, 1), got {self.memory_reserve!r}")


IDEAL = Efficiency()


@dataclass(frozen=True)
class Calibration:
    """Efficiency terms of the serving model (fractions of peak, seconds, counts)."""

    compute: float
    memory: float
    link: float
    overhead_fixed_s: float
    overhead_per_layer_s: float
    overlap: float
    moe_shuffle_passes: float
    pipeline_bubble: float
    alltoall_latency_s: float
    scaleup_latency_s: float
    scaleout_latency_s: float
    memory_reserve: float
    max_seqs_per_scheduler: int
    residual_low: float
    residual_high: float
    moe_gemm_half_tokens: float = 0.0
    moe_load_imbalance: bool = False
    vendor: tuple = ()
    #: time GEMMs, attention and MoE from the measured kernel tables (`chalk.analyses.step.kernels`) instead of the
    #: roofline at `compute` / `memory`
    use_kernel_tables: bool = False
    #: KV an engine holds back for the rest of each running request's output, as a fraction of its mean remaining
    #: output: 0 allocates on demand (vLLM, with preemption), 1 reserves the whole output up front (TensorRT-LLM's
    #: GUARANTEED_NO_EVICT capacity scheduler); SGLang's new_token_ratio sits between. Batch capacity is sized at a
    #: context of I + O/2 + this * O/2.
    kv_reserve_output_fraction: float = 0.0
    #: Per-request latency a client sees outside the GPU steps before its first token (API server, tokeniser,
    #: scheduler hand-off, streaming the first chunk); added to TTFT only. Fitted on the TTFT rows alone
    #: (`chalk.analyses.fidelity.calibrate.fit_request_latency`).
    request_latency_s: float = 0.0
    #: Share of prefill chunks an engine lines up across the attention-DP ranks of a replica (so that ranks prefill
    #: in the same steps): 0 places each rank's chunks independently, 1 aligns them all (TensorRT-LLM's
    #: attention_dp_config enable_balance; fixed-length benchmark waves). Used by `serving.prefill_step_tokens`.
    dp_prefill_alignment: float = 0.0
    #: Host time per sequence a scheduler carries in one step (decode sequences plus prompts being prefilled):
    #: per-request bookkeeping, input tensor preparation, sampling and stop checks in the engine's Python loop,
    #: added to the step's fixed overhead. It is what makes a small model at a thousand sequences per GPU slower
    #: than its kernels: WukLab's breakdown of vLLM and SGLang (mlsys.wuklab.io/posts/scheduling_overhead, 2024)
    #: finds scheduling plus tensor pre- and post-processing growing with the batch, over half of vLLM's step time
    #: for small models. Fitted by `chalk calibrate` (grid 0-16 us); 0 keeps the fixed overhead only.
    overhead_per_seq_s: float = 0.0
    #: Expert-parallel group size from which a deployment balances expert load (EPLB: redundant copies of the
    #: busiest experts, placed by measured load), so its MoE kernels are timed with balanced expert loads (the
    #: `moe_balanced` tables); smaller groups keep served traffic's power-law loads (the `moe` tables). Published
    #: wide-EP deployments run a balancer (DeepSeek's EPLB, SGLang's large-EP recipes with --enable-eplb,
    #: TensorRT-LLM's wide-EP load balancer); the engines' defaults do not. Fitted by `chalk calibrate` over
    #: (8, 16, 32, 64, 128, never); inf: never.
    eplb_min_ep: float = float("inf")
    label: str = "calibrated"

    #: AMD's software stack relative to the NVIDIA-dominated constants (compute, memory multipliers): started from
    #: public kernel sweeps (VENDOR below), refitted on the AMD rows of the validation set by `chalk calibrate`.
    amd_compute: float = 0.65
    amd_memory: float = 0.9

    def vendor_factors(self, vendor: str) -> tuple[float, float]:
        """(compute, memory) multipliers of a vendor's software stack relative to the fitted constants: the fitted
        fields `VENDOR_FIELDS` names for the chip's vendor (its YAML's `vendor`), else the `vendor` table, else 1."""
        v = str(vendor).lower()
        fields = VENDOR_FIELDS.get(v)
        if fields is not None:
            return getattr(self, fields[0]), getattr(self, fields[1])
        for name, c, m in self.vendor:
            if name.lower() == v:
                return c, m
        return 1.0, 1.0

    def overhead_s(self, layers: float) -> float:
        """Per-forward-pass overhead of a model with `layers` layers (launches, syncs, scheduling)."""
        return self.overhead_fixed_s + self.overhead_per_layer_s * layers

    def balances_experts(self, ep, attn_dp):
        """Whether a layout's routed experts run with balanced loads (an expert-load balancer): an expert-parallel
        group, the experts spread over attention-DP ranks (`attn_dp` > 1; with one rank chalk shards each expert
        over the TP group, and every GPU sees every token), at least `eplb_min_ep` wide. Numbers or arrays."""
        return (ep >= self.eplb_min_ep) & (attn_dp > 1)


#: Achieved fraction of dense matmul peak, end to end (GEMMs and attention plus the norms, activations, routing
#: and quantisation kernels they drag along). Ceiling: DeepGEMM 1350 / 1979 = 68% FP8 on H800 and FlashMLA
#: 580 / 989 = 59% BF16 (open-infra-index; reference README convention 6); Azure GB200 2,744 / 5,000 = 55%
#: sustained FP8 GEMM. Fitted: 0.475 (the grid searched 0.30-0.80 in steps of 0.025; 0.45 before the MoE terms).
#: Data that pins it: prefill-heavy rows (TensorRT-LLM Llama-3.1-8B 2048/128 on H100, SGLang DeepSeek-V3 prefill
#: on H100 at 7,209 tok/s/GPU = ~27% of FP8 peak for the whole MoE step). MLPerf Llama-2-70B Offline on Hopper
#: (held out) implies 43-62% of FP8 peak end to end (v4.1-v5.0, at an assumed ~300-token mean prompt) while the
#: TensorRT-LLM Blackwell FP4 rows want less than 0.475: one fraction for every precision cannot serve both.
COMPUTE = 0.475

#: Achieved fraction of HBM bandwidth. Ceiling: FlashMLA 3000 / 3350 GB/s = 90% on H800; Azure GB200
#: 7.35 / 8 TB/s = 92%; DeepGEMM's M = 64-128 FP8 GEMMs stream weights at 2,100-2,670 GB/s on H800 (63-80%).
#: Fitted 0.82 (grid 0.60-0.92; 0.75 before the MoE terms): weight streaming through small-M GEMMs and paged-KV
#: gathers run below the streaming ceiling. Data that pins it: decode-heavy rows (Llama 128/2048 and 1k/1k).
MEMORY = 0.82

#: Achieved fraction of one-way link bandwidth in collectives: NCCL all-reduce bus bandwidth ~360 of
#: 450 GB/s one-way NVLink4 (80%); DeepEP normal-mode dispatch 153 GB/s NVLink and 43-58 GB/s RDMA per
#: 50 GB/s CX7 NIC (DeepEP README, H800). Not fitted: 0.75 from those kernel figures.
LINK = 0.75

#: Per-forward-pass overhead: a fixed part (scheduling, sampling, CUDA-graph replay, host sync) and a per-layer
#: part (kernel launches and the small non-GEMM kernels of each layer). Fitted (grid 0-3 ms and 5-60 us);
#: the result, 1.4-5 ms for 32-126 layers (2.5 ms for DeepSeek's 61), matches the "1-5 ms per large MoE step"
#: of engine profiles; pinned by small-batch rows (InferenceX DeepSeek-R1 TP8 at 16 concurrent on B200).
OVERHEAD_FIXED_S = 0.1e-3
OVERHEAD_PER_LAYER_S = 40e-6

#: Fraction of the shorter of (compute, communication) that two-micro-batch overlap hides. Fitted 0.25 (grid
#: 0-0.6). Large-EP decode sits near the plain sum: SGLang's H100 EP72 decode (256 seqs/GPU, 2,785 tok/s/GPU)
#: and the Kimi K2 H200 EP96 decode (3,000 tok/s/GPU, batch 480 read as per GPU) match compute + communication
#: with little hidden, while
#: SGLang's EP32 prefill (7,209 tok/s/GPU) needs about half hidden.
OVERLAP = 0.25

#: Inference pipelines lose throughput to micro-batch imbalance and per-stage synchronisation: each extra stage
#: stretches the stage step by this fraction. TensorRT-LLM's own RTX 6000 Pro table (perf-overview.md, Llama 3.3
#: 70B FP4, 128/128) gives per-GPU throughput 3,264 (PP1), 3,086 (PP2), 2,410 (PP4), 1,485 (PP8), i.e. 0.06-0.17
#: per extra stage over PCIe; fitted 0.30 (grid 0-0.3, the top of it; 0.20 before the MoE terms) on NVLink
#: systems, where engines prefer TP.
PIPELINE_BUBBLE = 0.30

#: Fixed cost of one MoE dispatch or combine (kernel launch, barrier, signalling): DeepEP low-latency kernels
#: take ~77 us (dispatch) and ~114 us (combine) for 128 tokens at EP8 on H800 (DeepEP README), of which the
#: bytes explain about half.
ALLTOALL_LATENCY_S = 20e-6

#: Passes over a routed token copy's hidden vector (2-byte activations) outside the expert GEMMs: gather into
#: expert order, scatter back, weighted combine, activation quantisation. It is what makes small-expert MoEs
#: (Qwen3-30B-A3B: hidden 2048, experts 768 wide) bandwidth-bound around their GEMMs. Fitted 16 (grid 0-48):
#: it takes the prefill-heavy Qwen3 rows of the TensorRT-LLM table from +90-140% to +50-80% over.
MOE_SHUFFLE_PASSES = 16.0

#: Vendor software maturity, relative to the NVIDIA-dominated fit: (vendor, compute multiplier, memory multiplier).
#: AMD: public GEMM sweeps (SemiAnalysis, "MI300X vs H100 vs H200", Dec 2024) put MI300X BF16/FP8 GEMMs at
#: roughly half of peak against ~70% on H100 (ratio ~0.65), and stream-type tests at ~80% of HBM peak against
#: ~90% (ratio ~0.9). Approximate kernel-level figures, not fitted per row and not re-verified here; the AMD
#: rows of the validation set still come out over-predicted with them.
VENDOR = (("AMD", 0.65, 0.9),)

#: The refitted fields that hold a vendor's (compute, memory) multipliers, by the `vendor` a chip's YAML names (lower
#: case): data the step model looks up, so no code branches on a vendor. A vendor not listed runs at 1, 1.
VENDOR_FIELDS = {"amd": ("amd_compute", "amd_memory")}

#: Per-hop latency of a collective: NVLink/NVSwitch ~1 us per ring step (NCCL LL protocol); RDMA over
#: InfiniBand/RoCE ~5 us (NIC + switch traversal). Physical figures, not fitted.
SCALEUP_LATENCY_S = 1.0e-6
SCALEOUT_LATENCY_S = 5.0e-6

#: HBM kept for activations, CUDA graphs, workspace and fragmentation: vLLM's default
#: gpu_memory_utilization 0.9 and TensorRT-LLM's kv_cache_free_gpu_mem_fraction 0.9 both leave ~10%.
MEMORY_RESERVE = 0.10

#: Most sequences one scheduler (one attention replica, or one attention-DP rank) runs per micro-batch. Engine
#: defaults span 256 (vLLM V0 max_num_seqs, SGLang's CUDA-graph batch sizes) to 1024 (vLLM V1 max_num_seqs on
#: large GPUs) and 2048 (TensorRT-LLM max_batch_size for trtllm-bench); MLPerf Offline submissions run 806-2048
#: per GPU (NVIDIA llama2-70b configs, inference_results_v4.1/v5.0: gpu_batch_size 806 on H200 in v4.1, 2048 on
#: H200/B200 in v5.0, 1024 per PP2 pair on H100). Refitted with the MoE terms over 256-2048, the whole-set fit
#: still prefers 256 (objective 0.248 at 256 against 0.255 at the best larger cap, 768): above it the MoE rows
#: (TensorRT-LLM Qwen3, InferenceX DeepSeek) over-predict by far more than the dense rows gain. Consequence:
#: dense offline/max-throughput points that real engines reach with 1-2K sequences (MLPerf Llama-2-70B rows:
#: median -19%) stay under-predicted. A cap of 2048 would cut that to -16% and the dense median to 0.11, but
#: raise the MoE median to 0.23 and its p90 to 1.0: the MoE terms below do not explain enough of the MoE
#: rows' large-batch shortfall to allow it.
MAX_SEQS_PER_SCHEDULER = 256

#: Tokens per expert at which a grouped expert GEMM runs at half the efficiency of a large dense GEMM:
#: eta(m) = m / (m + m_half) on the routed-expert FLOPs, m = routed token copies per expert in one forward pass.
#: From kernel data, not fitted: DeepGEMM's masked grouped FP8 GEMMs on H800 (deepseek-ai/DeepGEMM README, Feb
#: 2025) reach 1233 / 1040 / 932 TFLOPS at m = 1024 / 512 / 256 for N x K = 4096 x 7168 against 1304 for the
#: dense M = 4096 GEMM (eta 0.95 / 0.80 / 0.71), and 925 / 916 / 815 against 1025 for 7168 x 2048 (0.90 / 0.89 /
#: 0.80); least squares over the six gives 86 (single points 59-130), about one 64-128-row M tile of waste per
#: expert. Letting the refit move it (grid 0-2000) kept 86. It bites where experts are many for the batch:
#: DeepSeek decode pools (SGLang EP72 at 256 sequences per GPU, DeepSeek's EP144 at 128: m = 576, eta 0.87),
#: small-batch EP decode (m < 100, eta < 0.5, where weight reads usually dominate anyway); Mixtral (8 experts)
#: and 16K-token prefill chunks see eta ~ 1.
MOE_GEMM_HALF_TOKENS = 86.0

#: Whether expert parallelism pays for its busiest chip: under attention-DP + EP the step waits for the chip whose
#: experts received the most routed copies. Modelled as uniform balls in bins (equations.moe.max_load_factor:
#: max / mean = 1 + sqrt(2 ln EP / lambda), lambda copies per chip), parameter-free; TP-sharded experts see every
#: token and have no imbalance. A popularity-skew extension (a coefficient of variation between experts that does
#: not average away with batch) was tried: the fit put it at 0.1-0.4 with no held-out gain and it did not carry
#: across held-out groups of rows, so it is not used.
MOE_LOAD_IMBALANCE = True

#: Spread of the residuals log(measured / predicted) over the validation set, so [low, high] = estimate *
#: exp(residual). The literals are the first in-sample 10th and 90th percentiles (67 rows, after the MoE refit); the
#: shipped values (catalog/calibration.yaml, its `range` block saying how) are the family-weighted percentiles of
#: the leave-one-family-out residuals that hold 80% of held-out measured values (`calibrate.cv_range`).
RESIDUAL_LOW = -0.49
RESIDUAL_HIGH = 0.26

CALIBRATION = Calibration(
    compute=COMPUTE, memory=MEMORY, link=LINK, overhead_fixed_s=OVERHEAD_FIXED_S,
    overhead_per_layer_s=OVERHEAD_PER_LAYER_S, overlap=OVERLAP, moe_shuffle_passes=MOE_SHUFFLE_PASSES,
    pipeline_bubble=PIPELINE_BUBBLE, alltoall_latency_s=ALLTOALL_LATENCY_S, scaleup_latency_s=SCALEUP_LATENCY_S,
    scaleout_latency_s=SCALEOUT_LATENCY_S, memory_reserve=MEMORY_RESERVE,
    max_seqs_per_scheduler=MAX_SEQS_PER_SCHEDULER, vendor=VENDOR, amd_compute=VENDOR[0][1], amd_memory=VENDOR[0][2],
    residual_low=RESIDUAL_LOW,
    residual_high=RESIDUAL_HIGH, moe_gemm_half_tokens=MOE_GEMM_HALF_TOKENS, moe_load_imbalance=MOE_LOAD_IMBALANCE)

#: The fields `chalk calibrate` refits (and may write to the package's catalog/calibration.yaml).
REFITTABLE = ("compute", "memory", "overhead_fixed_s", "overhead_per_layer_s", "moe_shuffle_passes", "overlap",
              "max_seqs_per_scheduler", "pipeline_bubble", "residual_low", "residual_high", "use_kernel_tables",
              "kv_reserve_output_fraction", "request_latency_s", "amd_compute", "amd_memory",
              "dp_prefill_alignment", "overhead_per_seq_s", "eplb_min_ep")


def _apply_fitted(base: Calibration, d: dict) -> Calibration:
    """`base` with the refitted fields of a calibration YAML (unknown keys ignored; types checked)."""
    upd = {}
    for k in REFITTABLE:
        if k in d:
            v = d[k]
            if k == "use_kernel_tables":
                upd[k] = bool(v)
            elif k == "max_seqs_per_scheduler":
                upd[k] = int(v)
            else:
                upd[k] = float(v)
    return dataclasses.replace(base, **upd)


def _fitted_file(base: Calibration) -> Calibration:
    """The last `chalk calibrate --write` result shipped as package data, if any."""
    from chalk.specs.catalog import package_path, read_yaml

    f = package_path("catalog", "calibration.yaml")
    if not f.is_file():
        return base
    return _apply_fitted(base, read_yaml(f, "catalog calibration.yaml").get("fitted", {}))


CALIBRATION = _fitted_file(CALIBRATION)

#: The ideal counterpart: peak rates, no overhead, no reserve, full link bandwidth, no latency.
IDEAL_CALIBRATION = Calibration(
    compute=1.0, memory=1.0, link=1.0, overhead_fixed_s=0.0, overhead_per_layer_s=0.0, overlap=1.0,
    moe_shuffle_passes=0.0, pipeline_bubble=0.0, alltoall_latency_s=0.0, scaleup_latency_s=0.0,
    scaleout_latency_s=0.0, memory_reserve=0.0, max_seqs_per_scheduler=1 << 20, residual_low=0.0,
    residual_high=0.0, dp_prefill_alignment=1.0, label="ideal")

#: Layers assumed for `calibrated_efficiency()` when no model is given (a large model, ~60 layers).
TYPICAL_LAYERS = 60


@lru_cache(maxsize=64)
def calibrated_efficiency(layers: int | None = None) -> Efficiency:
    """The calibrated `roofline.Efficiency`: compute and HBM fractions, per-step overhead, memory reserve.

    `layers` sizes the per-layer overhead (default: TYPICAL_LAYERS). Link efficiency and latencies are
    used by the layout-aware analyses (`chalk.analyses.step.parallel`, `chalk.analyses.traffic.serving`), which read
    `CALIBRATION` directly.
    """
    n = TYPICAL_LAYERS if layers is None else layers
    c = CALIBRATION
    return Efficiency(compute=c.compute, memory=c.memory, overhead_s=c.overhead_s(n),
                      memory_reserve=c.memory_reserve, label="calibrated",
                      residual_low=c.residual_low, residual_high=c.residual_high)


def efficiency_for(chip) -> tuple[float, float, float] | None:
    """(compute fraction, memory fraction, per-step overhead in s) fitted for this chip by `chalk measure` and
    carried in its YAML's `efficiency:` block; None for a catalog chip (which uses the constants above)."""
    e = getattr(chip, "efficiency", None)
    if e is None:
        return None
    return float(e.compute), float(e.memory), float(e.overhead_s)


def default_efficiency(ideal: bool = False, layers: int | None = None, chip=None) -> Efficiency:
    """The pure roofline (`ideal`); else the chip's own fitted efficiency when its YAML carries one
    (`efficiency_for`), else chalk's calibrated efficiency, sized for a model's layer count."""
    if ideal:
        return IDEAL
    fitted = efficiency_for(chip) if chip is not None else None
    if fitted is not None:
        c, m, o = fitted
        return Efficiency(compute=c, memory=m, overhead_s=o, memory_reserve=MEMORY_RESERVE,
                          label=f"measured ({chip.id})")
    return calibrated_efficiency(layers)


#: `--eplb`: whether a layout's MoE layers run an expert-load balancer. auto: from the calibrated EP width
#: (`Calibration.eplb_min_ep`); on: every expert-parallel group (EP >= 2); off: none (served traffic's power-law
#: expert loads throughout).
EPLB_MODES = ("auto", "on", "off")
_EPLB_WIDTH = {"on": 2.0, "off": float("inf")}
_WITH_EPLB: dict = {}


def eplb_mode(eplb: str | None) -> str:
    """`eplb` checked and normalised: one of `EPLB_MODES` (None is auto); InputError otherwise."""
    mode = "auto" if eplb is None else str(eplb).strip().lower()
    if mode not in EPLB_MODES:
        raise InputError(f"--eplb must be one of {', '.join(EPLB_MODES)}, got {eplb!r}")
    return mode


def with_eplb(cal: Calibration, eplb: str | None) -> Calibration:
    """`cal` with its expert-load-balancer rule set by `eplb` (one of `EPLB_MODES`; None is auto). The same
    calibration object comes back for the same question, so the step model's plans kept per calibration stay
    kept."""
    mode = eplb_mode(eplb)
    if mode == "auto" or cal.label == "ideal":  # the ideal roofline has no kernel tables to choose between
        return cal
    key = (id(cal), mode)
    hit = _WITH_EPLB.get(key)
    if hit is None or hit[0] is not cal:
        if len(_WITH_EPLB) >= 64:
            _WITH_EPLB.clear()
        hit = _WITH_EPLB[key] = (cal, dataclasses.replace(cal, eplb_min_ep=_EPLB_WIDTH[mode]))
    return hit[1]


def calibration(ideal: bool = False, chip=None, eplb: str | None = None) -> Calibration:
    """The serving model's constants: calibrated (default) or ideal. A chip whose YAML carries a `chalk measure`
    fit (`efficiency_for`) uses its own compute and memory fractions and overhead instead of the global ones and
    of the kernel tables. `eplb`: the expert-load balancer rule (`with_eplb`; None: the calibrated width)."""
    if ideal:
        return with_eplb(IDEAL_CALIBRATION, eplb)
    fitted = efficiency_for(chip) if chip is not None else None
    if fitted is None:
        return with_eplb(CALIBRATION, eplb)
    c, m, o = fitted
    return with_eplb(dataclasses.replace(CALIBRATION, compute=c, memory=m, overhead_fixed_s=o,
                                         overhead_per_layer_s=0.0, overhead_per_seq_s=0.0, use_kernel_tables=False,
                                         label=f"measured ({chip.id})"), eplb)
