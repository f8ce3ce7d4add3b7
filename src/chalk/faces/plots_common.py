"""Shared pieces of `chalk.faces.plots`: style, colours, the data helpers, and the axis helpers.

No formulas live here: every number comes from `chalk.api` (a RooflineResult over a numpy batch or context
array) or an analysis module. matplotlib is imported lazily inside the functions (Agg backend) so the CLI
stays fast. Import through `chalk.faces.plots`, which re-exports everything here.
"""

from __future__ import annotations

import inspect

import numpy as np

from chalk.errors import ChalkError, InputError
from chalk.faces.fmt import num, seconds, si, usd

FORMATS = (".png", ".svg")
COLORS = {"compute": "#1f77b4", "weights": "#ff7f0e", "kv": "#2ca02c", "memory": "#d62728", "step": "#111111",
          "sparse": "#9467bd", "grey": "#888888"}
STYLE = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8.5,
         "axes.spines.top": False, "axes.spines.right": False}


# ------------------------------------------------------------------ shared data (also used by web and report)
def roofline_over_batch(model, hardware, context=4096, *, batches=None, chips=None, precision=None,
                        kv_precision="bf16", ideal=False, sparse_law=None, eplb=None):
    """The roofline (a RooflineResult of arrays) over a log-spaced batch range reaching past the critical batch.
    `eplb`: as `chalk.estimate`'s (a layout's expert-load balancer)."""
    from chalk import api

    kw = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal, sparse_law=sparse_law,
              eplb=eplb)
    if batches is None:
        r1 = api.estimate(model, hardware, 1, context, **kw)
        batches = batch_range(r1)
    return api.estimate(model, hardware, np.asarray(batches, dtype=float), context, **kw)


def batch_range(r, points: int = 160) -> np.ndarray:
    """Log-spaced batches from 1 to ~16x the larger critical batch (a power of two, 1k..1M)."""
    marks = [v for v in (r.critical_batch, _finite(r.critical_batch_with_kv)) if v]
    top = 2 ** int(np.clip(np.ceil(np.log2(max(marks + [64.0]) * 16)), 10, 20))
    return np.geomspace(1, top, points)


def roofline_over_context(model, hardware, batch, *, contexts=None, chips=None, precision=None,
                          kv_precision="bf16", ideal=False, sparse_law=None, eplb=None):
    """The roofline over a log-spaced context range (256 tokens .. 2M) at a fixed batch."""
    from chalk import api

    contexts = np.geomspace(256, 2 ** 21, 120) if contexts is None else np.asarray(contexts, dtype=float)
    return api.estimate(model, hardware, batch, contexts, chips=chips, precision=precision,
                        kv_precision=kv_precision, ideal=ideal, sparse_law=sparse_law, eplb=eplb)


def default_batch(r) -> int:
    """A round operating batch: the critical batch rounded up to a power of two."""
    return int(2 ** np.ceil(np.log2(max(r.critical_batch, 1.0))))


def cost_components_per_mtok(r, hardware):
    """Eq. 4 applied to each time component of a decode roofline: {name: $ per M tokens over r.batch}."""
    from chalk.specs.catalog import as_system
    from chalk.equations.roofline import cost_per_token_usd

    price = as_system(hardware).chip.price_usd_per_s
    n = r.chips
    return {k: cost_per_token_usd(getattr(r, f"{k}_time_s"), price, n, r.batch) * 1e6
            for k in ("compute", "weight", "kv", "memory")}


def chips_label(chips, hardware) -> str:
    """'8 × h100-sxm (hgx-h100)': the count is of chips, never of systems ("72 × gb200-nvl72" read as 72 racks)."""
    from chalk.specs.catalog import as_system

    try:
        system = as_system(hardware)
    except Exception:  # noqa: BLE001 - a label must not fail a plot that already computed
        return f"{chips} × {hardware}"
    chip = system.chip.id
    n = int(chips) if float(chips) == int(chips) else chips
    if system.chips and n < system.chips:  # a layout on part of the scale-up domain: say of how many
        return f"{n} of {system.chips} × {chip} GPUs of {system.id}"
    return f"{n} × {chip} GPU{'s' if n != 1 else ''}" + (f" of {system.id}" if system.id != chip else "")


def title_of(r, extra: str = "") -> str:
    lay = getattr(r, "layout", None)
    lay = lay.get("label") if isinstance(lay, dict) else None
    t = f"{r.model} on {chips_label(r.chips, r.hardware)}" + (f" · layout {lay}" if lay else "") + \
        f" · {r.precision} weights ({r.compute_precision} compute), {r.kv_precision} KV"
    return t + (f" · {extra}" if extra else "")


def caption_of(r) -> str:
    label = r.efficiency
    what = "pure roofline at datasheet peaks" if label == "ideal" else "calibrated achieved fractions of peak"
    return f"efficiency: {label} ({what}); weights read: {r.weights_read}. chalk roofline, eq. 1-5 of the lecture."


def whole(v) -> str:
    """A count for a label: 5,726 / 299.8 / 12.5."""
    f = _finite(v)
    return "n/a" if f is None else f"{f:,.0f}" if abs(f) >= 1000 else num(f, 4)


def _finite(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


# ------------------------------------------------------------------ axis helpers (matplotlib imported lazily)
def _plt():
    """pyplot, on the Agg backend unless the caller (a notebook) already chose one."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, dpi: float) -> bytes:
    """`fig` as PNG at `dpi`, cropped to what it draws plus `savefig.pad_inches`, as `savefig(bbox_inches="tight")`
    crops it, from one draw: savefig's tight mode draws the figure twice (once only to place it, then for the pixels)
    and measures every artist a third time; here the crop is read off the drawn pixels. A figure with a label past
    its canvas, or ink up to its edge, goes through savefig, which grows the canvas to hold it."""
    import io

    import matplotlib

    canvas = fig.canvas
    if hasattr(canvas, "buffer_rgba"):  # Agg and the backends built on it
        fig.set_dpi(dpi)
        canvas.draw()
        img = np.asarray(canvas.buffer_rgba())
        face = np.round(np.asarray(matplotlib.colors.to_rgba(fig.get_facecolor())) * 255).astype(np.uint8)
        H, W = img.shape[:2]
        ink = np.ascontiguousarray(img).view(np.uint32).reshape(H, W) != face.view(np.uint32)[0]
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        inside = rows.size and rows[0] > 0 and rows[-1] < H - 1 and cols[0] > 0 and cols[-1] < W - 1
        if inside and not _labels_past_canvas(fig, canvas.get_renderer(), W, H):
            from PIL import Image

            pad = int(round(matplotlib.rcParams["savefig.pad_inches"] * dpi))
            h, w = rows[-1] + 1 - rows[0], cols[-1] + 1 - cols[0]
            out = np.empty((h + 2 * pad, w + 2 * pad, 4), dtype=np.uint8)
            out[...] = face
            out[pad:pad + h, pad:pad + w] = img[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
            im = Image.fromarray(out, "RGBA")
            buf = io.BytesIO()
            # an opaque figure as RGB, at zlib level 3: a quarter less to compress and 8% fewer bytes than savefig's
            # RGBA at level 6, the same pixels
            (im.convert("RGB") if face[3] == 255 else im).save(buf, format="png", compress_level=3)
            return buf.getvalue()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def _labels_past_canvas(fig, renderer, W, H) -> bool:
    """Whether a text, annotation or legend (the artists placed freely, not by the layout) reaches past the canvas:
    one wholly outside leaves no ink at the edge to give it away."""
    arts = [*fig.texts, *fig.legends]
    for ax in fig.axes:
        arts += [*ax.texts, ax.get_legend()]
    for a in arts:
        if a is not None and a.get_visible():
            bb = a.get_window_extent(renderer)
            if bb.x0 < 0 or bb.y0 < 0 or bb.x1 > W or bb.y1 > H:
                return True
    return False


def _need(what: str, **values):
    for k, v in values.items():
        if v is None:
            raise InputError(f"plot kind {what} needs --{k}")


def _fmt_axes(ax, x=None, y=None):
    from matplotlib.ticker import FuncFormatter

    fmts = {"batch": lambda v, _: si(v, digits=3), "tokens": lambda v, _: si(v, digits=3),
            "time": lambda v, _: seconds(v), "usd": lambda v, _: usd(v), "pct": lambda v, _: f"{v:.0%}"}
    if x:
        ax.xaxis.set_major_formatter(FuncFormatter(fmts[x]))
    if y:
        ax.yaxis.set_major_formatter(FuncFormatter(fmts[y]))
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_minor_locator(_in_view(axis.get_minor_locator()))


def _in_view(locator):
    """A log axis' minor locator, cheaper to draw: the locations in the view only, and on a view of three decades or
    more only 2x and 5x each decade (plotly's "D2"), not 2x-9x.

    matplotlib makes and updates a tick (five artists) for every location its locator lists, at every layout and
    draw pass, and draws only those in view: the default lists 2x-9x of every decade the view touches, a fifth to a
    third of them outside it. Over three or more decades, eight faint lines a decade are a fill, not a scale to read
    by, and they were a third of a roofline figure's drawing time; narrower views keep all eight (and their labels,
    which matplotlib shows under a decade)."""
    from matplotlib.ticker import Locator, LogLocator

    class InView(Locator):
        def __init__(self, inner):
            self.inner = inner
            self.wide = None
            if isinstance(inner, LogLocator) and getattr(inner, "_subs", None) == "auto":
                self.wide = LogLocator(base=inner._base, subs=(2.0, 5.0), numticks=inner.numticks)

        def set_axis(self, axis):
            super().set_axis(axis)
            for loc in (self.inner, self.wide):
                if loc is not None:
                    loc.set_axis(axis)

        def __call__(self):
            return self.tick_values(*self.axis.get_view_interval())

        def tick_values(self, vmin, vmax):
            lo, hi = sorted((vmin, vmax))
            wide = self.wide is not None and lo > 0 and hi >= 1000 * lo
            locs = np.asarray((self.wide if wide else self.inner).tick_values(vmin, vmax), dtype=float)
            # a margin past the view: matplotlib's own test keeps ticks within a hair of the edge
            return locs[(locs >= lo - 1e-6 * abs(lo)) & (locs <= hi + 1e-6 * abs(hi))]

    return InView(locator)


def _tight(fig, rect):
    """`fig.tight_layout(rect=rect)`, measuring the figure once instead of twice when its axes sit in one row.

    Given a rect, matplotlib measures every artist for the margins the labels need, then measures them all again,
    on the unchanged figure, to fit those margins inside the rect: for one row of axes the second pass only shifts
    the first pass's margins by the rect (the column spacing depends on the left and right margins alone, which the
    shift keeps). Here the shift is applied directly, in matplotlib's own arithmetic; more rows, or a layout
    matplotlib would give up on, go through `fig.tight_layout(rect=rect)` itself."""
    specs = [ax.get_subplotspec() for ax in fig.axes]
    if not specs or None in specs or any(ss.get_gridspec().nrows != 1 for ss in specs):
        fig.tight_layout(rect=rect)
        return
    p = fig.subplotpars
    before = (p.left, p.bottom, p.right, p.top)
    fig.tight_layout()
    if (p.left, p.bottom, p.right, p.top) == before:  # matplotlib left the layout alone (it warned): so does the rect
        return
    left, bottom, right, top = rect
    left, bottom = left + p.left, bottom + p.bottom
    right, top = right - (1 - p.right), top - (1 - p.top)
    m_right, m_top = 1 - right, 1 - top
    if left + m_right >= 1 or bottom + m_top >= 1:  # no room left inside the rect: matplotlib's answer
        fig.subplots_adjust(*before)
        fig.tight_layout(rect=rect)
        return
    fig.subplots_adjust(left=left, bottom=bottom, right=1 - m_right, top=1 - m_top)


def _caption(fig, text: str):
    import textwrap

    width = int(fig.get_figwidth() * 17)
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(text, width)), fontsize=7.5, color="#555555", ha="left",
             va="bottom")


def _shade_no_fit(ax, x, fits, label="does not fit in HBM"):
    fits = np.asarray(fits, dtype=bool)
    if fits.all():
        return
    bad = x[~fits]
    ax.axvspan(bad.min(), x.max(), color="#bbbbbb", alpha=0.25, lw=0, label=label)


def _vline(ax, x, text, color, y_frac=0.97, ls=":"):
    if x is None:
        return
    ax.axvline(x, color=color, ls=ls, lw=1.3)
    ax.text(x * 1.07, y_frac, text, transform=ax.get_xaxis_transform(), color=color, fontsize=8.5, va="top",
            ha="left", bbox=dict(fc="white", ec="none", alpha=0.8, pad=1))


# ------------------------------------------------------------------ helpers for kinds waiting on other analyses
def _field(obj, *names, default=None):
    for n in names:
        if isinstance(obj, dict) and n in obj:
            return obj[n]
        if hasattr(obj, "columns") and n in getattr(obj, "columns"):
            return np.asarray(obj[n])
        if not isinstance(obj, dict) and hasattr(obj, n):
            return getattr(obj, n)
    return default


def _accepts(fn, kwargs: dict) -> dict:
    """The subset of kwargs that fn's signature accepts (for analyses whose signature may grow)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def _require(module: str, func: str, kind: str):
    import importlib

    try:
        mod = importlib.import_module(f"chalk.analyses.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"chalk.analyses.{module}":
            raise
        mod = None
    fn = getattr(mod, func, None)
    if fn is None:
        raise ChalkError(f"plot kind {kind} needs chalk.analyses.{module}.{func}")
    return fn


# ------------------------------------------------------------------ tick labels
def _sci(v) -> str:
    return f"{v:.3g}".replace("e+", "e")


def _formatter(fmt):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: fmt(v))
