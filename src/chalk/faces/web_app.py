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
from chalk.faces.fmt import num, pct, seconds, si, usd
from chalk.faces.plots import whole
from chalk.faces.web import _UPLOAD_NAMES, MAX_UPLOAD_BYTES, md_escape, scrub_paths, shown, upload_root  # noqa: F401

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
    """Latency vs batch (ms, log-log): compute, weight floor, KV slope, memory, their max; the operating point."""
    import plotly.graph_objects as go

    B = np.asarray(r.batch)
    fig = go.Figure()
    for key, name, color, dash, width in (
            ("compute_time_s", "compute (eq. 2)", COLORS["compute"], None, 2),
            ("weight_time_s", "weight fetch (eq. 3)", COLORS["weights"], "dash", 2),
            ("kv_time_s", "KV fetch (eq. 3)", COLORS["kv"], "dash", 2),
            ("memory_time_s", "weights + KV", COLORS["memory"], None, 2),
            ("step_time_s", "step time = max (eq. 1)" + ("" if r.efficiency == "ideal" else " + overhead"),
             COLORS["step"], None, 5)):
        fig.add_trace(go.Scatter(x=B, y=np.asarray(getattr(r, key)) * 1e3, name=name, mode="lines",
                                 line=dict(color=color, dash=dash, width=width),
                                 opacity=0.45 if key == "step_time_s" else 1))
    _vmark(fig, r.critical_batch, f"critical batch ≈ {whole(r.critical_batch)}", COLORS["compute"])
    _no_fit(fig, B, r.fits)
    if batch is not None:
        fig.add_trace(go.Scatter(x=[batch], y=[step_s * 1e3], name="you are here", mode="markers",
                                 marker=dict(size=13, color="#e377c2", line=dict(color="black", width=1))))
    return _log_layout(fig, "Latency vs batch", "batch (sequences)", "time per decode step (ms)")


def cost_figure(r, hardware, batch=None, cost=None):
    """Cost per M output tokens vs batch: the hyperbola falling to the compute floor; the operating point."""
    import plotly.graph_objects as go

    from chalk.faces.plots import cost_components_per_mtok

    B = np.asarray(r.batch)
    c = cost_components_per_mtok(r, hardware)
    fig = go.Figure()
    for key, name, color, dash in (("compute", "compute per token", COLORS["compute"], None),
                                   ("weight", "weight fetch per token", COLORS["weights"], "dash"),
                                   ("kv", "KV fetch per token", COLORS["kv"], "dash"),
                                   ("memory", "weights + KV per token", COLORS["memory"], None)):
        fig.add_trace(go.Scatter(x=B, y=c[key], name=name, mode="lines", line=dict(color=color, dash=dash)))
    fig.add_trace(go.Scatter(x=B, y=r.cost_per_mtok_usd, name="cost per token (eq. 4)", mode="lines",
                             line=dict(color=COLORS["step"], width=5), opacity=0.45))
    _vmark(fig, r.critical_batch, f"critical batch ≈ {whole(r.critical_batch)}", COLORS["compute"])
    _no_fit(fig, B, r.fits)
    if batch is not None:
        fig.add_trace(go.Scatter(x=[batch], y=[cost], name="you are here", mode="markers",
                                 marker=dict(size=13, color="#e377c2", line=dict(color="black", width=1))))
    lo = float(np.nanmin(r.cost_per_mtok_usd)) / 4
    fig = _log_layout(fig, "Cost per output token vs batch", "batch (sequences)", "$ per million output tokens")
    fig.update_yaxes(range=[np.log10(lo), np.log10(float(np.nanmax(r.cost_per_mtok_usd)) * 3)], tickprefix="$")
    return fig


def context_figure(dense, sparse, context=None):
    """Cost and MFU vs context at a fixed batch: dense vs sqrt-law sparse attention."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    L = np.asarray(dense.context)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("$ per M output tokens vs context", "MFU vs context"))
    for res, name, color, dash in ((dense, "as configured", COLORS["step"], None),
                                   (sparse, "sparse: √L law", COLORS["sparse"], "dash")):
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
                             name=f"one replica on {r.chips} × {r.hardware}, decode only (roofline)", text=[f"batch {num(b)}" for b in np.asarray(r.batch)[fits]],
                             marker=dict(size=4)))
    if batch is not None:
        i = int(np.argmin(np.abs(np.log(np.asarray(r.batch)) - np.log(batch))))
        fig.add_trace(go.Scatter(x=[np.asarray(r.user_tokens_per_s)[i]], y=[per_chip[i]], mode="markers",
                                 name="you are here", marker=dict(size=13, color="#e377c2")))
    fig = _log_layout(fig, "Throughput vs interactivity (one replica, roofline)", "tokens/s per user",
                      "output tokens/s per chip")
    fig.update_xaxes(dtick=None)  # often less than two decades: let plotly label 2 and 5
    return fig


def pipeline_figure(stages, microbatches, schedule):
    """The pipeline timeline from `plots.pipeline_schedule` as horizontal bars."""
    import plotly.graph_objects as go

    from chalk.faces.plots import pipeline_schedule

    ops = pipeline_schedule(stages, microbatches, schedule)
    fig = go.Figure()
    for kind, color in (("F", "#4a90d9"), ("B", "#f28e2b")):
        sel = [o for o in ops if o[1] == kind]
        fig.add_trace(go.Bar(y=[f"stage {o[0]}" for o in sel], x=[o[4] for o in sel], base=[o[3] for o in sel],
                             orientation="h", name="forward" if kind == "F" else "backward",
                             marker=dict(color=color, line=dict(color="white", width=1)),
                             text=[f"{kind}{o[2]}" for o in sel], textposition="inside"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="overlay", height=140 + 40 * stages, template="plotly_white",
                      xaxis_title="time (forward = 1 unit, backward = 2)", margin=dict(l=60, r=20, t=30, b=40))
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
    kv = st.sidebar.selectbox("KV precision", KV_PRECISIONS)
    ideal = st.sidebar.checkbox("ideal roofline (datasheet peaks)", value=False)
    eplb = st.sidebar.selectbox("expert-load balancer (MoE)", EPLB_MODES,
                                help="Whether a layout's MoE layers run an expert-load balancer (redundant experts "
                                     "placed by load). auto: from the calibrated EP width, as wide-EP deployments "
                                     "run one; off: served traffic's uneven expert loads.")
    batch = st.sidebar.select_slider("batch (sequences)", options=BATCHES, value=64, key="batch")
    context = st.sidebar.select_slider("context (tokens)", options=CONTEXTS, value=4096, key="context")
    return dict(model=model, hardware=hardware, precision=None if precision == "checkpoint default" else precision,
                kv_precision=kv, ideal=ideal, eplb=eplb), batch, context


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


def tab_roofline(st, common, batch, context, r):
    from chalk.faces.plots import batch_range, roofline_over_batch, roofline_over_context

    B = np.unique(np.concatenate([batch_range(r), [batch]]))
    rb = roofline_over_batch(common["model"], common["hardware"], context, batches=B, **_layout_opts(common))
    c1, c2 = st.columns(2)
    c1.plotly_chart(latency_figure(rb, batch, float(r.step_time_s)), width="stretch")
    c2.plotly_chart(cost_figure(rb, common["hardware"], batch, float(r.cost_per_mtok_usd)),
                    width="stretch")
    dense = roofline_over_context(common["model"], common["hardware"], batch, **_layout_opts(common))
    sparse = roofline_over_context(common["model"], common["hardware"], batch, sparse_law="sqrt", **_opts(common))
    st.plotly_chart(context_figure(dense, sparse, context), width="stretch")
    st.caption(f"efficiency: {shown(r.efficiency)}; weights read: {shown(r.weights_read)}. Pink marks the "
               "sidebar's batch and context; grey is where the KV cache no longer fits in HBM.")


def tab_serving(st, common, batch, context, r):
    import plotly.graph_objects as go

    from chalk.faces.plots import batch_range, roofline_over_batch

    out_len = st.select_slider("output tokens per request", options=[64, 128, 256, 512, 1024, 2048, 4096, 8192],
                               value=1024, key="output_len")
    rb = roofline_over_batch(common["model"], common["hardware"], context, batches=batch_range(r),
                             **_layout_opts(common))
    fig = frontier_figure(rb, r.chips, batch)
    try:
        from chalk.analyses.traffic.serving import throughput
    except ImportError:
        st.plotly_chart(fig, width="stretch")
        st.info("Multi-replica serving (TP / EP / PP layouts, throughput at a latency target) needs "
                "chalk.analyses.traffic.serving, not in this build yet. Above: one replica on the roofline.")
        return
    res = throughput(common["model"], common["hardware"], input_len=float(context), output_len=float(out_len),
                     precision=common["precision"], kv_precision=common["kv_precision"], ideal=common["ideal"],
                     pareto=True, eplb=common["eplb"])
    front = sorted(res["frontier"], key=lambda f: f["user_tokens_per_s"])
    fig.add_trace(go.Scatter(x=[f["user_tokens_per_s"] for f in front],
                             y=[f["output_tokens_per_s_per_gpu"] for f in front], mode="lines+markers",
                             name="serving frontier (layouts × batch)", line=dict(color="#2ca02c", width=3),
                             text=[f["layout"] for f in front]))
    fig.add_trace(go.Scatter(x=[res["user_tokens_per_s"]], y=[res["output_tokens_per_s_per_gpu"]], mode="markers",
                             name="most tokens/s per GPU", marker=dict(symbol="star", size=16, color="#2ca02c",
                                                                       line=dict(color="black", width=1))))
    fig.update_layout(title=dict(text="Throughput vs interactivity: one replica (roofline) and the serving frontier"))
    c = st.columns(4)
    c[0].metric("Output tokens/s per GPU", num(res["output_tokens_per_s_per_gpu"]))
    c[1].metric("Tokens/s per user", num(res["user_tokens_per_s"]))
    c[2].metric("Cost per M output tokens", usd(res["cost_per_mtok_output_usd"]))
    c[3].metric("Time to first token", seconds(res["ttft_s"]))
    st.caption(f"Best layout: {shown(res['layout'])} on {num(res['gpus'])} GPUs, {num(res['concurrency'])} sequences; "
               f"{num(context)} tokens in, {num(out_len)} out; {shown(res['efficiency'])} efficiency. "
               "chalk.analyses.traffic.serving.throughput.")
    st.plotly_chart(fig, width="stretch")


def tab_layout(st, common, batch, context, r):
    c1, c2, c3 = st.columns(3)
    stages = c1.slider("pipeline stages (PP)", 1, 16, 4)
    micro = c2.slider("micro-batches (M)", 1, 32, 8)
    sched = c3.selectbox("schedule", ["gpipe", "1f1b"])
    st.plotly_chart(pipeline_figure(stages, micro, sched), width="stretch")
    from chalk.faces.plots import _bubble_from_analyses

    b = _bubble_from_analyses(stages, micro)
    if b:
        st.metric("Training pipeline bubble (PP−1)/(M+PP−1)", pct(b[0]))
    try:
        from chalk.analyses.step.parallel import layout_report
    except ImportError:
        st.info("Tensor / expert / pipeline layouts with their link costs need chalk.analyses.step.parallel, "
                "not in this build yet.")
        return
    from chalk.specs.catalog import load_model, resolve_hardware

    rep = layout_report(load_model(common["model"]), resolve_hardware(common["hardware"]),
                        precision=common["precision"], context=float(context), ideal=common["ideal"])
    st.subheader(f"Layouts of {shown(rep['model'])} on {num(rep['gpus'])} × {shown(rep['hardware'])}")
    rows = rep["layouts"]
    st.dataframe({"layout": [str(x.get("label", "")) for x in rows],
                  "weights per GPU": [si(x["weight_bytes_per_gpu"], "B") for x in rows],
                  "weights fit": ["yes" if x["fits_weights"] else "no" for x in rows],
                  "KV per sequence per GPU": [si(x["kv_bytes_per_sequence_per_gpu"], "B") for x in rows],
                  "max sequences per replica": [num(x["max_sequences_per_replica"]) for x in rows]},
                 width="stretch")
    pp = rep["pipeline"]["rows"]
    st.subheader("Pipelining for inference: weights per GPU fall as 1/PP, KV per GPU does not")
    st.dataframe({"PP": [x["pp"] for x in pp], "GPUs": [x["gpus"] for x in pp],
                  "weights per GPU": [si(x["weight_bytes_per_gpu"], "B") for x in pp],
                  "KV per GPU": [si(x["kv_bytes_per_gpu"], "B") for x in pp],
                  "token latency": [seconds(x["token_latency_s"]) for x in pp],
                  "tokens/s per GPU": [num(x["output_tokens_per_s_per_gpu"]) for x in pp]},
                 width="stretch")


def tab_pricing(st, common, batch, context, r):
    from chalk.analyses.economics.pricing import analyze_sheet, pricing_margin
    from chalk.specs.prices import price_sheet_ids

    ids = price_sheet_ids()
    sheet = st.selectbox("price sheet", ids, index=ids.index("deepseek-r1") if "deepseek-r1" in ids else 0)
    m = pricing_margin(common["model"], common["hardware"], sheet, batch=batch, context=context,
                       precision=common["precision"], kv_precision=common["kv_precision"], ideal=common["ideal"])
    c = st.columns(4)
    c[0].metric("chalk cost, output", f"{usd(m['cost_output_usd_per_mtok'])}/M")
    c[1].metric("sheet price, output", f"{usd(m['output_usd_per_mtok'])}/M")
    c[2].metric("chalk cost, input", f"{usd(m['cost_input_usd_per_mtok'])}/M")
    c[3].metric("margin on the day", pct(m["margin"]))
    st.caption(f"A day of {si(m['input_tokens'])} input ({pct(m['cache_hit_fraction'])} cache hits) and "
               f"{si(m['output_tokens'])} output tokens, decode at batch {num(m['decode_batch'])}, context "
               f"{num(m['context'])}; {shown(m['efficiency'])} efficiency. chalk.analyses.economics.pricing.pricing_margin.")
    d = analyze_sheet(sheet)
    rows = [(k, _show(v)) for k, v in d.items() if not isinstance(v, (list, dict))]
    st.dataframe({"reading": [k for k, _ in rows], "value": [v for _, v in rows]}, width="stretch")


def tab_training(st, common, batch, context, r):
    from chalk.analyses.blackboard.training import train_estimate

    c1, c2 = st.columns(2)
    own = c1.checkbox("train on the sidebar's hardware", value=False,
                      help="Off: the model's published run (hardware, GPUs, tokens) if it has one, else chalk's "
                           "default run.")
    gpus = c2.number_input("GPUs (0 = default)", min_value=0, max_value=1_000_000, value=0, step=1024)
    e = train_estimate(common["model"], hardware=common["hardware"] if own else None, gpus=int(gpus) or None)
    c = st.columns(4)
    c[0].metric("GPU-hours", si(e.gpu_hours))
    c[1].metric("wall clock", f"{e.wall_clock_days:.3g} days")
    c[2].metric("cost", usd(e.cost_usd))
    c[3].metric("MFU", pct(e.mfu))
    st.caption(f"{shown(e.model)} on {num(e.gpus)} × {shown(e.chip)}, {si(e.tokens)} tokens, "
               f"{shown(e.precision)}; "
               "chalk.analyses.blackboard.training.train_estimate (defaults: the model's published run if any).")
    import plotly.graph_objects as go

    names = list(e.pools)
    fig = go.Figure(go.Bar(x=names, y=[e.pools[n]["tokens"] for n in names],
                           text=[si(e.pools[n]["tokens"]) for n in names], marker_color=["#1f77b4", "#9467bd",
                                                                                           "#2ca02c"][:len(names)]))
    fig.update_layout(title="Tokens per pool at eq. 7's balance (D_pretrain ≈ D_RL ≈ D_inference)",
                      yaxis_title="tokens", template="plotly_white", height=380)
    st.plotly_chart(fig, width="stretch")


def tab_lecture(st, common, batch, context, r):
    from chalk.faces.report import lecture_steps

    steps, rs = lecture_steps(common["model"], common["hardware"], context=context, batch=batch, **_opts(common))
    for s in steps:
        st.markdown(f"**Eq. {s.eq} — {s.title}**  \n`{s.formula}`")
        st.table({"quantity": [q for q, _ in s.rows],
                  **{f"batch {num(x.batch)}": [v[i] for _, v in s.rows] for i, x in enumerate(rs)}})
    from chalk.analyses.blackboard.lecture import all_claims

    claims = all_claims()
    st.subheader("The lecture's claims, computed by chalk")
    st.dataframe({"claim": [c.id for c in claims], "chalk": [_show(c.value) for c in claims],
                  "unit": [c.unit for c in claims], "lecture": [_show(c.lecture_value) for c in claims],
                  "in range": ["" if c.within_lecture_range is None else "yes" if c.within_lecture_range else "no"
                               for c in claims]}, width="stretch", height=420)


def _show(v) -> str:
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, tuple)):
        return " – ".join(_show(x) for x in v)
    return "" if v is None else str(v)


def _opts(common):
    """The sidebar's options every view takes (the lecture's aggregate views too)."""
    return {k: common[k] for k in ("precision", "kv_precision", "ideal")}


def _layout_opts(common):
    """`_opts` and the expert-load balancer: the options of a view on a real layout."""
    return {**_opts(common), "eplb": common["eplb"]}


def main():
    import streamlit as st

    from chalk import api

    st.set_page_config(page_title="chalk explorer", layout="wide")
    common, batch, context = sidebar(st)
    try:
        r = api.estimate(common["model"], common["hardware"], batch, context, **_layout_opts(common))
    except ChalkError as e:
        st.error(shown(e))
        st.stop()
    except Exception as e:  # noqa: BLE001 - a malformed upload is one line, never a traceback with paths
        st.error(f"chalk could not read this model ({type(e).__name__})")
        st.stop()
    st.markdown(f"#### {shown(r.model)} on {r.chips} × {shown(r.hardware)} · {shown(r.precision)} weights, "
                f"{shown(r.kv_precision)} KV · batch {num(batch)} · context {num(context)}")
    m = st.columns(6)
    m[0].metric("Step time", seconds(r.step_time_s))
    m[1].metric("Cost per M tokens", usd(r.cost_per_mtok_usd))
    m[2].metric("Tokens/s per user", num(r.user_tokens_per_s))
    m[3].metric("Tokens/s (all users)", num(r.tokens_per_s))
    m[4].metric("MFU", pct(r.mfu))
    m[5].metric("Bound", str(r.bound))
    if not r.fits:
        st.warning(f"Batch {num(batch)} at context {num(context)} does not fit in {si(r.hbm_bytes, 'B')} of HBM "
                   f"(max batch {num(r.max_batch_fit)}).")
    from chalk.faces.web_plan import tab_plan

    tabs = st.tabs(["Roofline", "Serving", "Plan", "Layout", "Pricing", "Training", "Lecture"])
    for tab, fn in zip(tabs, (tab_roofline, tab_serving, tab_plan, tab_layout, tab_pricing, tab_training,
                              tab_lecture)):
        with tab:
            _guard(st, fn, common, batch, context, r)


if __name__ == "__main__":
    main()
