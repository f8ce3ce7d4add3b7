"""The notebook API: `chalk.estimate(...)` and `chalk.sweep(...)`. The CLI is a thin face on these."""

from __future__ import annotations

import inspect

import numpy as np

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


def _estimate_fn():
    from chalk.analyses.step.estimate import estimate as _estimate

    return _estimate


def _layout_fn():
    from chalk.analyses.step.parallel import layout_report

    return layout_report


@checked(types={"efficiency": _efficiency}, like=_estimate_fn)
def estimate(model, hardware, batch=1, context=4096, **kwargs) -> RooflineResult:
    """One decode step (or a prefill of `batch` prompts of `context` tokens), timed op by op on a real layout;
    see `chalk.analyses.step.estimate.estimate` for every option (layout, aggregate, gpus, precision, ...)."""
    from chalk.analyses.step.estimate import estimate as _estimate

    return _estimate(model, hardware, batch, context, **kwargs)


@checked(types={"efficiency": _efficiency}, like=_estimate_fn)
def sweep(model, hardware, batches=None, contexts=None, **kwargs):
    """Vectorised sweep over batch x context: a `SweepResult`, one row per (batch, context).

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
    return sweep_table(estimate(model, hardware, B.ravel(), L.ravel(), **kwargs))


@checked(like=_layout_fn)
def layout(model, hardware, gpus: int | None = None, **kwargs):
    """Every feasible layout of `model` on `gpus` of `hardware` with memory per GPU, the MoE rack layout and the
    pipeline analysis (`chalk.analyses.step.parallel.layout_report`)."""
    from chalk.analyses.step.parallel import layout_report
    from chalk.specs.catalog import as_system

    return layout_report(as_model(model), as_system(hardware), gpus, **kwargs)


@checked
def simulate(model, hardware, *, rate: float = 100.0, requests: int | None = None, input_len=512, output_len=128,
             trace=None, speedup: float = 1.0, layout=None, gpus: int | None = None, concurrency: int | None = None,
             max_batch: int = 256, prefill_chunk: int | None = None, kv_capacity_tokens=None,
             precision: str | None = None, kv_precision: str | None = "auto", ideal: bool = False, seed: int = 0,
             client_latency_s: float | None = None, scheduler: str = "continuous", period_s: float = 0.02,
             prefix_cache: bool = True):
    """Requests through one replica (`chalk.analyses.traffic.simulate_run.simulate_requests`): Poisson arrivals at `rate`,
    a closed loop of `concurrency` requests in flight, or a `trace` file (chalk CSV, Azure CSV or Mooncake JSONL,
    arrivals sped up `speedup` times; Mooncake's prefix blocks replayed through an LRU prefix cache). Lengths are
    numbers or distributions as `throughput` takes them, cut at the model's context. The layout is the one given or
    the one `throughput` picks on `gpus`. `client_latency_s` (closed loop): time each request spends outside the
    engine's steps, holding its seat (default: the calibrated `request_latency_s`; 0 with `ideal`). Returns a
    `SimulateRun`: the `SimulationResult`'s fields plus the setup (layout, GPUs, precisions, hit rate, notes)."""
    from chalk.analyses.traffic.simulate_run import simulate_requests

    return simulate_requests(model, hardware, rate=rate, requests=requests, input_len=input_len,
                             output_len=output_len, trace=trace, speedup=speedup, layout=layout, gpus=gpus,
                             concurrency=concurrency, max_batch=max_batch, kv_capacity_tokens=kv_capacity_tokens,
                             prefill_chunk=prefill_chunk, precision=precision, kv_precision=kv_precision,
                             ideal=ideal, seed=seed, client_latency=client_latency_s, scheduler=scheduler,
                             period_s=period_s, prefix_cache=prefix_cache)


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
            for k, v in options.items():
                _check_option(k, v)
            super().__init__(model, hardware, **options)

        def estimate(self, batch=1, context=4096, **overrides):
            check_value("batch", batch)
            check_value("context", context)
            for k, v in overrides.items():
                _check_option(k, v)
            return super().estimate(batch, context, **overrides)

    Session.__module__, Session.__qualname__ = __name__, "Session"
    return Session


def _check_option(name, value):
    if name == "efficiency":
        if value is not None and not isinstance(value, Efficiency):
            raise InputError(f"efficiency must be an Efficiency, got {short(value)}")
    else:
        check_value(name, value, None if name in _NONE_DEFAULTS else inspect.Parameter.empty)


#: estimate options whose default is None (None passes for them)
_NONE_DEFAULTS = frozenset({"layout", "chips", "gpus", "precision", "sparse_law", "eplb", "efficiency"})


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
def throughput(model, hardware, *, input_len, output_len, gpus=None, precision=None, kv_precision="auto",
               min_user_tps=None, max_ttft_s=None, disaggregated=False, pareto=False, ideal=False,
               calibration_override=None, layout=None, concurrency=None, speculative="auto", engine=None,
               cache_hit=None, prefill_gpus=None, eplb=None, tpot_p99_s=None, ttft_p99_s=None, max_seqs=None,
               max_tokens=None) -> dict:
    """The best (or a fixed) deployment: `chalk.analyses.traffic.serving.throughput`, every argument checked first."""
    from chalk.analyses.traffic.serving import throughput as _throughput

    return _throughput(model, hardware, input_len=input_len, output_len=output_len, gpus=gpus,
                       precision=precision, kv_precision=kv_precision, min_user_tps=min_user_tps,
                       max_ttft_s=max_ttft_s, disaggregated=disaggregated, pareto=pareto, ideal=ideal,
                       calibration_override=calibration_override, layout=layout, concurrency=concurrency,
                       speculative=speculative, engine=engine, cache_hit=cache_hit, prefill_gpus=prefill_gpus,
                       eplb=eplb, tpot_p99_s=tpot_p99_s, ttft_p99_s=ttft_p99_s, max_seqs=max_seqs,
                       max_tokens=max_tokens)


@checked
def train(model, hardware=None, gpus=None, tokens=None, precision=None, *, seq_len=None, global_batch_tokens=None,
          pipeline_stages=None, interleave=None, inference_tokens_per_s=None, deployment_days=None,
          obsolescence_probability=0.0, rl_tokens=None, rl_flops_per_param=3.0, rl_inefficiency=3.0,
          inference_inefficiency=3.0, kernel_mfu=None, moe_residual_efficiency=None):
    """Training time and cost: `chalk.analyses.blackboard.training.train_estimate`, every argument checked first."""
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


def pricing(a=None, sheets=None) -> dict:
    """API price sheets read back into hardware facts: `chalk.analyses.economics.pricing.pricing_report`, with the
    `Assumptions` (default: the lecture's) and the sheets checked first."""
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
def validate(ideal: bool = False, cal=None) -> dict:
    """Predicted vs measured on the validation set: `chalk.analyses.fidelity.validate.validate`, arguments checked."""
    from chalk.analyses.fidelity.validate import validate as _validate

    return _validate(ideal, cal)


@checked
def plan(model, hardware=None, *, input_len=None, output_len=None, users=None, rate=None, min_user_tps=None,
         ttft_p99_s=None, tpot_p99_s=None, diurnal=None, prices=None, engine=None, precision=None,
         kv_precision="auto", speculative="auto", draft_model=None, modes=("aggregated", "disaggregated"),
         ideal=False, sim_requests=12000, seed=0, curves=True, eplb=None, trace=None, speedup=1.0,
         checkpoint=None):
    """GPUs, layout, replicas and dollars for a demand: `chalk.analyses.planning.plan.plan`, every argument checked."""
    from chalk.analyses.planning.plan import plan as _plan

    return _plan(model, hardware, input_len=input_len, output_len=output_len, users=users, rate=rate,
                 min_user_tps=min_user_tps, ttft_p99_s=ttft_p99_s, tpot_p99_s=tpot_p99_s, diurnal=diurnal,
                 prices=prices, engine=engine, precision=precision, kv_precision=kv_precision,
                 speculative=speculative, draft_model=draft_model, modes=modes, ideal=ideal,
                 sim_requests=sim_requests, seed=seed, curves=curves, eplb=eplb, trace=trace, speedup=speedup,
                 checkpoint=checkpoint)
