"""Roofline plot kinds: latency vs batch, cost vs batch, cost vs context, and the hardware ratios.

Registered in `chalk.faces.plots.KINDS`; call them through `chalk.faces.plots.plot` / `figure`. No formulas
live here: every number comes from `chalk.api` or `chalk.analyses.blackboard.hardware_facts`.
"""

from __future__ import annotations

import numpy as np

from chalk.faces.fmt import component_names, num, seconds, si, usd
from chalk.faces.plots_common import (COLORS, _caption, _finite, _fmt_axes, _need, _plt, _shade_no_fit, _tight,
                                      _vline, caption_of, cost_components_per_mtok, default_batch, roofline_over_batch,
                                      roofline_over_context, title_of, whole)


def latency_vs_batch(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                     ideal=False, **kw):
    """The blackboard's first graph: compute line, weight-fetch floor, KV-fetch slope, their max."""
    _need("latency-vs-batch", model=model, hardware=hardware)
    r = roofline_over_batch(model, hardware, context, chips=chips, precision=precision,
                            kv_precision=kv_precision, ideal=ideal, sparse_law=kw.get("sparse_law"))
    plt = _plt()
    B = np.asarray(r.batch)
    fig, ax = plt.subplots(figsize=(9, 5.6))
    moe = str(r.weights_read).startswith("refined")
    if getattr(r, "view", None) == "layout":  # the step's ops by what binds each, as `chalk estimate` lists them
        n = component_names(r)
        labels = (n["compute"], n["weight"] + (" (experts touched)" if moe else ""), f"{n['kv']}, L = {num(context)}",
                  n["memory"], n["step"])
    else:  # the lecture's aggregate bound, term by term
        labels = ("compute: FLOPs / peak (eq. 2)",
                  f"weight fetch: {'bytes of experts touched' if moe else 'weight bytes'} / HBM bw (eq. 3, 1st term)",
                  f"KV fetch: B·L·KV bytes / HBM bw (eq. 3, 2nd term), L = {num(context)}",
                  "memory = weight fetch + KV fetch",
                  "step time = max (eq. 1)" + ("" if r.efficiency == "ideal" else " + per-step overhead"))
    ax.loglog(B, r.compute_time_s, color=COLORS["compute"], lw=1.8, label=labels[0])
    ax.loglog(B, r.weight_time_s, color=COLORS["weights"], lw=1.6, ls="--", label=labels[1])
    ax.loglog(B, r.kv_time_s, color=COLORS["kv"], lw=1.6, ls="--", label=labels[2])
    ax.loglog(B, r.memory_time_s, color=COLORS["memory"], lw=1.6, label=labels[3])
    ax.loglog(B, r.step_time_s, color=COLORS["step"], lw=7, alpha=0.25, zorder=1, solid_capstyle="butt",
              label=labels[4])
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
    _tight(fig, (0, 0.03, 1, 1))
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
    _tight(fig, (0, 0.03, 1, 1))
    return fig


def cost_vs_context(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                    ideal=False, batch=None, **kw):
    """Cost per token and MFU vs context at a fixed batch: dense vs sqrt-law sparse attention."""
    _need("cost-vs-context", model=model, hardware=hardware)
    from chalk import api

    common = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    r1 = api.estimate(model, hardware, 1, context, **common)
    batch = float(batch) if batch is not None else default_batch(r1)
    # up to the model's own maximum context (its config's max_position_embeddings), 2M tokens where unknown
    from chalk.specs.catalog import as_model

    top = float(as_model(model).max_context or 2 ** 21)
    contexts = np.geomspace(min(256.0, top / 8), top, 120)
    dense = roofline_over_context(model, hardware, batch, contexts=contexts, **common)
    sparse = roofline_over_context(model, hardware, batch, contexts=contexts, sparse_law="sqrt", **common)
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
    # whole decades on the cost axis, so a cost under $1 has its tick ($0.10, $0.01)
    costs = np.concatenate([np.asarray(dense.cost_per_mtok_usd, float), np.asarray(sparse.cost_per_mtok_usd, float)])
    costs = costs[np.isfinite(costs) & (costs > 0)]
    if costs.size:
        ax.set_ylim(10 ** np.floor(np.log10(costs.min())), 10 ** np.ceil(np.log10(costs.max())))
    ax.set_xlim(L.min(), L.max())
    ax2.set_xlim(L.min(), L.max())
    ax.set_title("cost per output token vs context", loc="left")
    ax2.set_title("MFU vs context: past the balance context the KV fetch sets the pace", loc="left")
    h, lab = ax2.get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=3, frameon=False, bbox_to_anchor=(0.5, 0.045))
    fig.suptitle(title_of(dense, f"batch {num(batch)}"), x=0.01, ha="left", fontsize=11)
    _caption(fig, caption_of(dense) + " Balance context: one sequence's KV read time = its compute time.")
    _tight(fig, (0, 0.1, 1, 1))
    return fig


def _attention_label(model) -> str:
    from chalk.specs.catalog import as_model

    m = as_model(model)
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
                  "Datasheet dense peaks and HBM figures from the chip catalog (chalk.analyses.blackboard.hardware_facts).")
    _tight(fig, (0, 0.03, 1, 0.97))
    return fig


def chip_ratio_rows() -> list[dict]:
    """chalk.analyses.blackboard.hardware_facts.chip_facts for every catalog chip, sorted by vendor and HBM bandwidth."""
    from chalk.analyses.blackboard.hardware_facts import chip_facts
    from chalk.specs import catalog

    rows = []
    for cid in catalog.chip_ids():
        c = catalog.load_chip(cid)
        rows.append(dict(chip_facts(c), id=c.id, label=c.id, vendor=c.vendor or "other",
                         bw=c.hbm_bandwidth_bytes_per_s))
    rows.sort(key=lambda r: (r["vendor"], r["bw"], r["id"]))
    return rows
