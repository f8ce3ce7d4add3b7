"""`chalk simulate --plot`: the run that was simulated, not an idealised picture.

Top: a sample of the run's requests on a time axis (arrival, wait to board, first token, last token), with the
train's departures every --period-ms when the scheduler is the train. Bottom: the run's time-to-first-token
histogram with its p50/p90/p99. Every number comes from the SimulationResult.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chalk.errors import InputError
from chalk.specs.files import atomic_path
from chalk.faces.fmt import num, seconds
from chalk.faces.plots_common import COLORS, FORMATS, STYLE, _plt


def _unit(span_s: float) -> tuple[float, str]:
    """A time unit for an axis spanning `span_s`: (seconds per unit, name)."""
    for scale, name in ((1e-3, "ms"), (1.0, "s"), (60.0, "min"), (3600.0, "h")):
        if span_s < 2000 * scale:
            return scale, name
    return 86400.0, "days"


def simulation_figure(result, title: str = "", sample: int = 40):
    """The matplotlib Figure of a SimulationResult."""
    import matplotlib

    plt = _plt()
    a, q, ttft, e2e = result.arrival_s, result.queue_s, result.ttft_s, result.e2e_s
    with matplotlib.rc_context(STYLE):
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7.5), gridspec_kw=dict(height_ratios=[1.2, 1]))
        period = result.period_s
        # a window that shows how waits evolve: the first requests, or the whole run when it is short
        window = float(a[-1] - a[0]) if a.size > 1 else 1.0
        if period:
            window = min(window, 12 * period)
        pick = np.flatnonzero(a - a[0] <= window)
        pick = pick[np.linspace(0, pick.size - 1, min(pick.size, sample)).astype(int)]
        end = float(np.max(a[pick] + e2e[pick])) - a[0]
        scale, unit = _unit(end)
        t0 = a[0]
        if period:
            k0 = int(np.floor(t0 / period))
            for k in range(int(np.ceil(end / period)) + 2):
                x = ((k0 + k) * period - t0) / scale
                if 0 <= x <= end / scale:
                    ax.axvline(x, color=COLORS["compute"], lw=0.9, alpha=0.6, zorder=1)
        ys = np.linspace(0.05, 0.95, max(pick.size, 1))
        for y, i in zip(ys, pick):
            x0 = (a[i] - t0) / scale
            ax.plot([x0, x0 + q[i] / scale], [y, y], color=COLORS["weights"], lw=1.2, zorder=2)
            ax.plot([x0 + q[i] / scale, x0 + ttft[i] / scale], [y, y], color=COLORS["kv"], lw=2.4, zorder=2)
            ax.plot([x0 + ttft[i] / scale, x0 + e2e[i] / scale], [y, y], color=COLORS["memory"], lw=1.0, zorder=2)
            ax.plot(x0, y, "o", color=COLORS["weights"], ms=3, zorder=3)
        ax.set_yticks([])
        ax.set_xlabel(f"time since the first arrival ({unit})")
        how = (f"a batch departs every {seconds(period)}" if period else "continuous batching") + \
            f", at most {num(result.max_batch)} sequences per step"
        ax.set_title((title + "\n" if title else "") + f"{num(result.n_requests)} requests simulated; {how}",
                     loc="left")
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=COLORS["weights"], marker="o", ms=3, label="arrives, waits to board"),
                   Line2D([], [], color=COLORS["kv"], lw=2.4, label="prefill to first token"),
                   Line2D([], [], color=COLORS["memory"], lw=1.0, label="decodes to its last token")]
        if period:
            handles.insert(0, Line2D([], [], color=COLORS["compute"], lw=0.9, label="a batch departs"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=len(handles), frameon=False,
                  fontsize=8)
        finite = ttft[np.isfinite(ttft)]
        hs, hu = _unit(float(finite.max()) if finite.size else 1.0)
        ax2.hist(finite / hs, bins=60, color=COLORS["memory"], alpha=0.85)
        for key, style in (("ttft_p50_s", "-"), ("ttft_p90_s", "--"), ("ttft_p99_s", ":")):
            v = getattr(result, key)
            if v is not None and np.isfinite(v):
                ax2.axvline(v / hs, color="k", ls=style, lw=1.1)
                ax2.text(v / hs, 0.97, f" {key[5:8]} {seconds(v)}", transform=ax2.get_xaxis_transform(),
                         va="top", fontsize=8)
        ax2.set_xlabel(f"time to first token ({hu})")
        ax2.set_ylabel("requests")
        fig.tight_layout()
    return fig


def plot_simulation(result, output, title: str = "") -> Path:
    """Write `simulation_figure(result)` to `output` (.png or .svg)."""
    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"plot output must end in .png or .svg, got {str(output)!r}")
    if path.parent and not path.parent.exists():
        raise InputError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
    fig = simulation_figure(result, title)
    try:
        with atomic_path(path, "plot output") as tmp:
            fig.savefig(tmp, dpi=130, bbox_inches="tight")
    finally:
        _plt().close(fig)
    return path
