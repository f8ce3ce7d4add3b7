"""The lecture's aggregate bound: every chip of a system summed into one communication-free chip.

This is the one module that computes it: `step` (one decode or prefill step, with the lecture's breakdown),
`aggregate_step_cost` (its linear form for the request simulator) and `aggregate_verification` (a speculative
verification step on it). FLOP/s, bandwidth and HBM are summed and communication is free, so it bounds a real
deployment from above; it is no deployment. Every other step time in chalk comes from the step model
(`chalk.analyses.step.step_model`, through `estimate` and `StepCost.from_step_model`); this bound is shown
only where the output says so (`estimate --aggregate`, the lecture's claims, the price sheets' mode curve).
tests/test_house.py lists the modules allowed to call it.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from chalk.analyses.records.results import jsonable as _jsonable

from chalk.analyses.step.calibration import IDEAL, Efficiency  # noqa: F401  (re-exported: the lecture's callers)
from chalk.analyses.step.model_sizes import ModelSizes, sizes
from chalk.equations import roofline as R
from chalk.equations.num import flt, ones_like, where
from chalk.errors import FitError
from chalk.memo import by_identity
from chalk.specs.hardware import System
from chalk.specs.model import ModelSpec
from chalk.specs.precision import bytes_per_element, canonical, weight_only
from chalk.specs.workload import MAX_GPUS, Workload, context_note, count, sparse_law_name


_UNSET = object()


class RooflineResult:
    """One step (or a grid of steps when batch/context are arrays). Times in s, bytes, FLOP, USD.

    An immutable record: every field below is an attribute, `.to_dict()` gives them all (JSON-ready) in this
    order. Built with every field (`RooflineResult(**fields)`), or by `RooflineResult.deferred` with the fields a
    step's time needs given and a function that works out the rest (the op table, the range, the lecture's
    context-dependent quantities) on first access, from what the step already computed: a caller that reads only
    the step time never pays for them, and every attribute reads the same as if it had been given.
    """

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
    notes: tuple[str, ...]
    #: [low, high] for step time, tokens/s and cost from the calibration residuals (equal to the value when ideal)
    range: dict
    #: 'aggregate': every chip summed into one communication-free chip (the lecture's bound);
    #: 'layout': one replica on a real layout, timed op by op (`chalk.analyses.step.step_model`)
    view: str
    layout: dict | None
    #: the step's operations (layout view, scalar batch and context): name, kind, flops, bytes, time_s, bound, source
    ops: tuple
    comm_time_s: object
    overhead_time_s: object
    #: which framework and version the kernel tables come from (layout view; None: no tables used)
    kernels: str | None
    #: joules per token, power, kWh per day, electricity share of cost (`chalk.analyses.economics.energy.Energy`):
    #: attached by the API and the faces (`attached`); None from the step model itself
    energy: object
    #: the same step with speculative decoding (`SpeculativeResult`) when the API is asked for `mtp` draft tokens
    speculative: object
    #: what the default layout was chosen for ('cost' or 'latency'; None: a layout given, or the aggregate view)
    objective: str | None
    #: what the other objective would pick (layout view, layout chosen): its layout, GPUs, step time, tokens/s
    #: per replica and $ per M tokens at the point the choice was judged (`chalk.analyses.step.estimate`)
    alternative: dict | None
    #: the elementwise passes' share of the step (layout view: norms, activations, sampling, expert shuffles)
    activation_time_s: object
    #: the engine profile the step was timed under ('vllm 0.11': its kernel tables and host time per step); None:
    #: chalk's calibrated defaults
    engine: str | None

    #: field names in order; those after `notes` have defaults (`_DEFAULTS`: a fresh dict for `range`)
    FIELDS = ("model", "hardware", "chips", "phase", "batch", "context", "precision", "compute_precision",
              "kv_precision", "weights_read", "efficiency", "step_time_s", "compute_time_s", "weight_time_s",
              "weight_time_lecture_s", "kv_time_s", "memory_time_s", "bound", "mfu", "mbu", "tokens_per_s",
              "user_tokens_per_s", "cost_per_mtok_usd", "critical_batch", "critical_batch_with_kv",
              "balance_context", "weight_bytes", "kv_bytes_per_token", "kv_bytes_per_sequence",
              "memory_needed_bytes", "hbm_bytes", "max_batch_fit", "fits", "total_params", "active_params", "flops",
              "bytes_moved", "notes", "range", "view", "layout", "ops", "comm_time_s", "overhead_time_s",
              "kernels", "energy", "speculative", "objective", "alternative", "activation_time_s", "engine")
    _DEFAULTS = {"notes": (), "range": None, "view": "aggregate", "layout": None, "ops": (), "comm_time_s": 0.0,
                 "overhead_time_s": 0.0, "kernels": None, "energy": None,
                 "speculative": None, "objective": None, "alternative": None, "activation_time_s": 0.0,
                 "engine": None}
    _NAMES = frozenset(FIELDS)
    __slots__ = FIELDS + ("_later",)

    def __init__(self, **fields):
        put = object.__setattr__
        for name in self.FIELDS:
            v = fields.pop(name, _UNSET)
            if v is _UNSET:
                if name not in self._DEFAULTS:
                    raise TypeError(f"RooflineResult() missing field {name!r}")
                v = self._DEFAULTS[name] if name != "range" else {}
            put(self, name, v)
        if fields:
            raise TypeError(f"RooflineResult() got unexpected fields {sorted(fields)}")
        put(self, "_later", None)

    @classmethod
    def deferred(cls, later, **fields) -> "RooflineResult":
        """A result with `fields` given and the rest from `later()` (a dict of the missing fields, called at most
        once, on the first read of any of them). `later` must only gather what is already known: it may not
        re-run the step model."""
        r = cls.__new__(cls)
        put = object.__setattr__
        try:
            for name, v in fields.items():
                put(r, name, v)  # a name that is no field has no slot: AttributeError
        except AttributeError:
            raise TypeError(f"RooflineResult() got an unexpected field {name!r}") from None
        if "_later" in fields:
            raise TypeError("RooflineResult() got an unexpected field '_later'")
        for name in _ATTACHED:
            if name not in fields:
                put(r, name, None)  # never deferred: the API and the faces attach them (`attached`)
        put(r, "_later", later)
        return r

    @property
    def tokens_per_s_per_gpu(self):
        """`tokens_per_s` (one replica of `chips` GPUs, or the fleet summed in the aggregate view) per GPU: the
        name `chalk estimate --json` gives it (issue 27: every throughput says per what)."""
        return self.tokens_per_s / self.chips if self.chips else None

    def attached(self, **figures) -> "RooflineResult":
        """This result with the figures the API and the faces attach (`energy`, `speculative`); the fields not
        yet worked out stay deferred."""
        bad = set(figures) - set(_ATTACHED)
        if bad:
            raise TypeError(f"RooflineResult.attached() takes {', '.join(_ATTACHED)}, not {sorted(bad)}")
        r = type(self).__new__(type(self))
        put, get = object.__setattr__, object.__getattribute__
        for name in self.FIELDS:
            try:
                put(r, name, get(self, name))
            except AttributeError:  # deferred: `later` gives it on first read of the copy
                pass
        for name, v in figures.items():
            put(r, name, v)
        put(r, "_later", get(self, "_later"))
        return r

    def to_frame(self):
        """A pandas DataFrame: one row per (batch, context) point, the scalar fields as columns (the layout as its
        label, the energy figures as `energy_*`); pandas is imported only here."""
        from chalk.analyses.records.results import roofline_frame

        return roofline_frame(self)

    def __getattr__(self, name: str):
        """A deferred field, worked out (all of them at once) on first read."""
        later = object.__getattribute__(self, "_later") if name != "_later" else None
        if later is None or name not in self._NAMES:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        put = object.__setattr__
        for k, v in later().items():
            put(self, k, v)
        put(self, "_later", None)
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple:
        return tuple(getattr(self, k) for k in self.FIELDS)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # a frozen record holding a dict (range) and arrays: not hashable, like the dataclass it was

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __reduce__(self):
        return _rebuild, (type(self), {k: getattr(self, k) for k in self.FIELDS})

    def to_dict(self) -> dict:
        d = {k: _jsonable(getattr(self, k)) for k in self.FIELDS}
        # the release on its own key, as throughput, simulate and plan give it (QA 2026-11-28); `engine` keeps
        # 'vllm 0.11' (the header's words)
        d["engine_release"] = self.engine.split(" ", 1)[1] if self.engine and " " in self.engine else None
        return d


#: fields the step model leaves None and the API or a face attaches (`RooflineResult.attached`)
_ATTACHED = ("energy", "speculative")


def _rebuild(cls, fields: dict):
    """Unpickle a RooflineResult."""
    return cls(**fields)


_F64 = np.float64


def _scalar(x):
    t = type(x)
    if t is _F64:
        return x.item()
    if t is float or t is int or t is str or t is bool:
        return x
    if isinstance(x, np.generic):
        return x.item()
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


class Lecture:
    """The lecture's quantities of a model on `chips` chips of a system that no batch or context changes, worked
    out once per configuration (`lecture_constants`): rates, weight bytes, the critical batch, the balance
    context and the notes about the chip's price and rates."""

    def __init__(self, model: ModelSpec, system: System, efficiency: Efficiency, chips: int, precision: str | None,
                 kv_precision: str, sparse_law: str | None):
        self.sz = sz = sizes(model)
        self.prec = prec = precision or sz.default_precision()
        chip = system.chip
        cprec = chip.compute_precision(prec)
        fmt = model.weight_format
        if (fmt is not None and fmt.weight_only and fmt.precision == prec and fmt.compute in chip.flops_per_s
                and chip.flops_per_s[fmt.compute] == chip.flops_per_s[cprec]):
            # a weight-only checkpoint's math runs at its own 16-bit dtype (its quantisation note says so; QA
            # 2026-11-28: an fp16 bitsandbytes checkpoint's header said bf16 compute), at the same rate
            cprec = fmt.compute
        self.cprec = cprec
        self.peak = chip.flops_per_s[cprec] * chips
        self.bw = chip.hbm_bandwidth_bytes_per_s * chips
        self.hbm = chip.hbm_bytes * chips
        self.eff_peak, self.eff_bw = self.peak * efficiency.compute, self.bw * efficiency.memory
        self.weight_bytes = sz.weight_bytes(precision)  # None -> the checkpoint's own mix
        self.kv_tok = sz.kv_bytes_per_token(kv_precision)
        bpp = self.weight_bytes / sz.total_params
        self.crit = float(R.critical_batch(self.eff_peak, self.eff_bw, sz.total_params, sz.active_matmul_params,
                                           bpp))
        self.bal = balance_context(sz, self.eff_peak, self.eff_bw, kv_precision, sparse_law)
        notes = []
        if chip.price_is_assumption:
            notes.append(f"{chip.id} price ${chip.price_usd_per_hour}/h is an assumption: {chip.price_note}")
        if precision is None and model.weight_format is not None:  # what was sized: the checkpoint as stored
            notes.append(f"weights as stored: {model.weight_format.describe()}")
        elif model.weight_format is not None and canonical(precision) != model.weight_format.precision:
            # a precision asked for over a quantised checkpoint sizes every weight at it (QA 2026-11-28: -p fp8 on
            # a GPTQ config dropped its quantization_config without a word)
            notes.append(f"weights sized at {canonical(precision)} as asked, not as the checkpoint stores them "
                         f"({model.weight_format.describe()}; leave --precision out to size those)")
        if weight_only(prec):
            notes.append(f"{prec} is weight-only quantisation: weights read at {bytes_per_element(prec) * 8:.3g} bits "
                         f"each, multiplied at {cprec} (dequantised on chip, assumed hidden under the math)")
        elif cprec != prec and not (prec == "mxfp4" and cprec == "fp4"):
            notes.append(f"{chip.id} has no {prec} rate; compute runs at {cprec}")
        self.notes = tuple(notes)

    def at_context(self, L, tokens, precision: str | None, kv_precision: str, sparse_law: str | None) -> tuple:
        """(the lecture's weight read time of all weights for `tokens`, the critical batch with the KV fetch at
        context `L`, one sequence's decode FLOPs per token, its KV bytes read) for one question."""
        sz = self.sz
        t_w_lec = R.memory_time_s(sz.weight_bytes_read(tokens, precision, refined=False), self.eff_bw)
        per_seq_flops = sz.decode_flops_per_token(L, sparse_law)
        per_seq_kv = sz.kv_read_bytes_per_sequence(L, kv_precision, sparse_law)
        crit_kv = R.critical_batch_with_kv(self.weight_bytes, per_seq_flops, per_seq_kv, self.eff_peak, self.eff_bw)
        return t_w_lec, crit_kv, per_seq_flops, per_seq_kv


@by_identity(maxsize=256, objects=3)
def lecture_constants(model: ModelSpec, system: System, efficiency: Efficiency, chips: int, precision: str | None,
                      kv_precision: str, sparse_law: str | None) -> Lecture:
    """`Lecture(...)`, kept for the last few configurations (found by the identity of the model, system and
    efficiency, all immutable; the rest by value). `precision`: canonical or None; `kv_precision`: canonical."""
    return Lecture(model, system, efficiency, chips, precision, kv_precision, sparse_law)


def step_fields(model: ModelSpec, system: System, batch, context, *, phase: str = "decode", chips: int | None = None,
                precision: str | None = None, kv_precision: str = "bf16", efficiency: Efficiency = IDEAL,
                refined: bool = True, sparse_law: str | None = None, strict_fit: bool = False) -> dict:
    """`step`'s answer as the RooflineResult's fields (a dict)."""
    w = Workload(batch, context, phase, precision, kv_precision)
    batch, context, phase, precision, kv_precision = w.batch, w.context, w.phase, w.precision, w.kv_precision
    n = count("chips", chips if chips is not None else system.chips, MAX_GPUS)
    sparse_law, context_notes = sparse_law_name(sparse_law), context_note(model, context, strict_fit=strict_fit)
    lec = lecture_constants(model, system, efficiency, n, precision, kv_precision, sparse_law)
    sz = lec.sz
    prec, cprec = lec.prec, lec.cprec
    chip = system.chip
    peak, bw, hbm = lec.peak, lec.bw, lec.hbm
    eff_peak, eff_bw = lec.eff_peak, lec.eff_bw

    B = flt(batch)
    L = flt(context)
    wprec = precision  # None -> the checkpoint's own mix
    weight_bytes = lec.weight_bytes
    tokens = B if phase == "decode" else B * L

    # the lecture's analytic quantities
    t_w_lec, crit_kv, per_seq_flops, per_seq_kv = lec.at_context(L, tokens, wprec, kv_precision, sparse_law)
    lecture = dict(
        model=model.id, hardware=system.id, chips=n, phase=phase, batch=_scalar(batch), context=_scalar(context),
        precision=prec, compute_precision=cprec, kv_precision=kv_precision,
        weights_read="refined (distinct experts touched)" if refined and model.is_moe else "all weights (lecture)",
        efficiency=efficiency.label, weight_time_lecture_s=_scalar(t_w_lec),
        critical_batch=lec.crit, critical_batch_with_kv=_scalar(crit_kv), balance_context=lec.bal,
        weight_bytes=weight_bytes, kv_bytes_per_token=lec.kv_tok, hbm_bytes=hbm, total_params=sz.total_params,
        active_params=sz.active_params, notes=tuple(context_notes) + lec.notes)

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


def aggregate_step_cost(model, system, chips: int | None = None, precision: str | None = None,
                        kv_precision: str = "bf16", efficiency: Efficiency = IDEAL,
                        reference_context_tokens: float = 4096) -> dict:
    """The aggregate bound (`step`) as the request simulator's linear step cost: the fields of a `StepCost`
    (`StepCost.from_roofline` builds it), for `model` on `chips` chips of `system` (objects or catalog ids), summed
    into one chip. Exact for pure decode at full attention; attention and KV terms are the tangent at
    `reference_context_tokens` (sliding windows, top-k).

    Formula: the `StepCost` coefficients of `roofline.step`'s FLOPs and bytes, rates x chips x efficiency.
    Assumes: the lecture's aggregate (no communication, HBM pooled); routed experts touched as 1 - (1 - k/E)^t.
    """
    import math

    from chalk.analyses.step.parallel import precisions
    from chalk.specs.catalog import load_model, resolve_hardware
    from chalk.specs.workload import positive

    model = load_model(model) if isinstance(model, str) else model
    system = resolve_hardware(system) if isinstance(system, str) else system
    n = int(positive("chips", chips if chips is not None else system.chips, integer=True, scalar=True))
    L = float(positive("reference context", reference_context_tokens, scalar=True))
    sz = ModelSizes(model)
    prec, kvp = precisions(model, system, precision, kv_precision)
    chip = system.chip
    peak = chip.flops_per_s[chip.compute_precision(prec)] * n * efficiency.compute
    bw = chip.hbm_bandwidth_bytes_per_s * n * efficiency.memory
    dense = float(sz.weight_bytes_read(0.0, precision))  # tokens=0 touches no routed expert
    experts = float(sz.weight_bytes_read(1e9, precision)) - dense if model.is_moe else 0.0
    frac = model.experts_per_token / model.num_experts if model.is_moe else 0.0
    l1k = math.log1p(-frac) if frac < 1 else -700.0  # every expert active: (1-k/E)^t = 0 for t >= 1
    af = lambda x: float(sz.attention_flops_per_token(x))  # noqa: E731
    kr = lambda x: float(sz.kv_read_bytes_per_sequence(x, kvp))  # noqa: E731
    a1, k1 = af(L + 1) - af(L), kr(L + 1) - kr(L)
    kv_write = float(sz.kv_bytes_per_sequence(L, kvp)) / L
    usable = chip.hbm_bytes * n * (1 - efficiency.memory_reserve) - sz.weight_bytes(precision)
    return dict(flops_per_token=2 * sz.active_matmul_params, attn_flops_per_context_token=a1,
                attn_flops_per_sequence=max(af(L) - a1 * L, 0.0),
                prefill_attn_flops_per_pair=float(sz.prefill_attention_flops(L)) / (L * (L + 1) / 2),
                peak_flops_per_s=peak, weight_dense_bytes=dense, expert_bytes_all=experts,
                log1m_expert_fraction=l1k, kv_read_bytes_per_context_token=k1,
                kv_read_bytes_per_sequence=max(kr(L) - k1 * L, 0.0), kv_write_bytes_per_token=kv_write,
                bandwidth_bytes_per_s=bw, overhead_s=efficiency.overhead_s,
                kv_capacity_tokens=max(usable, 0.0) / kv_write,
                label=f"{model.id} on {n} x {chip.id} ({prec}, KV {kvp}, {efficiency.label}; aggregate bound)")


def aggregate_verification(plain: RooflineResult, model: ModelSpec, system: System, verify_tokens, *,
                           chips: int | None = None, precision: str | None = None, efficiency: Efficiency = IDEAL,
                           refined: bool = True, sparse_law: str | None = None) -> tuple:
    """A speculative verification step on the aggregate bound, against its plain decode step `plain` (an
    aggregate `step` answer): (compute s, weight-read s, KV-read s, step s) of `verify_tokens` (B x (k + 1))
    query tokens.

    Formula: T = max(T_c(B (k+1)), T_w(B (k+1)) + T_kv(B)) + overhead, the overhead that of the plain step.
    Assumes: compute and weight reads those of a decode step at batch B (k + 1); each sequence's KV read once,
    as in the plain step (the k + 1 query tokens attend to the same cached context together).
    """
    v = step(model, system, verify_tokens, plain.context, phase="decode", chips=chips, precision=precision,
             kv_precision=plain.kv_precision, efficiency=efficiency, refined=refined, sparse_law=sparse_law)
    overhead = np.asarray(plain.step_time_s, dtype=float) - R.step_time_s(np.asarray(plain.compute_time_s, float),
                                                                         np.asarray(plain.memory_time_s, float))
    t_c = np.asarray(v.compute_time_s, dtype=float)
    t_w = np.asarray(v.weight_time_s, dtype=float)
    t_kv = np.asarray(plain.kv_time_s, dtype=float)  # each sequence's cache read once, as in the plain step
    return t_c, t_w, t_kv, R.step_time_s(t_c, t_w + t_kv, overhead)
