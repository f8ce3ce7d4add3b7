"""The explorer's "Plan" tab: demand and targets in, the cheapest deployment per chip out. Thin: it calls
`chalk.analyses.planning.plan.plan` and draws its curves; no formulas."""

from __future__ import annotations

from chalk.faces.fmt import num, pct, seconds, si, usd

#: Chips offered by default beside the sidebar's hardware.
DEFAULT_CHIPS = ["h100-sxm", "h200", "b200", "mi300x"]


def plan_figures(res):
    """(cost against per-user speed, GPUs against demand) as plotly figures from a PlanResult's curves."""
    import plotly.graph_objects as go

    curves = res["curves"]
    cost = go.Figure()
    for hw, c in curves["cost_vs_speed"].items():
        cost.add_trace(go.Scatter(x=c["user_tokens_per_s"], y=c["usd_per_mtok_output"], mode="lines", name=hw))
        cost.add_trace(go.Scatter(x=[c["chosen"][0]], y=[c["chosen"][1]], mode="markers", name=f"{hw}: plan",
                                  marker=dict(symbol="star", size=14, line=dict(color="black", width=1))))
    cost.update_layout(title="Cost against per-user speed (serving frontier per chip)", template="plotly_white",
                       height=420, xaxis_title="tokens/s per user", yaxis_title="$ per M output tokens")
    cost.update_xaxes(type="log")
    cost.update_yaxes(type="log", tickprefix="$")
    gpus = go.Figure()
    for key, g in curves["gpus_vs_demand"].items():
        gpus.add_trace(go.Scatter(x=curves["demand"], y=g, mode="lines", name=key, line=dict(shape="hv")))
    gpus.add_vline(x=res["demand"]["planned_for"], line_dash="dot", line_color="#555")
    gpus.update_layout(title="GPUs against demand", template="plotly_white", height=420,
                       xaxis_title=f"demand ({curves['demand_unit']})", yaxis_title="GPUs")
    gpus.update_xaxes(type="log")
    gpus.update_yaxes(type="log")
    return cost, gpus


def plan_precisions(common) -> dict:
    """The weight and KV precisions a plan takes from the sidebar, as `chalk plan` reads its options: the
    checkpoint's default explores the checkpoint's precision and each narrower one a candidate chip runs natively
    ('explore'); a precision picked in the sidebar is the only one; KV 'auto' follows each explored precision."""
    kv = common.get("kv_choice", common["kv_precision"])
    return {"precision": common["precision"] or "explore", "kv_precision": kv}


def _price(o) -> str:
    p = o.get("price") or {}
    if p.get("given"):
        return f"{usd(o['usd_per_gpu_hour'])} (given with --price)"
    return f"{usd(o['usd_per_gpu_hour'])} ({p.get('date') or 'undated'}; {p.get('source') or 'no source'})"


def tab_plan(st, common, batch, context, r):
    from chalk.analyses.planning.plan import plan
    from chalk.faces.web import shown
    from chalk.specs.catalog import chip_ids

    chips = chip_ids()
    with st.form("plan"):
        c = st.columns(5)
        users = c[0].number_input("concurrent users", min_value=1, max_value=10_000_000, value=1000, step=100)
        speed = c[1].number_input("min tokens/s per user", min_value=1.0, max_value=10_000.0, value=30.0)
        ttft = c[2].number_input("p99 TTFT target, s (0 = none)", min_value=0.0, max_value=600.0, value=0.0)
        in_len = c[3].number_input("input tokens per request", min_value=1, max_value=10_000_000,
                                   value=int(context), step=256,
                                   help="Prompt tokens per request (starts at the sidebar's context).")
        out_len = c[4].number_input("output tokens per request", min_value=1, max_value=1_000_000, value=500)
        hw = st.multiselect("candidate chips", chips, default=[h for h in DEFAULT_CHIPS if h in chips])
        go = st.form_submit_button("Plan")
    if st.session_state.get("plan_for") != common["model"]:  # a plan answers for the model it was asked about
        st.session_state.pop("plan_result", None)
    if not go and "plan_result" not in st.session_state:
        st.info(f"Plan {shown(common['model'])} for a demand: pick the chips, the request lengths and the "
                "targets, then press Plan.")
        return
    if go:
        st.session_state["plan_for"] = common["model"]
        st.session_state["plan_result"] = plan(common["model"], hw or None, users=int(users),
                                               min_user_tps=float(speed), ttft_p99_s=float(ttft) or None,
                                               input_len=float(in_len), output_len=float(out_len),
                                               **plan_precisions(common), ideal=common["ideal"], eplb=common["eplb"])
    res = st.session_state["plan_result"]
    from chalk.analyses.economics.energy import attach_plan_energy
    from chalk.faces.web import md_escape
    from chalk.faces.web_tabs import energy_note, energy_opts, energy_table

    attach_plan_energy(res, **energy_opts(common))  # as chalk.plan and `chalk plan` do, at the sidebar's price and PUE
    best = res["options"][0]
    st.markdown(f"**Cheapest: {shown(best['hardware'])}, {shown(best['mode'])} serving, {shown(best['layout'])}**")
    m = st.columns(3)
    m[0].metric("GPUs (fleet)", num(best["gpus"]))
    m[1].metric("$ per hour (fleet)", usd(best["usd_per_hour"]))
    m[2].metric("$ per M output tokens", usd(best["usd_per_mtok_output"]))
    opts = res["options"]
    st.dataframe({"chip": [o["hardware"] for o in opts], "mode": [o["mode"] for o in opts],
                  "engine": [f"{o['engine']} {(o['engine_version'] or '').split(' ')[0]}" if o.get("engine") else "-"
                             for o in opts],
                  "precision": [o["precision"] for o in opts], "layout": [o["layout"] for o in opts],
                  "GPUs": [o["gpus"] for o in opts], "$/hour": [usd(o["usd_per_hour"]) for o in opts],
                  "sim p99 TTFT": [seconds(o["simulated"]["ttft_p99_s"]) for o in opts],
                  "sim p99 TPOT": [seconds(o["simulated"]["tpot_p99_s"]) for o in opts],
                  "headroom": [pct(o["headroom"]) for o in opts]}, width="stretch")
    # the long text columns as a wrapping table (a dataframe cell cuts them off at its width)
    st.table({"option": [f"{o['hardware']} · {o['mode']} · {o['layout']}" for o in opts],
              "$/GPU-hour (date; source)": [_price(o) for o in opts],
              "why it loses": [o["why"] for o in opts]})
    st.markdown(f"Energy of the cheapest option (its fleet of {num(best['gpus'])} GPUs at the planned demand):\n\n"
                + energy_table(best["energy"], "fleet"))
    st.caption(md_escape(energy_note(best["energy"])))
    st.dataframe({"option": [f"{o['hardware']} · {o['mode']} · {o['layout']}" for o in opts],
                  "J per output token": [num(o["energy"].get("joules_per_token")) for o in opts],
                  "fleet W at the wall": [si(o["energy"].get("power_w_per_fleet"), "W") for o in opts],
                  "fleet kWh/day": [num(o["energy"].get("kwh_per_day")) for o in opts],
                  "electricity $/M out": [usd(o["energy"].get("electricity_usd_per_mtok")) for o in opts],
                  "share of $/M": [pct(o["energy"].get("electricity_share_of_cost")) for o in opts]},
                 width="stretch", hide_index=True)
    cost, gpus = plan_figures(res)
    a, b = st.columns(2)
    a.plotly_chart(cost, width="stretch")
    b.plotly_chart(gpus, width="stretch")
    for eng, text in best["launch"].items():
        st.code(text, language="bash")
    explored = ", ".join(res.get("precisions_explored") or [])
    why = ("as the sidebar's weights precision gave" if common["precision"] else "the checkpoint's and each narrower "
           "one a candidate chip runs natively (a narrower one means a quantised checkpoint, accuracy not "
           "modelled); pick a weights precision in the sidebar to plan with that one only")
    st.caption(f"{shown(res['model'])}: {num(res['demand']['value'])} {shown(res['demand']['unit'])}, "
               f"{num(res['input_len'])} "
               f"in / {num(res['output_len'])} out; latencies measured in a replay of the fleet. Precisions explored: "
               f"{shown(explored)} ({why}). chalk.analyses.planning.plan.plan.")
