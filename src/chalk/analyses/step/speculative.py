"""Speculative decoding / multi-token prediction on the roofline: what a verification step costs, and
the batch above which it stops paying.

A verification step runs B sequences x (k + 1) tokens (each sequence's last token plus k drafts)
through the model: compute and weight reads are those of a decode step at batch B * (k + 1)
(`chalk.api.estimate`, so MoE layers touch the experts those tokens route to), but each sequence's KV
cache is read once, as in the plain step at batch B: the k + 1 query tokens attend to the same cached
context together. While the step is memory-bound the extra tokens ride along nearly free; once it is
compute-bound, verification costs ~(k + 1)x and speculation loses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from chalk.analyses.step.calibration import Efficiency
from chalk.analyses.step.roofline import RooflineResult, _jsonable, _scalar
from chalk.equations import speculative as S
from chalk.errors import InputError
from chalk.specs.catalog import as_model, as_system
from chalk.specs.workload import positive

ASSUMPTIONS = (
    "verification = a decode step at batch B*(k+1) for compute and weights; KV read once per sequence",
    "draft by MTP heads: one transformer block per draft token, ~1/num_layers of a step each",
    "each further draft accepted at decay x the rate of the one before (1: independently at one rate); the first "
    "rejection ends the run",
)


@dataclass(frozen=True)
class SpeculativeResult:
    """Speculative decoding at one (or a grid of) batch and context. Times in s, cost in USD."""

    draft_tokens: int
    acceptance: float
    #: the factor each further draft's acceptance falls by (1: every draft at `acceptance`)
    acceptance_decay: float
    batch: object
    context: object
    tokens_per_step: float
    verify_tokens: object
    verify_compute_time_s: object
    verify_weight_time_s: object
    verify_kv_time_s: object
    verify_time_s: object
    draft_time_s: object
    step_time_s: object
    plain_step_time_s: object
    verify_cost_ratio: object
    bound: object
    user_tokens_per_s: object
    tokens_per_s: object
    cost_per_mtok_usd: object
    plain_cost_per_mtok_usd: object
    speedup_vs_plain: object
    pays: object
    #: 'layout': the step model on the plain step's layout; 'aggregate': the lecture's aggregate bound
    view: str = "layout"
    assumptions: tuple[str, ...] = field(default_factory=lambda: ASSUMPTIONS)

    def to_dict(self) -> dict:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class SpeculativeBreakeven:
    """Where speculation pays for one model, chips, context, k and acceptance (batch in sequences)."""

    draft_tokens: int
    acceptance: float
    context: float
    tokens_per_step: float
    speedup_at_batch_1: float
    compute_bound_speedup: float
    free_until_batch: float
    pays_until_batch: float

    def to_dict(self) -> dict:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


def _validate(draft_tokens, acceptance, decay=1.0) -> tuple[int, float, float]:
    k = int(positive("draft tokens", draft_tokens, integer=True, scalar=True))
    a, d = float(acceptance), float(decay)
    if not (np.isfinite(a) and 0.0 <= a <= 1.0):
        raise InputError(f"acceptance must be in [0, 1], got {acceptance!r}")
    if not (np.isfinite(d) and 0.0 < d <= 1.0):
        raise InputError(f"acceptance decay must be in (0, 1], got {decay!r}")
    return k, a, d


def speculative_estimate(result: RooflineResult, model, hardware, draft_tokens: int, acceptance: float,
                         chips: int | None = None, precision: str | None = None, kv_precision: str = "auto",
                         ideal: bool = False, *, efficiency: Efficiency | None = None, refined: bool | None = None,
                         sparse_law: str | None = None, draft_layers: float = 1.0, layout=None,
                         aggregate: bool | None = None, eplb: str | None = None,
                         engine=None, decay: float = 1.0) -> SpeculativeResult:
    """Speculative decoding with `draft_tokens` drafts, the first accepted at `acceptance` and each further one at
    `decay` times the rate of the one before, against the plain decode `result`.

    `result` is the plain step for the same model, hardware, batch and context (`chalk.estimate`); its view
    (a real layout, or the lecture's aggregate) is kept. `draft_layers` is the cost of one draft in main-model layers.
    `eplb`: as `chalk.estimate`'s (the expert-load balancer of a layout's MoE layers).
    """
    from chalk.analyses.step.calibration import calibration
    from chalk.analyses.step.estimate import engine_step, layout_estimate
    from chalk.specs.catalog import as_system

    if result.phase != "decode":
        raise InputError("speculative decoding applies to decode steps, not prefill")
    k, a, d = _validate(draft_tokens, acceptance, decay)
    spec = as_model(model)
    system = as_system(hardware)
    B = np.asarray(result.batch, dtype=float)
    L = np.asarray(result.context, dtype=float)
    t_plain = np.asarray(result.step_time_s, dtype=float)
    if aggregate is None:
        aggregate = result.view == "aggregate"
    if not aggregate:  # the one step model: K + 1 query tokens per sequence, its KV read once
        cal = calibration(ideal, system.chip, eplb)
        e = {"cal": cal} if engine is None else engine_step(engine, spec, system, cal, precision, result.kv_precision)
        v = layout_estimate(spec, system, B, L, phase="decode", layout=layout or result.layout, gpus=chips,
                            precision=precision, kv_precision=result.kv_precision, ideal=ideal,
                            query_tokens=k + 1, cal=e["cal"], kernels=e.get("kernels"),
                            overhead_s=e.get("overhead_s"))
        t_c = np.asarray(v.compute_time_s, dtype=float)
        t_w = np.asarray(v.weight_time_s, dtype=float)
        t_kv = np.asarray(v.kv_time_s, dtype=float)
        t_verify = np.asarray(v.step_time_s, dtype=float)
    else:  # the lecture's aggregate bound (`estimate --aggregate --mtp`), computed with the rest of it
        from chalk.analyses.step.calibration import default_efficiency
        from chalk.analyses.step.roofline import aggregate_verification

        if refined is None:
            refined = not result.weights_read.startswith("all weights") or not spec.is_moe
        eff = efficiency or default_efficiency(ideal, spec.num_layers, system.chip)
        t_c, t_w, t_kv, t_verify = aggregate_verification(result, spec, system, S.verification_tokens(B, k),
                                                          chips=chips, precision=precision, efficiency=eff,
                                                          refined=refined, sparse_law=sparse_law)
    t_draft = S.mtp_draft_time_s(t_plain, k, spec.num_layers, draft_layers)
    t = t_verify + t_draft
    e = float(S.expected_tokens_per_step(a, k, d))
    speedup = S.speculative_speedup(e, t_plain, t)
    return SpeculativeResult(
        draft_tokens=k, acceptance=a, acceptance_decay=d, batch=result.batch, context=result.context, tokens_per_step=e,
        verify_tokens=_scalar(S.verification_tokens(B, k)), verify_compute_time_s=_scalar(t_c),
        verify_weight_time_s=_scalar(t_w), verify_kv_time_s=_scalar(t_kv), verify_time_s=_scalar(t_verify),
        draft_time_s=_scalar(t_draft), step_time_s=_scalar(t), plain_step_time_s=_scalar(t_plain),
        verify_cost_ratio=_scalar(t_verify / t_plain),
        bound=_scalar(np.where(t_c >= t_w + t_kv, "compute", "memory")),
        user_tokens_per_s=_scalar(e / t), tokens_per_s=_scalar(B * e / t),
        cost_per_mtok_usd=_scalar(np.asarray(result.cost_per_mtok_usd, dtype=float) / speedup),
        plain_cost_per_mtok_usd=result.cost_per_mtok_usd, speedup_vs_plain=_scalar(speedup),
        pays=_scalar(speedup > 1.0), view="aggregate" if aggregate else "layout")


def _first_false(batches, ok, test) -> float:
    """Largest batch where `ok` still holds, refined by bisection between grid points (0 if never, inf if always)."""
    if not ok[0]:
        return 0.0
    if ok.all():
        return float("inf")
    i = int(np.argmin(ok))
    lo, hi = np.log(batches[i - 1]), np.log(batches[i])
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if test(float(np.exp(mid))):
            lo = mid
        else:
            hi = mid
    return float(np.exp(lo))


def speculative_breakeven(model, hardware, draft_tokens: int, acceptance: float, context: float = 4096, *,
                          chips: int | None = None, precision: str | None = None, kv_precision: str = "bf16",
                          ideal: bool = False, max_batch: float = 1e6, points: int = 241) -> SpeculativeBreakeven:
    """The batch up to which verification is nearly free (memory-bound) and up to which speculation pays, on the
    lecture's aggregate bound (`estimate(aggregate=True)`: every chip summed into one, no layout).

    Speed-up falls with batch: ~E (tokens per step) while memory-bound, ~E / (k + 1) < 1 once compute-bound.
    """
    from chalk.analyses.step.estimate import estimate as _est

    k, a, _ = _validate(draft_tokens, acceptance)
    context = float(positive("context", context, scalar=True))
    spec = as_model(model)
    kw = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal, aggregate=True)

    def at(b):
        r = _est(spec, hardware, b, context, **kw)
        return speculative_estimate(r, spec, hardware, k, a, **kw)

    batches = np.geomspace(1.0, float(positive("max batch", max_batch, scalar=True)), int(points))
    s = at(batches)
    free = np.asarray(s.bound) == "memory"
    pays = np.asarray(s.pays, dtype=bool)
    e = s.tokens_per_step
    return SpeculativeBreakeven(
        draft_tokens=k, acceptance=a, context=context, tokens_per_step=e,
        speedup_at_batch_1=float(np.asarray(s.speedup_vs_plain)[0]), compute_bound_speedup=e / (k + 1),
        free_until_batch=_first_false(batches, free, lambda b: at(b).bound == "memory"),
        pays_until_batch=_first_false(batches, pays, lambda b: bool(at(b).pays)))
