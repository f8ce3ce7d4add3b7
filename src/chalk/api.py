"""The notebook API: `chalk.estimate(...)` and `chalk.sweep(...)`. The CLI is a thin face on these."""

from __future__ import annotations

import functools
import inspect
import os

import numpy as np

from chalk.analyses.records.results import (Catalog, LectureResult, PlanResult, PricingReport, ServingResult,
                                            ValidationReport)
from chalk.analyses.step.roofline import Efficiency, RooflineResult
from chalk.errors import InputError
from chalk.specs.arguments import check_value, checked
from chalk.specs.catalog import as_model, as_system
from chalk.specs.workload import MAX_GRID_POINTS, positive, short
from chalk.specs.workload import tokens as token_count


def _efficiency():
    return Efficiency


def _calibration():
    from chalk.analyses.step.calibration import Calibration

    return Calibration


def default_efficiency(ideal: bool, model=None, hardware=None) -> Efficiency:
    """The pure roofline with `ideal`, else the chip's fitted efficiency (a `chalk measure` YAML) or chalk's
    calibrated efficiency for this model's depth."""
    from chalk.analyses.step.calibration import default_efficiency as _default

    return _default(ideal, as_model(model).num_layers if model is not None else None,
                    as_system(hardware).chip if hardware is not None else None)


@checked(types={"efficiency": _efficiency})
def estimate(model, hardware, batch=1, context=4096, *, phase: str = "decode", layout=None,
             objective: str | None = None, aggregate: bool = False,
             gpus: int | None = None, chips: int | None = None, precision: str | None = None,
             kv_precision: str | None = "auto", ideal: bool = False, lecture_weights: bool = False,
             refined: bool | None = None, sparse_law: str | None = None, mtp: int | None = None,
             acceptance: float | None = None, strict_fit: bool = False, eplb: str | None = None,
             efficiency: Efficiency | None = None, usd_per_kwh: float | None = None,
             pue: float | None = None, engine: str | None = None) -> RooflineResult:
    """One decode step (or a prefill of `batch` prompts of `context` tokens), timed op by op on a real layout
    (`chalk estimate`). Every option of the command, by the same name:

    model: a catalog id or alias, a config.json (or its folder), or a ModelSpec.
    hardware: a chip id (its default system), a system id, a chip/system YAML path, or a System.
    batch, context: sequences in the step (per replica) and context tokens (the prompt length for prefill);
        numbers or numpy arrays (a grid, answered in one vectorised call).
    phase: 'decode' or 'prefill'.
    layout: one replica, e.g. 'tp=8,ep=8,pp=1,attn_dp=8' or {'tp': 8} (default: chosen within `gpus` by
        `objective`).
    objective: what the default layout is chosen for: 'cost' (None: the default; the fewest GPUs that hold the
        weights and this batch's KV, the faster layout of that many: a MoE model's TP group or its attention-DP x
        EP) or 'latency' (the shortest step within `gpus`). The answer's `objective` and `layout` say what was
        chosen, its `alternative` what the other objective would pick (layout, GPUs, step time, $/M tokens).
    aggregate: the lecture's view instead: every chip summed into one communication-free chip (an upper bound).
    gpus: GPUs available (default: the system's scale-up domain); with `aggregate`, the chips summed. `chips` is
        its older name.
    precision, kv_precision: weights/compute ('bf16', 'fp8', 'fp4', ...; None: the checkpoint's) and KV cache
        ('auto': FP8 with 8-bit weights on chips with an FP8 rate, else BF16).
    ideal: peak rates, no calibration. efficiency: an `Efficiency` of your own instead of the calibrated one.
    lecture_weights: read all weights every step (the lecture's form; implies the aggregate view) instead of only
        the experts a batch touches (`refined=False` says the same).
    sparse_law: 'sqrt', the lecture's square-root law (implies the aggregate view).
    mtp, acceptance: draft tokens per step and their per-token acceptance (speculative decoding / MTP; default
        acceptance: the model's own MTP layers' sourced rate, none for a model without them); the answer's
        `speculative` holds that step (`SpeculativeResult`).
    strict_fit: raise FitError when it does not fit in HBM.
    eplb: MoE expert-load balancer on the EP group: 'auto' (default), 'on', 'off'.
    usd_per_kwh, pue: electricity price and power usage effectiveness for the answer's `energy` (default: the
        catalog's sourced figures, `energy.yaml`).
    engine: an engine profile ('vllm', 'sglang@0.4', 'trtllm'): its kernel tables, its host time per step and its
        'auto' KV cache, as `throughput` and `simulate` time steps with it (the answer's `engine` names it).

    Returns a `RooflineResult` (frozen; `.to_dict()`, `.to_frame()`), its `energy` an `Energy` (joules per token,
    power per GPU and per replica, kWh per day, the electricity share of its $/M tokens).
    """
    from chalk.analyses.economics.energy import energy_settings, estimate_energy
    from chalk.analyses.step.estimate import estimate as _estimate

    energy_settings(usd_per_kwh, pue)  # a bad price or PUE fails before any work
    if gpus is not None and chips is not None and gpus != chips:
        raise InputError(f"gpus={gpus} and chips={chips} disagree: chips is gpus' older name, give one")
    if lecture_weights and refined:
        raise InputError("lecture_weights=True is refined=False: give one of them")
    if acceptance is not None and mtp is None:
        raise InputError("acceptance is the acceptance rate of mtp's draft tokens: give mtp too")
    if mtp is not None and phase != "decode":
        raise InputError("mtp (speculative decoding) applies to decode steps, not prefill")
    refined = (not lecture_weights) if refined is None else refined
    r = _estimate(model, hardware, batch, context, phase=phase, layout=layout, objective=objective,
                  aggregate=aggregate,
                  gpus=gpus if gpus is not None else chips, precision=precision, kv_precision=kv_precision,
                  ideal=ideal, efficiency=efficiency, refined=refined, sparse_law=sparse_law, strict_fit=strict_fit,
                  eplb=eplb, engine=engine)
    spec = None
    if mtp is not None:
        from chalk.analyses.step.speculative import speculative_estimate

        from chalk.analyses.traffic.serving import mtp_speculation

        drafts = mtp_speculation(model, mtp, acceptance)
        spec = speculative_estimate(r, model=model, hardware=hardware, draft_tokens=mtp, acceptance=drafts.acceptance,
                                    decay=drafts.decay,
                                    chips=gpus if gpus is not None else chips, precision=precision,
                                    kv_precision=r.kv_precision, ideal=ideal, layout=r.layout,
                                    aggregate=r.view == "aggregate", eplb=eplb, engine=engine)
    return r.attached(energy=estimate_energy(r, as_system(hardware).chip, usd_per_kwh=usd_per_kwh, pue=pue),
                      speculative=spec)


@checked(types={"efficiency": _efficiency})
def sweep(model, hardware, batches=None, contexts=None, *, phase: str = "decode", layout=None,
          aggregate: bool = False, gpus: int | None = None, chips: int | None = None, precision: str | None = None,
          kv_precision: str | None = "auto", ideal: bool = False, lecture_weights: bool = False,
          refined: bool | None = None, sparse_law: str | None = None, strict_fit: bool = False,
          eplb: str | None = None, efficiency: Efficiency | None = None):
    """`estimate` over every (batch, context) of `batches` x `contexts` in one vectorised call (`chalk sweep`):
    a `SweepResult`, one row per point. `batches` default 1, 2, 4, ..., 8192; `contexts` default 4096; `phase`,
    `layout`, `aggregate`, `gpus` (or `chips`), `precision`, `kv_precision`, `ideal`, `lecture_weights`,
    `refined`, `sparse_law`, `strict_fit`, `eplb` and `efficiency` as `estimate`'s.

    `.rows()` and `.to_dict()` need nothing more; `.to_frame()` gives a pandas DataFrame (pandas optional).
    """
    from chalk.analyses.traffic.sweep import sweep_table

    batches = positive("batch", batches if batches is not None else 2 ** np.arange(0, 14))
    contexts = positive("context", contexts if contexts is not None else [4096])
    batches, contexts = np.atleast_1d(np.asarray(batches, dtype=float)), np.atleast_1d(np.asarray(contexts, dtype=float))
    if batches.size * contexts.size > MAX_GRID_POINTS:
        raise InputError(f"a sweep of {batches.size:,} batches x {contexts.size:,} contexts is more than "
                         f"{MAX_GRID_POINTS:,} points")
    B, L = np.meshgrid(batches, contexts, indexing="ij")
    return sweep_table(estimate(model, hardware, B.ravel(), L.ravel(), phase=phase, layout=layout,
                                aggregate=aggregate, gpus=gpus, chips=chips, precision=precision,
                                kv_precision=kv_precision, ideal=ideal, lecture_weights=lecture_weights,
                                refined=refined, sparse_law=sparse_law, strict_fit=strict_fit, eplb=eplb,
                                efficiency=efficiency))


@checked
def layout(model, hardware, gpus: int | None = None, *, precision: str | None = None,
           kv_precision: str | None = "auto", context: float = 4096, ideal: bool = False):
    """Every feasible layout of `model` on `gpus` of `hardware` (default: one scale-up domain, or the fewest that
    hold the weights) with memory per GPU at `context` tokens, the MoE rack layout and the pipeline analysis
    (`chalk layout`); `precision`, `kv_precision` and `ideal` as `estimate`'s. Returns a `LayoutReport`."""
    from chalk.analyses.step.parallel import layout_report

    return layout_report(as_model(model), as_system(hardware), gpus, precision=precision,
                         kv_precision=kv_precision, context=context, ideal=ideal)


@checked
def simulate(model, hardware, *, rate: float | None = None, requests: int | None = None, input_len=None,
             output_len=None, trace=None, speedup: float = 1.0, layout=None, gpus: int | None = None,
             concurrency: int | None = None, max_batch: int | None = None, prefill_chunk: int | None = None,
             kv_capacity_tokens=None, precision: str | None = None, kv_precision: str | None = "auto",
             ideal: bool = False, seed: int = 0, client_latency_s: float | None = None, scheduler: str = "continuous",
             period_s: float = 0.02, prefix_cache: bool = True, engine: str | None = None):
    """Requests through one replica (`chalk simulate`; `chalk.analyses.traffic.simulate_run.simulate_requests`).

    Arrivals: Poisson at `rate` (default 100/s), a closed loop of `concurrency` requests in flight, or a `trace`
        file (chalk CSV, Azure CSV or Mooncake JSONL, arrivals sped up `speedup` times; Mooncake's prefix blocks
        replayed through an LRU prefix cache); give one of the three. `requests`: how many (default: 10,000
        Poisson, enough rounds of a closed loop to settle, or the whole trace). `seed`: the draws' seed.
    input_len, output_len: numbers or distributions as `throughput` takes them (defaults 512 and 128), cut at the
        model's context; a trace brings its own.
    layout: the one given, else the one `throughput` picks on `gpus`. precision, kv_precision: as `estimate`.
    The replica runs as `throughput` replays it (the engine's scheduler cap and KV room, prefill chunk and step
        overhead) where `max_batch`, `prefill_chunk` and `kv_capacity_tokens` are not given: `engine`'s profile
        (e.g. 'vllm@0.11'), else chalk's fitted scheduler.
    client_latency_s: time each request spends outside the engine's steps (default: the calibrated
        `request_latency_s`; 0 with `ideal`): a closed loop's seat is held for it; an open loop adds it to TTFT.
    scheduler: 'continuous' (default) or 'train' (the lecture's departures every `period_s`). prefix_cache: replay
        a Mooncake trace's prefix blocks (default) or not.
    Returns a `SimulateRun`: the `SimulationResult`'s fields plus the setup (layout, GPUs, precisions, hit rate,
    overload, steady_state_gap, rates per replica and per GPU, notes)."""
    from chalk.analyses.traffic.simulate_run import simulate_requests

    return simulate_requests(model, hardware, rate=rate, requests=requests, input_len=input_len,
                             output_len=output_len, trace=trace, speedup=speedup, layout=layout, gpus=gpus,
                             concurrency=concurrency, max_batch=max_batch, kv_capacity_tokens=kv_capacity_tokens,
                             prefill_chunk=prefill_chunk, precision=precision, kv_precision=kv_precision,
                             ideal=ideal, seed=seed, client_latency=client_latency_s, scheduler=scheduler,
                             period_s=period_s, prefix_cache=prefix_cache, engine=engine)


# ------------------------------------------------------------------ the other public calls, arguments checked first
# (`chalk.__init__` exports these; the analyses keep their own checks for the CLI's already-parsed values)
def _session_class():
    from chalk.analyses.step.estimate import Session as _Session

    class Session(_Session):
        """`chalk.analyses.step.estimate.Session` with every option and override checked as `estimate` checks it."""

        def __init__(self, model, hardware, **options):
            check_value("model", model)
            check_value("hardware", hardware)
            asked = [k for k in ("batch", "context") if k in options]
            if asked:
                raise InputError(f"Session takes {' and '.join(asked)} in .estimate(...), not when it is made")
            _session_options(options)
            super().__init__(model, hardware, **options)

        def estimate(self, batch=1, context=4096, **overrides):
            """One step of the session's model on its hardware, as `chalk.estimate(model, hardware, batch, context,
            **options)` answers it, with this call's `overrides` over the session's options (batch and context may
            be numpy arrays: a grid in one call). Repeated questions return the answer already given."""
            check_value("batch", batch)
            check_value("context", context)
            _session_options(overrides)
            from chalk.analyses.economics.energy import estimate_energy

            r = super().estimate(batch, context, **overrides)
            # the energy `chalk.estimate` attaches, so a Session answers as the function does: a new result (the
            # kept one stays as it was), itself kept beside the one it was made from, so a repeated question still
            # gets the very object it got before
            kept = self.__dict__.setdefault("_with_energy", {})
            hit = kept.get(id(r))
            if hit is not None and hit[0] is r:
                return hit[1]
            out = r.attached(energy=estimate_energy(r, self.system.chip))
            if np.ndim(batch) or np.ndim(context):  # a grid: never asked again as the same object, and its arrays
                return out  # (every deferred field, worked out by the energy) are too big to keep
            if len(kept) >= 4096:
                kept.clear()
            kept[id(r)] = (r, out)
            return out

    Session.__module__, Session.__qualname__ = __name__, "Session"
    return Session


def _session_options(options: dict) -> None:
    """A Session's options, checked when given: `estimate`'s own (each checked as `estimate` checks it); the ones
    `chalk.estimate` adds on top (speculation, energy prices, the lecture's weights) are refused in one line, as is
    an unknown name (a bare TypeError came at the first question; QA 2026-11-28). Nothing is worked out for a
    question without options (a Session's repeated questions are dictionary lookups)."""
    for k, v in options.items():
        takes = _session_takes()
        if k not in takes:
            extra = k in inspect.signature(estimate).parameters
            raise InputError(f"Session does not take {k!r}" + (": ask chalk.estimate(...) for it" if extra else
                                                               f" (it takes: {', '.join(sorted(takes))})"))
        _check_option(k, v)


@functools.cache
def _session_takes() -> frozenset:
    """The options a Session passes to `estimate` (its signature's, less what the Session or the call gives)."""
    from chalk.analyses.step.estimate import estimate as _step_estimate

    return frozenset(inspect.signature(_step_estimate).parameters) - {"model", "system", "hardware", "batch",
                                                                       "context"}


def _check_option(name, value):
    if name == "efficiency":
        if value is not None and not isinstance(value, Efficiency):
            raise InputError(f"efficiency must be an Efficiency, got {short(value)}")
    else:
        check_value(name, value, None if name in _NONE_DEFAULTS else inspect.Parameter.empty)


#: estimate options whose default is None (None passes for them)
_NONE_DEFAULTS = frozenset({"layout", "chips", "gpus", "precision", "sparse_law", "eplb", "efficiency",
                            "objective"})


def __getattr__(name: str):
    """`chalk.api.SWEEP_COLUMNS`, re-exported without importing the sweep module when the CLI starts, and the
    checked `Session`, built on first use."""
    if name == "SWEEP_COLUMNS":
        from chalk.analyses.traffic.sweep import SWEEP_COLUMNS

        return SWEEP_COLUMNS
    if name == "Session":
        cls = _session_class()
        globals()["Session"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@checked(types={"calibration_override": _calibration})
def throughput(model, hardware, *, input_len, output_len, gpus: int | None = None, precision: str | None = None,
               kv_precision: str | None = "auto", min_user_tps: float | None = None,
               max_ttft_s: float | None = None, tpot_p99_s: float | None = None, ttft_p99_s: float | None = None,
               max_seqs: int | None = None, max_tokens: int | None = None, disaggregated: bool | str = "auto",
               layout=None, concurrency: int | None = None, prefill_gpus: int | None = None,
               mtp: int | None = None, acceptance: float | None = None, speculative="auto",
               engine: str | None = None, cache_hit: float | None = None, pareto: bool = False,
               ideal: bool = False, eplb: str | None = None, calibration_override=None,
               usd_per_kwh: float | None = None, pue: float | None = None,
               prefill_layout: str | None = None, arrivals: str = "poisson") -> ServingResult:
    """The best deployment over layouts x batch that fit and meet the constraints, or with `layout` and
    `concurrency` what that exact deployment does (`chalk throughput`). Every option of the command:

    input_len, output_len: tokens per request: a mean, a distribution ('lognormal:mean=2000,p99=8000') or a file
        of lengths.
    gpus: GPUs available (with `disaggregated`: the decode pool). precision, kv_precision: as `estimate`.
    min_user_tps: output tokens/s per user at least. max_ttft_s: mean time to first token at most (s).
    tpot_p99_s, ttft_p99_s: p99 targets (s), checked by replaying the chosen point. arrivals: how requests arrive
        in that replay: 'poisson' (default: the highest Poisson rate meeting the targets answers) or 'closed' (the
        chosen concurrency held in flight).
    max_seqs, max_tokens: the engine's sequences per scheduler and prompt tokens per step, over its profile.
    disaggregated: True: separate prefill and decode pools; False: one pool; 'auto' (default, the CLI's --mode all):
        one pool unless two serve `serving.DISAGGREGATION_MARGIN` (5%) more per GPU (a fixed deployment,
        `concurrency`, is aggregated unless told).
        layout, concurrency: one fixed deployment (closed loop of
        `concurrency` requests). prefill_gpus: its prefill pool, with `disaggregated`; prefill_layout: the layout
        of that pool's workers (default: `layout`), e.g. 'tp=1,attn_dp=4,ep=4'.
    mtp, acceptance: draft tokens per step and their acceptance (as `--mtp K --acceptance A`); speculative: a
        `Speculation`, 'auto' (the model's own MTP layers) or None; give one of the two forms.
    engine: 'vllm' | 'sglang' | 'trtllm' (its scheduler cap, KV memory, chunk and overhead). cache_hit: fraction
        of prompt tokens from the prefix cache. pareto: also the latency-cost frontier. ideal, eplb: as `estimate`.
    calibration_override: a `Calibration` of your own instead of chalk's.
    usd_per_kwh, pue: for the answer's `energy` (default: the catalog's sourced figures).

    Returns a `ServingResult` (a dict with attribute access, `.to_dict()`, `.to_frame()`); its throughputs are
    per GPU (`*_per_gpu`), its `energy` the `Energy` figures as a dict.
    """
    from chalk.analyses.economics.energy import energy_settings, serving_energy
    from chalk.analyses.traffic.serving import label_rates, throughput as _throughput

    energy_settings(usd_per_kwh, pue)
    speculative = _speculation(model, mtp, acceptance, speculative)
    system = as_system(hardware)
    r = _throughput(model, system, input_len=input_len, output_len=output_len, gpus=gpus,
                    precision=precision, kv_precision=kv_precision, min_user_tps=min_user_tps,
                    max_ttft_s=max_ttft_s, disaggregated=disaggregated, pareto=pareto, ideal=ideal,
                    calibration_override=calibration_override, layout=layout, concurrency=concurrency,
                    speculative=speculative, engine=engine, cache_hit=cache_hit, prefill_gpus=prefill_gpus,
                    eplb=eplb, tpot_p99_s=tpot_p99_s, ttft_p99_s=ttft_p99_s, max_seqs=max_seqs,
                    max_tokens=max_tokens, prefill_layout=prefill_layout, arrivals=arrivals)
    label_rates(r)  # per replica and per fleet, as the command's JSON has them
    r["energy"] = serving_energy(r, system.chip, usd_per_kwh=usd_per_kwh, pue=pue).to_dict()
    return r


def _speculation(model, mtp, acceptance, speculative):
    """The `speculative` argument of throughput and plan from `mtp` / `acceptance` (the CLI's --mtp K
    --acceptance A) or as given; both forms at once is a contradiction."""
    from chalk.analyses.traffic.serving import mtp_speculation

    if acceptance is not None and mtp is None:
        raise InputError("acceptance is the acceptance rate of mtp's draft tokens: give mtp too")
    if mtp is None:
        return speculative
    if speculative != "auto":
        raise InputError("mtp (with acceptance) and speculative both say how to speculate: give one of them")
    return mtp_speculation(model, mtp, acceptance)


@checked
def train(model, hardware=None, gpus=None, tokens=None, precision=None, *, seq_len=None, global_batch_tokens=None,
          pipeline_stages=None, interleave=None, inference_tokens_per_s=None, deployment_days=None,
          obsolescence_probability=0.0, rl_tokens=None, rl_flops_per_param=3.0, rl_inefficiency=3.0,
          inference_inefficiency=3.0, kernel_mfu=None, moe_residual_efficiency=None):
    """Training time and cost (`chalk train`), every argument checked first. Returns a `TrainingEstimate`.

    model, hardware, gpus, tokens, precision: the run (defaults: a model's published run where the catalog has one,
        else 16,384 H100s, 15T tokens, the checkpoint's precision). seq_len, global_batch_tokens: its sequences and
        tokens per step (8,192; 16M). pipeline_stages, interleave: its pipeline (default: chosen to fit).
    kernel_mfu, moe_residual_efficiency: override the calibrated MFU and the MoE layers' residual efficiency.
    inference_tokens_per_s, deployment_days, obsolescence_probability: inference volume for eq. 7's pools (60 days
        if only the rate is given); rl_tokens, rl_flops_per_param, rl_inefficiency, inference_inefficiency: the RL
        and inference pools' work (eq. 7).
    See `chalk.analyses.blackboard.training.train_estimate` for the model behind it."""
    from chalk.analyses.blackboard.training import train_estimate

    if tokens is not None:
        token_count("tokens", tokens)
    if global_batch_tokens is not None:
        token_count("global_batch_tokens", global_batch_tokens)
    return train_estimate(model, hardware, gpus, tokens, precision, seq_len=seq_len,
                          global_batch_tokens=global_batch_tokens, pipeline_stages=pipeline_stages,
                          interleave=interleave, inference_tokens_per_s=inference_tokens_per_s,
                          deployment_days=deployment_days, obsolescence_probability=obsolescence_probability,
                          rl_tokens=rl_tokens, rl_flops_per_param=rl_flops_per_param,
                          rl_inefficiency=rl_inefficiency, inference_inefficiency=inference_inefficiency,
                          kernel_mfu=kernel_mfu, moe_residual_efficiency=moe_residual_efficiency)


@checked(skip=("a", "sheets"))
def pricing(a=None, sheets=None, *, active_params: float | None = None, hardware=None,
            precision: str | None = None, ratio: float | None = None, ref_model=None, ref_hardware=None,
            cache_context: float | None = None, mode_hardware=None,
            mode_context: float | None = None) -> PricingReport:
    """API price sheets read back into hardware facts (`chalk pricing`): each sheet's implied KV bytes, cache
    retention tier and fast modes, with the assumptions used. The command's options, by the same names:

    active_params: eq. 6's active parameters N_active (default 100e9, the lecture's). hardware, precision: take
    eq. 6's ratio from that chip, (FLOP/s at `precision` (default fp8) / 2) / HBM bytes/s; ratio: eq. 6's ratio
    directly, multiplies per byte (default: the lecture's 300). ref_model, ref_hardware: the reference model and
    chip for cache load-vs-recompute (deepseek-v3, h100-sxm); cache_context: the context at which a token's KV is
    recomputed (32768); mode_hardware, mode_context: the system and context of the fast-mode curve (gb200-nvl72,
    4096). Or `a`: an `Assumptions` of your own (not with those options); `sheets`: `PriceSheet`s instead of the
    catalog's. Returns a `PricingReport`.
    """
    from chalk.analyses.economics.pricing import assumptions

    given = {k: v for k, v in dict(ref_model=ref_model, ref_hardware=ref_hardware, cache_context=cache_context,
                                   mode_hardware=mode_hardware, mode_context=mode_context).items() if v is not None}
    ratio_from = dict(active_params=active_params, hardware=hardware, multiplies_per_byte=ratio)
    if precision is not None and hardware is None:
        raise InputError("precision is the compute precision of hardware's ratio: give hardware too")
    if any(v is not None for v in ratio_from.values()) or given:
        if a is not None:
            raise InputError("give an Assumptions (a) or the options, not both")
        a = assumptions(**ratio_from, precision=precision or "fp8", **given)
    return _pricing(a, sheets)


def _pricing(a, sheets) -> PricingReport:
    from chalk.analyses.economics.pricing import DEFAULT, Assumptions, pricing_report
    from chalk.specs.prices import PriceSheet

    a = DEFAULT if a is None else a
    if not isinstance(a, Assumptions):
        raise InputError(f"a must be an Assumptions, got {short(a)}")
    positive("active_params", a.active_params, scalar=True)
    positive("multiplies_per_byte", a.multiplies_per_byte, scalar=True)
    token_count("cache_context", a.cache_context)
    token_count("mode_context", a.mode_context)
    for name in ("ref_model", "ref_hardware", "mode_hardware", "kv_precision"):
        check_value("precision" if name == "kv_precision" else "model", getattr(a, name))
        if not isinstance(getattr(a, name), str):
            raise InputError(f"{name} must be a name, got {short(getattr(a, name))}")
    if not isinstance(a.ratio_source, str):
        raise InputError(f"ratio_source must be text, got {short(a.ratio_source)}")
    if sheets is not None and (not isinstance(sheets, (list, tuple)) or not sheets
                               or not all(isinstance(s, PriceSheet) for s in sheets)):
        raise InputError(f"sheets must be a non-empty list of PriceSheet, got {short(sheets)}")
    return pricing_report(a, sheets)


@checked(types={"cal": _calibration})
def validate(ideal: bool = False, cal=None) -> ValidationReport:
    """Predicted vs measured on the validation set (`chalk validate`): every row with its source, family, engine and
    error; the headline median and p90 |error| over the throughput and TPOT rows, per group and per family.
    `ideal`: the pure roofline instead of the calibrated step model; `cal`: a `Calibration` of your own. Returns a
    `ValidationReport` (`.to_frame()`: one row per measured row). Cross-validation is `chalk validate --cv`
    (`chalk.analyses.fidelity.calibrate.cross_validate`)."""
    from chalk.analyses.fidelity.validate import validate as _validate

    return _validate(ideal, cal)


@checked
def plan(model, hardware=None, *, input_len=None, output_len=None, users: float | None = None,
         rate: float | None = None, min_user_tps: float | None = None, ttft_p99_s: float | None = None,
         tpot_p99_s: float | None = None, diurnal=None, prices=None, engine: str | None = None,
         precision="explore", kv_precision: str | None = "auto", mtp: int | None = None,
         acceptance: float | None = None, speculative="auto", draft_model: str | None = None,
         modes=("aggregated", "disaggregated"),
         ideal: bool = False, sim_requests: int = 12000, seed: int = 0, curves: bool = True, eplb: str | None = None,
         trace=None, speedup: float = 1.0, checkpoint: str | None = None, usd_per_kwh: float | None = None,
         pue: float | None = None) -> PlanResult:
    """GPUs, layout, replicas and dollars for a demand (`chalk plan`). Every option of the command:

    hardware: chips or systems to choose among (a list or 'h100-sxm,h200'; None: every catalog chip with a price).
    input_len, output_len: as `throughput`. users (requests in flight) or rate (requests/s): the demand.
    min_user_tps, ttft_p99_s, tpot_p99_s: the targets (s). diurnal: 24 hourly multipliers (numbers or a CSV).
    prices: {'h100-sxm': 2.5} or 'h100-sxm=2.5' in $/GPU-hour. engine: size with that engine only.
    precision: one or several weight precisions to choose from ('explore', the default as in the CLI: the
        checkpoint's and each narrower one a candidate chip runs natively; None: the checkpoint's only);
        kv_precision: as `estimate`. mtp, acceptance or speculative: as `throughput`. draft_model: a draft for the launch command.
    modes: 'aggregated', 'disaggregated' or both. sim_requests, seed: the replay that checks each option.
    curves: also GPUs-vs-demand and cost-vs-speed curves. trace, speedup: demand and lengths from a request trace.
    checkpoint: the user's own checkpoint for the launch commands. ideal, eplb: as `estimate`.
    usd_per_kwh, pue: for each option's `energy` (default: the catalog's sourced figures).

    Returns a `PlanResult` (`.to_dict()`, `.to_frame()`: one row per option, with precision, tok/s/GPU and energy).
    """
    from chalk.analyses.economics.energy import attach_plan_energy, energy_settings
    from chalk.analyses.planning.plan import plan as _plan

    energy_settings(usd_per_kwh, pue)
    speculative = _speculation(model, mtp, acceptance, speculative)
    r = _plan(model, hardware, input_len=input_len, output_len=output_len, users=users, rate=rate,
              min_user_tps=min_user_tps, ttft_p99_s=ttft_p99_s, tpot_p99_s=tpot_p99_s, diurnal=diurnal,
              prices=prices, engine=engine, precision=precision, kv_precision=kv_precision,
              speculative=speculative, draft_model=draft_model, modes=modes, ideal=ideal,
              sim_requests=sim_requests, seed=seed, curves=curves, eplb=eplb, trace=trace, speedup=speedup,
              checkpoint=checkpoint)
    return attach_plan_energy(r, usd_per_kwh=usd_per_kwh, pue=pue)


def _portfolio_source():
    return (str, os.PathLike, dict)


@checked(types={"source": _portfolio_source})
def portfolio(source, *, ray: bool = False, ray_address: str | None = None, workers: int | None = None,
              results: str | None = None, resume: bool = False):
    """Several models' demands planned together (`chalk plan --portfolio FILE`): the cheapest assignment of each
    model to a chip, layout, precision, engine, mode and region that meets every target and fleet constraint.

    source: a portfolio YAML path or the same content as a dict (examples/portfolio.yaml). ray / ray_address /
    workers: where the candidates run (a local Ray, a Ray cluster, a process pool; default this process; the answer
    is the same). results: a JSON-lines file each finished candidate is appended to; resume: reuse its candidates.

    Returns a `PortfolioResult` (`.to_dict()`, `.to_frame()`: one row per model; `answer()`: without the run's
    own facts)."""
    from chalk.analyses.planning.portfolio import portfolio as _portfolio
    from chalk.executor import executor

    ex = executor(ray=ray, address=ray_address, workers=workers)
    try:
        return _portfolio(source, executor=ex, results=results, resume=resume)
    finally:
        close = getattr(ex, "close", None)
        if close is not None:
            close()


# ------------------------------------------------------------------ catalogs, the lecture, the report, the plots
def hardware() -> Catalog:
    """Every chip and system in the catalog (`chalk hardware list`): `chips` (each chip's spec and its derived
    ratios) and `systems`. `.to_frame()`: one row per chip."""
    from dataclasses import asdict

    from chalk.analyses.blackboard.hardware_facts import chip_facts
    from chalk.specs import catalog

    chips = [catalog.load_chip(c) for c in catalog.chip_ids()]
    systems = [catalog.load_system(s) for s in catalog.system_ids()]
    return Catalog(kind="chips", chips=[{**asdict(c), **chip_facts(c)} for c in chips],
                   systems=[{"id": s.id, "name": s.name, "chip": s.chip.id, "chips": s.chips, "kind": s.kind}
                            for s in systems])


def models() -> Catalog:
    """Every model in the catalog with its sizes (`chalk models list`): `models`, one summary each (parameters,
    weight bytes, KV bytes per token, attention). `.to_frame()`: one row per model."""
    from chalk.analyses.step.model_sizes import ModelSizes
    from chalk.specs import catalog

    return Catalog(kind="models", models=[ModelSizes(catalog.load_model(m)).summary() for m in catalog.model_ids()])


def lecture() -> LectureResult:
    """The lecture's deductions, each computed by chalk (`chalk lecture`): `claims`, each with its statement,
    chalk's value, the lecture's and whether they agree. `.to_frame()`: one row per claim."""
    from chalk.analyses.blackboard.lecture import all_claims

    return LectureResult(claims=[c.to_dict() for c in all_claims()])
