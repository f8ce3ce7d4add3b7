"""`chalk estimate` on a real layout: one replica of tp x attn_dp x pp GPUs, its step from the one step model.

The lecture's summed-chip view (every chip of a system as one communication-free chip) stays available as
`aggregate=True` (`chalk.analyses.step.roofline.step`): a bound, not a deployment.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from functools import partial

import numpy as np

from chalk.analyses.step import roofline as RF
from chalk.analyses.step.calibration import Calibration, calibration, default_efficiency, eplb_mode
from chalk.analyses.step.parallel import (Layout, default_kernels, kernel_provenance, kv_per_chip, precisions,
                                     stage_step, step_costs, valid_tp, weights_per_chip)
from chalk.analyses.step.step_model import ops_table
from chalk.equations import parallel as P
from chalk.equations.parallel import kv_shard_fraction
from chalk.equations import roofline as R
from chalk.equations.num import every, flt, maximum, ones_like, where
from chalk.errors import FitError, InputError
from chalk.memo import by_identity
from chalk.specs.catalog import as_model, as_system
from chalk.specs.hardware import System
from chalk.specs.model import ModelSpec
from chalk.specs.precision import canonical
from chalk.specs.workload import MAX_GPUS, Workload, context_note, count, positive


def parse_layout(text) -> dict:
    """`tp=8,ep=8,pp=1,attn_dp=8` -> {'tp': 8, 'ep': 8, 'pp': 1, 'attn_dp': 8}; keys tp, ep, etp, pp, attn_dp (or
    dp)."""
    if isinstance(text, dict):
        items = [(k, v) for k, v in text.items() if k in ("tp", "ep", "etp", "pp", "attn_dp")]
    else:
        parts = [p.strip() for p in str(text).replace(" ", "").split(",") if p.strip()]
        if not parts:
            raise InputError(f"layout must look like tp=8,ep=8,pp=1,attn_dp=8, got {text!r}")
        items = []
        for p in parts:
            k, sep, v = p.partition("=")
            if not sep:
                raise InputError(f"layout must look like tp=8,ep=8,pp=1,attn_dp=8, got {text!r}")
            items.append((k, v))
    out = {}
    for k, v in items:
        key = {"dp_attn": "attn_dp", "attention_dp": "attn_dp", "dp_attention": "attn_dp"}.get(str(k).lower(), str(k).lower())
        if key not in ("tp", "ep", "etp", "pp", "attn_dp"):
            raise InputError(f"layout key {k!r} is not one of tp, ep, etp, pp, attn_dp (replicas: use --gpus with "
                             "chalk throughput)")
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise InputError(f"layout {key} must be a whole number >= 1, got {v!r}") from None
        if not np.isfinite(f) or f < 1 or f != int(f) or f > 1 << 20:
            raise InputError(f"layout {key} must be a whole number >= 1, got {v!r}")
        if key in out:
            raise InputError(f"layout gives {key} twice")
        out[key] = int(f)
    return out


def make_layout(model: ModelSpec, spec) -> Layout:
    """A validated one-replica Layout from `parse_layout` output (or its text); a Layout passes through."""
    if isinstance(spec, Layout):
        return spec
    d = parse_layout(spec)
    tp, pp, a = d.get("tp", 1), d.get("pp", 1), d.get("attn_dp", 1)
    if not valid_tp(model, tp):
        raise InputError(f"layout tp={tp} does not divide {model.id}'s {model.num_heads} attention heads"
                         + ("" if model.attention == "mla" else f" / {model.num_kv_heads} KV heads"))
    if pp > model.num_layers:
        raise InputError(f"layout pp={pp} exceeds {model.id}'s {model.num_layers} layers")
    if not model.is_moe:
        if a > 1:
            raise InputError(f"attention data parallelism needs a MoE model; {model.id} is dense (use replicas)")
        if d.get("ep", 1) != 1 or d.get("etp", 1) != 1:
            raise InputError(f"{model.id} is dense: ep and etp must be 1, got ep={d.get('ep', 1)}, "
                             f"etp={d.get('etp', 1)}")
    else:
        ranks = tp * a  # the stage's GPUs: ep expert-parallel groups of etp GPUs each
        etp = d.get("etp", 1)
        if ranks % etp:
            raise InputError(f"etp={etp} must divide tp x attn_dp = {ranks} (experts split etp ways inside each "
                             "of the stage's expert-parallel groups)")
        ep = d.get("ep", ranks // etp)
        if ep * etp != ranks:
            raise InputError(f"ep x etp must equal tp x attn_dp = {ranks} (experts spread over the stage's GPUs), "
                             f"got ep={ep}, etp={etp}" + ("" if "etp" in d else
                                                            f" (etp={ranks // ep} splits each expert)"
                                                            if ranks % ep == 0 else ""))
        if ep > model.num_experts:
            raise InputError(f"ep={ep} exceeds {model.id}'s {model.num_experts} experts")
        if etp > model.moe_intermediate_size:
            raise InputError(f"etp={etp} exceeds {model.id}'s expert width {model.moe_intermediate_size}")
        return Layout(tp=tp, attn_dp=a, pp=pp, dp=1, moe=True, etp=etp)
    return Layout(tp=tp, attn_dp=a, pp=pp, dp=1, moe=model.is_moe)


@by_identity(maxsize=64)
def _by_calibration(cal: Calibration) -> tuple:
    """(the lecture's Efficiency for the layout view, (slow, fast) range factors) of a calibration, worked out once
    per calibration object (calibrations are immutable). measured = predicted x exp(residual): the slow end
    divides, the fast end multiplies."""
    ideal = cal.label == "ideal"
    eff = RF.Efficiency(compute=1.0 if ideal else cal.compute, memory=1.0 if ideal else cal.memory, overhead_s=0.0,
                        memory_reserve=cal.memory_reserve, label=cal.label, residual_low=cal.residual_low,
                        residual_high=cal.residual_high)
    return eff, (np.exp(-cal.residual_low), np.exp(-cal.residual_high))


def _largest(x) -> float:
    return float(x) if isinstance(x, float) else float(np.max(x))


def _tp_candidates(model: ModelSpec, costs) -> list:
    """The default layout's candidates, smallest first: (tp, its one-replica Layout, weight bytes per GPU) for each
    tensor-parallel size that divides the heads (and, for MoE, the experts)."""
    moe = model.is_moe
    return [(t, Layout(tp=t, attn_dp=1, pp=1, dp=1, moe=moe), weights_per_chip(costs, t, 1, t if moe else 1))
            for t in (1, 2, 4, 8, 16, 32, 64, 128) if valid_tp(model, t) and (not moe or t <= model.num_experts)]


class _Setup:
    """What a model on a system at these precisions and this calibration fixes for every question, worked out once
    (`_setup`): the precisions, the step model's costs, usable HBM per GPU, the range factors, the default layout's
    candidate tensor-parallel groups with their weight bytes per GPU, and each layout's weight bytes per GPU."""

    def __init__(self, model: ModelSpec, system: System, cal: Calibration, precision: str | None, kv_precision,
                 efficiency: RF.Efficiency | None):
        self.prec, self.kvp, self.costs = step_costs(model, system, precision, kv_precision)
        costs = self.costs
        self.wprec = canonical(precision) if precision else None  # as the Workload holds it
        chip = system.chip
        self.usable_chip = chip.hbm_bytes * (1 - cal.memory_reserve)
        lecture_eff, self.spread = _by_calibration(cal)
        self.eff = dataclasses.replace(efficiency, overhead_s=0.0) if efficiency else lecture_eff
        self.candidates = _tp_candidates(model, costs)
        #: each candidate's fraction of a sequence's KV one GPU holds (its TP group shards the KV heads)
        self.kv_shards = [kv_shard_fraction(model.num_kv_heads, t, costs.head_shardable) for t, _, _ in
                          self.candidates]
        self.kernels = default_kernels(system.chip, cal)  # the step model's kernel profile (False: none)
        self.weights: dict = {}

    def memory_on(self, lay: Layout, batch, context) -> tuple:
        """(weight bytes, KV bytes) per GPU of a layout holding `batch` sequences of `context` tokens."""
        costs = self.costs
        return self.weights_on(lay), kv_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, batch, costs.kv_bytes(context))

    def weights_on(self, lay: Layout):
        """Weight bytes per GPU of a layout, kept per layout."""
        key = (lay.tp, lay.pp, lay.ep, lay.etp)
        w = self.weights.get(key)
        if w is None:
            w = self.weights[key] = weights_per_chip(self.costs, lay.tp, lay.pp, lay.ep, lay.etp)
        return w


@by_identity(maxsize=64, objects=3)
def _setup(model: ModelSpec, system: System, cal: Calibration, precision, kv_precision, efficiency) -> _Setup:
    """`_Setup(...)`, kept for the last few configurations (model, system and calibration found by identity; all
    immutable)."""
    return _Setup(model, system, cal, precision, kv_precision, efficiency)


def default_layout(model: ModelSpec, system: System, costs, batch: float, context: float, gpus: int,
                   cal: Calibration, setup: _Setup | None = None) -> tuple[Layout, bool]:
    """The smallest tensor-parallel group (within the scale-up domain and `gpus`) whose memory holds the weights
    and `batch` sequences of `context` tokens; the largest one if none does. Returns (layout, fits). `setup`: the
    configuration's candidates with their weight bytes, when the caller has them."""
    usable = system.chip.hbm_bytes * (1 - cal.memory_reserve)
    every_tp = setup.candidates if setup is not None and setup.costs is costs else _tp_candidates(model, costs)
    limit = min(gpus, system.chips)
    kv_seq = costs.kv_bytes(context)
    if setup is not None and setup.costs is costs and isinstance(batch, float) and isinstance(kv_seq, float):
        # one question: kv_per_chip(costs, t, 1, 1, batch, kv_seq) = batch x kv_seq x the candidate's KV shard
        per_seq = flt(batch) * kv_seq
        last = every_tp[0][1]
        for (t, lay, w), shard in zip(every_tp, setup.kv_shards):
            if t > limit and t > 1:  # tp=1 is always a candidate
                break
            if w + per_seq * shard <= usable:
                return lay, True
            last = lay
        return last, False
    cands = [c for c in every_tp if c[0] <= limit] or every_tp[:1]  # tp=1 is always a candidate
    for t, lay, w in cands:
        kv = kv_per_chip(costs, t, 1, 1, batch, kv_seq)
        if (w + kv if isinstance(kv, float) else _largest(w + kv)) <= usable:
            return lay, True
    return cands[-1][1], False


def _layout_later(model: ModelSpec, system: System, su: _Setup, cal: Calibration, lay: Layout, fits_any, n_avail: int,
                  gpus, layout, B, L, t, tokens, r: dict, phase: str, n: int) -> dict:
    """The fields of a `layout_estimate` answer worked out on its first read: from its step's ops (`r`) and the
    configuration, no new step. (A function of its arguments, bound with `partial`: a closure would make every
    local of `layout_estimate` a cell, allocated on each question.)"""
    sc = RF._scalar
    costs, kvp, prec, chip, usable_chip = su.costs, su.kvp, su.prec, system.chip, su.usable_chip
    G = lay.replica_gpus
    notes = []
    if fits_any is not None:
        notes.append(f"layout {lay.label()} chosen: the smallest tensor-parallel group that holds the weights "
                     "and this batch's KV" if fits_any else
                     f"layout {lay.label()}: no tensor-parallel group within {min(n_avail, system.chips)} GPUs "
                     "holds the weights and this batch's KV; a replica over several scale-up domains may (e.g. "
                     f"--layout tp={lay.tp},pp=2; `chalk throughput` searches them)")
    if G > system.chips:
        notes.append(f"the replica's {G} GPUs exceed the {system.chips}-GPU scale-up domain of {system.id}: "
                     "traffic between domains crosses the scale-out network")
    if gpus is not None and gpus > system.chips and layout is None:
        notes.append(f"{gpus} GPUs exceed the {system.chips}-GPU scale-up domain: estimate answers for one "
                     "replica inside it; use `chalk throughput` for a deployment of replicas")
    w_chip, kv_chip = su.memory_on(lay, B, L)
    fits = (w_chip + kv_chip) <= usable_chip
    if not every(fits):
        notes.append(f"does not fit: {_largest(w_chip + kv_chip) / 1e9:.1f} GB needed per GPU, "
                     f"{usable_chip / 1e9:.1f} GB usable")
    # the lecture's analytic quantities on the replica's chips (aggregate roofline of G chips)
    lec = RF.lecture_constants(model, system, su.eff, n, su.wprec, kvp, None)
    cost = R.cost_per_token_usd(t, chip.price_usd_per_s, G, tokens) * 1e6
    # the context note, and of the aggregate view's notes those that hold on a layout too (price, missing rates)
    notes += context_note(model, L) + [x for x in lec.notes if "price" in x or "rate" in x or x.startswith("weight")]
    kp = kernel_provenance(su.kernels, model)  # which framework and version the kernel tables come from
    notes += kp["notes"]
    cprec = chip.compute_precision(prec)
    tm_ec = 1.0 if cal.label == "ideal" else cal.compute
    tm_em = 1.0 if cal.label == "ideal" else cal.memory
    peak = chip.flops_per_s[cprec] * G
    bw = chip.hbm_bandwidth_bytes_per_s * G
    ops = r["ops"]
    flops = sum(flt(o.flops) for o in ops.values()) * G
    w_bytes = flt(r["weight_read_bytes"]) * G
    kv_bytes = flt(r["kv_read_bytes"]) * G
    other = sum(flt(o.bytes) for o in ops.values() if o.kind == "elementwise") * G
    t_c = flops / (peak * tm_ec)
    t_w = w_bytes / (bw * tm_em)
    t_kv = kv_bytes / (bw * tm_em)
    slow, fast = su.spread
    spread = {"step_time_s": [sc(t * fast), sc(t * slow)],
              "tokens_per_s": [sc(tokens / (t * slow)), sc(tokens / (t * fast))],
              "cost_per_mtok_usd": [sc(cost * fast), sc(cost * slow)]}
    ops_rows = ()
    if np.ndim(t) == 0:
        ops_rows = tuple(ops_table(ops))
        if lay.pp > 1:  # the token passes every stage: the step is pp stage steps
            for d in ops_rows:
                d["time_s"] *= lay.pp
    kv1 = kv_per_chip(costs, lay.tp, lay.attn_dp, lay.pp, float(lay.pp * lay.attn_dp), costs.kv_bytes(L))
    max_b = np.floor(maximum(usable_chip - w_chip, 0.0) / where(kv1 > 0, kv1, np.inf)) * lay.pp * lay.attn_dp
    t_w_lec, crit_kv = lec.at_context(L, tokens, su.wprec, kvp, None)[:2]
    kv_seq = costs.kv_bytes(L + 1) if phase == "decode" else costs.kv_bytes(L)
    return dict(precision=lec.prec, compute_precision=lec.cprec, critical_batch=lec.crit,
                balance_context=lec.bal, weight_bytes=lec.weight_bytes, kv_bytes_per_token=lec.kv_tok,
                total_params=lec.sz.total_params, active_params=lec.sz.active_params,
                cost_per_mtok_usd=sc(cost), memory_needed_bytes=sc((w_chip + kv_chip) * G),
                hbm_bytes=chip.hbm_bytes * G, fits=sc(fits), notes=tuple(notes),
                range=spread, ops=ops_rows, max_batch_fit=sc(max_b), weight_time_lecture_s=sc(t_w_lec),
                critical_batch_with_kv=sc(crit_kv), kv_bytes_per_sequence=sc(kv_seq), layout=lay.to_dict(),
                compute_time_s=sc(t_c), weight_time_s=sc(t_w), kv_time_s=sc(t_kv), memory_time_s=sc(t_w + t_kv),
                bound=sc(where(t_c >= t_w + t_kv, "compute", "memory")),
                mfu=sc(R.utilization(flops / t, peak)), mbu=sc(R.utilization((w_bytes + kv_bytes + other) / t, bw)),
                flops=sc(flops), bytes_moved=sc(w_bytes + kv_bytes + other),
                comm_time_s=sc(flt(r["comm_time_s"]) * lay.pp), overhead_time_s=sc(flt(r["overhead_s"]) * lay.pp),
                kernels=kp["kernels"])


def layout_estimate(model: ModelSpec, system: System, batch, context, *, phase: str = "decode",
                    layout=None, gpus: int | None = None, precision: str | None = None,
                    kv_precision: str | None = "auto", ideal: bool = False, cal: Calibration | None = None,
                    efficiency: RF.Efficiency | None = None, sparse_law: str | None = None,
                    strict_fit: bool = False, overhead_s: float | None = None, kernels=None,
                    query_tokens: float = 1.0) -> RF.RooflineResult:
    """One decode step (or prefill of `batch` prompts of `context` tokens) of one replica on a real layout.

    batch: sequences per replica (all pipeline micro-batches). The analytic lecture quantities (critical batch,
    balance context) are those of the replica's chips; step time, bound, MFU and cost come from the step model.
    What the step time needs is worked out here; the op table, the range, the largest batch that fits and the
    lecture's context-dependent quantities when first read (`RooflineResult.deferred`), from the same step.
    """
    cal = cal or calibration(ideal, system.chip)
    su = _setup(model, system, cal, precision, kv_precision, efficiency)
    kvp, costs = su.kvp, su.costs
    w = Workload(batch, context, phase, precision or None, kvp)
    if sparse_law is not None:
        raise InputError("--sparse-law applies to the lecture's aggregate roofline: add --aggregate")
    B = flt(w.batch)
    L = flt(w.context)
    n_avail = int(system.chips) if gpus is None else int(positive("gpus", gpus, integer=True, scalar=True))
    fits_any = None
    if layout is None:
        lay, fits_any = default_layout(model, system, costs, _largest(B) if phase == "decode" else 0.0,
                                       _largest(L), n_avail, cal, su)
    else:
        lay = layout if isinstance(layout, Layout) else make_layout(model, layout)
    G = lay.replica_gpus
    n = count("chips", G, MAX_GPUS)

    if kernels is None:
        kernels = su.kernels
    if phase == "decode":
        r = stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, B, 0.0, L, 1.0, cal, kernels=kernels,
                       overhead_s=overhead_s, query_tokens=query_tokens)
        tokens = B
        user_tokens = ones_like(B * L)
    else:
        r = stage_step(costs, system, lay.tp, lay.attn_dp, lay.pp, lay.ep, 0.0, B * L, L, L, cal, kernels=kernels,
                       overhead_s=overhead_s)
        tokens = B * L
        user_tokens = L * ones_like(B)
    stage = flt(r["stage_time_s"])
    t = P.pipeline_token_latency_s(stage, lay.pp)
    chip = system.chip
    usable_chip = su.usable_chip
    if strict_fit:
        w_chip, kv_chip = su.memory_on(lay, B, L)
        if not every((w_chip + kv_chip) <= usable_chip):
            raise FitError(f"{model.id} does not fit on {lay.label()} of {chip.id}: needs "
                           f"{_largest(w_chip + kv_chip) / 1e9:.1f} GB per GPU, {usable_chip / 1e9:.1f} GB usable")
    sc = RF._scalar
    later = partial(_layout_later, model, system, su, cal, lay, fits_any, n_avail, gpus, layout, B, L, t, tokens, r,
                    phase, n)
    return RF.RooflineResult.deferred(
        later, model=model.id, hardware=system.id, phase=w.phase, batch=sc(B), context=sc(L), kv_precision=kvp,
        weights_read="refined (distinct experts touched)" if model.is_moe else "all weights (lecture)",
        chips=G, efficiency=cal.label, step_time_s=sc(t), tokens_per_s=sc(tokens / t),
        user_tokens_per_s=sc(user_tokens / t), view="layout")


def estimate(model, hardware, batch=1, context=4096, *, phase: str = "decode", layout=None, aggregate: bool = False,
             chips: int | None = None, gpus: int | None = None, precision: str | None = None,
             kv_precision: str | None = "auto", ideal: bool = False, efficiency: RF.Efficiency | None = None,
             refined: bool = True, sparse_law: str | None = None, strict_fit: bool = False,
             eplb: str | None = None) -> RF.RooflineResult:
    """One decode step (or a prefill of `batch` prompts of `context` tokens), timed op by op on a real layout.

    model: a catalog id/alias, a path to a config.json (or its folder), or a ModelSpec.
    hardware: a chip id (its default system), a system id, a chip/system YAML path, or a System.
    layout: one replica, e.g. 'tp=8,ep=8,pp=1,attn_dp=8' (default: the smallest tensor-parallel group in the
    scale-up domain that holds the weights and this batch's KV); `batch` counts sequences per replica.
    aggregate: the lecture's view instead: every chip (`chips`, default the system's) summed into one
    communication-free chip, an upper bound.
    eplb: whether the MoE layers run an expert-load balancer ('auto' (default): from the calibrated EP width;
    'on'; 'off'); the experts op's detail says which loads it was timed with.
    """
    m, system = as_model(model), as_system(hardware)
    n = gpus if gpus is not None else chips
    kvp = kv_precision
    if aggregate or sparse_law is not None or not refined:
        if eplb_mode(eplb) != "auto":
            raise InputError("--eplb applies to a layout's expert-parallel group; the aggregate view has none")
        if kvp is None or str(kvp).lower() == "auto":
            kvp = precisions(m, system, precision, kvp)[1]
        if layout is not None:
            raise InputError("--layout and --aggregate exclude each other: the aggregate view has no layout")
        eff = efficiency or default_efficiency(ideal, m.num_layers, system.chip)
        return RF.step(m, system, batch, context, phase=phase, chips=n, precision=precision, kv_precision=kvp,
                    efficiency=eff, refined=refined, sparse_law=sparse_law, strict_fit=strict_fit)
    return layout_estimate(m, system, batch, context, phase=phase, layout=layout, gpus=n, precision=precision,
                           kv_precision=kvp, ideal=ideal, strict_fit=strict_fit,
                           cal=calibration(ideal, system.chip, eplb))


_NUMBERS = (int, float)
#: Answers a Session keeps (the latest ones). An answer holds its op table and deferred fields; keeping every
#: answer made Python's cyclic garbage collector walk them all again and again: ~10 us of each new estimate at a
#: few thousand kept (`benchmarks/bench_estimate.py`), more than a kept answer saves unless it is asked again soon.
SESSION_MEMO = 512


class Session:
    """A model on hardware, asked many questions: resolves the model, the system and their derived sizes once, and
    remembers the answers it gave (a repeated question costs a dictionary lookup).

    >>> s = Session("llama-3.1-8b", "h100-sxm")
    >>> s.estimate(64, 4096).layout["tp"]
    1

    `estimate(batch, context)` takes numpy arrays too: one call answers a whole grid (the fast way to ask
    thousands of questions). Options given here (layout, precision, ...) apply to every question unless a call
    overrides them.
    """

    def __init__(self, model, hardware, **options):
        self.model = as_model(model)
        self.system = as_system(hardware)
        self.options = dict(options)
        self._memo: OrderedDict = OrderedDict()  # popitem(last=False) drops the oldest in O(1)
        self._cal = None  # the calibration a question without options takes (`estimate`'s default), found once

    def estimate(self, batch=1, context=4096, **overrides) -> RF.RooflineResult:
        opts = {**self.options, **overrides}
        scalar = type(batch) in _NUMBERS and type(context) in _NUMBERS or np.ndim(batch) == 0 and np.ndim(context) == 0
        key = (float(batch), float(context), tuple(sorted(opts.items()))) if scalar else None
        if key is not None:
            try:
                hit = self._memo.get(key)
            except TypeError:  # an unhashable option: answer without memoising
                key, hit = None, None
            if hit is not None:
                return hit
        if opts:
            r = estimate(self.model, self.system, batch, context, **opts)
        else:  # no options: `estimate`'s layout view at its defaults, with the calibration it would resolve
            if self._cal is None:
                self._cal = calibration(False, self.system.chip, None)
            r = layout_estimate(self.model, self.system, batch, context, cal=self._cal)
        if key is not None:
            if len(self._memo) >= SESSION_MEMO:  # the oldest answer goes
                self._memo.popitem(last=False)
            self._memo[key] = r
        return r
