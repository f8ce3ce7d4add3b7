"""Pretraining time, GPU-hours and cost at a calibrated MFU; eq. 7's three compute pools; the lecture's
training claims.

FLOP convention (the one MFU is measured against): model FLOPs = 3 x forward FLOPs per token, where the
forward is `ModelSizes.prefill_flops(seq_len) / seq_len` = 2 * N_active(matmul) + causal attention at the
training sequence length (the Llama 3 paper's MFU counts attention). No recomputation counted. The
lecture's bare 6ND (no attention) is reported beside it as `flops_6nd` and used for eq. 7's pools.

Achieved FLOP/s per GPU = peak_bf16 * KERNEL_MFU_BF16 * fp8 speed-up * MoE efficiency, then the step
stretches by the pipeline bubble and any data-parallel gradient reduction the backward pass cannot hide.
Every constant below names the measurement it came from; `derive_calibration()` recomputes them from
those measurements and the tests check the two agree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from chalk.analyses.records.claims import Claim
from chalk.analyses.step.model_sizes import ModelSizes
from chalk.analyses.step.roofline import _jsonable
from chalk.equations import training as T
from chalk.errors import InputError
from chalk.specs.catalog import as_model, as_system
from chalk.specs.hardware import System
from chalk.specs.precision import canonical
from chalk.specs.workload import fraction, positive


# --------------------------------------------------------------------------- published runs
@dataclass(frozen=True)
class PublishedRun:
    """A pretraining run with published GPU-hours: the defaults for its model and the check on chalk."""

    model: str
    hardware: str
    gpus: int
    tokens: float
    seq_len: int
    global_batch_tokens: float
    precision: str
    gpu_hours_pretrain: float | None
    gpu_hours_total: float
    source: str
    notes: str = ""


LLAMA_3_1_405B = PublishedRun(
    model="llama-3.1-405b", hardware="hgx-h100", gpus=16384, tokens=15.6e12, seq_len=8192,
    global_batch_tokens=16 * 2**20, precision="bf16", gpu_hours_pretrain=None, gpu_hours_total=30.84e6,
    source="github meta-llama/llama-models models/llama3_1/MODEL_CARD.md (30.84M H100-80GB GPU-hours, all "
           "stages); 15.6T tokens, 16K H100s, 16M-token batches of 8,192: 'The Llama 3 Herd of Models' "
           "arXiv 2407.21783 (Table 4, section 3.4)",
    notes="the model card gives only the all-stage total (pretraining, 128K context extension, annealing, "
          "post-training); the pretraining estimate is compared with it")

DEEPSEEK_V3 = PublishedRun(
    model="deepseek-v3", hardware="hgx-h800", gpus=2048, tokens=14.8e12, seq_len=4096,
    global_batch_tokens=15360 * 4096, precision="fp8", gpu_hours_pretrain=2.664e6, gpu_hours_total=2.788e6,
    source="DeepSeek-V3 Technical Report arXiv 2412.19437 (Table 1: 2,664K H800 GPU-hours pretraining on "
           "14.8T tokens, 2,788K total; 180K GPU-hours per trillion tokens; FP8 mixed precision; batch "
           "15,360 x 4K tokens) and github deepseek-ai/DeepSeek-V3 README",
    notes="the MoE efficiency below is calibrated on this run, so it reproduces it by construction")

_LLAMA_CARD = ("github meta-llama/llama-models models/llama3_1/MODEL_CARD.md (training GPU-hours on H100-80GB, all "
               "stages; 'pretrained on ~15 trillion tokens'), via reference measurements-public.csv")
LLAMA_3_1_8B = PublishedRun(
    model="llama-3.1-8b", hardware="hgx-h100", gpus=16384, tokens=15e12, seq_len=8192,
    global_batch_tokens=16 * 2**20, precision="bf16", gpu_hours_pretrain=None, gpu_hours_total=1.46e6,
    source=_LLAMA_CARD + ": 1.46M GPU-hours",
    notes="the card gives only the all-stage total and ~15T tokens; GPU count and batch are not published (the "
          "405B run's 16,384 GPUs and 16M-token batches assumed); not used in any fit")
LLAMA_3_1_70B = PublishedRun(
    model="llama-3.1-70b", hardware="hgx-h100", gpus=16384, tokens=15e12, seq_len=8192,
    global_batch_tokens=16 * 2**20, precision="bf16", gpu_hours_pretrain=None, gpu_hours_total=7.0e6,
    source=_LLAMA_CARD + ": 7.0M GPU-hours",
    notes=LLAMA_3_1_8B.notes)

PUBLISHED: dict[str, PublishedRun] = {r.model: r for r in (LLAMA_3_1_8B, LLAMA_3_1_70B, LLAMA_3_1_405B, DEEPSEEK_V3)}

#: Published runs a calibration constant was fitted on (chalk reproduces them by construction, so they are no check).
CALIBRATED_ON = {"deepseek-v3": "MOE_RESIDUAL_EFFICIENCY", "llama-3.1-405b": "KERNEL_MFU_BF16 (from its MFU rows)"}

#: A MoE run the MoE efficiency was NOT fitted on: DeepSeek-V2 (236B total, 21B active, MLA, 160 routed experts,
#: BF16 on H800). Config: huggingface.co/deepseek-ai/DeepSeek-V2 config.json (model_type deepseek_v2). Figure:
#: "for training on each trillion tokens, DeepSeek 67B requires 300.6K GPU hours, while DeepSeek-V2 needs only
#: 172.8K GPU hours" on DeepSeek's H800 cluster (DeepSeek-V2 technical report, arXiv 2405.04434, sec. 3.2).
#: The paper gives 4K-token sequences and a batch ramped to 9,216 sequences; the GPU count is not published
#: (2,048 assumed, V3's).
DEEPSEEK_V2_CONFIG = {
    "model_type": "deepseek_v2", "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536,
    "num_hidden_layers": 60, "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 160,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 102400, "max_position_embeddings": 163840, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16"}
DEEPSEEK_V2_GPU_HOURS_PER_TRILLION_TOKENS = 172.8e3
DEEPSEEK_V2_SOURCE = ("DeepSeek-V2 technical report arXiv 2405.04434 sec. 3.2 (172.8K H800 GPU-hours per trillion "
                      "tokens); config huggingface.co/deepseek-ai/DeepSeek-V2 config.json")

#: Llama 3.1 405B, BF16, 8,192-token sequences, 16M-token batches, TP8 PP16 (DP 64 and 128), H100:
#: (GPUs, MFU). 'The Llama 3 Herd of Models' Table 4 (430 and 400 TFLOP/s per GPU).
LLAMA_MFU_ROWS: tuple[tuple[int, float], ...] = ((8192, 0.43), (16384, 0.41))

# --------------------------------------------------------------------------- calibration constants
#: Bubble-free BF16 MFU of a dense transformer at scale: each Llama row's MFU / (1 - its bubble), with
#: PP16, interleave 8 (chalk's reading of the paper: 126 layers = 16 stages x 8 one-layer virtual stages,
#: less the one layer it drops from the first and the last stage) and M = batch / DP micro-batches: 0.43 / (1 - 15/271) -> 0.4556 at 8K GPUs,
#: 0.41 / (1 - 15/143) -> 0.4591 at 16K GPUs (after the small exposed gradient reduction). The two rows
#: agree to 1%, so the pipeline bubble explains their gap; the mean is kept.
KERNEL_MFU_BF16 = 0.4573

#: Share of a BF16 training step spent in the GEMMs that FP8 runs at the chip's FP8 rate (2x on Hopper).
#: Chosen so the end-to-end FP8 gain is the ~1.3x reported for FP8 training (PyTorch torchao MXFP8 MoE
#: training: +30.2% for Llama4 Scout on GB200; secondary reports of +34% for Llama-2 7B on H100; medium
#: confidence): 1 / (0.5 + 0.5 / 2) = 1.33. Attention, norms, routing, optimizer and communication stay
#: BF16/FP32 (DeepSeek-V3 report section 3.3), so FP8 never reaches the 2x of the GEMM peak.
FP8_GEMM_TIME_SHARE = 0.5

#: DeepSeek-V3 dedicates 20 of each H800's 132 SMs to all-to-all dispatch/combine (report section 3.2.2).
MOE_COMM_SM_EFFICIENCY = 112 / 132

#: What DeepSeek-V3's published 2.664M H800 GPU-hours leave after the SM reservation: fine-grained expert
#: GEMMs (256 experts of width 2048), all-to-all not fully hidden, EP load imbalance, the H800's 400 GB/s
#: NVLink and DualPipe's small bubble (chalk's layout rule gives that run TP8 x PP1 x EP256, bubble-free;
#: DeepSeek ran PP16 DualPipe x EP64 x ZeRO-1 DP, no TP). Calibrated on that one run (see
#: `derive_calibration`), so coarse MoEs (Mixtral's 8 experts) probably pay less than this. It achieved
#: 386.5 TFLOP/s per GPU in chalk's FLOP convention (347.7 by bare 6ND with 37.6B active), i.e. 39.1% of
#: the BF16 peak, against 603 TFLOP/s a dense model would reach at the same FP8 gain: efficiency 0.641.
MOE_RESIDUAL_EFFICIENCY = 0.7550

#: Layout rule: tensor parallel inside the scale-up domain (at most 8), then the fewest pipeline stages
#: (powers of two) that keep BF16 weights + BF16 gradients (4 B/param) within a quarter of HBM; the rest
#: holds ZeRO-1 optimizer shards and activations. Reproduces Llama 3.1 405B's PP16 on 80 GB H100s.
MAX_TENSOR_PARALLEL = 8
TRAIN_STATE_BYTES_PER_PARAM = 4.0
WEIGHT_HBM_SHARE = 0.25
GRADIENT_BYTES_PER_PARAM = 2.0  # BF16 gradients reduced across data-parallel replicas

GENERIC_DEFAULTS = dict(hardware="h100-sxm", gpus=16384, tokens=15e12, seq_len=8192,
                        global_batch_tokens=16 * 2**20)
TRAINING_PRECISIONS = ("bf16", "fp16", "fp8")


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class TrainingLayout:
    """How the GPUs split the work: TP x PP x DP whole replicas (experts spread over EP ranks inside DP and over the
    TP group), at most one replica per sequence of the batch; `gpus_used` = TP x PP x DP of the GPUs given."""

    tensor_parallel: int
    pipeline_stages: int
    data_parallel: int
    expert_parallel: int
    interleave: int
    microbatches: float
    params_per_gpu: float
    train_state_bytes_per_gpu: float
    fits: bool
    gpus_used: int = 0


@dataclass(frozen=True)
class TrainingEstimate:
    """One pretraining run: work, time, GPU-hours and cost; Chinchilla; eq. 7's pools. SI units, USD."""

    model: str
    hardware: str
    chip: str
    gpus: int
    tokens: float
    precision: str
    compute_precision: str
    seq_len: int
    global_batch_tokens: float
    active_params: float
    flops: float
    flops_6nd: float
    flops_per_token: float
    attention_share: float
    kernel_mfu: float
    fp8_speedup: float
    moe_efficiency: float
    layout: TrainingLayout
    bubble_fraction: float
    dp_reduction_s: float
    dp_exposed_s: float
    step_time_s: float
    achieved_flops_per_s_per_gpu: float
    mfu: float
    mfu_bf16_peak: float
    gpu_hours: float
    wall_clock_days: float
    price_usd_per_gpu_hour: float
    cost_usd: float
    chinchilla_tokens: float
    overtraining_factor: float
    inference_tokens: float | None
    equilibrium_pretrain_tokens: float | None
    equilibrium_overtraining_factor: float | None
    pools: dict
    published: dict | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {k: _jsonable(v) for k, v in asdict(self).items()}

    def to_frame(self):
        """One row: the scalar fields, the layout's as `layout_*` columns (pandas; every result has one)."""
        from chalk.analyses.records.results import _flat, _frame

        d = self.to_dict()
        row = _flat(d)
        row.update({f"layout_{k}": v for k, v in (d.get("layout") or {}).items()
                    if not isinstance(v, (dict, list, tuple))})
        return _frame([row])


# --------------------------------------------------------------------------- layout and efficiency
def training_layout(sz: ModelSizes, system: System, gpus: int, seq_len: float, global_batch_tokens: float,
                    pipeline_stages: int | None = None, interleave: int | None = None) -> TrainingLayout:
    """TP in the scale-up domain, PP from memory (or as given), DP for the rest; one sequence per micro-batch."""
    m = sz.model
    tp = int(min(MAX_TENSOR_PARALLEL, system.chips, gpus))
    budget = system.chip.hbm_bytes * WEIGHT_HBM_SHARE

    sequences = max(math.floor(global_batch_tokens / seq_len), 1)  # per step: a replica needs one to work on

    def shard(pp: int):
        # whole replicas, no more than the batch has sequences (QA 2026-11-28: 6.25 replicas of 100 GPUs, and 62,500
        # replicas for 2,048 sequences that kept cutting the time)
        dp = max(min(gpus // (tp * pp), sequences), 1)
        ep = int(min(m.num_experts, dp)) if m.is_moe else 1
        # routed experts over EP and, inside each, over the TP group (Megatron's expert tensor parallel defaults to
        # TP): 235B of Qwen3 on TP8 x PP8 held 114 GB per GPU where 15 GB is what each GPU holds
        return sz.dense_params / (tp * pp) + sz.routed_expert_params / (tp * ep * pp), dp, ep

    if pipeline_stages is None:
        pp = 1
        while shard(pp)[0] * TRAIN_STATE_BYTES_PER_PARAM > budget and tp * pp * 2 <= min(gpus, tp * m.num_layers):
            pp *= 2
    else:
        pp = int(positive("pipeline stages", pipeline_stages, integer=True, scalar=True))
        if tp * pp > gpus:
            raise InputError(f"{pp} pipeline stages x TP {tp} need more than {gpus} GPUs")
        if pp > m.num_layers:
            raise InputError(f"{pp} pipeline stages exceed the model's {m.num_layers} layers")
    params, dp, ep = shard(pp)
    per_stage = math.ceil(m.num_layers / pp)
    v = per_stage if interleave is None else int(positive("interleave", interleave, integer=True, scalar=True))
    if v > per_stage:
        raise InputError(f"interleave {v} exceeds the {per_stage} layers per pipeline stage")
    if pp == 1:
        v = 1
    micro = max(1.0, global_batch_tokens / seq_len / dp)
    state = params * TRAIN_STATE_BYTES_PER_PARAM
    return TrainingLayout(tensor_parallel=tp, pipeline_stages=pp, data_parallel=int(dp), expert_parallel=ep,
                          interleave=v, microbatches=micro, params_per_gpu=params,
                          train_state_bytes_per_gpu=state, fits=bool(state <= budget), gpus_used=int(tp * pp * dp))


def fp8_speedup(system: System, precision: str) -> float:
    """End-to-end gain of FP8 training over BF16 on this chip (1 for BF16, or a chip without FP8)."""
    chip = system.chip
    if precision != "fp8" or chip.compute_precision("fp8") != "fp8":
        return 1.0
    return float(T.amdahl_speedup(FP8_GEMM_TIME_SHARE, chip.flops_per_s["fp8"] / chip.peak_flops_per_s("bf16")))


def _dp_reduction_s(sz: ModelSizes, system: System, lay: TrainingLayout) -> float:
    """Ring all-reduce of BF16 gradients over the scale-out NIC: dense shards over DP, experts over DP/EP."""
    bw = system.chip.scaleout_bandwidth_bytes_per_s or system.chip.scaleup_bandwidth_bytes_per_s
    if not bw or lay.data_parallel <= 1:
        return 0.0
    tp, pp, dp, ep = lay.tensor_parallel, lay.pipeline_stages, lay.data_parallel, lay.expert_parallel
    dense = sz.dense_params / (tp * pp) * GRADIENT_BYTES_PER_PARAM
    experts = sz.routed_expert_params / (tp * ep * pp) * GRADIENT_BYTES_PER_PARAM
    t = T.ring_allreduce_time_s(dense, dp, bw)
    if experts and dp / ep > 1:
        t = t + T.ring_allreduce_time_s(experts, dp / ep, bw)
    return float(t)


# --------------------------------------------------------------------------- the estimate
def _resolve(model, hardware, gpus, tokens, precision, seq_len, global_batch_tokens):
    spec = as_model(model)
    ref = PUBLISHED.get(spec.id)
    d = dict(GENERIC_DEFAULTS)
    if ref is not None:
        d.update(hardware=ref.hardware, gpus=ref.gpus, tokens=ref.tokens, seq_len=ref.seq_len,
                 global_batch_tokens=ref.global_batch_tokens)
    system = as_system(hardware or d["hardware"])
    gpus = int(positive("gpus", gpus if gpus is not None else d["gpus"], integer=True, scalar=True))
    tokens = float(positive("tokens", tokens if tokens is not None else d["tokens"], scalar=True))
    seq_len = int(positive("sequence length", seq_len if seq_len is not None else d["seq_len"], integer=True, scalar=True))
    batch = float(positive("global batch tokens",
                           global_batch_tokens if global_batch_tokens is not None else d["global_batch_tokens"], scalar=True))
    if seq_len > batch:  # a step holds whole sequences (QA 2026-11-28: --seq-len 1e11 ran at 1,841,815 days)
        raise InputError(f"a sequence of {seq_len:,} tokens is longer than the global batch of {batch:,.0f} tokens: "
                         "raise the batch or shorten the sequence")
    sz = ModelSizes(spec)
    if precision is None:
        precision = ref.precision if ref is not None else ("fp8" if sz.default_precision() == "fp8" else "bf16")
    precision = canonical(precision)
    if precision not in TRAINING_PRECISIONS:
        raise InputError(f"training precision must be one of {', '.join(TRAINING_PRECISIONS)}, got {precision!r}")
    return spec, sz, ref, system, gpus, tokens, precision, seq_len, batch


def train_estimate(model, hardware=None, gpus: int | None = None, tokens: float | None = None,
                   precision: str | None = None, *, seq_len: int | None = None,
                   global_batch_tokens: float | None = None, pipeline_stages: int | None = None,
                   interleave: int | None = None, inference_tokens_per_s: float | None = None,
                   deployment_days: float | None = None, obsolescence_probability: float = 0.0,
                   rl_tokens: float | None = None, rl_flops_per_param: float = 3.0, rl_inefficiency: float = 3.0,
                   inference_inefficiency: float = 3.0, kernel_mfu: float | None = None,
                   moe_residual_efficiency: float | None = None) -> TrainingEstimate:
    """Pretraining of `model` on `tokens` tokens with `gpus` GPUs of `hardware` at the calibrated MFU.

    Defaults: a model with a published run (llama-3.1-405b, deepseek-v3) takes that run's hardware, GPU
    count, tokens, sequence length, batch and precision; any other takes 16,384 H100s, 15T tokens,
    8,192-token sequences, 16M-token batches, and FP8 only if its checkpoint is FP8.
    Inference volume for eq. 7: `inference_tokens_per_s` over `deployment_days` (60, the lecture's two
    months, if only the rate is given), discounted by `obsolescence_probability`.
    """
    spec, sz, ref, system, gpus, tokens, precision, seq_len, batch = _resolve(
        model, hardware, gpus, tokens, precision, seq_len, global_batch_tokens)
    chip = system.chip
    notes: list[str] = []
    for name, v in (("RL FLOPs per param per token", rl_flops_per_param), ("RL inefficiency", rl_inefficiency),
                     ("inference inefficiency", inference_inefficiency)):
        positive(name, v)
    if not 2 <= rl_flops_per_param <= 6:
        raise InputError(f"RL FLOPs per param per token must be in [2, 6], got {rl_flops_per_param!r}")
    p = float(obsolescence_probability)
    if not (math.isfinite(p) and 0 <= p < 1):
        raise InputError(f"obsolescence probability must be in [0, 1), got {obsolescence_probability!r}")

    # work
    forward = float(sz.prefill_flops(seq_len)) / seq_len
    f_tok = float(T.training_flops_per_token(forward))
    attn_share = 1.0 - 2 * sz.active_matmul_params / forward
    flops = f_tok * tokens
    flops_6nd = float(T.pretraining_flops(sz.active_params, tokens))

    # rate
    kernel = KERNEL_MFU_BF16 if kernel_mfu is None else fraction("kernel MFU", kernel_mfu)
    residual = MOE_RESIDUAL_EFFICIENCY if moe_residual_efficiency is None else \
        fraction("MoE residual efficiency", moe_residual_efficiency)
    fp8 = fp8_speedup(system, precision)
    if precision == "fp8" and fp8 == 1.0:
        notes.append(f"{chip.id} has no faster FP8 rate: FP8 training gains nothing here")
    moe = MOE_COMM_SM_EFFICIENCY * residual if spec.is_moe else 1.0
    peak_bf16 = chip.peak_flops_per_s("bf16")
    rate = peak_bf16 * kernel * fp8 * moe

    # step: compute, pipeline bubble, exposed gradient reduction
    lay = training_layout(sz, system, gpus, seq_len, batch, pipeline_stages, interleave)
    if lay.train_state_bytes_per_gpu > chip.hbm_bytes:
        notes.append(f"does not fit: BF16 weights + gradients need {lay.train_state_bytes_per_gpu / 1e9:,.0f} GB per "
                     f"GPU, more than its whole {chip.hbm_bytes / 1e9:.0f} GB HBM; the time below assumes they fit "
                     "(more GPUs or pipeline stages)")
    elif not lay.fits:
        notes.append(f"BF16 weights + gradients need {lay.train_state_bytes_per_gpu / 1e9:.0f} GB per GPU, more "
                     f"than a quarter of {chip.hbm_bytes / 1e9:.0f} GB HBM: the layout is optimistic")
    if lay.gpus_used < gpus:
        full = lay.data_parallel == max(math.floor(batch / seq_len), 1)
        notes.append(f"{gpus - lay.gpus_used:,} of {gpus:,} GPUs idle: "
                     + (f"the batch's {lay.data_parallel:,} sequences of {seq_len:,} tokens give one data-parallel "
                        "replica each (a larger global batch uses more)" if full else
                        f"whole replicas of TP{lay.tensor_parallel} x PP{lay.pipeline_stages} fill "
                        f"{lay.gpus_used:,}") + "; they are paid for in the GPU-hours")
    if spec.max_context and seq_len > spec.max_context:
        notes.append(f"sequences of {seq_len:,} tokens are longer than {spec.id}'s {spec.max_context:,}-token context "
                     "(its config's max_position_embeddings): a run this long needs the position encoding extended")
    if batch % seq_len:
        notes.append(f"the global batch of {batch:,.0f} tokens is {batch / seq_len:,.2f} sequences of {seq_len:,}: "
                     "steps hold whole sequences")
    bubble = float(T.pipeline_bubble_fraction(lay.pipeline_stages, lay.microbatches, lay.interleave))
    t_compute = batch * f_tok / (lay.gpus_used * rate)
    t_dp = _dp_reduction_s(sz, system, lay)
    window = (2.0 / 3.0) * t_compute / lay.microbatches  # backward of the last micro-batch
    exposed = max(0.0, t_dp - window)
    t_step = t_compute / (1.0 - bubble) + exposed
    achieved = batch * f_tok / (gpus * t_step)
    hours = float(T.gpu_hours(flops, achieved))
    price = chip.price_usd_per_hour
    if chip.price_is_assumption:
        notes.append(f"{chip.id} price ${price}/h is an assumption: {chip.price_note}")

    # Chinchilla and eq. 7
    chin = float(T.chinchilla_tokens(sz.active_params))
    d_inf = None
    if inference_tokens_per_s is not None:
        days = 60.0 if deployment_days is None else float(positive("deployment days", deployment_days, scalar=True))
        d_inf = float(T.inference_tokens(positive("inference tokens per second", inference_tokens_per_s),
                                         days * T.SECONDS_PER_DAY, p))
    elif deployment_days is not None:
        raise InputError("a deployment window needs an inference rate (inference tokens per second) too")
    eq_pre = None if d_inf is None else float(T.equilibrium_pretrain_tokens(d_inf, inference_inefficiency))

    per_6nd_gpu_hour = flops_6nd / hours  # lecture FLOPs per GPU-hour at this run's achieved rate
    if rl_tokens is None:
        d_rl, rl_src = float(T.equilibrium_rl_tokens(tokens, rl_flops_per_param, rl_inefficiency)), "eq. 7 balance"
    else:
        d_rl, rl_src = float(positive("RL tokens", rl_tokens, scalar=True)), "given"
    if d_inf is None:
        d_inf_pool = tokens * 6.0 / (2.0 * inference_inefficiency)
        inf_src = "eq. 7 balance"
    else:
        d_inf_pool, inf_src = d_inf, "given rate x window x (1 - p)"
    pools = {}
    for name, d, c, src in (
            ("pretrain", tokens, flops_6nd, "given"),
            ("rl", d_rl, float(T.rl_flops(sz.active_params, d_rl, rl_flops_per_param, rl_inefficiency)), rl_src),
            ("inference", d_inf_pool, float(T.inference_flops(sz.active_params, d_inf_pool, inference_inefficiency)),
             inf_src)):
        h = c / per_6nd_gpu_hour
        pools[name] = {"tokens": d, "tokens_source": src, "flops": c, "gpu_hours": h, "cost_usd": h * price}

    published = None
    if ref is not None:
        same = abs(tokens - ref.tokens) <= 1e-9 * ref.tokens and chip.id == as_system(ref.hardware).chip.id
        published = {
            "gpu_hours_pretrain": ref.gpu_hours_pretrain, "gpu_hours_total": ref.gpu_hours_total,
            "gpus": ref.gpus, "tokens": ref.tokens, "hardware": ref.hardware, "source": ref.source,
            "notes": ref.notes, "same_run_shape": same,
            "predicted_over_pretrain": hours / ref.gpu_hours_pretrain if same and ref.gpu_hours_pretrain else None,
            "predicted_over_total": hours / ref.gpu_hours_total if same else None,
            "calibrated_on_this_run": CALIBRATED_ON.get(ref.model),
            "held_out_check": HELD_OUT_CHECKS[spec.id]() if spec.id in HELD_OUT_CHECKS else None,
        }
    return TrainingEstimate(
        model=spec.id, hardware=system.id, chip=chip.id, gpus=gpus, tokens=tokens, precision=precision,
        compute_precision=chip.compute_precision(precision), seq_len=seq_len, global_batch_tokens=batch,
        active_params=sz.active_params, flops=flops, flops_6nd=flops_6nd, flops_per_token=f_tok,
        attention_share=attn_share, kernel_mfu=kernel, fp8_speedup=fp8, moe_efficiency=moe, layout=lay,
        bubble_fraction=bubble, dp_reduction_s=t_dp, dp_exposed_s=exposed, step_time_s=t_step,
        achieved_flops_per_s_per_gpu=achieved, mfu=achieved / chip.peak_flops_per_s(precision),
        mfu_bf16_peak=achieved / peak_bf16, gpu_hours=hours, wall_clock_days=hours / gpus / 24.0,
        price_usd_per_gpu_hour=price, cost_usd=hours * price, chinchilla_tokens=chin,
        overtraining_factor=tokens / chin, inference_tokens=d_inf, equilibrium_pretrain_tokens=eq_pre,
        equilibrium_overtraining_factor=None if eq_pre is None else eq_pre / chin, pools=pools,
        published=published, notes=tuple(notes))


def moe_held_out_check() -> dict:
    """chalk's H800 GPU-hours per trillion tokens for DeepSeek-V2, a MoE run the MoE efficiency was not fitted on,
    against the published 172.8K."""
    from chalk.specs.model import model_from_config

    spec = model_from_config(DEEPSEEK_V2_CONFIG, id="deepseek-v2", source=DEEPSEEK_V2_SOURCE)
    e = train_estimate(spec, "hgx-h800", gpus=2048, tokens=1e12, precision="bf16", seq_len=4096,
                       global_batch_tokens=9216 * 4096)
    return {"model": "deepseek-v2", "hardware": "hgx-h800", "precision": "bf16", "tokens": 1e12,
            "published_gpu_hours": DEEPSEEK_V2_GPU_HOURS_PER_TRILLION_TOKENS, "predicted_gpu_hours": e.gpu_hours,
            "predicted_over_published": e.gpu_hours / DEEPSEEK_V2_GPU_HOURS_PER_TRILLION_TOKENS,
            "source": DEEPSEEK_V2_SOURCE,
            "notes": "not fitted on: MOE_RESIDUAL_EFFICIENCY comes from DeepSeek-V3; 2,048 GPUs assumed"}


#: The run a published reference was calibrated on -> the check on a run it was not fitted on, shown beside it.
HELD_OUT_CHECKS = {"deepseek-v3": moe_held_out_check}


# --------------------------------------------------------------------------- calibration, recomputed
def _solve(f, target: float, lo: float = 0.01, hi: float = 1.0) -> float:
    """x in [lo, hi] with f(x) = target, f increasing (bisection)."""
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def derive_calibration() -> dict:
    """Recompute KERNEL_MFU_BF16 and MOE_RESIDUAL_EFFICIENCY from the published measurements they came from."""
    ref = LLAMA_3_1_405B
    rows = []
    for gpus, mfu in LLAMA_MFU_ROWS:
        k = _solve(lambda x: train_estimate(ref.model, gpus=gpus, precision="bf16", kernel_mfu=x).mfu, mfu)
        e = train_estimate(ref.model, gpus=gpus, precision="bf16", kernel_mfu=k)
        rows.append({"gpus": gpus, "mfu": mfu, "bubble": e.bubble_fraction, "microbatches": e.layout.microbatches,
                     "kernel_mfu": k})
    kernel = sum(r["kernel_mfu"] for r in rows) / len(rows)
    ds = DEEPSEEK_V3
    target = ds.gpu_hours_pretrain
    # GPU-hours fall as efficiency rises: solve on -hours
    resid = _solve(lambda x: -train_estimate(ds.model, kernel_mfu=kernel, moe_residual_efficiency=x).gpu_hours,
                   -target)
    e = train_estimate(ds.model, kernel_mfu=kernel, moe_residual_efficiency=resid)
    dense_rate = e.achieved_flops_per_s_per_gpu / e.moe_efficiency
    return {
        "llama_rows": rows, "kernel_mfu_bf16": kernel, "moe_residual_efficiency": resid,
        "moe_efficiency": MOE_COMM_SM_EFFICIENCY * resid,
        "deepseek_achieved_flops_per_s_per_gpu": e.achieved_flops_per_s_per_gpu,
        "deepseek_achieved_6nd_flops_per_s_per_gpu": e.flops_6nd / (target * T.SECONDS_PER_HOUR),
        "deepseek_dense_fp8_rate_flops_per_s": dense_rate,
        "deepseek_mfu_bf16_peak": e.mfu_bf16_peak, "deepseek_mfu_fp8_peak": e.mfu,
    }


# --------------------------------------------------------------------------- the lecture's claims
LECTURE_RATE_TOKENS_PER_S = 50e6
LECTURE_WINDOW_DAYS = 60.0
LECTURE_ACTIVE_PARAMS = 100e9


def claims() -> list[Claim]:
    """The four training claims of shared/lecture/claims.md, each computed by the equations above."""
    d_inf = float(T.inference_tokens(LECTURE_RATE_TOKENS_PER_S, LECTURE_WINDOW_DAYS * T.SECONDS_PER_DAY))
    chin = float(T.chinchilla_tokens(LECTURE_ACTIVE_PARAMS))
    d_pre = float(T.equilibrium_pretrain_tokens(d_inf, inference_inefficiency=3.0))
    d_rl = float(T.equilibrium_rl_tokens(d_pre, rl_flops_per_param=3.0, rl_inefficiency=3.0))
    eq7 = "eq. 7: 6 N D_pretrain = 3 N D_RL x 3 = 2 N D_inference x 3"
    return [
        Claim("inference_tokens_two_months", d_inf, "tokens", "~200T (exactly 259T)",
              "50M output tokens/s, flat, for 60 days; no obsolescence discount",
              f"D_inference = 50e6 tok/s x 60 x 86,400 s = {d_inf / 1e12:.1f}T tokens; the lecture rounds to 200T.",
              (1.5e14, 3.0e14), "training"),
        Claim("chinchilla_tokens_100b", chin, "tokens", 2e12,
              "20 tokens per active parameter (Hoffmann et al. 2022), 100B active parameters",
              f"D_chinchilla = 20 x 100B = {chin / 1e12:.0f}T tokens.", (1.9e12, 2.1e12), "training"),
        Claim("overtraining_factor", d_pre / chin, "x", "~100x",
              f"{eq7} with inference inefficiency 3 gives D_pretrain = D_inference = {d_pre / 1e12:.0f}T; "
              "Chinchilla 2T for 100B active",
              f"D_pretrain / D_chinchilla = {d_pre / 1e12:.1f}T / {chin / 1e12:.0f}T = {d_pre / chin:.0f}x: "
              "serving volume, not compute-optimality, sets how long a frontier model is trained.",
              (50.0, 200.0), "training"),
        Claim("pool_ratio_pretrain_to_rl", d_pre / d_rl, "D_pretrain / D_RL", 1.5,
              "RL at 3 FLOPs/param/token and inefficiency 3; inference at 2 and inefficiency 3; equal pools",
              f"{eq7} -> D_pretrain = 1.5 D_RL = D_inference (here D_inference / D_pretrain = {d_inf / d_pre:.2f}).",
              (1.49, 1.51), "training"),
    ]

