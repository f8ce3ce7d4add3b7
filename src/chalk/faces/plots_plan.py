"""`chalk plan --plot`: two panels from a PlanResult's curves. No formulas: every number comes from
`chalk.analyses.planning.plan.plan` (its `curves`: the serving frontier per chip priced per M output tokens, and the GPUs
each option needs as the demand grows)."""

from __future__ import annotations

from pathlib import Path

from chalk.errors import InputError
from chalk.specs.files import atomic_path
from chalk.faces.fmt import num
from chalk.faces.plots_common import FORMATS, STYLE, _caption, _fmt_axes, _plt, _tight


def plan_figure(result):
    """Left: $ per M output tokens against tokens/s per user, per chip (★ the plan's choice). Right: GPUs against
    demand per option (dotted: the demand planned for)."""
    curves = result.get("curves")
    if not curves:
        raise InputError("this plan has no curves: run chalk.plan(..., curves=True)")
    import matplotlib

    plt = _plt()
    with matplotlib.rc_context(STYLE):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, (hw, c) in enumerate(curves["cost_vs_speed"].items()):
            col = colors[i % len(colors)]
            ax.plot(c["user_tokens_per_s"], c["usd_per_mtok_output"], "-", color=col, lw=1.8, label=hw)
            ax.plot(*c["chosen"], "*", ms=14, color=col, mec="black", mew=0.6)
        t = result["targets"]
        if t.get("tpot_p99_s"):
            ax.axvline(1.0 / t["tpot_p99_s"], ls=":", color="#555555", lw=1)
            ax.text(1.0 / t["tpot_p99_s"], 0.98, " per-user target", transform=ax.get_xaxis_transform(),
                    va="top", fontsize=8, color="#555555")
        ax.set(xscale="log", yscale="log", xlabel="tokens/s per user", ylabel="$ per M output tokens",
               title="cost against per-user speed (serving frontier)")
        _fmt_axes(ax, x="tokens", y="usd")
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.legend(fontsize=8, title="chip", title_fontsize=8)
        d = result["demand"]
        x = curves["demand"]
        for i, (key, g) in enumerate(curves["gpus_vs_demand"].items()):
            ax2.plot(x, g, drawstyle="steps-post", color=colors[i % len(colors)], lw=1.6, label=key)
        ax2.axvline(d["planned_for"], ls=":", color="#555555", lw=1)
        ax2.text(d["planned_for"], 0.98, " planned", transform=ax2.get_xaxis_transform(), va="top", fontsize=8,
                 color="#555555")
        ax2.set(xscale="log", yscale="log", xlabel=f"demand ({curves['demand_unit']})", ylabel="GPUs",
                title="GPUs against demand (same layout and concurrency cap)")
        _fmt_axes(ax2, x="tokens", y="tokens")
        ax2.legend(fontsize=7.5)
        best = result["options"][0]
        _caption(fig, f"{result['model']}: {num(d['value'])} {d['unit']}; cheapest {best['hardware']} "
                      f"{best['mode']} {best['layout']} ({num(best['gpus'])} GPUs, ${best['usd_per_hour']:,.0f}/h). "
                      "★ = the plan's operating point. chalk.analyses.planning.plan (serving frontier from "
                      "chalk.analyses.traffic.serving.throughput; replicas from the fixed-deployment sizing).")
        _tight(fig, (0, 0.05, 1, 1))
    return fig


def plot_plan(result, output) -> Path:
    """Write `plan_figure(result)` to `output` (.png or .svg); returns the path."""
    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"plot output must end in .png or .svg, got {str(output)!r}")
    fig = plan_figure(result)
    plt = _plt()
    try:
        with atomic_path(path, "plot output") as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
