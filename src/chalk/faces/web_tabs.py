"""The explorer's Layout, Pricing, Training and Lecture tabs (`web_app` draws the sidebar, header, Roofline and
Serving tabs; `web_plan` the Plan tab). Thin: every number comes from the analyses; no formulas."""

from __future__ import annotations

import re

from chalk.faces.fmt import num, pct, seconds, si, usd, value_text

#: How many answers each memoised call keeps (one per sidebar choice visited).
MEMO_ENTRIES = 64
_MEMOS: dict = {}


def memo(fn):
    """`fn` memoised for the life of the server (st.cache_resource: the answer object itself, not a pickled copy;
    chalk's answers are immutable), so a second visit or a rerun does not search again. Plain `fn` without
    Streamlit."""
    if fn not in _MEMOS:
        try:
            import streamlit as st
        except ImportError:  # pragma: no cover
            return fn
        _MEMOS[fn] = st.cache_resource(show_spinner=False, max_entries=MEMO_ENTRIES)(fn)
    return _MEMOS[fn]


# ------------------------------------------------------------------ Energy
def energy_opts(common) -> dict:
    """The sidebar's electricity price and PUE, as every energy call takes them (None: the catalog's default)."""
    return {k: common.get(k) for k in ("usd_per_kwh", "pue")}


def energy_cells(e, fleet: str) -> list[tuple[str, str]]:
    """(label, value) cells of one answer's `Energy` (`chalk.analyses.economics.energy`, as the API attaches it):
    J per token, power per GPU and for `fleet` (what the answer's GPUs are: 'replica', 'deployment', 'fleet') at the
    wall, kWh per day and the electricity per M tokens with its share of $/M tokens. Formatting only."""
    d = e.to_dict() if hasattr(e, "to_dict") else (e or {})
    if d.get("joules_per_token") is None:
        return [("Energy", str(d.get("assumption", "not estimated")))]
    gpus, tok = int(d["gpus"]), d["tokens"]
    share = d.get("electricity_share_of_cost")
    return [(f"J per {tok} token", num(d["joules_per_token"])),
            (f"Power per GPU ({d['power_source'].replace(' (', ': ').rstrip(')')})", si(d["power_w_per_gpu"], "W")),
            (f"Power per {fleet} ({num(gpus)} GPU{'s' if gpus != 1 else ''}, at the wall)",
             si(d["power_w_per_fleet"], "W")),
            (f"kWh per day ({fleet})", num(d["kwh_per_day"])),
            (f"Electricity per M {tok} tokens", usd(d["electricity_usd_per_mtok"])),
            ("Electricity share of $/M tokens", "n/a" if share is None else pct(share))]


def energy_table(e, fleet: str) -> str:
    """`energy_cells` as one markdown table (labels and values escaped)."""
    from chalk.faces.web import md_escape

    cells = energy_cells(e, fleet)
    return ("| " + " | ".join(md_escape(k) for k, _ in cells) + " |\n|" + "---|" * len(cells) + "\n| "
            + " | ".join(md_escape(v) for _, v in cells) + " |")


def energy_note(e) -> str:
    """The assumption behind an answer's energy figures and where the price and PUE come from (plain text)."""
    d = e.to_dict() if hasattr(e, "to_dict") else (e or {})
    if d.get("joules_per_token") is None:
        return str(d.get("assumption", ""))
    def whose(src: str) -> str:  # 'chalk default: <the source>' -> 'chalk's default (source: ...)'
        return "the sidebar's value" if src == "given" else "chalk's sourced default (see the sidebar's help)"

    return (f"{d['assumption']}. Electricity price: {whose(d['usd_per_kwh_source'])}; PUE: "
            f"{whose(d['pue_source'])}. chalk.analyses.economics.energy.")


# ------------------------------------------------------------------ Layout
def layouts_figure(rep, chosen: str | None = None):
    """Serving layouts of one system: the sequences each replica holds (KV room left after its weights) for every
    layout whose weights fit, from `chalk.analyses.step.parallel.layout_report`; `chosen` (the header's layout)
    drawn in pink."""
    import plotly.graph_objects as go

    rows = [x for x in rep["layouts"] if x["fits_weights"] and x["max_sequences_per_replica"] >= 1]
    labels = [str(x.get("label", "")) for x in rows]
    base = [re.sub(r" x\d+ replicas$", "", lab) for lab in labels]  # 'TP4 x2 replicas' -> 'TP4': one replica
    fig = go.Figure(go.Bar(
        y=labels, x=[x["max_sequences_per_replica"] for x in rows], orientation="h",
        text=[f"{num(x['max_sequences_per_replica'])} seq · {si(x['weight_bytes_per_gpu'], 'B')} weights/GPU"
              for x in rows], textposition="auto",
        marker_color=["#e377c2" if chosen and b == chosen else "#1f77b4" for b in base]))
    fig.update_xaxes(type="log", title=f"sequences one replica holds at context {num(rep['context'])}")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=dict(text=f"Serving layouts on {num(rep['gpus'])} GPUs of {rep['hardware']}: "
                                      "KV room per replica (pink: the header's layout)", x=0.01, font=dict(size=14)),
                      template="plotly_white", height=min(140 + 22 * max(len(rows), 1), 900),
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def _layouts(model, hardware, precision, kv_precision, context, ideal):
    from chalk.analyses.step.parallel import layout_report
    from chalk.specs.catalog import as_model, as_system

    return layout_report(as_model(model), as_system(hardware), precision=precision, kv_precision=kv_precision,
                         context=context, ideal=ideal)


def tab_layout(st, common, batch, context, r):
    from chalk.faces.web import shown

    rep = memo(_layouts)(common["model"], common["hardware"], common["precision"], common["kv_precision"],
                         float(context), common["ideal"])
    chosen = (r.layout or {}).get("label")
    st.plotly_chart(layouts_figure(rep, chosen), width="stretch")
    st.caption(f"Inference: each layout's weights per GPU and the sequences its replica holds at context "
               f"{num(context)}. The header's numbers are one replica on {shown(chosen or '?')}. "
               "chalk.analyses.step.parallel.layout_report (chalk layout).")
    rows = rep["layouts"]
    st.subheader(f"Layouts of {shown(rep['model'])} on {num(rep['gpus'])} GPUs of {shown(rep['hardware'])}")
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
                  "output tokens/s per GPU": [num(x["output_tokens_per_s_per_gpu"]) for x in pp]},
                 width="stretch")
    with st.expander("Training: a pipeline schedule (GPipe / 1F1B) and its bubble"):
        from chalk.faces.plots import _bubble_from_analyses

        c1, c2, c3 = st.columns(3)
        stages = c1.slider("pipeline stages (PP)", 1, 16, 4)
        micro = c2.slider("micro-batches (M)", 1, 32, 8)
        sched = c3.selectbox("schedule", ["gpipe", "1f1b"])
        st.plotly_chart(pipeline_figure(stages, micro, sched), width="stretch")
        b = _bubble_from_analyses(stages, micro)
        if b:
            st.metric("Training pipeline bubble (PP−1)/(M+PP−1)", pct(b[0]))


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


# ------------------------------------------------------------------ Pricing
def sheets_for(model_id: str) -> list[str]:
    """The catalog's price sheets of this model: a sheet whose id is the model's id or one of its aliases (the
    catalog's link between the two), mode sheets included."""
    from chalk.specs.catalog import model_ids, model_meta
    from chalk.specs.prices import price_sheet_ids

    names = {model_id}
    if model_id in model_ids():
        names |= set(model_meta(model_id).get("aliases") or ())
    return [s for s in price_sheet_ids() if s in names]


def tab_pricing(st, common, batch, context, r):
    from chalk.analyses.economics.pricing import analyze_sheet, pricing_margin
    from chalk.faces.web import shown

    ids = sheets_for(r.model)
    if not ids:
        st.info(f"No API price sheet for {shown(r.model)} in the catalog, so no margin: a margin compares a "
                "model's own prices with its own cost. chalk's cost for it is in the header "
                f"({usd(r.cost_per_mtok_usd)} per M output tokens). Sheets exist for the models "
                f"{shown(', '.join(_priced_models()))}.")
        return
    sheet = st.selectbox("price sheet", ids, index=0)
    m = memo(pricing_margin)(common["model"], common["hardware"], sheet, batch=batch, context=context,
                             precision=common["precision"], kv_precision=common["kv_precision"],
                             ideal=common["ideal"])
    c = st.columns(4)
    c[0].metric("chalk cost, output", f"{usd(m['cost_output_usd_per_mtok'])}/M")
    c[1].metric("sheet price, output", f"{usd(m['output_usd_per_mtok'])}/M")
    c[2].metric("chalk cost, input", f"{usd(m['cost_input_usd_per_mtok'])}/M")
    c[3].metric("margin on the day", pct(m["margin"]))
    st.caption(f"Pricing view (a day's traffic on layout {shown(m['layout'])}; the header's numbers are one "
               f"replica on {shown((r.layout or {}).get('label', '?'))}). "
               f"Sheet {shown(sheet)} for {shown(r.model)}. A day of {si(m['input_tokens'])} input "
               f"({pct(m['cache_hit_fraction'])} cache hits) and {si(m['output_tokens'])} output tokens, decode at "
               f"batch {num(m['decode_batch'])} on layout {shown(m['layout'])}, context {num(m['context'])}; "
               f"{shown(m['efficiency'])} efficiency. chalk.analyses.economics.pricing.pricing_margin.")
    d = analyze_sheet(sheet)
    rows = [(k, value_text(v)) for k, v in d.items() if not isinstance(v, (list, dict))]
    st.dataframe({"reading": [k for k, _ in rows], "value": [v for _, v in rows]}, width="stretch")


def _priced_models() -> list[str]:
    from chalk.specs.catalog import model_ids

    return [m for m in model_ids() if sheets_for(m)]


# ------------------------------------------------------------------ Training
def tab_training(st, common, batch, context, r):
    from chalk.analyses.blackboard.training import train_estimate
    from chalk.faces.web import shown

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
    st.caption(f"{shown(e.model)} on {num(e.gpus)} GPUs ({shown(e.chip)}), {si(e.tokens)} tokens, "
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


# ------------------------------------------------------------------ Lecture
def _claims():
    from chalk.analyses.blackboard.lecture import all_claims

    return all_claims()


def tab_lecture(st, common, batch, context, r):
    from chalk.faces.report import lecture_steps
    from chalk.faces.web import shown

    opts = {k: common[k] for k in ("precision", "kv_precision", "ideal")}
    steps, rs = memo(lecture_steps)(common["model"], common["hardware"], context=context, batch=batch, **opts)
    agg = rs[-1]
    st.info(f"Aggregate bound: all {num(agg.chips)} GPUs of {shown(agg.hardware)} summed into one chip with free "
            f"communication, the lecture's view: decode step {seconds(agg.step_time_s)} at batch {num(agg.batch)}. "
            f"An upper bound on speed, not a deployment; the header's layout view (one replica on "
            f"{shown((r.layout or {}).get('label', '?'))}, {num(r.chips)} GPUs, communication timed) gives "
            f"{seconds(r.step_time_s)}.")
    for s in steps:
        st.markdown(f"**Eq. {s.eq} — {s.title}** (aggregate bound, {num(agg.chips)} GPUs)  \n`{s.formula}`")
        st.table({"quantity": [q for q, _ in s.rows],
                  **{f"batch {num(x.batch)}": [v[i] for _, v in s.rows] for i, x in enumerate(rs)}})
    claims = memo(_claims)()
    st.subheader("The lecture's claims, computed by chalk")
    st.dataframe({"claim": [c.id for c in claims], "chalk": [value_text(c.value) for c in claims],
                  "unit": [c.unit for c in claims], "lecture": [value_text(c.lecture_value) for c in claims],
                  "in range": ["" if c.within_lecture_range is None else "yes" if c.within_lecture_range else "no"
                               for c in claims]}, width="stretch", height=420)
