"""Deployment and training plot kinds: pipeline bubbles, the serving pareto frontier, the batch train,
the training pools, and `chalk measure --plot` (`plot_measured`).

Registered in `chalk.faces.plots.KINDS`; call them through `chalk.faces.plots`. No formulas live here: the
numbers come from `chalk.api` and the analyses (serving, simulate, training, parallel), imported inside the
functions; a missing analysis is a ChalkError naming the module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chalk.errors import ChalkError, InputError
from chalk.faces.fmt import num, seconds, si, usd
from chalk.faces.plots_common import (COLORS, FORMATS, STYLE, _accepts, _caption, _fmt_axes, _formatter, _need,
                                      _plt, _require, _sci, _tight, chips_label, default_batch, whole)
from chalk.specs.files import atomic_path


# ------------------------------------------------------------------ kinds: pipeline (drawing; bubble from parallel)
MAX_DRAWN_STAGES, MAX_DRAWN_MICROBATCHES = 64, 256

def pipeline_schedule(stages: int, microbatches: int, schedule: str = "gpipe", backward: float = 2.0):
    """The timeline of a pipeline: [(stage, 'F'|'B', microbatch, start, duration)], forward = 1 time unit.

    A drawing aid, not a model: each stage runs its ops in order (GPipe: all forwards then all backwards;
    1F1B: PP-1-s warm-up forwards, then one forward / one backward), each op starting once its input
    (the previous stage's forward, the next stage's backward) has finished.
    """
    if schedule not in ("gpipe", "1f1b"):
        raise InputError(f"pipeline schedule must be 'gpipe' or '1f1b', got {schedule!r}")
    # a drawing: beyond these the bars are thinner than a pixel and the figure takes minutes
    S = int(_positive_int("stages", stages, maximum=MAX_DRAWN_STAGES))
    M = int(_positive_int("microbatches", microbatches, maximum=MAX_DRAWN_MICROBATCHES))
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


def _positive_int(name, v, maximum=None):
    from chalk.specs.workload import MAX_QUANTITY, positive

    return positive(name, v, integer=True, maximum=maximum or MAX_QUANTITY)


def _bubble_from_analyses(stages, microbatches):
    """(PP-1)/(M+PP-1) from chalk's own equations when present, else None."""
    import importlib

    for mod in ("chalk.analyses.step.parallel", "chalk.equations.parallel", "chalk.equations.training"):
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
#: The hardware `pareto` compares when neither `compare` nor `hardware` is given.
DEFAULT_PARETO_HARDWARE = ("hgx-h100", "hgx-h200", "hgx-b200", "gb200-nvl72", "mi355x-8")


def pareto(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16", ideal=False,
           compare=None, input_len=None, output_len=1024, results=None, **kw):
    """Output tokens/s per GPU vs tokens/s per user: chalk.analyses.traffic.serving.throughput's frontier per hardware.

    Requests of `input_len` prompt tokens (default: `context`) and `output_len` output tokens; hardware from
    `compare` or `hardware` (comma-separated), else a default set across generations. Hardware the model does
    not fit is listed in the caption. `results`: {hardware name: throughput(..., pareto=True)} the caller already
    has for these same requests (the report's serving answer), drawn as they are instead of searched again.
    """
    _need("pareto", model=model)
    run = _require("traffic.serving", "throughput", "pareto")
    hws = [h.strip() for h in (compare or hardware or ",".join(DEFAULT_PARETO_HARDWARE)).split(",") if h.strip()]
    if not hws:
        raise InputError("pareto needs at least one chip or system to compare")
    from chalk.specs.catalog import as_system

    for hw in hws:  # an unknown name is an error, never silently dropped from the figure
        as_system(hw)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 6))
    skipped, label = [], None
    for hw in hws:
        res = (results or {}).get(hw)
        try:
            if res is None or "frontier" not in res:
                res = run(model, hw, input_len=float(context if input_len is None else input_len),
                          output_len=float(output_len), gpus=chips, precision=precision, kv_precision=kv_precision,
                          ideal=ideal, pareto=True)
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
    ax.set_title(f"{model} · {num(context if input_len is None else input_len)} tokens in, {num(output_len)} out · serving frontier "
                 "per hardware\n(★ = most tokens/s per GPU; every point: the best layout × batch at that speed)",
                 loc="left")
    ax.legend(framealpha=0.9, title="hardware")
    _caption(fig, f"efficiency: {label}; chalk.analyses.traffic.serving.throughput (layouts × batch, aggregated serving)."
             + (f" Not shown (does not fit): {'; '.join(skipped)}." if skipped else ""))
    _tight(fig, (0, 0.04, 1, 1))
    return fig


def batch_train(model=None, hardware=None, context=4096, chips=None, precision=None, kv_precision="bf16",
                ideal=False, batch=None, period_s=None, load=0.7, seed=0, **kw):
    """The lecture's batch train: departures every T, requests' waits, and the first-token latency histogram.

    T is `period_s`, else the decode step time at `batch` for model/hardware, else the lecture's 20 ms.
    Every step takes T (the lecture's idealisation); requests arrive as a Poisson stream at `load` x capacity.
    Numbers from chalk.analyses.traffic.simulate.simulate_train.
    """
    sim = _require("traffic.simulate", "simulate_train", "batch-train")
    from chalk.analyses.traffic.simulate import StepCost, poisson_arrivals

    where = "the lecture's example"
    if period_s is None and model is not None and hardware is not None:
        from chalk import api

        r1 = api.estimate(model, hardware, 1, context, chips=chips, precision=precision, kv_precision=kv_precision,
                          ideal=ideal)
        batch = int(default_batch(r1) if batch is None else batch)
        r = api.estimate(model, hardware, batch, context, chips=chips, precision=precision, kv_precision=kv_precision,
                         ideal=ideal)
        period_s, where = float(r.step_time_s), f"{r.model} on {chips_label(r.chips, r.hardware)}, batch {num(batch)}"
    T = float(0.020 if period_s is None else period_s)
    B = int(2048 if batch is None else batch)
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
                  "chalk.analyses.traffic.simulate.simulate_train; Poisson arrivals.")
    _tight(fig, (0, 0.03, 1, 1))
    return fig


def training_pools(model=None, hardware=None, **kw):
    """Pretraining, RL and inference pools at eq. 7's balance (chalk.analyses.blackboard.training.train_estimate)."""
    _need("training-pools", model=model)
    est_fn = _require("blackboard.training", "train_estimate", "training-pools")
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
             " chalk.analyses.blackboard.training.train_estimate.")
    _tight(fig, (0, 0.05, 1, 0.95))
    return fig


# ------------------------------------------------------------------ chalk measure --plot
def plot_measured(result, output) -> Path:
    """`chalk measure --plot`: measured decode steps over the calibrated roofline's latency-vs-batch curves
    (one per context that has at least two measured batches), and every case measured vs predicted."""
    from chalk.analyses.step.measure.fit import predicted_decode_s

    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"plot output must end in .png or .svg, got {str(output)!r}")
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
            ax.plot(b, predicted_decode_s(result, b, L), "-", color=col, lw=1.5, label=f"predicted, context {whole(L)}")
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
        _tight(fig, (0, 0.06, 1, 1))
        try:
            with atomic_path(path, "plot output") as tmp:
                fig.savefig(tmp, dpi=150, bbox_inches="tight")
        finally:
            plt.close(fig)
    return path
