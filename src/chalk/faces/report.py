"""`chalk report`: one self-contained HTML page replaying the lecture for a model/hardware pair.

Figures are embedded as base64 PNG; the page loads nothing from the network. Every number comes from
`chalk.api` and the analyses; this module only lays them out.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chalk.errors import ChalkError, InputError
from chalk.faces.fmt import num, pct, seconds, si, usd, value_text
from chalk.specs.catalog import as_model, as_system
from chalk.specs.files import atomic_write


@dataclass(frozen=True)
class Step:
    """One equation of the lecture with this pair's numbers (one column per batch)."""

    eq: str
    title: str
    formula: str
    rows: list  # [(quantity, [value per batch, ...])]
    note: str = ""


def operating_batch(r1) -> int:
    from chalk.faces.plots import default_batch

    return default_batch(r1)


def lecture_steps(model, hardware, *, context=4096, batch=None, chips=None, precision=None, kv_precision="bf16",
                  ideal=False) -> tuple[list[Step], list]:
    """Eqs. 1-5 and the balance context for this pair at batch 1 and at the operating batch.

    Returns (steps, [RooflineResult at batch 1, at the operating batch]).
    """
    from chalk import api

    kw = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal, aggregate=True)
    r1 = api.estimate(model, hardware, 1, context, **kw)
    b = float(batch) if batch is not None else float(operating_batch(r1))
    rs = [r1] if b == 1 else [r1, api.estimate(model, hardware, b, context, **kw)]
    chip = as_system(hardware).chip
    n = r1.chips
    eff = api.default_efficiency(ideal, model)
    peak = f"{n} × {si(chip.flops_per_s[r1.compute_precision], 'FLOP/s')} ({r1.compute_precision})"
    bw = f"{n} × {si(chip.hbm_bandwidth_bytes_per_s, 'B/s')}"

    def col(f):
        return [f(r) for r in rs]

    steps = [
        Step("1", "A decode step takes the longer of its compute and its memory traffic",
             "T = max(T_compute, T_memory) + overhead   (overhead 0 in the ideal roofline)",
             [("T_compute (decode)", col(lambda r: seconds(r.compute_time_s))),
              ("T_memory (decode)", col(lambda r: seconds(r.memory_time_s))),
              (f"per-step overhead ({eff.label})", col(lambda r: seconds(r.overhead_time_s))),
              ("T (decode step time)", col(lambda r: seconds(r.step_time_s))),
              ("bound", col(lambda r: str(r.bound)))]),
        Step("2", "Compute: every active weight multiplies every token once (2 FLOPs per multiply-add)",
             "T_compute = B × (2·N_active + attention FLOPs per token) / (peak FLOP/s × achieved fraction)",
             [("B (sequences)", col(lambda r: num(r.batch))),
              ("N_active", [si(r1.active_params)] * len(rs)),
              ("FLOPs in the decode step", col(lambda r: si(r.flops, "FLOP"))),
              ("peak", [peak] * len(rs)),
              (f"achieved fraction of peak ({eff.label})", [pct(eff.compute)] * len(rs)),
              ("T_compute", col(lambda r: seconds(r.compute_time_s))),
              ("MFU", col(lambda r: pct(r.mfu)))]),
        Step("3", "Memory: fetch the weights once per decode step, and each sequence's whole KV cache",
             "T_memory = (weight bytes read + B × L × KV bytes per token) / (HBM bandwidth × achieved fraction)",
             [("weight bytes (all weights; the fetch reads the input embedding's rows for the batch, not its "
               "table)", [si(r1.weight_bytes, "B")] * len(rs)),
              ("weights read", [r1.weights_read] * len(rs)),
              ("weight fetch time", col(lambda r: seconds(r.weight_time_s))),
              ("L (context)", [num(context)] * len(rs)),
              ("KV bytes per token", [si(r1.kv_bytes_per_token, "B")] * len(rs)),
              ("KV fetch time", col(lambda r: seconds(r.kv_time_s))),
              ("HBM bandwidth", [bw] * len(rs)),
              (f"achieved fraction of bandwidth ({eff.label})", [pct(eff.memory)] * len(rs)),
              ("T_memory", col(lambda r: seconds(r.memory_time_s)))]),
        Step("4", "Cost: rent every chip for the decode step, share it among the tokens it produced",
             "cost per token = T × ($ per chip-second × chips) / B",
             [("price", [f"${chip.price_usd_per_hour:.2f} per chip-hour × {n} chips"
                         + (" (assumption)" if chip.price_is_assumption else "")] * len(rs)),
              ("tokens/s (all users)", col(lambda r: num(r.tokens_per_s))),
              ("tokens/s per user", col(lambda r: num(r.user_tokens_per_s))),
              ("cost per million output tokens", col(lambda r: usd(r.cost_per_mtok_usd)))]),
        Step("5", "Critical batch: where the weight fetch and the weight multiplies take equal time",
             "B* = (FLOP/s ÷ 2 × bytes per param ÷ HBM bytes/s) × N_total / N_active",
             [("N_total / N_active", [f"{si(r1.total_params)} / {si(r1.active_params)}"] * len(rs)),
              ("B* (eq. 5, weights only)", [num(r1.critical_batch)] * len(rs)),
              ("B* with the KV fetch at this context", [num(r1.critical_batch_with_kv)
                                                        if np.isfinite(r1.critical_batch_with_kv)
                                                        else "none: the KV fetch alone outgrows compute"] * len(rs)),
              ("fits in HBM", col(lambda r: f"{'yes' if r.fits else 'NO'} (max batch {num(r.max_batch_fit)})"))]),
        Step("L*", "Balance context: where one sequence's KV fetch takes as long as its compute",
             "L*: B·L·KV bytes / HBM bw = B·FLOPs per token(L) / peak (solved numerically)",
             [("balance context", [f"{num(r1.balance_context)} tokens"] * len(rs)),
              ("this context", [f"{num(context)} tokens ("
                                + ("below: compute can win" if context < r1.balance_context
                                   else "above: memory-bound at every batch") + ")"] * len(rs))],
             note="Past L*, MFU falls roughly as L*/L for dense attention; sparse attention reads fewer KV bytes."),
    ]
    return steps, rs


def assumption_rows(model, hardware, r, ideal: bool = False) -> list[tuple[str, str, str]]:
    """Every assumption and source behind the numbers: (item, value, source)."""
    from chalk.equations import roofline as R
    from chalk.specs.catalog import catalog_meta

    from chalk.api import default_efficiency

    eff = default_efficiency(ideal, model)
    sysm = as_system(hardware)
    chip = sysm.chip
    m = as_model(model)
    meta = catalog_meta(m)  # a config loaded from a path: none of the catalog's entry of the same id
    src = chip.sources
    rows = [
        ("model", f"{m.name} ({m.id}, {m.model_type}, {m.attention} attention)", m.source or meta.get("source", "")),
        ("model parameters total / active", f"{si(r.total_params)} / {si(r.active_params)}",
         meta.get("card_source", "counted from config.json")),
    ]
    if meta.get("reconstructed"):
        rows.append(("model config reconstructed", "yes", str(meta.get("notes", ""))))
    rows += [
        ("system", f"{sysm.name}: {sysm.chips} × {chip.name}", "; ".join(f"{k}: {v}" for k, v in sysm.sources.items())),
        (f"dense peak ({r.compute_precision})", si(chip.flops_per_s[r.compute_precision], "FLOP/s"),
         src.get("dense_tflops", "")),
        ("HBM per chip", si(chip.hbm_bytes, "B"), src.get("hbm_gb", "")),
        ("HBM bandwidth per chip", si(chip.hbm_bandwidth_bytes_per_s, "B/s"), src.get("hbm_tb_per_s", "")),
        ("price", f"${chip.price_usd_per_hour:.2f}/chip-hour ({chip.price_date or 'undated'})"
                  + (" — an assumption" if chip.price_is_assumption else ""),
         src.get("price_usd_per_hour", "") + (f"; note: {chip.price_note}" if chip.price_note else "")),
        ("weights precision / compute precision / KV precision",
         f"{r.precision} / {r.compute_precision} / {r.kv_precision}", "checkpoint default unless --precision"),
        ("efficiency", f"{r.efficiency}: {pct(eff.compute)} of peak FLOP/s, {pct(eff.memory)} of HBM bandwidth, "
                       f"{seconds(eff.overhead_s)} per-step overhead, {pct(eff.memory_reserve)} of HBM reserved",
         "ideal = datasheet peaks; calibrated = chalk.analyses.step.calibration (fitted to public measurements)"),
        ("weights read per step", r.weights_read, "lecture eq. 3; refined MoE form counts distinct experts touched"),
        ("chips", f"{r.chips} (one replica; FLOP/s, bandwidth and HBM summed, communication free)",
         "chalk.analyses.step.roofline"),
    ]
    for name in ("step_time_s", "compute_time_s", "memory_time_s", "cost_per_token_usd", "critical_batch",
                 "critical_batch_with_kv", "hbm_drain_time_s"):
        fn = getattr(R, name, None)
        sec = _doc_sections(inspect.getdoc(fn) or "")
        ref, ass = sec.get("Ref", ""), sec.get("Assumes", "")
        if ass or ref:
            rows.append((f"equation {name}", ass, ref))
    rows += [("note", n, "chalk.analyses.step.roofline") for n in r.notes]
    return rows


def _doc_sections(doc: str) -> dict:
    """`Formula:` / `Ref:` / `Assumes:` blocks of an equation's docstring, continuation lines joined."""
    out, key = {}, None
    for ln in doc.splitlines():
        head = ln.split(":", 1)[0].strip()
        if head in ("Formula", "Ref", "Assumes") and ":" in ln:
            key = head
            out[key] = ln.split(":", 1)[1].strip()
        elif key and ln.startswith(" ") and ln.strip():
            out[key] += " " + ln.strip()
        else:
            key = None
    return out


def serving_answer(model, hardware, *, context, chips, precision, kv_precision, ideal, output_len=1024,
                   input_len=None, layout=None):
    """chalk.analyses.traffic.serving.throughput's best point (on `layout` when given) for requests of `input_len`
    prompt tokens (default `context`) and `output_len` output tokens, as {source, answer, modes, result}; None when
    the serving analysis is not in this build. The result carries the search's frontier too (the report's frontier
    figure draws it). The answer names the step each time belongs to: prefill (time to first token) or decode."""
    try:
        from chalk.analyses.traffic.serving import throughput
    except ImportError:
        return None
    res = throughput(model, hardware, input_len=_length(context if input_len is None else input_len),
                     output_len=_length(output_len), gpus=chips, precision=precision, kv_precision=kv_precision,
                     ideal=ideal, pareto=True, layout=layout)
    p = res["parallelism"]
    input_len, output_len = float(res["input_len"]), float(res["output_len"])  # the means of what was given
    return {"source": f"chalk.analyses.traffic.serving.throughput ({res['efficiency']} efficiency; {num(input_len)} "
                      f"tokens in, {num(output_len)} out per request on average; {res['mode']} serving"
                      + (f"; layout fixed at {layout}" if layout else "; the best layout searched") + ")",
            "answer": f"{num(res['output_tokens_per_s_per_gpu'])} output tokens/s per GPU at "
                      f"{num(res['user_tokens_per_s'])} tokens/s per user (decode: one token every "
                      f"{seconds(res['tpot_s'])}), time to first token (prefill) {seconds(res['ttft_s'])}, "
                      f"{usd(res['cost_per_mtok_output_usd'])} per million output tokens; layout {res['layout']} "
                      f"(TP {p['tp']}, EP {p['ep']}, PP {p['pp']}, DP {p['dp']}) on {num(res['gpus'])} GPUs with "
                      f"{num(res['concurrency'])} sequences in flight",
            "modes": res.get("modes", []), "result": res, "output_len": float(output_len), "input_len": input_len}


def _length(x):
    """A request length as the serving search takes it: a number as a float, a distribution's text as given."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return x


def length_text(x) -> str:
    v = _length(x)
    return num(v) if isinstance(v, float) else str(v)


def check_request(input_len=None, output_len=None, layout=None) -> None:
    """Refuse a bad length or layout in one line before any work (the serving search would, but only after the
    lecture's figures are drawn)."""
    from chalk.analyses.step.estimate import parse_layout
    from chalk.specs.lengths import parse_lengths
    from chalk.specs.workload import positive

    for name, x in (("input_len", input_len), ("output_len", output_len)):
        if x is None:
            continue
        v = _length(x)
        if isinstance(v, float):
            positive(name, v, scalar=True)
        else:
            parse_lengths(v)
    if layout is not None:
        parse_layout(layout)


def step_label(res: dict) -> str:
    """Which step a serving answer's step detail (`res['step']`) describes: in aggregated serving the step that
    carries a new prompt's prefill chunk beside the decoding batch; in disaggregated serving the decode step."""
    if res.get("mode") == "disaggregated":
        return "the decode step"
    return "the step that carries a new prompt's prefill chunk beside the decoding batch (prefill + decode)"


def reconcile(serving: dict, best: dict, r_best, context: float, output_len: float,
              input_len: float | None = None) -> list[str]:
    """Why the serving answer and the one-replica roofline table give different tokens/s per GPU: the batch,
    the prefill share, the layout's communication and overheads, and the context each assumes. Lines of text;
    every number is read from the two results."""
    from chalk.analyses.step.calibration import MAX_SEQS_PER_SCHEDULER

    res = serving.get("result") or {}
    step = res.get("step") or {}
    p = res.get("parallelism") or {}
    gpus = res.get("gpus")
    input_len = float(context if input_len is None else input_len)
    lines = [
        f"Per GPU: the serving answer gives {num(res.get('output_tokens_per_s_per_gpu'))} output tokens/s; the "
        f"roofline table's cheapest batch gives {num(r_best.tokens_per_s / r_best.chips)} tokens/s "
        f"({num(r_best.tokens_per_s)} over {num(r_best.chips)} chips). They answer different questions:",
        f"Batch. Serving runs {num(res.get('concurrency'))} sequences on {num(gpus)} GPUs "
        f"({num(res.get('batch_per_replica'))} per replica), held down by the memory left for KV and by a cap of "
        f"{MAX_SEQS_PER_SCHEDULER} sequences per scheduler (what engines run); the table's cheapest batch is "
        f"{num(best.get('best_batch'))}, as large as HBM allows.",
        f"Prefill. Serving also reads every request's {num(input_len)}-token prompt: "
        f"{pct(res.get('prefill_time_share'))} of its GPU time goes to prefill, and output tokens/s per GPU counts "
        f"only the {num(output_len)} decoded tokens; the table is decode alone.",
        f"Layout and overheads. Serving's {res.get('layout', '?')} layout (TP {p.get('tp', '?')}, EP "
        f"{p.get('ep', '?')}, PP {p.get('pp', '?')}) spends {seconds(step.get('comm_time_s'))} on communication "
        f"and {seconds(step.get('overhead_s'))} on per-step overhead in {step_label(res)}, which takes "
        f"{seconds(step.get('stage_time_s'))}; its decode emits one token per sequence every "
        f"{seconds(res.get('tpot_s'))} on average (TPOT). The table's decode step at batch "
        f"{num(r_best.batch)} takes {seconds(r_best.step_time_s)} on {r_best.view} view"
        + (f" {(r_best.layout or {}).get('label', '')}" if r_best.view == "layout" else "")
        + f" ({num(r_best.chips)} chips, communication {seconds(r_best.comm_time_s)}).",
        f"Context. Serving's KV cache grows to {num(input_len + output_len)} tokens per sequence by the last output "
        f"token; the table holds the context at {num(context)}.",
    ]
    return lines


def roofline_best_batch(model, hardware, *, context, chips, precision, kv_precision, ideal, layout=None) -> dict:
    """One replica (on `layout` when given) decoding: the cheapest batch that fits in HBM, and the sweep it was
    read from."""
    from chalk import api

    r1 = api.estimate(model, hardware, 1, context, chips=chips, precision=precision, kv_precision=kv_precision,
                      ideal=ideal, layout=layout)
    batches = np.unique(np.concatenate([2.0 ** np.arange(0, 17), [max(float(r1.max_batch_fit), 1.0)]]))
    table = api.sweep(model, hardware, batches, [context], chips=chips, precision=precision,
                      kv_precision=kv_precision, ideal=ideal, layout=layout)
    best = table.best("cost_per_mtok_usd", where="fits")
    if best is None:
        return {"answer": "does not fit in HBM even at batch 1", "table": table}
    return {"answer": f"batch {num(best['batch'])}: {seconds(best['step_time_s'])} per decode step, "
                      f"{num(best['user_tokens_per_s'])} tokens/s per user, {num(best['tokens_per_s'])} tokens/s "
                      f"in all, {usd(best['cost_per_mtok_usd'])} per million output tokens "
                      f"({best['bound']}-bound, MFU {pct(best['mfu'])})",
            "best_batch": float(best["batch"]), "table": table}


def _claims():
    try:
        from chalk.analyses.blackboard.lecture import all_claims
    except ImportError:
        return None
    return all_claims()


FIGURE_DPI = 110


def _figure_png(kind: str, **kw) -> str:
    from chalk.faces import plots

    fig = plots.figure(kind, dpi=FIGURE_DPI, **kw)
    try:
        png = plots.png_bytes(fig, FIGURE_DPI)
    finally:
        plots._plt().close(fig)
    return base64.b64encode(png).decode("ascii")


CSS = """
body{font:15px/1.5 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1.2em;color:#1b1b1b}
h1{font-size:1.7em;margin-bottom:.2em} h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#555} .eq{font-family:Menlo,Consolas,monospace;background:#f5f5f0;padding:.35em .7em;border-radius:4px;
display:inline-block} table{border-collapse:collapse;margin:.6em 0 1.2em;width:100%;font-size:.92em}
th,td{border:1px solid #ddd;padding:.3em .55em;text-align:left;vertical-align:top}
th{background:#f3f3f3} table.eqt td:first-child{width:34%} td{overflow-wrap:break-word}
table.srct td:last-child{overflow-wrap:anywhere;width:50%}
td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eee;margin:.5em 0} .answer{background:#eef6ee;border-left:4px solid #3a3;
padding:.6em 1em} .src{color:#555;font-size:.85em;word-break:break-word} .ok{color:#1a7f1a} .bad{color:#b00}
"""


def _e(x) -> str:
    return html.escape(str(x))


def _table(head, rows, num_cols=(), cls="") -> str:
    h = "".join(f"<th>{_e(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td{' class=num' if i in num_cols else ''}>{_e(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table{f' class={cls}' if cls else ''}><tr>{h}</tr>{body}</table>"


def build_report(model, hardware, *, context=4096, batch=None, chips=None, precision=None, kv_precision="bf16",
                 ideal=False, input_len=None, output_len=1024, layout=None) -> str:
    """The report as an HTML string. `context`: the decode context of the lecture's equations and the roofline
    table; `input_len` (default `context`) and `output_len`: the serving answer's requests; `layout` (e.g.
    'tp=8,ep=8'): the replica of the serving answer and the roofline table (default: searched / chosen)."""
    from chalk import __version__

    kw = dict(chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    steps, rs = lecture_steps(model, hardware, context=context, batch=batch, **kw)
    r1, rb = rs[0], rs[-1]
    heads = ["quantity"] + [f"batch {num(r.batch)}" for r in rs]
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>chalk report: {_e(r1.model)} on "
           f"{_e(r1.hardware)}</title><style>{CSS}</style></head><body>",
           f"<h1>{_e(r1.model)} on {r1.chips} × {_e(r1.hardware)}</h1>",
           f"<p class=sub>Decode steps at context {num(context)} (sections 1-3: the aggregate bound, all "
           f"{num(r1.chips)} GPUs summed); serving requests of {_e(length_text(context if input_len is None else input_len))} "
           f"tokens in, {_e(length_text(output_len))} out (section 4)"
           + (f", layout {_e(layout)}" if layout else "") + f" · {_e(r1.precision)} weights ({_e(r1.compute_precision)} "
           f"compute), {_e(r1.kv_precision)} KV · efficiency: {_e(r1.efficiency)} · chalk {__version__} · "
           f"{_dt.date.today().isoformat()}</p>",
           "<p>This page replays the blackboard lecture's roofline for one model on one machine: how long a decode "
           "step takes, why, what a token costs, and how batch and context move both. A decode step reads the "
           "model's weights and every sequence's KV cache from HBM and multiplies each token through the active "
           "weights; whichever takes longer sets the decode step time.</p>",
           f"<div class=answer><b>In one line.</b> At batch 1 a decode step takes {seconds(r1.step_time_s)} and a "
           f"million output tokens cost {usd(r1.cost_per_mtok_usd)}; at batch {num(rb.batch)} a decode step takes "
           f"{seconds(rb.step_time_s)} and they cost {usd(rb.cost_per_mtok_usd)}. The critical batch (eq. 5) is "
           f"{num(r1.critical_batch)}; past a context of {num(r1.balance_context)} tokens the KV fetch outgrows the "
           f"compute.</div>",
           f"<h2>1. The equations with this pair's numbers (decode step, aggregate bound: {num(r1.chips)} GPUs "
           "summed, communication free)</h2>"]
    for s in steps:
        out.append(f"<h3>Eq. {_e(s.eq)} — {_e(s.title)}</h3><p><span class=eq>{_e(s.formula)}</span></p>")
        out.append(_table(heads, [[q, *vals] for q, vals in s.rows], num_cols=range(1, len(heads)), cls="eqt"))
        if s.note:
            out.append(f"<p class=sub>{_e(s.note)}</p>")
    fk = dict(model=model, hardware=hardware, context=context, **kw)
    out.append("<h2>2. The two graphs (decode)</h2><p>Latency vs batch: the compute line, the weight-fetch floor, the "
               "KV-fetch slope and their max (the thick line). Below the critical batch the step time barely "
               "moves with batch: it is the time to read the weights.</p>")
    out.append(f"<img alt='latency vs batch' src='data:image/png;base64,{_figure_png('latency-vs-batch', **fk)}'>")
    out.append("<p>Cost per token vs batch: the weight fetch, shared by the whole batch, is a hyperbola; compute "
               "and KV per token are flat. Cost falls until it meets the floor, so batching far past the critical "
               "batch ('slow mode') saves little.</p>")
    out.append(f"<img alt='cost vs batch' src='data:image/png;base64,{_figure_png('cost-vs-batch', **fk)}'>")
    out.append("<h2>3. Cost vs context (decode)</h2><p>At a fixed batch, longer contexts add KV bytes per token. Past the "
               "balance context the step is memory-bound and MFU collapses; sparse attention (reading ~√L of the "
               "context) moves the cliff out.</p>")
    out.append(f"<img alt='cost vs context' src='data:image/png;base64,"
               f"{_figure_png('cost-vs-context', batch=rb.batch, **fk)}'>")
    out.append("<h2>4. The serving answer (prefill and decode)</h2>")
    ans = serving_answer(model, hardware, context=context, input_len=input_len, output_len=output_len,
                         layout=layout, **kw)
    if ans is None:
        out.append("<p class=sub>chalk.analyses.traffic.serving is not in this build: below, one replica on the "
                   "roofline.</p>")
    else:
        out.append(f"<p class=answer>{_e(ans['answer'])}</p><p class=src>source: {_e(ans['source'])}</p>")
        if ans["modes"]:
            out.append("<p>Fast and slow modes: the price multiple that buys a per-user speed-up over this "
                       "point.</p>")
            out.append(_table(["speed-up", "tokens/s per user", "price multiple", "layout"],
                              [[f"{m['speedup']:g}×", num(m["user_tokens_per_s"]),
                                "unreachable" if m.get("price_multiple") is None else f"{m['price_multiple']:.2f}×",
                                m.get("layout", "")] for m in ans["modes"]], num_cols=(1, 2)))
        try:  # the frontier of the search that gave the answer above, drawn without searching again
            png = _figure_png("pareto", compare=hardware, output_len=ans["output_len"],
                              results={hardware: ans["result"]}, **fk)
            out.append(f"<img alt='serving frontier' src='data:image/png;base64,{png}'>")
        except ChalkError as e:
            out.append(f"<p class=sub>No frontier figure: {_e(e)}</p>")
    best = roofline_best_batch(model, hardware, context=context, layout=layout, **kw)
    out.append(f"<h3>One replica decoding, no prefill</h3><p class=answer>Cheapest batch that fits: "
               f"{_e(best['answer'])}</p>")
    if ans is not None and best.get("best_batch"):
        from chalk import api

        r_best = api.estimate(model, hardware, best["best_batch"], context, layout=layout, **kw)
        lines = reconcile(ans, best, r_best, float(context), float(ans.get("output_len", 1024)),
                          ans.get("input_len"))
        out.append("<h3>Why the serving answer and the roofline table differ</h3><p>" + _e(lines[0]) + "</p><ul>"
                   + "".join(f"<li>{_e(x)}</li>" for x in lines[1:]) + "</ul>")
    out.append(_table(["batch", "decode step time", "bound", "MFU", "output tokens/s per replica",
                       "tokens/s per user", "$ per M output tokens", "fits"],
                      [[num(t["batch"]), seconds(t["step_time_s"]), t["bound"], pct(t["mfu"]),
                        num(t["tokens_per_s"]), num(t["user_tokens_per_s"]), usd(t["cost_per_mtok_usd"]),
                        "yes" if t["fits"] else "no"]
                       for t in best["table"].rows()], num_cols=(0, 1, 3, 4, 5, 6)))
    out.append("<h2>5. The lecture's claims</h2>")
    claims = _claims()
    if claims is None:
        out.append("<p class=sub>chalk.analyses.blackboard.lecture is not available in this build.</p>")
    else:
        rows = []
        for c in claims:
            ok = c.within_lecture_range
            rng = "n/a" if c.lecture_range is None else f"{value_text(float(c.lecture_range[0]))} – " \
                                                         f"{value_text(float(c.lecture_range[1]))}"
            rows.append([c.id, value_text(c.value), c.unit, value_text(c.lecture_value), rng,
                         "n/a" if ok is None else ("yes" if ok else "no"), c.assumptions])
        out.append("<p>“Accepted range” is the interval chalk's value must fall in to count as reproducing the "
                   "lecture's figure (claims without a numeric range are qualitative).</p>")
        out.append(_table(["claim", "chalk", "unit", "lecture", "accepted range", "within range", "assumptions"],
                          rows))
    out.append("<h2>6. Every assumption and source</h2>")
    out.append(_table(["item", "value", "source"], assumption_rows(model, hardware, r1, ideal), cls="srct"))
    out.append("<p class=sub>Generated by <code>chalk report</code>. Self-contained: figures are embedded; "
               "nothing is loaded from the network.</p></body></html>")
    return "\n".join(out)


def write_report(output, model, hardware, **kw) -> Path:
    """Write the report to `output` (.html); returns the path."""
    path = Path(output)
    if path.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"report output must end in .html, got {str(output)!r}")
    if not path.parent.exists():
        raise InputError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
    check_request(kw.get("input_len"), kw.get("output_len"), kw.get("layout"))
    text = build_report(model, hardware, **kw)
    atomic_write(path, text, "report output")
    return path
