"""Figures for files: one matplotlib function per plot kind, written to PNG or SVG.

`plot(kind, output=path, model=..., hardware=..., ...)` is what `chalk plot KIND` and every `--plot FILE`
call. No formulas live here: every number comes from `chalk.api` (a RooflineResult over a numpy batch or
context array), an analysis module, or one of `chalk.equations`' named functions. matplotlib is imported
lazily (Agg backend) so the CLI stays fast.

Kinds that need analyses written elsewhere import them inside the function and raise a ChalkError naming
the module when it is not there yet: pareto (chalk.analyses.serving), batch-train (chalk.analyses.simulate),
training-pools (chalk.analyses.training).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from chalk.errors import ChalkError, InputError
from chalk.faces.cli_common import num, seconds, si, usd

FORMATS = (".png", ".svg")
COLORS = {"compute": "#1f77b4", "weights": "#ff7f0e", "kv": "#2ca02c", "memory": "#d62728", "step": "#111111",
          "sparse": "#9467bd", "grey": "#888888"}


# ------------------------------------------------------------------ shared data (also used by web and report)
def roofline_over_batch(model, hardware, context=4096, *, batches=None, chips=None, precision=None,
                        kv_precision="bf16", ideal=False, sparse_law=None):
    """The roofline (a RooflineResult of arrays) over a log-spaced batch range reaching past the critical batch."""
    from chalk import api

    kw = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal, sparse_law=sparse_law)
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
                          kv_precision="bf16", ideal=False, sparse_law=None):
    """The roofline over a log-spaced context range (256 tokens .. 2M) at a fixed batch."""
    from chalk import api

    contexts = np.geomspace(256, 2 ** 21, 120) if contexts is None else np.asarray(contexts, dtype=float)
    return api.estimate(model, hardware, batch, contexts, chips=chips, precision=precision,
                        kv_precision=kv_precision, ideal=ideal, sparse_law=sparse_law)


def default_batch(r) -> int:
    """A round operating batch: the critical batch rounded up to a power of two."""
    return int(2 ** np.ceil(np.log2(max(r.critical_batch, 1.0))))


def cost_components_per_mtok(r, hardware):
    """Eq. 4 applied to each time component of a decode roofline: {name: $ per M tokens over r.batch}."""
    from chalk.api import _system
    from chalk.equations.roofline import cost_per_token_usd

    price = _system(hardware).chip.price_usd_per_s
    n = r.chips
    return {k: cost_per_token_usd(getattr(r, f"{k}_time_s"), price, n, r.batch) * 1e6
            for k in ("compute", "weight", "kv", "memory")}


def title_of(r, extra: str = "") -> str:
    t = f"{r.model} on {r.chips} × {r.hardware} · {r.precision} weights ({r.compute_precision} compute), " \
        f"{r.kv_precision} KV"
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
                 kv_precision=kv_precision, ideal=ideal, **kw)
    try:
        if path.parent and not path.parent.exists():
            raise InputError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
        fig.savefig(path, dpi=kw.get("dpi", 150), bbox_inches="tight")
    finally:
        _plt().close(fig)
    return path


def figure(kind: str, **kw):
    """The matplotlib Figure for `kind` (not saved); same keywords as `plot`."""
    fn = KINDS.get(kind)
    if fn is None:
        from chalk.errors import UnknownNameError

        raise UnknownNameError("plot kind", kind, KINDS)
    kw = {k: v for k, v in kw.items() if k != "dpi"}
    import matplotlib

    _plt()
    with matplotlib.rc_context(STYLE):
        return fn(**kw)


STYLE = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8.5,
         "axes.spines.top": False, "axes.spines.right": False}


def _plt():
    """pyplot, on the Agg backend unless the caller (a notebook) already chose one."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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


# ------------------------------------------------------------------ kinds: roofline only
def latency_vs_batch(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                     ideal=False, **kw):
    """The blackboard's first graph: compute line, weight-fetch floor, KV-fetch slope, their max."""
    _need("latency-vs-batch", model=model, hardware=hardware)
    r = roofline_over_batch(model, hardware, context, chips=chips, precision=precision,
                            kv_precision=kv_precision, ideal=ideal, sparse_law=kw.get("sparse_law"))
    plt = _plt()
    B = np.asarray(r.batch)
    fig, ax = plt.subplots(figsize=(9, 5.6))
    ax.loglog(B, r.compute_time_s, color=COLORS["compute"], lw=1.8, label="compute: FLOPs / peak (eq. 2)")
    moe = str(r.weights_read).startswith("refined")
    ax.loglog(B, r.weight_time_s, color=COLORS["weights"], lw=1.6, ls="--",
              label=f"weight fetch: {'bytes of experts touched' if moe else 'weight bytes'} / HBM bw (eq. 3, 1st term)")
    ax.loglog(B, r.kv_time_s, color=COLORS["kv"], lw=1.6, ls="--",
              label=f"KV fetch: B·L·KV bytes / HBM bw (eq. 3, 2nd term), L = {num(context)}")
    ax.loglog(B, r.memory_time_s, color=COLORS["memory"], lw=1.6, label="memory = weight fetch + KV fetch")
    ax.loglog(B, r.step_time_s, color=COLORS["step"], lw=7, alpha=0.25, zorder=1, solid_capstyle="butt",
              label="step time = max (eq. 1)" + ("" if r.efficiency == "ideal" else " + per-step overhead"))
    _shade_no_fit(ax, B, r.fits, f"does not fit in {si(r.hbm_bytes, 'B')} HBM")
    _vline(ax, r.critical_batch, f"critical batch B* ≈ {whole(r.critical_batch)}\n(eq. 5, weights only)",
           COLORS["compute"])
    ckv = _finite(np.asarray(r.critical_batch_with_kv).ravel()[0])
    if ckv:
        _vline(ax, ckv, f"with KV at L = {num(context)}:\nB* = {whole(ckv)}", COLORS["kv"], y_frac=0.80)
    else:
        ax.text(0.99, 0.03, f"at L = {num(context)} the KV fetch alone outgrows compute:\n"
                f"memory-bound at every batch (balance context {num(r.balance_context)} tokens)",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5, color=COLORS["kv"])
    floor = float(np.asarray(r.step_time_s)[0])
    why = ("read the weights one token touches" if moe else "read every weight once") \
        + ("" if r.efficiency == "ideal" else ",\nplus the calibrated per-step overhead")
    ax.annotate(f"batch 1: {seconds(floor)}, the latency floor\n({why})", xy=(B[0], floor),
                xytext=(B[0] * 1.6, floor * 0.35), fontsize=8.5, arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.set_xlabel("batch B (sequences decoded together)")
    ax.set_ylabel("time per decode step")
    ax.set_ylim(max(np.min(r.compute_time_s), floor * 1e-3), None)
    _fmt_axes(ax, "batch", "time")
    ax.set_title(title_of(r, f"context {num(context)}") + "\nlatency vs batch", loc="left")
    ax.legend(loc="upper left", framealpha=0.9)
    _caption(fig, caption_of(r))
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def cost_vs_batch(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                  ideal=False, **kw):
    """Cost per token vs batch: the weight-fetch hyperbola falling to the compute floor (eq. 4)."""
    _need("cost-vs-batch", model=model, hardware=hardware)
    r = roofline_over_batch(model, hardware, context, chips=chips, precision=precision,
                            kv_precision=kv_precision, ideal=ideal, sparse_law=kw.get("sparse_law"))
    c = cost_components_per_mtok(r, hardware)
    plt = _plt()
    B = np.asarray(r.batch)
    fig, ax = plt.subplots(figsize=(9, 5.6))
    ax.loglog(B, c["compute"], color=COLORS["compute"], lw=1.8, label="compute per token (flat)")
    ax.loglog(B, c["weight"], color=COLORS["weights"], lw=1.6, ls="--", label="weight fetch per token (hyperbola)")
    ax.loglog(B, c["kv"], color=COLORS["kv"], lw=1.6, ls="--", label=f"KV fetch per token (flat), L = {num(context)}")
    ax.loglog(B, c["memory"], color=COLORS["memory"], lw=1.6, label="weights + KV per token")
    cost = np.asarray(r.cost_per_mtok_usd)
    ax.loglog(B, cost, color=COLORS["step"], lw=7, alpha=0.25, zorder=1, solid_capstyle="butt",
              label="cost per token = max (eq. 4)")
    _shade_no_fit(ax, B, r.fits, f"does not fit in {si(r.hbm_bytes, 'B')} HBM")
    _vline(ax, r.critical_batch, f"critical batch B* ≈ {whole(r.critical_batch)}\n(eq. 5)", COLORS["compute"])
    # the floor a deployment can reach: the cheapest batch that still fits in HBM
    fits = np.broadcast_to(np.asarray(r.fits, dtype=bool), cost.shape)
    i_floor = int(np.argmin(np.where(fits, cost, np.inf))) if fits.any() else len(cost) - 1
    b1, floor = float(cost[0]), float(cost[i_floor])
    where = f"at batch {int(B[i_floor]):,}" if fits.any() else "(nothing fits)"
    ax.annotate(f"batch 1: {usd(b1)} per M tokens", xy=(B[0], b1), xytext=(B[0] * 2.2, b1 * 1.05), fontsize=9,
                arrowprops=dict(arrowstyle="->", lw=0.8), va="center")
    ax.annotate(f"floor ≈ {usd(floor)} per M tokens {where}\nbatch 1 costs {num(b1 / floor, 3)}× the floor",
                xy=(B[i_floor], floor), xytext=(B[i_floor] / 30, floor * 6), fontsize=9, ha="center",
                arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.set_ylim(max(min(np.min(c["compute"]), np.min(c["kv"]), floor) / 3, b1 * 1e-6), b1 * 4)
    ax.set_xlabel("batch B (sequences decoded together)")
    ax.set_ylabel("$ per million output tokens")
    _fmt_axes(ax, "batch", "usd")
    ax.set_title(title_of(r, f"context {num(context)}") + "\ncost per output token vs batch", loc="left")
    ax.legend(loc="lower left", framealpha=0.9)
    _caption(fig, caption_of(r) + " Rental price: catalog $/chip-hour × chips × step time / tokens.")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def cost_vs_context(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                    ideal=False, batch=None, **kw):
    """Cost per token and MFU vs context at a fixed batch: dense vs sqrt-law sparse attention."""
    _need("cost-vs-context", model=model, hardware=hardware)
    from chalk import api

    common = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    r1 = api.estimate(model, hardware, 1, context, **common)
    batch = float(batch) if batch else default_batch(r1)
    dense = roofline_over_context(model, hardware, batch, **common)
    sparse = roofline_over_context(model, hardware, batch, sparse_law="sqrt", **common)
    attn = _attention_label(model)
    plt = _plt()
    L = np.asarray(dense.context)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5.4))
    ax.loglog(L, dense.cost_per_mtok_usd, color=COLORS["step"], lw=2.4, label=f"{attn} (as configured)")
    ax.loglog(L, sparse.cost_per_mtok_usd, color=COLORS["sparse"], lw=2.0, ls="--",
              label="sparse attention: √L law (KV read grows as √L)")
    ax2.semilogx(L, dense.mfu, color=COLORS["step"], lw=2.4, label=f"{attn} (as configured)")
    ax2.semilogx(L, sparse.mfu, color=COLORS["sparse"], lw=2.0, ls="--", label="sparse attention: √L law")
    for a, yf in ((ax, 0.97), (ax2, 0.3)):
        _shade_no_fit(a, L, dense.fits, f"batch {num(batch)} does not fit in {si(dense.hbm_bytes, 'B')} HBM")
        _vline(a, _finite(dense.balance_context), f"balance context\n{whole(dense.balance_context)} tokens",
               COLORS["kv"], y_frac=yf)
        bs = _finite(sparse.balance_context)
        if bs and bs < L.max():
            _vline(a, bs, f"√L balance context\n{whole(bs)} tokens", COLORS["sparse"], y_frac=yf - 0.2)
    ax.set_xlabel("context length L (tokens)")
    ax.set_ylabel("$ per million output tokens")
    ax2.set_xlabel("context length L (tokens)")
    ax2.set_ylabel("MFU (model FLOP/s ÷ peak)")
    ax2.set_ylim(0, 1.05 * max(np.nanmax(dense.mfu), np.nanmax(sparse.mfu), 0.05))
    _fmt_axes(ax, "tokens", "usd")
    _fmt_axes(ax2, "tokens", "pct")
    ax.set_title("cost per output token vs context", loc="left")
    ax2.set_title("MFU vs context: past the balance context the KV fetch sets the pace", loc="left")
    h, lab = ax2.get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=3, frameon=False, bbox_to_anchor=(0.5, 0.045))
    fig.suptitle(title_of(dense, f"batch {num(batch)}"), x=0.01, ha="left", fontsize=11)
    _caption(fig, caption_of(dense) + " Balance context: one sequence's KV read time = its compute time.")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def _attention_label(model) -> str:
    from chalk.api import _model

    m = _model(model)
    s = f"{m.attention.upper()} attention"
    if getattr(m, "sliding_window", None):
        s += f" (+ sliding window {num(m.sliding_window)})"
    if getattr(m, "is_dsa", False):
        s += f" (+ DSA top-{num(m.index_topk)})"
    return s


def hardware_ratio(**kw):
    """FLOP/s per byte/s, multiplies per weight byte, and HBM drain time, for every catalog chip."""
    rows = chip_ratio_rows()
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 6.4), sharey=True)
    y = np.arange(len(rows))[::-1]
    vendors = list(dict.fromkeys(r["vendor"] for r in rows))
    palette = dict(zip(vendors, ["#ed1c24", "#4285f4", "#76b900", "#999999", "#9467bd"]))
    col = [palette[r["vendor"]] for r in rows]
    panels = [("flops_per_byte", 1, "FLOP/s per byte/s of HBM\n(dense peak at native precision ÷ HBM bandwidth)",
               lambda v, r: f" {v:,.0f} ({r['native_precision']})"),
              ("dense_critical_batch", 1, "multiplies per weight byte fetched\n(= critical batch of a dense model, "
                                          "eq. 5)", lambda v, r: f" {v:,.0f}"),
              ("hbm_drain_time_s", 1e3, "HBM drain time (ms)\n(HBM capacity ÷ HBM bandwidth)",
               lambda v, r: f" {v:.1f} ms")]
    for ax, (key, scale, label, fmt) in zip(axes, panels):
        vals = np.asarray([r[key] for r in rows]) * scale
        ax.barh(y, vals, color=col, zorder=2)
        for yi, v, r in zip(y, vals, rows):
            ax.text(v, yi, fmt(v, r), va="center", fontsize=8)
        ax.set_xlabel(label)
        ax.set_xlim(0, max(vals.max(), 20 if key == "hbm_drain_time_s" else 0) * 1.3)
        ax.grid(True, axis="x", alpha=0.35)
    axes[1].axvline(300, color="k", ls=":", lw=1.2, zorder=3)
    axes[1].text(300, 1.0, " lecture: ~300", transform=axes[1].get_xaxis_transform(), fontsize=8.5, va="bottom")
    axes[2].axvspan(15, 20, color="#cccccc", alpha=0.6, lw=0, zorder=0)
    axes[2].text(17.5, 1.0, "lecture: 15-20 ms", transform=axes[2].get_xaxis_transform(), fontsize=8.5,
                 va="bottom", ha="center")
    axes[0].set_yticks(y, [r["label"] for r in rows])
    handles = [plt.Rectangle((0, 0), 1, 1, color=palette[v]) for v in vendors]
    axes[2].legend(handles, vendors, loc="lower right", framealpha=0.9)
    fig.suptitle("Hardware ratios across chip generations (every catalog chip; per vendor, by HBM bandwidth)",
                 x=0.01, ha="left", fontsize=11)
    _caption(fig, "Native precision: the narrowest float format that runs faster than the next wider one. "
                  "Datasheet dense peaks and HBM figures from the chip catalog (chalk.analyses.hardware_facts).")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    return fig


def chip_ratio_rows() -> list[dict]:
    """chalk.analyses.hardware_facts.chip_facts for every catalog chip, sorted by vendor and HBM bandwidth."""
    from chalk.analyses.hardware_facts import chip_facts
    from chalk.specs import catalog

    rows = []
    for cid in catalog.chip_ids():
        c = catalog.load_chip(cid)
        rows.append(dict(chip_facts(c), id=c.id, label=c.id, vendor=c.vendor or "other",
                         bw=c.hbm_bandwidth_bytes_per_s))
    rows.sort(key=lambda r: (r["vendor"], r["bw"], r["id"]))
    return rows


# ------------------------------------------------------------------ kinds: pipeline (drawing; bubble from parallel)
def pipeline_schedule(stages: int, microbatches: int, schedule: str = "gpipe", backward: float = 2.0):
    """The timeline of a pipeline: [(stage, 'F'|'B', microbatch, start, duration)], forward = 1 time unit.

    A drawing aid, not a model: each stage runs its ops in order (GPipe: all forwards then all backwards;
    1F1B: PP-1-s warm-up forwards, then one forward / one backward), each op starting once its input
    (the previous stage's forward, the next stage's backward) has finished.
    """
    if schedule not in ("gpipe", "1f1b"):
        raise InputError(f"pipeline schedule must be 'gpipe' or '1f1b', got {schedule!r}")
    S = int(_positive_int("stages", stages))
    M = int(_positive_int("microbatches", microbatches))
    orders = []
    for s in range(S):
        if schedule == "gpipe":
            orders.append([("F", m) for m in range(M)] + [("B", m) for m in range(M)])
        else:
            w = min(S - 1 - s, M)
            o = [("F", m) for m in range(w)]
            for i in range(M - w):
                o += [("F", w + i), ("B", i)]
            orders.append(o + [("B", m) for m in range(M - w, M)])
    done, free, ops, nxt = {}, [0.0] * S, [], [0] * S
    while any(nxt[s] < len(orders[s]) for s in range(S)):
        progressed = False
        for s in range(S):
            while nxt[s] < len(orders[s]):
                k, m = orders[s][nxt[s]]
                dep = (s - 1, "F", m) if k == "F" and s > 0 else (s + 1, "B", m) if k == "B" and s < S - 1 else None
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done.get(dep, 0.0))
                dur = 1.0 if k == "F" else float(backward)
                ops.append((s, k, m, start, dur))
                done[(s, k, m)] = free[s] = start + dur
                nxt[s] += 1
                progressed = True
        if not progressed:  # pragma: no cover - both orders are deadlock-free
            raise ChalkError("pipeline schedule deadlocked")
    return ops


def _positive_int(name, v):
    from chalk.specs.workload import positive

    return positive(name, v, integer=True)


def _bubble_from_analyses(stages, microbatches):
    """(PP-1)/(M+PP-1) from chalk's own equations when present, else None."""
    import importlib

    for mod in ("chalk.analyses.parallel", "chalk.equations.parallel", "chalk.equations.training"):
        try:
            fn = getattr(importlib.import_module(mod), "pipeline_bubble_fraction", None)
        except ImportError:
            continue
        if fn is not None:
            return float(fn(stages, microbatches)), mod
    return None


def pipeline(stages=4, microbatches=8, schedule="gpipe", **kw):
    """The bubble timeline for PP stages and M micro-batches (GPipe or 1F1B)."""
    ops = pipeline_schedule(stages, microbatches, schedule)
    S, M = int(stages), int(microbatches)
    span = max(st + d for _, _, _, st, d in ops)
    busy = sum(d for *_, d in ops)
    idle = 1 - busy / (span * S)
    formula = _bubble_from_analyses(S, M)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(9, min(16, span * 0.32)), 1.2 + 0.62 * S))
    cmap = plt.get_cmap("Blues"), plt.get_cmap("Oranges")
    for s, k, m, st, d in ops:
        shade = 0.45 + 0.4 * (m / max(M - 1, 1))
        ax.barh(s, d, left=st, height=0.78, color=(cmap[0] if k == "F" else cmap[1])(shade), edgecolor="white")
        if d * 9 >= len(str(m)) * 2:
            ax.text(st + d / 2, s, f"{k}{m}", ha="center", va="center", fontsize=7.5, color="white")
    ax.barh(range(S), [span] * S, left=0, height=0.78, color="none", edgecolor="#999999", hatch="///", lw=0,
            zorder=-1)
    ax.set_yticks(range(S), [f"stage {s}" for s in range(S)])
    ax.invert_yaxis()
    ax.set_xlim(0, span)
    ax.set_xlabel("time (units of one micro-batch forward through one stage; backward = 2 units)")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=cmap[0](0.7), label="forward"), Patch(color=cmap[1](0.7), label="backward"),
                       Patch(fc="white", ec="#999999", hatch="///", label="idle (bubble)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.5 / S), ncol=3, frameon=False)
    name = {"gpipe": "GPipe", "1f1b": "1F1B"}[schedule]
    f = f"; (PP−1)/(M+PP−1) = {S - 1}/{M + S - 1}" + (f" = {formula[0]:.1%}" if formula else "")
    ax.set_title(f"Pipeline schedule: {name}, PP = {S} stages, M = {M} micro-batches — idle {idle:.1%} of "
                 f"stage-time{f}", loc="left")
    ax.spines["left"].set_visible(False)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ kinds waiting on other analyses
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


DEFAULT_PARETO_HARDWARE = ("hgx-h100", "hgx-h200", "hgx-b200", "gb200-nvl72", "mi355x-8")


def pareto(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16", ideal=False,
           compare=None, input_len=None, output_len=1024, **kw):
    """Output tokens/s per GPU vs tokens/s per user: chalk.analyses.serving.throughput's frontier per hardware.

    Requests of `input_len` prompt tokens (default: `context`) and `output_len` output tokens; hardware from
    `compare` or `hardware` (comma-separated), else a default set across generations. Hardware the model does
    not fit is listed in the caption.
    """
    _need("pareto", model=model)
    run = _require("serving", "throughput", "pareto")
    hws = [h.strip() for h in (compare or hardware or ",".join(DEFAULT_PARETO_HARDWARE)).split(",") if h.strip()]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 6))
    skipped, label = [], None
    for hw in hws:
        try:
            res = run(model, hw, input_len=float(input_len or context), output_len=float(output_len),
                      gpus=chips, precision=precision, kv_precision=kv_precision, ideal=ideal, pareto=True)
        except ChalkError as e:
            if len(hws) == 1:
                raise
            skipped.append(f"{hw} ({str(e).split(':')[0]})")
            continue
        front = sorted(res["frontier"], key=lambda f: f["user_tokens_per_s"])
        x = [f["user_tokens_per_s"] for f in front]
        y = [f["output_tokens_per_s_per_gpu"] for f in front]
        (line,) = ax.loglog(x, y, lw=2, marker="o", ms=3, label=f"{res['hardware']}")
        ax.plot(res["user_tokens_per_s"], res["output_tokens_per_s_per_gpu"], "*", ms=13, color=line.get_color(),
                mec="black", mew=0.6)
        label = res["efficiency"]
    if label is None:
        raise ChalkError(f"{model} fits none of: {', '.join(hws)}")
    ax.set_xlabel("tokens/s per user (interactivity)")
    ax.set_ylabel("output tokens/s per GPU (throughput)")
    _fmt_axes(ax, "tokens", "tokens")
    ax.set_title(f"{model} · {num(input_len or context)} tokens in, {num(output_len)} out · serving frontier "
                 "per hardware\n(★ = most tokens/s per GPU; every point: the best layout × batch at that speed)",
                 loc="left")
    ax.legend(framealpha=0.9, title="hardware")
    _caption(fig, f"efficiency: {label}; chalk.analyses.serving.throughput (layouts × batch, aggregated serving)."
             + (f" Not shown (does not fit): {'; '.join(skipped)}." if skipped else ""))
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def batch_train(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                ideal=False, batch=None, period_s=None, load=0.7, seed=0, **kw):
    """The lecture's batch train: departures every T, requests' waits, and the first-token latency histogram.

    T is `period_s`, else the decode step time at `batch` for model/hardware, else the lecture's 20 ms.
    Every step takes T (the lecture's idealisation); requests arrive as a Poisson stream at `load` x capacity.
    Numbers from chalk.analyses.simulate.simulate_train.
    """
    sim = _require("simulate", "simulate_train", "batch-train")
    from chalk.analyses.simulate import StepCost, poisson_arrivals

    where = "the lecture's example"
    if period_s is None and model is not None and hardware is not None:
        from chalk import api

        r1 = api.estimate(model, hardware, 1, context, chips=chips, precision=precision, kv_precision=kv_precision,
                          ideal=ideal)
        batch = int(batch or default_batch(r1))
        r = api.estimate(model, hardware, batch, context, chips=chips, precision=precision, kv_precision=kv_precision,
                         ideal=ideal)
        period_s, where = float(r.step_time_s), f"{r.model} on {r.chips} × {r.hardware}, batch {num(batch)}"
    T = float(period_s or 0.020)
    B = int(batch or 2048)
    if not 0 < float(load) < 1:
        raise InputError(f"load must be in (0, 1), got {load!r}")
    rate = float(load) * B / T
    req = poisson_arrivals(rate, int(min(max(40 * B * load, 2000), 200_000)), input_len=int(context), output_len=1,
                           seed=int(seed))
    res = sim(req, StepCost.constant(T), T, B)
    arr, wait, ttft = res.arrival_s, res.queue_s, res.ttft_s
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7), gridspec_kw=dict(height_ratios=[1, 1]))
    window = 6 * T
    pick = np.flatnonzero(arr <= window)
    pick = pick[np.linspace(0, pick.size - 1, min(pick.size, 45)).astype(int)] if pick.size else pick
    for k in range(int(window / T) + 2):
        ax.axvline(k * T * 1e3, color=COLORS["compute"], lw=1.4, zorder=1)
    ys = np.linspace(0.06, 0.94, max(pick.size, 1))
    for y, i in zip(ys, pick):
        a, w, t = arr[i] * 1e3, wait[i] * 1e3, ttft[i] * 1e3
        ax.plot([a, a + w], [y, y], color=COLORS["weights"], lw=1.3, zorder=2)
        ax.plot([a + w, a + t], [y, y], color=COLORS["kv"], lw=2.2, zorder=2)
        ax.plot(a, y, "o", color=COLORS["weights"], ms=3.5, zorder=3)
    ax.set_xlim(0, (window + 1.2 * T) * 1e3)
    ax.set_yticks([])
    ax.set_xlabel("time (ms)")
    ax.set_title(f"The batch train: a batch departs every T = {seconds(T)} ({where});\nrequests arrive at "
                 f"{load:.0%} of {num(B)} seats per T", loc="left")
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], color=COLORS["compute"], label="a batch departs"),
                       Line2D([], [], color=COLORS["weights"], marker="o", ms=3.5, label="request arrives, waits"),
                       Line2D([], [], color=COLORS["kv"], lw=2.2, label="rides the step to its first token")],
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    ax2.hist(ttft * 1e3, bins=50, color=COLORS["memory"], alpha=0.85)
    for x, lab in ((T, "T"), (2 * T, "worst case 2T")):
        ax2.axvline(x * 1e3, color="k", ls=":", lw=1.2)
        ax2.text(x * 1e3, 0.97, f" {lab}", transform=ax2.get_xaxis_transform(), va="top", fontsize=8.5)
    ax2.set_xlim(0, 2.25 * T * 1e3)
    ax2.set_xlabel("time to first token (ms): the wait for the next departure, then one step")
    ax2.set_ylabel("requests")
    ax2.set_title(f"{whole(res.n_requests)} requests: median {seconds(res.ttft_p50_s)}, p99 {seconds(res.ttft_p99_s)},"
                  f" worst {seconds(float(np.max(ttft)))}", loc="left")
    _caption(fig, "Each step takes exactly T (the lecture's idealisation: StepCost.constant). "
                  "chalk.analyses.simulate.simulate_train; Poisson arrivals.")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def training_pools(model=None, hardware=None, **kw):
    """Pretraining, RL and inference pools at eq. 7's balance (chalk.analyses.training.train_estimate)."""
    _need("training-pools", model=model)
    est_fn = _require("training", "train_estimate", "training-pools")
    args = {k: v for k, v in dict(model=model, hardware=hardware, **kw).items() if v is not None}
    est = est_fn(**_accepts(est_fn, args))
    pools = est.pools
    names = list(pools)
    colors = [COLORS["compute"], COLORS["sparse"], COLORS["kv"]][:len(names)]
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.8))
    for ax, key, label, fmt in ((axes[0], "tokens", "tokens D", lambda v: si(v)),
                                (axes[1], "flops", "FLOPs (lecture's 6·N·D form)", _sci),
                                (axes[2], "cost_usd", "rental cost (USD)", usd)):
        vals = [float(pools[n][key]) for n in names]
        ax.bar(names, vals, color=colors)
        ax.set_ylabel(label)
        ax.set_ylim(0, max(vals) * 1.2)
        ax.yaxis.set_major_formatter(_formatter(fmt))
        for i, v in enumerate(vals):
            ax.text(i, v, fmt(v), ha="center", va="bottom", fontsize=9)
        ax.grid(True, axis="y", alpha=0.35)
    axes[0].set_title("tokens per pool", loc="left")
    axes[1].set_title("compute per pool", loc="left")
    axes[2].set_title("cost per pool", loc="left")
    src = "; ".join(f"{n}: {pools[n].get('tokens_source', '')}" for n in names)
    fig.suptitle(f"Training pools for {est.model} on {num(est.gpus)} × {est.chip}: eq. 7, 6·N·D_pretrain ≈ "
                 f"3·N·D_RL × 3 ≈ 2·N·D_inference × 3 at the cost optimum", x=0.01, ha="left", fontsize=11)
    _caption(fig, f"Tokens: {src}. GPU-hours at this run's achieved rate; ${est.price_usd_per_gpu_hour:.2f}/GPU-hour."
             " chalk.analyses.training.train_estimate.")
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig


def _sci(v) -> str:
    return f"{v:.3g}".replace("e+", "e")


def _formatter(fmt):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: fmt(v))


KINDS = {"latency-vs-batch": latency_vs_batch, "cost-vs-batch": cost_vs_batch, "cost-vs-context": cost_vs_context,
         "pareto": pareto, "hardware-ratio": hardware_ratio, "pipeline": pipeline, "batch-train": batch_train,
         "training-pools": training_pools}
#: Kinds that need only the roofline and the catalog (the rest wait on other analyses).
ROOFLINE_KINDS = ("latency-vs-batch", "cost-vs-batch", "cost-vs-context", "hardware-ratio", "pipeline")


# ------------------------------------------------------------------ chalk measure --plot
def plot_measured(result, output) -> Path:
    """`chalk measure --plot`: measured decode steps over the calibrated roofline's latency-vs-batch curves
    (one per context that has at least two measured batches), and every case measured vs predicted."""
    from chalk.analyses.roofline import step
    from chalk.specs.hardware import System
    from chalk.specs.model import model_from_config

    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"plot output must end in .png or .svg, got {str(output)!r}")
    model = model_from_config(result.model_config, id=result.model)
    system = System(id=result.chip.id, name=result.chip.name, chip=result.chip, chips=1, kind="chip")
    eff = result.fit.efficiency("decode")
    decode = [c for c in result.cases if c.phase == "decode"]
    import matplotlib

    plt = _plt()
    with matplotlib.rc_context(STYLE):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        by_ctx: dict[float, list] = {}
        for c in decode:
            by_ctx.setdefault(c.context, []).append(c)
        curves = [L for L, cs in sorted(by_ctx.items()) if len({c.batch for c in cs}) >= 2] or \
            sorted(by_ctx)[:1]
        for i, L in enumerate(curves):
            col = colors[i % len(colors)]
            bmax = max(c.batch for c in by_ctx[L])
            b = np.geomspace(1, max(2.0, 2 * bmax), 60)
            r = step(model, system, b, L, precision=result.precision, kv_precision=result.precision,
                     efficiency=eff)
            ax.plot(b, r.step_time_s, "-", color=col, lw=1.5, label=f"predicted, context {whole(L)}")
            for c in by_ctx[L]:
                ax.plot(c.batch, c.measured_s, "o", ms=6, color=col, mfc="white" if c.held_out else col)
        ax.plot([], [], "o", color="#444444", label="measured (fitted on)")
        ax.plot([], [], "o", color="#444444", mfc="white", label="measured (held out)")
        ax.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="decode step time",
               title="decode: measured steps on the calibrated roofline")
        _fmt_axes(ax, x="batch", y="time")
        ax.legend(fontsize=7.5, loc="upper left")
        for phase, col in (("decode", colors[0]), ("prefill", colors[1])):
            cs = [c for c in result.cases if c.phase == phase]
            ax2.scatter([c.predicted_s for c in cs if not c.held_out], [c.measured_s for c in cs if not c.held_out],
                        color=col, s=30, label=f"{phase} (fitted on)")
            ax2.scatter([c.predicted_s for c in cs if c.held_out], [c.measured_s for c in cs if c.held_out],
                        facecolors="white", edgecolors=col, s=30, label=f"{phase} (held out)")
        allv = [v for c in result.cases for v in (c.predicted_s, c.measured_s)]
        lo, hi = min(allv) / 1.3, max(allv) * 1.3
        x = np.geomspace(lo, hi, 10)
        ax2.plot(x, x, "-", color="#333333", lw=1, label="measured = predicted")
        ax2.fill_between(x, x / 1.15, x * 1.15, color="#999999", alpha=0.2, lw=0, label="within 15%")
        ax2.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="predicted step time",
                ylabel="measured step time", title="every case: measured vs predicted")
        _fmt_axes(ax2, x="time", y="time")
        ax2.legend(fontsize=7.5, loc="upper left")
        from matplotlib.ticker import FuncFormatter

        for a, axis in ((ax, ax.yaxis), (ax2, ax2.xaxis), (ax2, ax2.yaxis)):  # spans under a decade: label minors
            axis.set_minor_formatter(FuncFormatter(lambda v, _: seconds(v)))
            a.tick_params(axis="both", which="minor", labelsize=7)
        f = result.fit
        _caption(fig, f"{result.model} on {result.device} ({result.dtype}); fitted compute {f.compute:.0%} of the "
                      f"measured matmul peak, memory {f.memory:.0%} of the measured copy bandwidth, overhead "
                      f"{seconds(f.overhead_s)} per decode step; held-out median error "
                      f"{result.median_abs_error_held_out:.1%} over {result.n_held_out} steps")
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        try:
            fig.savefig(path, dpi=150, bbox_inches="tight")
        finally:
            plt.close(fig)
    return path
