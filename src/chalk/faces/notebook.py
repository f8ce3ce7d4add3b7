"""The report and the plots as Python calls (`chalk.report`, `chalk.plot`): the commands' options as checked
keywords. Here, not in `chalk.api`, because the plots and the report are faces built on the API (an import of
them from `chalk.api` would close a circle)."""

from __future__ import annotations

from chalk.errors import InputError
from chalk.specs.arguments import checked
from chalk.specs.workload import positive, short


def _scalars(**given) -> None:
    """The page and the graphs are drawn at one batch and one context (as `chalk report --batch` takes one): a list
    or an array is refused here, in one line, not a TypeError in the drawing (`check_arguments` takes grids)."""
    for name, v in given.items():
        if v is not None:
            positive(name, v, scalar=True)


@checked
def report(model, hardware, output=None, *, context: float = 4096, batch: float | None = None,
           gpus: int | None = None, precision: str | None = None, kv_precision: str | None = "auto",
           ideal: bool = False):
    """The self-contained HTML page replaying the lecture for a model on hardware (`chalk report`): the HTML text,
    or with `output` (a .html path) the path written (atomically). `batch`: the operating batch (default: the
    critical batch rounded up to a power of two); `context`, `gpus`, `precision`, `kv_precision` and `ideal` as
    `estimate`'s."""
    from chalk.faces.report import build_report, write_report

    _scalars(context=context, batch=batch)
    kw = dict(context=context, batch=batch, chips=gpus, precision=precision, kv_precision=kv_precision, ideal=ideal)
    if output is None:
        return build_report(model, hardware, **kw)
    return write_report(output, model, hardware, **kw)


def _plot_kinds():
    from chalk.faces.plots import kinds

    return kinds()


#: plot options that only some kinds draw with (`chalk plot` passes them the same way)
_PLOT_ONLY = {"batch": ("cost-vs-context", "batch-train"), "sparse_law": ("latency-vs-batch", "cost-vs-batch"),
              "stages": ("pipeline",), "microbatches": ("pipeline",), "schedule": ("pipeline",),
              "compare": ("pareto",)}


@checked
def plot(kind: str, output=None, *, model=None, hardware=None, context: float = 4096, batch: float | None = None,
         gpus: int | None = None, precision: str | None = None, kv_precision: str | None = "auto",
         ideal: bool = False, sparse_law: str | None = None, stages: int | None = None,
         microbatches: int | None = None, schedule: str | None = None, compare: str | None = None):
    """One of the lecture's graphs (`chalk plot`): `kind` one of `chalk.faces.notebook.plot_kinds()`; with
    `output` (.png or .svg) the path written, else the matplotlib Figure. `model`, `hardware`, `context`, `gpus`,
    `precision`, `kv_precision`, `ideal`: as `estimate`'s. `batch`: cost-vs-context and batch-train (default:
    the critical batch); `sparse_law`: latency- and cost-vs-batch; `stages`, `microbatches`, `schedule`: pipeline
    (default 4, 8, 'gpipe'); `compare`: pareto's other chips. An option the kind does not draw with is refused."""
    from chalk.faces.plots import figure
    from chalk.faces.plots import plot as _plot

    _scalars(context=context, batch=batch)
    kw = dict(model=model, hardware=hardware, context=context, chips=gpus, precision=precision,
              kv_precision=kv_precision, ideal=ideal)
    given = dict(batch=batch, sparse_law=sparse_law, stages=stages, microbatches=microbatches, schedule=schedule,
                 compare=compare)
    for name, v in given.items():
        if v is None:
            continue
        if kind not in _PLOT_ONLY[name]:
            raise InputError(f"{name} applies to the {' and '.join(_PLOT_ONLY[name])} plot"
                             f"{'s' if len(_PLOT_ONLY[name]) > 1 else ''}, not {short(kind)}")
        kw[name] = v
    return figure(kind, **kw) if output is None else _plot(kind, output, **kw)


def plot_kinds() -> list[str]:
    """The kinds `plot` draws."""
    return _plot_kinds()
