"""The notebook API: `chalk.estimate(...)` and `chalk.sweep(...)`. The CLI is a thin face on these."""

from __future__ import annotations

import numpy as np

from chalk.analyses.roofline import Efficiency, RooflineResult, step
from chalk.specs.catalog import as_model, as_system
from chalk.errors import InputError
from chalk.specs.workload import MAX_GRID_POINTS, positive


def default_efficiency(ideal: bool, model=None) -> Efficiency:
    """The pure roofline with `ideal`, else chalk's calibrated efficiency for this model's depth."""
    from chalk.analyses.calibration import default_efficiency as _default

    return _default(ideal, as_model(model).num_layers if model is not None else None)


def estimate(model, hardware, batch=1, context=4096, *, phase: str = "decode", chips: int | None = None,
             precision: str | None = None, kv_precision: str = "bf16", ideal: bool = False,
             efficiency: Efficiency | None = None, refined: bool = True, sparse_law: str | None = None,
             strict_fit: bool = False) -> RooflineResult:
    """Roofline estimate of one decode step (or a prefill of `batch` prompts of `context` tokens).

    model: a catalog id/alias, a path to a config.json (or its folder), or a ModelSpec.
    hardware: a chip id (its default system), a system id, a chip/system YAML path, or a System.
    """
    model = as_model(model)
    eff = efficiency or default_efficiency(ideal, model)
    return step(model, as_system(hardware), batch, context, phase=phase, chips=chips, precision=precision,
                kv_precision=kv_precision, efficiency=eff, refined=refined, sparse_law=sparse_law,
                strict_fit=strict_fit)


SWEEP_COLUMNS = ("batch", "context", "step_time_s", "compute_time_s", "weight_time_s", "kv_time_s", "bound",
                 "mfu", "mbu", "tokens_per_s", "user_tokens_per_s", "cost_per_mtok_usd", "fits")


def sweep(model, hardware, batches=None, contexts=None, **kwargs):
    """Vectorised sweep over batch x context: a pandas DataFrame, one row per (batch, context)."""
    import pandas as pd

    batches = np.asarray(batches if batches is not None else 2 ** np.arange(0, 14), dtype=float)
    contexts = np.asarray(contexts if contexts is not None else [4096], dtype=float)
    positive("batch", batches)
    positive("context", contexts)
    if batches.size * contexts.size > MAX_GRID_POINTS:
        raise InputError(f"a sweep of {batches.size:,} batches x {contexts.size:,} contexts is more than "
                         f"{MAX_GRID_POINTS:,} points")
    B, L = np.meshgrid(batches, contexts, indexing="ij")
    r = estimate(model, hardware, B.ravel(), L.ravel(), **kwargs)
    cols = {c: np.broadcast_to(np.asarray(getattr(r, c)), B.ravel().shape) for c in SWEEP_COLUMNS}
    df = pd.DataFrame(cols)
    df.attrs.update(model=r.model, hardware=r.hardware, chips=r.chips, phase=r.phase, precision=r.precision,
                    kv_precision=r.kv_precision, critical_batch=r.critical_batch,
                    balance_context=r.balance_context, efficiency=r.efficiency)
    return df
