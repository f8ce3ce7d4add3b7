"""The notebook API: `chalk.estimate(...)` and `chalk.sweep(...)`. The CLI is a thin face on these."""

from __future__ import annotations

import numpy as np

from chalk.analyses.roofline import Efficiency, RooflineResult
from chalk.errors import InputError
from chalk.specs.catalog import as_model, as_system
from chalk.specs.workload import MAX_GRID_POINTS, positive


def default_efficiency(ideal: bool, model=None, hardware=None) -> Efficiency:
    """The pure roofline with `ideal`, else the chip's fitted efficiency (a `chalk measure` YAML) or chalk's
    calibrated efficiency for this model's depth."""
    from chalk.analyses.calibration import default_efficiency as _default

    return _default(ideal, as_model(model).num_layers if model is not None else None,
                    as_system(hardware).chip if hardware is not None else None)


def estimate(model, hardware, batch=1, context=4096, **kwargs) -> RooflineResult:
    """One decode step (or a prefill of `batch` prompts of `context` tokens), timed op by op on a real layout;
    see `chalk.analyses.estimate.estimate` for every option (layout, aggregate, gpus, precision, ...)."""
    from chalk.analyses.estimate import estimate as _estimate

    return _estimate(model, hardware, batch, context, **kwargs)


def __getattr__(name: str):
    """`chalk.api.SWEEP_COLUMNS`, re-exported without importing the sweep module when the CLI starts."""
    if name == "SWEEP_COLUMNS":
        from chalk.analyses.sweep import SWEEP_COLUMNS

        return SWEEP_COLUMNS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def sweep(model, hardware, batches=None, contexts=None, **kwargs):
    """Vectorised sweep over batch x context: a `SweepResult`, one row per (batch, context).

    `.rows()` and `.to_dict()` need nothing more; `.to_frame()` gives a pandas DataFrame (pandas optional).
    """
    from chalk.analyses.sweep import sweep_table

    batches = positive("batch", batches if batches is not None else 2 ** np.arange(0, 14))
    contexts = positive("context", contexts if contexts is not None else [4096])
    batches, contexts = np.atleast_1d(np.asarray(batches, dtype=float)), np.atleast_1d(np.asarray(contexts, dtype=float))
    if batches.size * contexts.size > MAX_GRID_POINTS:
        raise InputError(f"a sweep of {batches.size:,} batches x {contexts.size:,} contexts is more than "
                         f"{MAX_GRID_POINTS:,} points")
    B, L = np.meshgrid(batches, contexts, indexing="ij")
    return sweep_table(estimate(model, hardware, B.ravel(), L.ravel(), **kwargs))


def layout(model, hardware, gpus: int | None = None, **kwargs):
    """Every feasible layout of `model` on `gpus` of `hardware` with memory per GPU, the MoE rack layout and the
    pipeline analysis (`chalk.analyses.parallel.layout_report`)."""
    from chalk.analyses.parallel import layout_report
    from chalk.specs.catalog import as_system

    return layout_report(as_model(model), as_system(hardware), gpus, **kwargs)


def simulate(model, hardware, *, rate: float = 100.0, requests: int | None = None, input_len=512, output_len=128,
             trace=None, speedup: float = 1.0, layout=None, gpus: int | None = None, concurrency: int | None = None,
             max_batch: int = 256, prefill_chunk: int | None = None, kv_capacity_tokens=None,
             precision: str | None = None, kv_precision: str | None = "auto", ideal: bool = False, seed: int = 0,
             client_latency_s: float | None = None, scheduler: str = "continuous", period_s: float = 0.02,
             prefix_cache: bool = True):
    """Requests through one replica (`chalk.analyses.simulate_run.simulate_requests`): Poisson arrivals at `rate`,
    a closed loop of `concurrency` requests in flight, or a `trace` file (chalk CSV, Azure CSV or Mooncake JSONL,
    arrivals sped up `speedup` times; Mooncake's prefix blocks replayed through an LRU prefix cache). Lengths are
    numbers or distributions as `throughput` takes them, cut at the model's context. The layout is the one given or
    the one `throughput` picks on `gpus`. `client_latency_s` (closed loop): time each request spends outside the
    engine's steps, holding its seat (default: the calibrated `request_latency_s`; 0 with `ideal`). Returns a
    `SimulateRun`: the `SimulationResult`'s fields plus the setup (layout, GPUs, precisions, hit rate, notes)."""
    from chalk.analyses.simulate_run import simulate_requests

    return simulate_requests(model, hardware, rate=rate, requests=requests, input_len=input_len,
                             output_len=output_len, trace=trace, speedup=speedup, layout=layout, gpus=gpus,
                             concurrency=concurrency, max_batch=max_batch, kv_capacity_tokens=kv_capacity_tokens,
                             prefill_chunk=prefill_chunk, precision=precision, kv_precision=kv_precision,
                             ideal=ideal, seed=seed, client_latency=client_latency_s, scheduler=scheduler,
                             period_s=period_s, prefix_cache=prefix_cache)
