"""Figures for files: one matplotlib function per plot kind, written to PNG or SVG.

`plot(kind, output=path, model=..., hardware=..., ...)` is what `chalk plot KIND` and every `--plot FILE`
call. No formulas live here: every number comes from `chalk.api` (a RooflineResult over a numpy batch or
context array), an analysis module, or one of `chalk.equations`' named functions. matplotlib is imported
lazily (Agg backend) so the CLI stays fast.

Kinds that need analyses written elsewhere import them inside the function and raise a ChalkError naming
the module when it is not there yet: pareto (chalk.analyses.traffic.serving), batch-train (chalk.analyses.traffic.simulate),
training-pools (chalk.analyses.blackboard.training).

The kinds live in `plots_roofline` (latency-vs-batch, cost-vs-batch, cost-vs-context, hardware-ratio) and
`plots_deploy` (pipeline, pareto, batch-train, training-pools, `plot_measured`); style and the shared data and
axis helpers in `plots_common`. Everything is re-exported here: import from `chalk.faces.plots`.
"""

from __future__ import annotations

from pathlib import Path

from chalk.errors import InputError
from chalk.specs.files import atomic_path
# Re-exported so `chalk.faces.plots.X` keeps working for every name this module used to define (web_app,
# report and the tests import the data helpers, `_plt` and `_bubble_from_analyses` from here).
from chalk.faces.plots_common import (COLORS, FORMATS, STYLE, _accepts, _caption, _field, _finite, _fmt_axes,
                                      _formatter, _need, _plt, _require, _sci, _shade_no_fit, _vline, batch_range,
                                      caption_of, cost_components_per_mtok, default_batch, png_bytes,
                                      roofline_over_batch, roofline_over_context, title_of, whole)
from chalk.faces.plots_deploy import (DEFAULT_PARETO_HARDWARE, _bubble_from_analyses, _positive_int, batch_train,
                                      pareto, pipeline, pipeline_schedule, plot_measured, training_pools)
from chalk.faces.plots_roofline import (_attention_label, chip_ratio_rows, cost_vs_batch, cost_vs_context,
                                        hardware_ratio, latency_vs_batch)


# ------------------------------------------------------------------ entry point
def kinds() -> list[str]:
    return list(KINDS)


def plot(kind: str, output=None, *, model=None, hardware=None, context: float = 4096, chips=None, precision=None,
         kv_precision: str = "bf16", ideal: bool = False, **kw) -> Path:
    """Draw plot `kind` and write it to `output` (.png or .svg); returns the path written."""
    if output is None:
        output = f"{kind}.png"
    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"plot output must end in .png or .svg, got {str(output)!r}")
    fig = figure(kind, model=model, hardware=hardware, context=context, chips=chips, precision=precision,
                 kv_precision=kv_precision, ideal=ideal, **{k: v for k, v in kw.items() if k != "dpi"})
    try:
        if path.parent and not path.parent.exists():
            raise InputError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
        with atomic_path(path, "plot output") as tmp:
            fig.savefig(tmp, dpi=kw.get("dpi", 150), bbox_inches="tight")
    finally:
        _plt().close(fig)
    return path


def figure(kind: str, *, dpi=None, **kw):
    """The matplotlib Figure for `kind` (not saved); same keywords as `plot`. `dpi`: lay the figure out at the
    resolution it will be drawn at (`png_bytes`), so its text is measured once, at that resolution."""
    fn = KINDS.get(kind)
    if fn is None:
        from chalk.errors import UnknownNameError

        raise UnknownNameError("plot kind", kind, KINDS)
    import matplotlib

    _plt()
    with matplotlib.rc_context(dict(STYLE, **({"figure.dpi": float(dpi)} if dpi else {}))):
        return fn(**kw)


KINDS = {"latency-vs-batch": latency_vs_batch, "cost-vs-batch": cost_vs_batch, "cost-vs-context": cost_vs_context,
         "pareto": pareto, "hardware-ratio": hardware_ratio, "pipeline": pipeline, "batch-train": batch_train,
         "training-pools": training_pools}
#: Kinds that need only the roofline and the catalog (the rest wait on other analyses).
ROOFLINE_KINDS = ("latency-vs-batch", "cost-vs-batch", "cost-vs-context", "hardware-ratio", "pipeline")
