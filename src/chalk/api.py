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


def simulate(model, hardware, *, rate: float = 100.0, requests: int = 10_000, input_len=512, output_len=128,
             layout=None, concurrency: int | None = None, max_batch: int = 256, prefill_chunk: int | None = None,
             precision: str | None = None, kv_precision: str | None = "auto", ideal: bool = False, seed: int = 0,
             client_latency_s: float | None = None):
    """Requests through continuous batching on one replica (`chalk.analyses.simulate`): Poisson arrivals at `rate`,
    or a closed loop of `concurrency` requests in flight; step times from the step model on `layout` (default: the
    aggregate roofline of the hardware's chips). `client_latency_s` (closed loop): time each request spends
    outside the engine's steps, holding its seat (default: the calibrated `request_latency_s`, as `throughput
    --concurrency` uses; 0 with `ideal`)."""
    import numpy as np

    from chalk.analyses import simulate as sim
    from chalk.specs.catalog import as_system

    m, system = as_model(model), as_system(hardware)
    n = int(positive("requests", requests, integer=True, scalar=True))
    if concurrency is not None:
        if layout is None:
            from chalk.errors import InputError

            raise InputError("a closed loop (concurrency) needs a layout")
        max_batch = int(positive("concurrency", concurrency, integer=True, scalar=True))
    if layout is not None:
        from chalk.analyses.serving import replica_step_cost

        sc = replica_step_cost(m, system, layout, max_batch, input_len, output_len, precision=precision,
                               kv_precision=kv_precision, ideal=ideal)
    else:
        from chalk.analyses.parallel import resolve_kv_precision
        from chalk.analyses.model_sizes import ModelSizes

        kvp = resolve_kv_precision(kv_precision, precision or ModelSizes(m).default_precision(), system)
        sc = sim.StepCost.from_roofline(m, system, precision=precision, kv_precision=kvp,
                                        efficiency=default_efficiency(ideal, m))
    if concurrency is not None:  # closed loop: a benchmark client's queue, `concurrency` seats, latency from send
        reqs = sim.closed_loop_requests(max_batch, n, input_len, output_len, seed)
    else:
        reqs = sim.poisson_arrivals(rate, n, input_len, output_len, seed)
    return sim.simulate_continuous(reqs, sc, max_batch=max_batch, prefill_chunk_tokens=prefill_chunk,
                                   closed_loop=concurrency is not None,
                                   client_latency_s=closed_loop_client_latency(concurrency, client_latency_s, ideal))


def closed_loop_client_latency(concurrency, client_latency_s: float | None, ideal: bool) -> float:
    """The client latency a closed loop of `concurrency` seats replays with: the one given, else the calibrated
    request latency outside the engine's steps (0 for the ideal roofline, and for open-loop arrivals)."""
    if concurrency is None:
        if client_latency_s is not None:
            raise InputError("a client latency applies to a closed loop: give a concurrency (--concurrency)")
        return 0.0
    if client_latency_s is not None:
        return float(positive("client latency (s)", client_latency_s, allow_zero=True, scalar=True))
    from chalk.analyses.calibration import calibration

    return calibration(ideal).request_latency_s
