"""The notebook API: `chalk.estimate(...)` and `chalk.sweep(...)`. The CLI is a thin face on these."""

from __future__ import annotations

import numpy as np

from chalk.analyses.roofline import Efficiency, RooflineResult, step
from chalk.specs.catalog import as_model, as_system
from chalk.specs.workload import positive


def default_efficiency(ideal: bool, model=None, hardware=None) -> Efficiency:
    """The pure roofline with `ideal`, else the chip's fitted efficiency (a `chalk measure` YAML) or chalk's
    calibrated efficiency for this model's depth."""
    from chalk.analyses.calibration import default_efficiency as _default

    return _default(ideal, as_model(model).num_layers if model is not None else None,
                    as_system(hardware).chip if hardware is not None else None)


def estimate(model, hardware, batch=1, context=4096, *, phase: str = "decode", chips: int | None = None,
             precision: str | None = None, kv_precision: str = "bf16", ideal: bool = False,
             efficiency: Efficiency | None = None, refined: bool = True, sparse_law: str | None = None,
             strict_fit: bool = False) -> RooflineResult:
    """Roofline estimate of one decode step (or a prefill of `batch` prompts of `context` tokens).

    model: a catalog id/alias, a path to a config.json (or its folder), or a ModelSpec.
    hardware: a chip id (its default system), a system id, a chip/system YAML path, or a System.
    """
    model, system = as_model(model), as_system(hardware)
    eff = efficiency or default_efficiency(ideal, model, system)
    return step(model, system, batch, context, phase=phase, chips=chips, precision=precision,
                kv_precision=kv_precision, efficiency=eff, refined=refined, sparse_law=sparse_law,
                strict_fit=strict_fit)


from chalk.analyses.sweep import SWEEP_COLUMNS  # noqa: E402,F401  (re-exported)


def sweep(model, hardware, batches=None, contexts=None, **kwargs):
    """Vectorised sweep over batch x context: a `SweepResult`, one row per (batch, context).

    `.rows()` and `.to_dict()` need nothing more; `.to_frame()` gives a pandas DataFrame (pandas optional).
    """
    from chalk.analyses.sweep import sweep_table

    batches = np.asarray(batches if batches is not None else 2 ** np.arange(0, 14), dtype=float)
    contexts = np.asarray(contexts if contexts is not None else [4096], dtype=float)
    positive("batch", batches)
    positive("context", contexts)
    B, L = np.meshgrid(batches, contexts, indexing="ij")
    return sweep_table(estimate(model, hardware, B.ravel(), L.ravel(), **kwargs))
