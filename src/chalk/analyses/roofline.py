"""Single-replica roofline for decode and prefill steps, with its breakdown.

Chips in a system are an ideal aggregate here: FLOP/s, bandwidth and HBM are summed and
communication is free. Real layouts (TP/EP/PP with link costs) live in `chalk.analyses.parallel`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np

from chalk.analyses.model_sizes import ModelSizes, sizes
from chalk.equations import roofline as R
from chalk.equations.num import flt, ones_like, where
from chalk.errors import FitError, InputError
from chalk.specs.hardware import System
from chalk.specs.model import ModelSpec
from chalk.specs.workload import MAX_GPUS, Workload, context_note, count, sparse_law_name


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
class RooflineResult:
    """One step (or a grid of steps when batch/context are arrays). Times in s, bytes, FLOP, USD."""

    model: str
    hardware: str
    chips: int
    phase: str
    batch: object
    context: object
    precision: str
    compute_precision: str
    kv_precision: str
    weights_read: str
    efficiency: str
    step_time_s: object
    compute_time_s: object
    weight_time_s: object
    weight_time_lecture_s: object
    kv_time_s: object
    memory_time_s: object
    bound: object
    mfu: object
    mbu: object
    tokens_per_s: object
    user_tokens_per_s: object
    cost_per_mtok_usd: object
    critical_batch: float
    critical_batch_with_kv: object
    balance_context: object
    weight_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_sequence: object
    memory_needed_bytes: object
    hbm_bytes: float
    max_batch_fit: object
    fits: object
    total_params: float
    active_params: float
    flops: object
    bytes_moved: object
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: [low, high] for step time, tokens/s and cost from the calibration residuals (equal to the value when ideal)
    range: dict = field(default_factory=dict)
    #: 'aggregate': every chip summed into one communication-free chip (the lecture's bound);
    #: 'layout': one replica on a real layout, timed op by op (`chalk.analyses.step_model`)
    view: str = "aggregate"
    layout: dict | None = None
    #: the step's operations (layout view, scalar batch and context): name, kind, flops, bytes, time_s, bound, source
    ops: tuple = ()
    comm_time_s: object = 0.0
    overhead_time_s: object = 0.0

    def to_dict(self) -> dict:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


def _jsonable(v):
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return _jsonable(v.item())
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if not np.isfinite(f) else f
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def _scalar(x):
    if isinstance(x, np.generic):
        return x.item()
    if type(x) in (float, int, str, bool):
        return x
    a = np.asarray(x)
    return a.item() if a.ndim == 0 else a


@lru_cache(maxsize=4096)
def balance_context(sz: ModelSizes, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                    kv_precision: str, sparse_law: str | None = None, lo: float = 1.0, hi: float = 1e9):
    """Context at which one sequence's KV read time equals its compute time (NaN if never).

    Full attention has a closed form (KV bytes and attention FLOPs both linear in L):
    L* = (2 N / peak) / (kv / bw - a / peak), kv the KV bytes per token, a the attention FLOPs per token of context.
    Sliding windows, DSA and the sqrt law are solved numerically (bisection in log-context). Memoised: it depends
    on the model, rates and precisions, never on the batch.
    """
    m = sz.model
    if sparse_law is None and not m.n_sliding_layers and not m.is_dsa and not m.index_topk:
        kv = float(sz.kv_read_bytes_per_sequence(2.0, kv_precision) - sz.kv_read_bytes_per_sequence(1.0,
                                                                                                   kv_precision))
        a = float(sz.attention_flops_per_token(2.0) - sz.attention_flops_per_token(1.0))
        base = float(sz.decode_flops_per_token(0.0))
        den = kv / bandwidth_bytes_per_s - a / peak_flops_per_s
        if den <= 0:
            return float("nan")
        L = base / peak_flops_per_s / den
        return float(min(max(L, lo), hi)) if L <= hi else float("nan")
    def gap(L):
        return (sz.kv_read_bytes_per_sequence(L, kv_precision, sparse_law) / bandwidth_bytes_per_s
                - sz.decode_flops_per_token(L, sparse_law) / peak_flops_per_s)

    if gap(hi) <= 0:
        return float("nan")
    if gap(lo) >= 0:
        return lo
    a, b = np.log(lo), np.log(hi)
    for _ in range(64):
        mid = 0.5 * (a + b)
        if gap(np.exp(mid)) > 0:
            b = mid
        else:
            a = mid
    return float(np.exp(0.5 * (a + b)))


def step(model: ModelSpec, system: System, batch, context, *, phase: str = "decode", chips: int | None = None,
         precision: str | None = None, kv_precision: str = "bf16", efficiency: Efficiency = IDEAL,
         refined: bool = True, sparse_law: str | None = None, strict_fit: bool = False) -> RooflineResult:
    """Roofline of one decode step (batch B at context L) or prefill (B prompts of L tokens).

    batch and context may be numpy arrays (broadcast together) for vectorised sweeps.
    """
    return RooflineResult(**step_fields(model, system, batch, context, phase=phase, chips=chips, precision=precision,
                                        kv_precision=kv_precision, efficiency=efficiency, refined=refined,
                                        sparse_law=sparse_law, strict_fit=strict_fit))


def step_fields(model: ModelSpec, system: System, batch, context, *, phase: str = "decode", chips: int | None = None,
                precision: str | None = None, kv_precision: str = "bf16", efficiency: Efficiency = IDEAL,
                refined: bool = True, sparse_law: str | None = None, strict_fit: bool = False,
                lecture_only: bool = False) -> dict:
    """`step`'s answer as the RooflineResult's fields (a dict). `lecture_only`: only the fields a caller that
    times the step itself keeps (the layout view): the lecture's analytic quantities (critical batch, balance
    context, the lecture's weight time), sizes, precisions and notes; the aggregate step's times are not worked
    out."""
    w = Workload(batch, context, phase, precision, kv_precision)
    batch, context, phase, precision, kv_precision = w.batch, w.context, w.phase, w.precision, w.kv_precision
    n = count("chips", chips if chips is not None else system.chips, MAX_GPUS)
    sparse_law, context_notes = sparse_law_name(sparse_law), context_note(model, context, strict_fit=strict_fit)
    sz = sizes(model)
    prec = precision or sz.default_precision()
    chip = system.chip
    cprec = chip.compute_precision(prec)
    peak = chip.flops_per_s[cprec] * n
    bw = chip.hbm_bandwidth_bytes_per_s * n
    hbm = chip.hbm_bytes * n
    eff_peak, eff_bw = peak * efficiency.compute, bw * efficiency.memory

    B = flt(batch)
    L = flt(context)
    wprec = precision  # None -> the checkpoint's own mix
    weight_bytes = sz.weight_bytes(wprec)
    kv_tok = sz.kv_bytes_per_token(kv_precision)
    tokens = B if phase == "decode" else B * L

    # the lecture's analytic quantities
    w_read_lecture = sz.weight_bytes_read(tokens, wprec, refined=False)
    t_w_lec = R.memory_time_s(w_read_lecture, eff_bw)
    bpp = weight_bytes / sz.total_params
    crit = float(R.critical_batch(eff_peak, eff_bw, sz.total_params, sz.active_matmul_params, bpp))
    per_seq_flops = sz.decode_flops_per_token(L, sparse_law)
    per_seq_kv = sz.kv_read_bytes_per_sequence(L, kv_precision, sparse_law)
    crit_kv = R.critical_batch_with_kv(weight_bytes, per_seq_flops, per_seq_kv, eff_peak, eff_bw)
    bal = balance_context(sz, eff_peak, eff_bw, kv_precision, sparse_law)
    notes = list(context_notes)
    if chip.price_is_assumption:
        notes.append(f"{chip.id} price ${chip.price_usd_per_hour}/h is an assumption: {chip.price_note}")
    if cprec != prec and not (prec == "mxfp4" and cprec == "fp4"):
        notes.append(f"{chip.id} has no {prec} rate; compute runs at {cprec}")
    lecture = dict(
        model=model.id, hardware=system.id, chips=n, phase=phase, batch=_scalar(batch), context=_scalar(context),
        precision=prec, compute_precision=cprec, kv_precision=kv_precision,
        weights_read="refined (distinct experts touched)" if refined and model.is_moe else "all weights (lecture)",
        efficiency=efficiency.label, weight_time_lecture_s=_scalar(t_w_lec),
        critical_batch=crit, critical_batch_with_kv=_scalar(crit_kv), balance_context=bal,
        weight_bytes=weight_bytes, kv_bytes_per_token=kv_tok, hbm_bytes=hbm, total_params=sz.total_params,
        active_params=sz.active_params, notes=tuple(notes))
    if lecture_only:
        return lecture

    if phase == "decode":
        flops = B * per_seq_flops
        kv_bytes = B * per_seq_kv
        kv_seq = sz.kv_bytes_per_sequence(L + 1, kv_precision)
        user_rate_tokens = ones_like(B * L)
    else:
        flops = B * sz.prefill_flops(L)
        kv_bytes = B * sz.kv_bytes_per_sequence(L, kv_precision)  # written once
        kv_seq = sz.kv_bytes_per_sequence(L, kv_precision)
        user_rate_tokens = L * ones_like(B)
    w_read = sz.weight_bytes_read(tokens, wprec, refined=refined)

    t_c = R.compute_time_s(flops, eff_peak)
    t_w = R.memory_time_s(w_read, eff_bw)
    t_kv = R.memory_time_s(kv_bytes, eff_bw)
    t_m = t_w + t_kv
    t = R.step_time_s(t_c, t_m, efficiency.overhead_s)
    bound = where(t_c >= t_m, "compute", "memory")
    bytes_moved = w_read + kv_bytes

    need = weight_bytes + B * kv_seq
    usable = hbm * (1 - efficiency.memory_reserve)
    fits = need <= usable
    with np.errstate(divide="ignore", invalid="ignore"):
        max_b = np.floor((usable - weight_bytes) / kv_seq)
    max_b = where(max_b >= 0, max_b, 0.0)
    if strict_fit and not np.all(fits):
        raise FitError(f"{model.id} does not fit on {n} x {chip.id}: needs {np.max(need) / 1e9:.1f} GB "
                       f"(weights {weight_bytes / 1e9:.1f} GB + KV), has {usable / 1e9:.1f} GB")

    price = chip.price_usd_per_s
    # measured throughput = predicted * exp(residual): slow end divides, fast end multiplies
    slow, fast = np.exp(-efficiency.residual_low), np.exp(-efficiency.residual_high)
    cost = R.cost_per_token_usd(t, price, n, tokens) * 1e6
    spread = {"step_time_s": [_scalar(t * fast), _scalar(t * slow)],
              "tokens_per_s": [_scalar(tokens / (t * slow)), _scalar(tokens / (t * fast))],
              "cost_per_mtok_usd": [_scalar(cost * fast), _scalar(cost * slow)]}
    return dict(
        lecture,
        step_time_s=_scalar(t), compute_time_s=_scalar(t_c), weight_time_s=_scalar(t_w),
        kv_time_s=_scalar(t_kv), memory_time_s=_scalar(t_m),
        bound=_scalar(bound), mfu=_scalar(R.utilization(flops / t, peak)),
        mbu=_scalar(R.utilization(bytes_moved / t, bw)), tokens_per_s=_scalar(tokens / t),
        user_tokens_per_s=_scalar(user_rate_tokens / t),
        cost_per_mtok_usd=_scalar(cost),
        kv_bytes_per_sequence=_scalar(kv_seq),
        memory_needed_bytes=_scalar(need), max_batch_fit=_scalar(max_b), fits=_scalar(fits),
        flops=_scalar(flops), bytes_moved=_scalar(bytes_moved), range=spread,
        overhead_time_s=float(efficiency.overhead_s),
    )
