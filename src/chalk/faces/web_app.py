"""The Streamlit explorer that `chalk web` serves: the lecture's graphs, live, for any model and hardware.

Run by `streamlit run` (where `__name__ == "__main__"`); importing it only defines the figure builders.
No formulas: every number comes from `chalk.api`, the analyses, and `chalk.faces.plots`' data helpers.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import numpy as np

try:  # a source checkout without PYTHONPATH=src
    import chalk  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chalk.analyses.step.calibration import EPLB_MODES
from chalk.errors import ChalkError, InputError
from chalk.faces.fmt import component_names, num, pct, seconds, si, usd
from chalk.faces.plots import whole
from chalk.faces.web import _UPLOAD_NAMES, MAX_UPLOAD_BYTES, md_escape, scrub_paths, shown, upload_root  # noqa: F401
# the explorer's figure builders, in one namespace, and the energy options every view takes
from chalk.faces.web_tabs import energy_opts, pipeline_figure  # noqa: F401

#: Batch choices: half-octave steps 1 .. 262,144 (a log slider).
BATCHES = sorted({int(round(2 ** (k / 2))) for k in range(0, 37)})
CONTEXTS = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576]
KV_PRECISIONS = ["bf16", "fp8", "fp4"]
DEFAULT_MODEL, DEFAULT_HARDWARE = "llama-3.1-70b", "hgx-h100"
COLORS = {"compute": "#1f77b4", "weights": "#ff7f0e", "kv": "#2ca02c", "memory": "#d62728", "step": "#111111",
          "sparse": "#9467bd"}


# ------------------------------------------------------------------ figure builders (plotly)
def _vmark(fig, x, text, color, y=1.0, **rc):
    """A dotted vertical line with a label; log-axis safe (annotations take log10 positions there)."""
    if x is None or not np.isfinite(x):
        return
    fig.add_vline(x=float(x), line_dash="dot", line_color=color, **rc)
    if text:
        ref = "x" if not rc else f"x{'' if rc['col'] == 1 else rc['col']}"
        fig.add_annotation(x=float(np.log10(x)), y=y, xref=ref, yref="paper", text=text, showarrow=False,
                           xanchor="left", yanchor="top", font=dict(color=color, size=11))


def view_label(r) -> str:
    """Which view a result's numbers come from, for a chart title: the layout view names its replica."""
    if getattr(r, "view", None) == "layout" and getattr(r, "layout", None):
        return f"layout view, {r.layout.get('label', '?')} on {num(r.chips)} GPUs"
    return f"aggregate bound, {num(r.chips)} GPUs summed"


def _log_layout(fig, title, x, y, height=430):
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)), height=height, hovermode="x unified",
                      margin=dict(l=60, r=20, t=60, b=50), legend=dict(orientation="h", y=-0.2),
                      template="plotly_white")
    fig.update_xaxes(type="log", title=x, dtick=1)
    fig.update_yaxes(type="log", title=y, dtick=1)
    return fig


def _no_fit(fig, x, fits, row=None, col=None):
    fits = np.asarray(fits, dtype=bool)
    if not fits.all():
        kw = {} if row is None else dict(row=row, col=col)
        fig.add_vrect(x0=float(np.asarray(x)[~fits].min()), x1=float(np.max(x)), fillcolor="#999", opacity=0.15,
                      line_width=0, **kw)


def latency_figure(r, batch=None, step_s=None):
    """Latency vs batch (ms, log-log): compute, weight floor, KV slope, memory and the step (labelled by the view's
    meaning of each, `component_names`); the operating point."""
    import plotly.graph_objects as go

    B = np.asarray(r.batch)
    n = component_names(r)
    fig = go.Figure()
    for key, name, color, dash, width in (
            ("compute_time_s", n["compute"], COLORS["compute"], None, 2),
            ("weight_time_s", n["weight"], COLORS["weights"], "dash", 2),
            ("kv_time_s", n["kv"], COLORS["kv"], "dash", 2),
            ("memory_time_s", n["memory"], COLORS["memory"], None, 2),
            ("step_time_s", n["step"], COLORS["step"], None, 5)):
        fig.add_trace(go.Scatter(x=B, y=np.asarray(getattr(r, key)) * 1e3, name=name, mode="lines",
                                 line=dict(color=color, dash=dash, width=width),
                                 opacity=0.45 if key == "step_time_s" else 1))
    _vmark(fig, r.critical_batch, f"critical batch ≈ {whole(r.critical_batch)}", COLORS["compute"])
    _no_fit(fig, B, r.fits)
    if batch is not None:
        fig.add_trace(go.Scatter(x=[batch], y=[step_s * 1e3], name="you are here", mode="markers",
                                 marker=dict(size=13, color="#e377c2", line=dict(color="black", width=1))))
    return _log_layout(fig, f"Latency vs batch ({view_label(r)})", "batch (sequences)",
                       "time per decode step (ms)")


def cost_figure(r, hardware, batch=None, cost=None):
    """Cost per M output tokens vs batch: the hyperbola falling to the compute floor; the operating point."""
    import plotly.graph_objects as go

    from chalk.faces.plots import cost_components_per_mtok

    B = np.asarray(r.batch)
    c = cost_components_per_mtok(r, hardware)
    n = component_names(r)
    fig = go.Figure()
    for key, color, dash in (("compute", COLORS["compute"], None), ("weight", COLORS["weights"], "dash"),
                             ("kv", COLORS["kv"], "dash"), ("memory", COLORS["memory"], None)):
        fig.add_trace(go.Scatter(x=B, y=c[key], name=f"{n[key]}, per token", mode="lines",
                                 line=dict(color=color, dash=dash)))
    fig.add_trace(go.Scatter(x=B, y=r.cost_per_mtok_usd, name="cost per token (eq. 4)", mode="lines",
                             line=dict(color=COLORS["step"], width=5), opacity=0.45))
    _vmark(fig, r.critical_batch, f"critical batch ≈ {whole(r.critical_batch)}", COLORS["compute"])
    _no_fit(fig, B, r.fits)
    if batch is not None:
        fig.add_trace(go.Scatter(x=[batch], y=[cost], name="you are here", mode="markers",
                                 marker=dict(size=13, color="#e377c2", line=dict(color="black", width=1))))
    lo = float(np.nanmin(r.cost_per_mtok_usd)) / 4
    fig = _log_layout(fig, f"Cost per output token vs batch ({view_label(r)})", "batch (sequences)",
                      "$ per million output tokens")
    fig.update_yaxes(range=[np.log10(lo), np.log10(float(np.nanmax(r.cost_per_mtok_usd)) * 3)], tickprefix="$")
    return fig


def context_figure(dense, sparse, context=None):
    """Cost and MFU vs context at a fixed batch: dense vs sqrt-law sparse attention."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    L = np.asarray(dense.context)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("$ per M output tokens vs context", "MFU vs context"))
    for res, name, color, dash in ((dense, "as configured", COLORS["step"], None),
                                   (sparse, "sparse: √L law (aggregate bound)", COLORS["sparse"], "dash")):
        fig.add_trace(go.Scatter(x=L, y=res.cost_per_mtok_usd, name=name, line=dict(color=color, dash=dash),
                                 legendgroup=name), row=1, col=1)
        fig.add_trace(go.Scatter(x=L, y=np.asarray(res.mfu) * 100, name=name, line=dict(color=color, dash=dash),
                                 legendgroup=name, showlegend=False), row=1, col=2)
    for col in (1, 2):
        _vmark(fig, dense.balance_context, f"balance context {whole(dense.balance_context)}", COLORS["kv"],
               row=1, col=col)
        if context is not None:
            fig.add_vline(x=context, line_color="#e377c2", row=1, col=col)
        _no_fit(fig, L, dense.fits, row=1, col=col)
    fig.update_xaxes(type="log", title="context (tokens)", dtick=1)
    fig.update_yaxes(type="log", title="$ per M tokens", dtick=1, tickprefix="$", row=1, col=1)
    fig.update_yaxes(title="MFU (%)", range=[0, 105], row=1, col=2)
    fig.update_layout(height=420, template="plotly_white", margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="h", y=-0.2), title=dict(text=f"batch {num(dense.batch)}", x=0.01))
    return fig


def frontier_figure(r, chips, batch=None):
    """Single-replica frontier from the roofline: tokens/s per chip vs tokens/s per user over batch."""
    import plotly.graph_objects as go

    per_chip = np.asarray(r.tokens_per_s) / chips
    fits = np.asarray(r.fits, dtype=bool)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=np.asarray(r.user_tokens_per_s)[fits], y=per_chip[fits], mode="lines+markers",
                             name=f"one replica on {num(r.chips)} GPUs of {r.hardware}, decode only (layout view)",
                             text=[f"batch {num(b)}" for b in np.asarray(r.batch)[fits]],
                             marker=dict(size=4)))
    if batch is not None:
        i = int(np.argmin(np.abs(np.log(np.asarray(r.batch)) - np.log(batch))))
        fig.add_trace(go.Scatter(x=[np.asarray(r.user_tokens_per_s)[i]], y=[per_chip[i]], mode="markers",
                                 name="you are here", marker=dict(size=13, color="#e377c2")))
    fig = _log_layout(fig, "Throughput vs interactivity", "tokens/s per user", "output tokens/s per GPU")
    fig.update_xaxes(dtick=None)  # often less than two decades: let plotly label 2 and 5
    return fig


# ------------------------------------------------------------------ the app
def _safe_stem(name: str) -> str:
    """An upload's file name reduced to letters, digits, '-', '_' and '.', so it is never read as markdown."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(name)).stem).strip("._") or "config"
    return stem[:40]


def _uploaded_model(up) -> str:
    """Save an uploaded config.json where the catalog loader can read it; returns its path.
    Refuses (InputError) more than MAX_UPLOAD_BYTES before anything is parsed or written."""
    size = getattr(up, "size", None)
    if size is not None and size > MAX_UPLOAD_BYTES:
        raise InputError(f"the upload is {size:,} bytes; the explorer takes a config.json of at most "
                         f"{MAX_UPLOAD_BYTES:,} bytes")
    data = up.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"the upload is {len(data):,} bytes; the explorer takes a config.json of at most "
                         f"{MAX_UPLOAD_BYTES:,} bytes")
    d = upload_root() / f"{_safe_stem(up.name)}-{hashlib.sha1(data).hexdigest()[:10]}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_bytes(data)
    saved = str(d / "config.json")
    _UPLOAD_NAMES[saved] = Path(str(up.name)).name[:80] or "config.json"
    return saved


def kv_choices(model, hardware, precision) -> tuple[list[str], str]:
    """The KV-precision select's options ('auto' first) and what 'auto' resolves to for this checkpoint on this
    chip (chalk.analyses.step.parallel.resolve_kv_precision: an 8-bit cache beside 8-bit-or-narrower weights)."""
    from chalk.analyses.step.model_sizes import ModelSizes
    from chalk.analyses.step.parallel import resolve_kv_precision
    from chalk.specs.catalog import as_model, as_system
    from chalk.specs.precision import canonical

    try:
        weights = canonical(precision) if precision else ModelSizes(as_model(model)).default_precision()
        auto = resolve_kv_precision("auto", weights, as_system(hardware))
    except ChalkError:
        auto = "bf16"
    return ["auto", *KV_PRECISIONS], auto


def sidebar(st):
    from chalk.specs import catalog

    st.sidebar.header("chalk explorer")
    src = st.sidebar.radio("model from", ["catalog", "upload config.json"], horizontal=True)
    models = catalog.model_ids()
    if src == "catalog":
        model = st.sidebar.selectbox("model", models, index=models.index(DEFAULT_MODEL)
                                     if DEFAULT_MODEL in models else 0)
    else:
        up = st.sidebar.file_uploader("Hugging Face config.json", type=["json"])
        if up is None:
            st.info("Upload a Hugging Face config.json, or pick a catalog model.")
            st.stop()
        try:
            model = _uploaded_model(up)
        except ChalkError as e:
            st.error(shown(e))
            st.stop()
    hw = catalog.system_ids() + catalog.chip_ids()
    hardware = st.sidebar.selectbox("chip or system", hw, index=hw.index(DEFAULT_HARDWARE)
                                    if DEFAULT_HARDWARE in hw else 0,
                                    help="A system is a chip in its scale-up domain; a chip id means its "
                                         "default system.")
    precisions = ["checkpoint default"]
    try:
        precisions += list(catalog.resolve_hardware(hardware).chip.precisions)
    except ChalkError:
        pass
    precision = st.sidebar.selectbox("weights precision", precisions)
    precision = None if precision == "checkpoint default" else precision
    kvs, auto = kv_choices(model, hardware, precision)
    kv = st.sidebar.selectbox("KV precision", kvs, key="kv_precision",
                              format_func=lambda k: f"auto → {auto} (checkpoint)" if k == "auto" else k,
                              help="auto: an 8-bit KV cache beside 8-bit (or narrower) weights on a chip with an "
                                   "FP8 rate, else bf16, as a checkpoint carrying its KV scheme is served "
                                   "(TensorRT-LLM); vLLM and SGLang keep bf16 unless told.")
    ideal = st.sidebar.checkbox("ideal roofline (datasheet peaks)", value=False)
    eplb = st.sidebar.selectbox("expert-load balancer (MoE)", EPLB_MODES,
                                help="Whether a layout's MoE layers run an expert-load balancer (redundant experts "
                                     "placed by load). auto: from the calibrated EP width, as wide-EP deployments "
                                     "run one; off: served traffic's uneven expert loads.")
    batch = st.sidebar.select_slider("batch (sequences)", options=BATCHES, value=64, key="batch")
    context = st.sidebar.select_slider("context (tokens)", options=CONTEXTS, value=4096, key="context")
    return dict(model=model, hardware=hardware, precision=precision, kv_precision=auto if kv == "auto" else kv,
                kv_choice=kv, ideal=ideal, eplb=eplb, **energy_inputs(st)), batch, context


def energy_inputs(st) -> dict:
    """The sidebar's electricity price and PUE for every answer's energy figures, starting at the catalog's
    sourced defaults (`energy.yaml`, its sources in the help); a value left at its default is passed as None, so
    the answer names the default's source."""
    from chalk.analyses.economics.energy import energy_defaults

    d = energy_defaults()
    with st.sidebar.expander("energy: electricity price and PUE"):
        price = st.number_input("electricity price (USD per kWh)", min_value=0.0, max_value=100.0,
                                value=float(d.usd_per_kwh), step=0.01, format="%.3f", key="usd_per_kwh",
                                help=f"Default {d.usd_per_kwh:g} USD/kWh: {d.usd_per_kwh_source}.")
        pue = st.number_input("PUE (facility power / IT power)", min_value=1.0, max_value=10.0, value=float(d.pue),
                              step=0.05, format="%.2f", key="pue", help=f"Default {d.pue:g}: {d.pue_source}.")
    return {"usd_per_kwh": None if price == d.usd_per_kwh else float(price),
            "pue": None if pue == d.pue else float(pue)}


def _guard(st, fn, *args):
    """Run one tab: a bad input is an error line, a missing analysis an info box, never a traceback."""
    try:
        fn(st, *args)
    except ChalkError as e:
        st.error(shown(e))
    except ImportError as e:
        st.info(f"This tab needs {shown(e.name or 'an analysis')} that is not in this build of chalk yet.")
    except Exception as e:  # noqa: BLE001 - keep the rest of the page alive
        st.warning(f"This view could not be drawn: {type(e).__name__}: {shown(e)}")


def _on_layout(common, r, batches, contexts):
    """The header's layout view over arrays of batch or context: the same replica (r.layout) at every point, so the
    curves pass through the header's numbers (a sweep left to choose would fit its largest batch)."""
    from chalk import api

    lay = {k: r.layout[k] for k in ("tp", "ep", "etp", "pp", "attn_dp")}
    return api.estimate(common["model"], common["hardware"], np.asarray(batches, dtype=float),
                        np.asarray(contexts, dtype=float), layout=lay, **_layout_opts(common))


def tab_roofline(st, common, batch, context, r):
    from chalk.faces.plots import batch_range, roofline_over_context

    B = np.unique(np.concatenate([batch_range(r), [batch]]))
    rb = _on_layout(common, r, B, float(context))
    c1, c2 = st.columns(2)
    c1.plotly_chart(latency_figure(rb, batch, float(r.step_time_s)), width="stretch")
    c2.plotly_chart(cost_figure(rb, common["hardware"], batch, float(r.cost_per_mtok_usd)),
                    width="stretch")
    dense = _on_layout(common, r, float(batch), np.geomspace(256, 2 ** 21, 120))
    sparse = roofline_over_context(common["model"], common["hardware"], batch, sparse_law="sqrt", **_opts(common))
    st.plotly_chart(context_figure(dense, sparse, context), width="stretch")
    st.caption(f"Layout view ({shown((r.layout or {}).get('label', '?'))}, {num(r.chips)} GPUs) for every line but "
               "the sparse one, which is the aggregate bound (every GPU summed). "
               f"Efficiency: {shown(r.efficiency)}; weights read: {shown(r.weights_read)}. Pink marks the "
               "sidebar's batch and context; grey is where the KV cache no longer fits in HBM.")


def tab_serving(st, common, batch, context, r):
    import plotly.graph_objects as go

    from chalk.faces.plots import batch_range

    out_len = st.select_slider("output tokens per request", options=[64, 128, 256, 512, 1024, 2048, 4096, 8192],
                               value=1024, key="output_len")
    rb = _on_layout(common, r, batch_range(r), float(context))
    fig = frontier_figure(rb, r.chips, batch)
    try:
        from chalk.analyses.traffic.serving import throughput
    except ImportError:
        st.plotly_chart(fig, width="stretch")
        st.info("Multi-replica serving (TP / EP / PP layouts, throughput at a latency target) needs "
                "chalk.analyses.traffic.serving, not in this build yet. Above: one replica on the roofline.")
        return
    from chalk.faces.web_tabs import memo

    res = memo(throughput)(common["model"], common["hardware"], input_len=float(context), output_len=float(out_len),
                           precision=common["precision"], kv_precision=common["kv_precision"],
                           ideal=common["ideal"], pareto=True, eplb=common["eplb"])
    front = sorted(res["frontier"], key=lambda f: f["user_tokens_per_s"])
    fig.add_trace(go.Scatter(x=[f["user_tokens_per_s"] for f in front],
                             y=[f["output_tokens_per_s_per_gpu"] for f in front], mode="lines+markers",
                             name="serving frontier (layouts × batch)", line=dict(color="#2ca02c", width=3),
                             text=[f["layout"] for f in front]))
    fig.add_trace(go.Scatter(x=[res["user_tokens_per_s"]], y=[res["output_tokens_per_s_per_gpu"]], mode="markers",
                             name="most tokens/s per GPU", marker=dict(symbol="star", size=16, color="#2ca02c",
                                                                       line=dict(color="black", width=1))))
    fig.update_layout(title=dict(text="Throughput vs interactivity: one replica decoding (layout view) and the "
                                      "serving frontier (search, prefill included)"))
    c = st.columns(4)
    c[0].metric("Output tokens/s per GPU (serving)", num(res["output_tokens_per_s_per_gpu"]))
    c[1].metric("Tokens/s per user", num(res["user_tokens_per_s"]))
    c[2].metric("Cost per M output tokens", usd(res["cost_per_mtok_output_usd"]))
    c[3].metric("Time to first token", seconds(res["ttft_s"]))
    st.caption(f"Serving view (a search over layouts and batch, prefill included; not the header's one layout): "
               f"best layout {shown(res['layout'])} on {num(res['gpus'])} GPUs, {num(res['concurrency'])} sequences; "
               f"{num(context)} tokens in, {num(out_len)} out; {shown(res['efficiency'])} efficiency. "
               "chalk.analyses.traffic.serving.throughput.")
    from chalk.analyses.economics.energy import serving_energy
    from chalk.faces.web_tabs import energy_note, energy_table
    from chalk.specs.catalog import as_system

    e = serving_energy(res, as_system(common["hardware"]).chip, **energy_opts(common))  # as chalk.throughput does
    st.markdown(f"Energy (serving view, the deployment's {num(res['gpus'])} GPUs at this point):\n\n"
                + energy_table(e, "deployment"))
    st.caption(md_escape(energy_note(e)))
    st.plotly_chart(fig, width="stretch")


def _opts(common):
    """The sidebar's options every view takes (the lecture's aggregate views too)."""
    return {k: common[k] for k in ("precision", "kv_precision", "ideal")}


def _layout_opts(common):
    """`_opts` and the expert-load balancer: the options of a view on a real layout."""
    return {**_opts(common), "eplb": common["eplb"]}


def header(st, r, batch, context) -> None:
    """The answer's one line (model, GPUs, layout, precisions, efficiency) and its numbers, each labelled with the
    view it comes from: one replica on the layout `estimate` chose, timed op by op with its communication."""
    lay = (r.layout or {}).get("label", "?")
    from chalk.specs.catalog import as_system

    st.markdown(f"#### {shown(r.model)} on {num(r.chips)} of {num(as_system(r.hardware).chips)} GPUs of "
                f"{shown(r.hardware)} · layout {shown(lay)} · "
                f"{shown(r.precision)} weights, {shown(r.kv_precision)} KV · batch {num(batch)} · "
                f"context {num(context)}")
    st.caption(f"Layout view: one replica on {shown(lay)} ({num(r.chips)} GPUs), the decode step timed op by op "
               f"with its communication ({shown(r.efficiency)} efficiency); chalk estimate. The Lecture tab shows "
               "the aggregate bound instead: every GPU of the system summed into one chip, communication free.")
    cells = [(f"Decode step (layout view, {num(r.chips)} GPUs)", seconds(r.step_time_s)),
             ("$ per M output tokens", usd(r.cost_per_mtok_usd)),
             ("Tokens/s per user", num(r.user_tokens_per_s)),
             (f"Output tokens/s per replica ({num(r.chips)} GPUs)", num(r.tokens_per_s)),
             ("Output tokens/s per GPU", num(float(r.tokens_per_s) / float(r.chips))),
             ("MFU", pct(r.mfu)), ("Bound", str(r.bound))]
    # one markdown table, not st.metric: markdown is in the page's first script bundle, so the numbers show with
    # the header line instead of waiting for a lazily loaded component behind the charts
    st.markdown("| " + " | ".join(md_escape(k) for k, _ in cells) + " |\n|" + "---|" * len(cells) + "\n| "
                + " | ".join(f"**{md_escape(v)}**" for _, v in cells) + " |")
    from chalk.faces.web_tabs import energy_note, energy_table

    st.markdown(f"Energy (layout view, one replica of {num(r.chips)} GPUs at this batch):\n\n"
                + energy_table(r.energy, "replica"))
    st.caption(md_escape(energy_note(r.energy)))


def infeasible(st, r, batch, context) -> None:
    """Why this choice cannot run, in place of the step's numbers and charts (the tabs that draw it say so)."""
    lay = (r.layout or {}).get("label", "?")
    hint = (f"at most {num(r.max_batch_fit)} sequences fit at this context: lower the batch" if r.max_batch_fit >= 1
            else "the weights alone do not fit: pick a system with more GPUs (or more HBM) or a narrower weights "
                 "precision")
    st.error(f"Infeasible: {shown(r.model)} at batch {num(batch)}, context {num(context)} does not fit on "
             f"{num(r.chips)} GPUs of {shown(r.hardware)} (layout {shown(lay)}): "
             f"{si(r.memory_needed_bytes, 'B')} needed, {si(r.hbm_bytes, 'B')} of HBM in all before the engine's "
             f"reserve. Fix: {hint}.")
    for n in r.notes:
        st.markdown(f"- {shown(n)}")


def tab_names() -> list[str]:
    return ["Roofline", "Serving", "Plan", "Portfolio", "Layout", "Pricing", "Training", "Lecture"]


def main():
    import streamlit as st

    from chalk import api

    st.set_page_config(page_title="chalk explorer", layout="wide")
    common, batch, context = sidebar(st)
    try:
        r = api.estimate(common["model"], common["hardware"], batch, context, **_layout_opts(common),
                         **energy_opts(common))
        _ = (r.step_time_s, r.mfu)  # resolve the deferred fields here, where an error is one line
    except ChalkError as e:
        st.error(shown(e))
        st.stop()
    except Exception as e:  # noqa: BLE001 - a malformed upload is one line, never a traceback with paths
        st.error(f"chalk could not read this model ({type(e).__name__})")
        st.stop()
    from chalk.faces.web_plan import tab_plan
    from chalk.faces.web_portfolio import tab_portfolio
    from chalk.faces.web_tabs import tab_layout, tab_lecture, tab_pricing, tab_training

    fns = (tab_roofline, tab_serving, tab_plan, tab_portfolio, tab_layout, tab_pricing, tab_training, tab_lecture)
    # the tabs that draw the sidebar's step; Plan, Portfolio and Training ask their own questions (QA 2026-11-28:
    # a batch and context that did not fit hid them all)
    needs_step = {tab_roofline, tab_serving, tab_layout, tab_pricing, tab_lecture}
    if r.fits:
        header(st, r, batch, context)
    else:
        infeasible(st, r, batch, context)
    try:  # lazy tabs (Streamlit >= 1.52): only the open tab runs, so the first numbers come fast
        tabs = st.tabs(tab_names(), key="tab", on_change="rerun")
    except TypeError:  # pragma: no cover - older Streamlit: every tab runs
        tabs = st.tabs(tab_names())
    for tab, fn in zip(tabs, fns):
        if getattr(tab, "open", True) is False:
            continue
        with tab:
            if not r.fits and fn in needs_step:
                st.info("This view draws the sidebar's step, which does not fit (see above): lower the batch or "
                        "the context, or pick more GPUs.")
                continue
            _guard(st, fn, common, batch, context, r)


if __name__ == "__main__":
    main()
