"""Plots: every kind writes a real PNG / SVG; bad kinds, paths and inputs are one clear ChalkError."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from chalk.errors import ChalkError, InputError, UnknownNameError
from chalk.faces import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PAIR = dict(model="llama-3.1-8b", hardware="hgx-h100")
MOE_PAIR = dict(model="deepseek-v3", hardware="gb200-nvl72")
ROOFLINE_CASES = [
    ("latency-vs-batch", PAIR),
    ("latency-vs-batch", dict(MOE_PAIR, context=1024)),
    ("cost-vs-batch", MOE_PAIR),
    ("cost-vs-context", PAIR),
    ("hardware-ratio", {}),
    ("pipeline", dict(stages=4, microbatches=8, schedule="1f1b")),
]


def _check_image(path, min_bytes=10_000):
    data = path.read_bytes()
    assert len(data) > min_bytes, f"{path} is only {len(data)} bytes"
    if path.suffix == ".png":
        assert data.startswith(PNG_MAGIC)
    else:
        head = data[:2000].decode("utf-8", "replace")
        assert "<svg" in head and data.rstrip().endswith(b"</svg>")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
@pytest.mark.parametrize(("kind", "kw"), ROOFLINE_CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(ROOFLINE_CASES)])
def test_roofline_kinds_write_real_images(tmp_path, kind, kw, suffix):
    out = plots.plot(kind, tmp_path / f"{kind}{suffix}", ideal=True, **kw)
    assert out == tmp_path / f"{kind}{suffix}"
    _check_image(out)


def test_every_issue_kind_is_registered():
    assert set(plots.kinds()) >= {"latency-vs-batch", "cost-vs-batch", "cost-vs-context", "pareto",
                                  "hardware-ratio", "pipeline", "batch-train", "training-pools"}


@pytest.mark.skipif(importlib.util.find_spec("chalk.analyses.traffic.simulate") is None, reason="simulate not built yet")
def test_batch_train_writes_png(tmp_path):
    _check_image(plots.plot("batch-train", tmp_path / "train.png"))
    _check_image(plots.plot("batch-train", tmp_path / "train2.png", ideal=True, **PAIR))


@pytest.mark.skipif(importlib.util.find_spec("chalk.analyses.blackboard.training") is None, reason="training not built yet")
def test_training_pools_writes_png(tmp_path):
    _check_image(plots.plot("training-pools", tmp_path / "pools.png", model="llama-3.1-405b"))


def test_pareto_needs_serving_or_draws(tmp_path):
    try:
        out = plots.plot("pareto", tmp_path / "pareto.png", model="llama-3.1-8b", compare="hgx-h100,hgx-b200")
    except ChalkError as e:
        assert "chalk.analyses.traffic.serving" in str(e)
    else:
        _check_image(out)


def test_unknown_kind_is_a_chalk_error_with_a_suggestion(tmp_path):
    with pytest.raises(UnknownNameError, match="latency-vs-batch"):
        plots.plot("latency-vs-bach", tmp_path / "x.png", **PAIR)
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("name", ["x.jpg", "x", "x.pdf"])
def test_output_must_be_png_or_svg(tmp_path, name):
    with pytest.raises(InputError, match=r"\.png or \.svg"):
        plots.plot("latency-vs-batch", tmp_path / name, **PAIR)


def test_missing_folder_and_missing_model_are_clear(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        plots.plot("latency-vs-batch", tmp_path / "nope" / "x.png", **PAIR)
    with pytest.raises(InputError, match="--model"):
        plots.plot("cost-vs-batch", tmp_path / "x.png", hardware="h100")
    with pytest.raises(ChalkError, match="model"):
        plots.plot("cost-vs-batch", tmp_path / "x.png", model="gpt-9", hardware="h100")


def test_figures_take_their_lines_from_the_roofline():
    """The drawn compute / weight / KV / step lines are the RooflineResult fields, not recomputed."""
    from chalk import api

    fig = plots.figure("latency-vs-batch", ideal=True, **PAIR)
    ax = fig.axes[0]
    compute, weight, kv, memory, step = ax.get_lines()[:5]
    B = compute.get_xdata()
    r = api.estimate(PAIR["model"], PAIR["hardware"], B, 4096, ideal=True)
    np.testing.assert_allclose(compute.get_ydata(), r.compute_time_s)
    np.testing.assert_allclose(weight.get_ydata(), r.weight_time_s)
    np.testing.assert_allclose(kv.get_ydata(), r.kv_time_s)
    np.testing.assert_allclose(step.get_ydata(), r.step_time_s)
    # the lines are labelled by what they are on this view: a real layout's ops grouped by what binds each (issue
    # 27: the lecture's "FLOPs / peak (eq. 2)" would misname a line that is zero below the critical batch)
    assert r.view == "layout"
    assert compute.get_label().startswith("compute-bound ops") and "eq. 2" not in compute.get_label()
    assert step.get_label().startswith("step time = all ops")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "batch" in ax.get_xlabel() and "time" in ax.get_ylabel()
    assert B.max() > r.critical_batch  # the critical batch is on the chart
    plots._plt().close(fig)


def test_pipeline_schedule_idles_the_bubble_fraction():
    for schedule in ("gpipe", "1f1b"):
        ops = plots.pipeline_schedule(4, 8, schedule)
        span = max(st + d for *_, st, d in ops)
        busy = sum(d for *_, d in ops)
        assert 1 - busy / (span * 4) == pytest.approx(3 / 11)
        assert len(ops) == 2 * 4 * 8
    with pytest.raises(InputError):
        plots.pipeline_schedule(4, 8, "zigzag")
    with pytest.raises(InputError):
        plots.pipeline_schedule(0, 8)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "chalk.faces.cli", *args], capture_output=True, text=True,
                          timeout=180)


def test_cli_plot_and_estimate_plot(tmp_path):
    p = _cli("plot", "cost-vs-batch", "-m", "llama-3.1-8b", "-H", "h100", "--ideal", "-o", str(tmp_path / "c.svg"))
    assert p.returncode == 0, p.stderr
    _check_image(tmp_path / "c.svg")
    p = _cli("estimate", "-m", "llama-3.1-8b", "-H", "h100", "--plot", str(tmp_path / "e.png"), "--json")
    assert p.returncode == 0, p.stderr
    _check_image(tmp_path / "e.png")
    p = _cli("plot", "pipeline", "--stages", "8", "--microbatches", "16", "-o", str(tmp_path / "p.png"))
    assert p.returncode == 0, p.stderr
    _check_image(tmp_path / "p.png")


def test_cli_plot_errors_are_one_line_exit_2(tmp_path):
    for args in (("plot", "nope", "-o", str(tmp_path / "x.png")),
                 ("plot", "latency-vs-batch", "-m", "llama-3.1-8b", "-H", "h100", "-o", str(tmp_path / "x.gif")),
                 ("plot", "latency-vs-batch", "-H", "h100", "-o", str(tmp_path / "x.png"))):
        p = _cli(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("chalk: error:") and len(p.stderr.strip().splitlines()) == 1


def test_cli_help_lists_every_plot_kind():
    # cli_visual keeps its own list so `chalk --help` need not import the plotting modules; it must not drift
    from chalk.faces import plots
    from chalk.faces.cli_visual import PLOT_KINDS

    assert set(PLOT_KINDS) == set(plots.kinds())


def test_titles_count_chips_not_systems():
    """issue 12: "72 x gb200-nvl72" read like 72 racks; titles name the chip and put the system beside it. Issue 27:
    a layout on part of the scale-up domain says of how many (64 of 72), as the other doors' headers do."""
    from chalk.faces.plots_common import chips_label, title_of
    from chalk.faces.plots_roofline import latency_vs_batch

    assert chips_label(72, "gb200-nvl72") == "72 × gb200 GPUs of gb200-nvl72"
    assert chips_label(64, "gb200-nvl72") == "64 of 72 × gb200 GPUs of gb200-nvl72"
    assert chips_label(1, "h100-sxm") == "1 of 8 × h100-sxm GPUs of hgx-h100"
    import chalk

    r = chalk.estimate("deepseek-v3", "gb200-nvl72", 64, 4096)
    t = title_of(r)
    assert f"{int(r.chips)} of 72 × gb200 GPUs" in t and f"layout {r.layout['label']}" in t
    fig = latency_vs_batch("deepseek-v3", "gb200-nvl72")
    assert " of 72 × gb200 GPUs of gb200-nvl72 · layout " in fig.axes[0].get_title(loc="left")


def test_cost_vs_context_spans_the_models_context_with_ticks_below_a_dollar():
    """issue 12: the x axis ends at the model's maximum context; the cost axis shows whole decades below $1."""
    import math

    from chalk.faces.plots_roofline import cost_vs_context

    fig = cost_vs_context(model="llama-3.1-70b", hardware="h100-sxm")
    ax = fig.axes[0]
    assert ax.get_xlim()[1] == pytest.approx(131072)
    lo, hi = ax.get_ylim()
    assert lo < 1 and math.log10(lo) == pytest.approx(round(math.log10(lo)))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any(lbl.startswith("$0.") for lbl in labels), labels


def _layout_figure(nrows, ncols, suptitle=False):
    plt = plots._plt()
    fig, axes = plt.subplots(nrows, ncols, figsize=(9, 5.6), squeeze=False)
    for i, ax in enumerate(axes.ravel()):
        ax.loglog([1, 10 ** (3 + i)], [1e-3, 10 ** i])
        ax.set_xlabel("batch B (sequences decoded together)")
        ax.set_ylabel("time per decode step")
        ax.set_title("a title that is long enough to matter\nover two lines", loc="left")
    if suptitle:
        fig.suptitle("a suptitle", x=0.01, ha="left")
    return fig


@pytest.mark.parametrize(("shape", "rect", "suptitle"), [((1, 1), (0, 0.03, 1, 1), False),
                                                        ((1, 2), (0, 0.1, 1, 1), True),
                                                        ((1, 3), (0, 0.03, 1, 0.97), True),
                                                        ((2, 1), (0, 0.03, 1, 1), False)])
def test_tight_matches_matplotlib_tight_layout_with_a_rect(shape, rect, suptitle):
    """issue 12: one measuring pass for a row of axes, the same subplot parameters as matplotlib's two."""
    from chalk.faces.plots_common import _tight

    ours, theirs = _layout_figure(*shape, suptitle), _layout_figure(*shape, suptitle)
    _tight(ours, rect)
    theirs.tight_layout(rect=rect)
    for name in ("left", "bottom", "right", "top", "wspace", "hspace"):
        assert getattr(ours.subplotpars, name) == pytest.approx(getattr(theirs.subplotpars, name), abs=1e-12), name
    plots._plt().close(ours)
    plots._plt().close(theirs)


def test_log_minor_ticks_stop_at_the_view():
    """issue 12: no tick objects for minor locations outside the view (matplotlib would not draw them); 2x and 5x
    a decade on views of three decades or more, 2x-9x on narrower ones."""
    fig = plots.figure("latency-vs-batch", **PAIR)
    for axis in (fig.axes[0].xaxis, fig.axes[0].yaxis):
        lo, hi = sorted(axis.get_view_interval())
        assert hi / lo > 1000
        locs = axis.get_minorticklocs()
        assert len(locs) > 4 and locs.min() >= lo * (1 - 1e-6) and locs.max() <= hi * (1 + 1e-6)
        mantissa = np.round(locs / 10 ** np.floor(np.log10(locs)), 6)
        assert set(mantissa) == {2.0, 5.0}
    plots._plt().close(fig)
    plt = plots._plt()
    fig, ax = plt.subplots()
    ax.loglog([20, 90], [1, 50])
    plots._fmt_axes(ax, "tokens", "tokens")
    mantissa = np.round([v / 10 ** np.floor(np.log10(v)) for v in ax.xaxis.get_minorticklocs()], 6)
    assert set(mantissa) == {2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0}  # 20 .. 90: under a decade, every one
    plt.close(fig)


def test_png_bytes_crops_like_savefig_tight():
    """issue 12: one draw, cropped to what the figure draws, within a few pixels of the size
    savefig(bbox_inches='tight') gives; a figure with an artist running past its canvas goes through savefig and
    keeps it whole."""
    import io

    from PIL import Image

    plt = plots._plt()
    for x in (None, 0.9, 1.1):  # no label; one running past the edge; one wholly past it
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([1, 2], [3, 4])
        ax.set_title("a title")
        if x is not None:
            fig.text(x, 0.5, "runs past the right edge")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        ours = Image.open(io.BytesIO(plots.png_bytes(fig, 100)))
        theirs = Image.open(buf)
        assert abs(ours.size[0] - theirs.size[0]) <= 6 and abs(ours.size[1] - theirs.size[1]) <= 6
        assert ours.getpixel((0, 0))[:3] == (255, 255, 255)
        plt.close(fig)
