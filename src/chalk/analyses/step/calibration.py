"""Calibrated efficiency: how far real serving engines sit below the pure roofline, and why.

A handful of global, physically meaningful constants, each documented with the data it came from.
Kernel ceilings bound them from above (the best a kernel reaches in isolation); the end-to-end values
were then fitted to the project's validation set (`chalk/validation/validation.csv`, `chalk validate`)
by coordinate descent over a coarse grid (`chalk.analyses.fidelity.calibrate.FIT_GRID`), minimising one objective
over all rows at once, never per row.

Three kinds of constant live here:
- refitted by `chalk calibrate` (REFITTABLE): COMPUTE, MEMORY, OVERHEAD_*, OVERLAP, MOE_SHUFFLE_PASSES,
  MAX_SEQS_PER_SCHEDULER, the AMD factors, RESIDUAL_*, and the fields without a literal below (KV reserve, request
  latency, prefill alignment, per-sequence host time, EPLB width). Their shipped values are the calibration record,
  `catalog/calibration.yaml`, read at import: per parameter its value, grid and whether it sits on the grid's edge,
  with the objective, the rows and source families and a hash of the validation data it was fitted on. The
  literals below are only the starting point of the first fit and the record of where each came from; the
  comments quote the shipped value as "shipped: X", and tests/test_calibration_record.py fails when one differs
  from the record. The README's table of them is generated (scripts/calibration_table.py).
- fitted once by hand, before `chalk calibrate` existed, and never refitted: PIPELINE_BUBBLE.
- taken from kernel or link figures: LINK, *_LATENCY_S, MEMORY_RESERVE, VENDOR, MOE_GEMM_HALF_TOKENS;
  parameter-free: MOE_LOAD_IMBALANCE (balls in bins).
The [low, high] range comes from the spread of held-out residuals (leave-one-family-out, `chalk calibrate`);
`chalk validate --cv` judges the fit by leaving out one source family at a time.

Only `_fitted_file` reads a file (the record, once at import); `calibrated_efficiency()` is cached.
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
    #: scheduler hand-off, streaming the first chunk); added to TTFT only (a closed loop's seat is held for it).
    #: Fitted with `warmup_s` on the TTFT rows, means and medians (`chalk.analyses.fidelity.calibrate
    #: .fit_request_latency`).
    request_latency_s: float = 0.0
    #: How much longer a cold engine's first step takes than a warm one's (kernels compiled on first use, first-shape
    #: graphs and memory pools set up while the first batch waits): seen only by a benchmark run measured whole, cold
    #: start included (a closed loop's first wave waits that much longer; `simulate.simulate_continuous` warmup_s).
    #: Fitted with `request_latency_s` on the TTFT rows (`chalk.analyses.fidelity.calibrate.fit_request_latency`).
    warmup_s: float = 0.0
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
#: sustained FP8 GEMM. The literal is the first fit (2026-11-21, on the roofline alone, before the measured kernel
#: tables): prefill-heavy rows pinned it (TensorRT-LLM Llama-3.1-8B 2048/128 on H100, SGLang DeepSeek-V3 prefill on
#: H100 at 7,209 tok/s/GPU = ~27% of FP8 peak for the whole MoE step). Since the kernel tables time GEMMs, attention
#: and MoE where measured, it times only the ops without a table (and chips without one); shipped: 0.35, the floor
#: of its grid (catalog/calibration.yaml; the refit of 2026-11-26 on the tables without opt-in kernels: the
#: objective is flat in it, 0.2592 at 0.35 against 0.2600 at 0.65 before that refit, as every NVIDIA GEMM,
#: attention and MoE op has a measured table and AMD's compute-bound kernels take `amd_compute` instead).
COMPUTE = 0.475

#: Achieved fraction of HBM bandwidth. Ceiling: FlashMLA 3000 / 3350 GB/s = 90% on H800; Azure GB200
#: 7.35 / 8 TB/s = 92%; DeepGEMM's M = 64-128 FP8 GEMMs stream weights at 2,100-2,670 GB/s on H800 (63-80%).
#: The literal is the first fit (2026-11-21, roofline alone): weight streaming through small-M GEMMs and paged-KV
#: gathers ran below the streaming ceiling on decode-heavy rows (Llama 128/2048 and 1k/1k). With the kernel tables
#: it times the ops without a table (elementwise, sampling, other chips); shipped: 0.65, one step above the floor of
#: its grid (catalog/calibration.yaml; the refit of 2026-11-27 over 837 rows from 17 families, where every
#: leave-one-family-out fold had chosen 0.6-0.7: the 0.9 shipped before was fitted on 730 rows from 14 families).
MEMORY = 0.82

#: Achieved fraction of one-way link bandwidth in collectives: NCCL all-reduce bus bandwidth ~360 of
#: 450 GB/s one-way NVLink4 (80%); DeepEP normal-mode dispatch 153 GB/s NVLink and 43-58 GB/s RDMA per
#: 50 GB/s CX7 NIC (DeepEP README, H800). Not fitted: 0.75 from those kernel figures.
LINK = 0.75

#: Per-forward-pass overhead: a fixed part (scheduling, sampling, CUDA-graph replay, host sync) and a per-layer
#: part (kernel launches and the small non-GEMM kernels of each layer), pinned by small-batch rows (InferenceX
#: DeepSeek-R1 TP8 at 16 concurrent on B200). The literals are the first fit (0.1 ms and 40 us: 1.4-5 ms for 32-126
#: layers, the "1-5 ms per large MoE step" of engine profiles). Shipped: 2 ms fixed and 30 us per layer (3-5.8
#: ms for 32-126 layers; with an engine profile its own per-step host time replaces the fixed part), with a
#: per-sequence host time beside them (`overhead_per_seq_s`; catalog/calibration.yaml; the refit of 2026-11-27 over
#: 837 rows, every fold choosing 1-4 ms and 20-30 us: small-batch MoE steps of DeepSeek-R1 on H200 and B200 ran 15-40%
#: longer than 1 ms and 10 us gave, in three families). A CUDA-graphed plain-torch Llama-8B step on H200 measures
#: 0.90 of its estimate (0.82 where weight reads bind; test_device_h200.py): a ceiling taken from those device steps
#: (1.63 ms for 32 layers) cross-validated worse, 19.3% against 16.65% held out, and was not shipped.
#: A refit over the 22 Azure, Oracle and Google rows added on 2026-11-27 took the fixed part to 0.1 ms, pulled there
#: by six TPU decode loops that XLA compiles whole (jax-llm-examples); measured H200 decode steps (tests/
#: test_device_h200.py) then ran 24% slower than estimated, so that fit was not shipped.
OVERHEAD_FIXED_S = 0.1e-3
OVERHEAD_PER_LAYER_S = 40e-6

#: Fraction of the shorter of (compute, communication) that two-micro-batch overlap hides. The literal is the first
#: fit: large-EP decode sat near the plain sum (SGLang's H100 EP72 decode, 256 seqs/GPU, 2,785 tok/s/GPU; the Kimi K2
#: H200 EP96 decode, 3,000 tok/s/GPU) while SGLang's EP32 prefill (7,209 tok/s/GPU) needed about half hidden.
#: Shipped: 0.75, the top of its grid (catalog/calibration.yaml).
OVERLAP = 0.25

#: Inference pipelines lose throughput to micro-batch imbalance and per-stage synchronisation: each extra stage
#: stretches the stage step by this fraction. TensorRT-LLM's own RTX 6000 Pro table (perf-overview.md, Llama 3.3
#: 70B FP4, 128/128) gives per-GPU throughput 3,264 (PP1), 3,086 (PP2), 2,410 (PP4), 1,485 (PP8), i.e. 0.06-0.17
#: per extra stage over PCIe. 0.30 is a hand fit of 2026-11-21 (grid 0-0.3, the top of it; 0.20 before the MoE
#: terms) on NVLink systems, where engines prefer TP, made before `chalk calibrate` existed: it is not in that
#: command's grid, so no refit has moved it or judged it since. A fixed constant, not a shipped fit; the step model's
#: pipeline_sync op applies it (few validation rows run pipeline parallelism to pin it).
PIPELINE_BUBBLE = 0.30

#: Fixed cost of one MoE dispatch or combine (kernel launch, barrier, signalling): DeepEP low-latency kernels
#: take ~77 us (dispatch) and ~114 us (combine) for 128 tokens at EP8 on H800 (DeepEP README), of which the
#: bytes explain about half.
ALLTOALL_LATENCY_S = 20e-6

#: Passes over a routed token copy's hidden vector (2-byte activations) outside the expert GEMMs: gather into
#: expert order, scatter back, weighted combine, activation quantisation. It is what makes small-expert MoEs
#: (Qwen3-30B-A3B: hidden 2048, experts 768 wide) bandwidth-bound around their GEMMs. First fit 16 (grid 0-48):
#: it took the prefill-heavy Qwen3 rows of the TensorRT-LLM table from +90-140% to +50-80% over. Shipped: 16, one
#: step from the top of its grid (catalog/calibration.yaml).
MOE_SHUFFLE_PASSES = 16.0

#: Vendor software maturity, relative to the NVIDIA-dominated fit: (vendor, compute multiplier, memory multiplier).
#: AMD: public GEMM sweeps (SemiAnalysis, "MI300X vs H100 vs H200", Dec 2024) put MI300X BF16/FP8 GEMMs at
#: roughly half of peak against ~70% on H100 (ratio ~0.65), and stream-type tests at ~80% of HBM peak against
#: ~90% (ratio ~0.9). Approximate kernel-level figures, the starting point; `chalk calibrate` refits them on the AMD
#: rows as `amd_compute` and `amd_memory` (`VENDOR_FIELDS`). Shipped: 0.6 compute and 0.9 memory, each one step in
#: from an end of its grid (catalog/calibration.yaml; the fit before had 0.5 and 1.0, on the ends).
#: The step model stretches a measured (NVIDIA) kernel time by the compute multiplier where the op's roofline is
#: compute-bound and by the memory one where it is memory-bound
#: (`step_model._Timer.vendor_factor`): a decode GEMM that reads its weights is a stream, not a GEMM sweep. Grouped
#: expert GEMMs and prefill attention take the compute one (tile- and math-bound).
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
#: H200/B200 in v5.0, 1024 per PP2 pair on H100). The literal, 256, is the first whole-set fit (2026-11-21, roofline
#: alone): larger caps let the MoE rows (TensorRT-LLM Qwen3, InferenceX DeepSeek) over-predict by more than the
#: dense rows gained. Once GEMMs, attention and MoE came from the measured kernel tables (2026-11-24) the refit
#: moved it up. Shipped: 2048, the top of its grid (catalog/calibration.yaml; 512 before the refit of 2026-11-27 over
#: 837 rows). It binds only deployments without an engine profile: a profile's own max_num_seqs caps the rest.
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
#: shipped values (shipped: -0.449 and 0.319; catalog/calibration.yaml, its `range` block saying how) are the
#: family-weighted percentiles of the leave-one-family-out residuals that hold 80% of held-out measured values
#: (`calibrate.cv_range`).
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
              "kv_reserve_output_fraction", "request_latency_s", "warmup_s", "amd_compute", "amd_memory",
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


def recorded(doc: dict) -> dict:
    """{parameter: value} of a calibration record: its `parameters` block (format 2, each parameter a mapping with
    its `value`, grid and edge; `chalk.analyses.fidelity.calibrate.record`), or an older file's `fitted` block."""
    params = doc.get("parameters") if isinstance(doc, dict) else None
    if isinstance(params, dict):
        return {k: v.get("value") for k, v in params.items() if isinstance(v, dict) and "value" in v}
    fitted = doc.get("fitted") if isinstance(doc, dict) else None
    return dict(fitted) if isinstance(fitted, dict) else {}


def _fitted_file(base: Calibration) -> Calibration:
    """The last `chalk calibrate --write` result shipped as package data, if any."""
    from chalk.specs.catalog import package_path, read_yaml

    f = package_path("catalog", "calibration.yaml")
    if not f.is_file():
        return base
    return _apply_fitted(base, recorded(read_yaml(f, "catalog calibration.yaml")))


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
