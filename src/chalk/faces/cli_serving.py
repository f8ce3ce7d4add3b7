"""`chalk layout`, `chalk throughput`, `chalk validate`: deployments at scale. A thin face, no formulas."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import (PLOT_FORMATS, console, emit_json, fail, num, out_file, pct, seconds, si, table,
                                    usd, write_plot)

MODEL_OPT = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or a folder holding one.")
HW_OPT = typer.Option(..., "--hardware", "-H", help="Chip id (its default system), system id, or a YAML path.")
GPUS_OPT = typer.Option(None, "--gpus", help="GPUs in the deployment (default: searched within the system).")
PREC_OPT = typer.Option(None, "--precision", "-p", help="Weights/compute precision (default: the checkpoint's).")
KV_OPT = typer.Option("auto", "--kv-precision",
                      help="KV cache precision; 'auto' = fp8 when weights run at 8 bits or fewer, else bf16.")


def register(app: typer.Typer) -> None:
    app.command("layout")(layout)
    app.command("throughput")(throughput)
    app.command("validate")(validate)


def _resolve(model: str, hardware: str):
    from chalk.specs.catalog import load_model, resolve_hardware

    return load_model(model), resolve_hardware(hardware)


def layout(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs to lay out (default: the scale-up domain)."),
    precision: Optional[str] = PREC_OPT,
    kv_precision: str = KV_OPT,
    context: float = typer.Option(4096, "--context", "-c", help="Tokens of context per sequence."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Parallel layouts with memory per GPU, the MoE rack layout, and the pipeline analysis."""
    from chalk.analyses.parallel import layout_report

    if gpus is not None and gpus < 1:
        fail(f"--gpus must be a positive whole number, got {gpus}")
    if context <= 0:
        fail(f"--context must be positive, got {context}")
    m, system = _resolve(model, hardware)
    r = layout_report(m, system, gpus, precision, kv_precision, context, ideal)
    if as_json:
        emit_json(r)
        return
    c = console()
    t = table(f"{r['model']} on {r['gpus']} x {system.chip.id} ({system.name}) · {r['precision']} weights, "
              f"{r['kv_precision']} KV · context {num(r['context'])} · {si(r['usable_hbm_bytes_per_gpu'], 'B')} "
              f"usable per GPU", ["layout", "TP", "EP", "PP", "DP", "weights / GPU", "KV / sequence / GPU",
                                  "max sequences per replica", "fits"])
    for row in r["layouts"]:
        t.add_row(row["label"], str(row["tp"]), str(row["ep"]), str(row["pp"]), str(row["dp"]),
                  si(row["weight_bytes_per_gpu"], "B"), si(row["kv_bytes_per_sequence_per_gpu"], "B"),
                  num(row["max_sequences_per_replica"]), "yes" if row["fits_weights"] else "no")
    c.print(t)
    moe = r["moe_rack_layout"]
    if moe.get("applies"):
        ins, sp = moe["inside"], moe["spilled"]
        t = table(f"MoE rack layout: EP inside one {moe['domain_chips']}-GPU scale-up domain vs spilled across "
                  f"two · {num(moe['batch_per_gpu'])} sequences per GPU at {num(moe['context'])} tokens",
                  ["", f"EP{moe['ep_inside_domain']} (inside)", f"EP{moe['ep_spilled']} (spilled)"])
        for label, key, fmt in (("step time", "stage_time_s", seconds), ("all-to-all", "alltoall_time_s", seconds),
                                ("GEMMs (weights)", "gemm_time_s", seconds),
                                ("attention (KV)", "attention_time_s", seconds),
                                ("weights / GPU", "weight_bytes_per_gpu", lambda v: si(v, "B")),
                                ("output tokens/s per GPU", "output_tokens_per_s_per_gpu", num)):
            t.add_row(label, fmt(ins[key]), fmt(sp[key]))
        c.print(t)
        c.print(f"scale-up {si(moe['scaleup_bytes_per_s_one_way'], 'B/s')} vs scale-out "
                f"{si(moe['scaleout_bytes_per_s_one_way'], 'B/s')} per GPU, both one way: "
                f"{num(moe['scaleout_slowdown'])}x slower off the rack; spilling makes the all-to-all "
                f"{num(moe['alltoall_slowdown_when_spilled'])}x and the step "
                f"{num(moe['step_slowdown_when_spilled'])}x slower.")
    else:
        c.print(f"[dim]MoE rack layout: {moe.get('reason')}[/dim]")
    pa = r["pipeline"]
    t = table(f"Pipeline parallelism · TP{pa['tp']} per stage · {num(pa['batch_per_stage'])} sequences per stage "
              f"at {num(pa['context'])} tokens · training with M = {pa['microbatches']} micro-batches",
              ["PP", "GPUs", "weights / GPU", "KV / GPU", "token latency", "latency penalty", "output tok/s/GPU",
               "training bubble", "interleaved x2"])
    for row in pa["rows"]:
        t.add_row(str(row["pp"]), str(row["gpus"]), si(row["weight_bytes_per_gpu"], "B"),
                  si(row["kv_bytes_per_gpu"], "B"), seconds(row["token_latency_s"]), pct(row["latency_penalty"]),
                  num(row["output_tokens_per_s_per_gpu"]), pct(row["training_bubble"]),
                  pct(row["training_bubble_interleaved_2"]))
    c.print(t)


def throughput(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    gpus: Optional[int] = GPUS_OPT,
    precision: Optional[str] = PREC_OPT,
    kv_precision: str = KV_OPT,
    input_len: float = typer.Option(..., "--input-len", help="Prompt tokens per request."),
    output_len: float = typer.Option(..., "--output-len", help="Output tokens per request."),
    min_user_tps: Optional[float] = typer.Option(None, "--min-user-tps", help="Minimum output tokens/s per user."),
    max_ttft_s: Optional[float] = typer.Option(None, "--max-ttft-s", help="Maximum time to first token, s."),
    disaggregated: bool = typer.Option(False, "--disaggregated",
                                       help="Separate prefill and decode pools (--gpus sizes the decode pool)."),
    pareto: bool = typer.Option(False, "--pareto", help="Also print the latency-cost frontier."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                      help="Also write the pareto frontier to this .png/.svg."),
):
    """Best output tokens/s per GPU over layouts x batch that fit and meet the constraints."""
    from chalk.analyses.serving import throughput as run

    m, system = _resolve(model, hardware)
    r = run(m, system, input_len=input_len, output_len=output_len, gpus=gpus, precision=precision,
            kv_precision=kv_precision, min_user_tps=min_user_tps, max_ttft_s=max_ttft_s,
            disaggregated=disaggregated, pareto=pareto, ideal=ideal)
    write_plot("pareto", plot, model=model, hardware=hardware, chips=gpus, precision=precision,
               kv_precision=kv_precision, ideal=ideal, input_len=input_len, output_len=output_len)
    if as_json:
        emit_json(r)
        return
    c = console()
    lo, hi = r["range"]["output_tokens_per_s_per_gpu"]
    t = table(f"{r['model']} on {system.name} · {r['precision']} weights, {r['kv_precision']} KV · "
              f"{num(r['input_len'])} in / {num(r['output_len'])} out · {r['mode']} · {r['efficiency']}",
              ["quantity", "value"])
    par = r["parallelism"]
    rows = [("output throughput", f"{num(r['output_tokens_per_s_per_gpu'])} tokens/s per GPU "
                                  f"(range {num(lo)} - {num(hi)})"),
            ("input throughput", f"{num(r['input_tokens_per_s_per_gpu'])} tokens/s per GPU"),
            ("per user", f"{num(r['user_tokens_per_s'])} tokens/s"), ("time per output token", seconds(r["tpot_s"])),
            ("time to first token", seconds(r["ttft_s"])), ("concurrency", f"{num(r['concurrency'])} sequences"),
            ("GPUs", num(r["gpus"])),
            ("layout", f"{r['layout']} (TP {par['tp']}, EP {par['ep']}, PP {par['pp']}, DP {par['dp']}); "
                       f"overlap: {r['overlap']}"),
            ("memory per GPU", f"{si(r['weight_bytes_per_gpu'], 'B')} weights + {si(r['kv_bytes_per_gpu'], 'B')} KV"),
            ("cost", f"{usd(r['cost_per_mtok_output_usd'])} per M output tokens, "
                     f"{usd(r['cost_per_mtok_input_usd'])} per M input tokens")]
    if "prefill" in r:
        p = r["prefill"]
        rows.append(("prefill pool", f"{p['layout']}: {num(p['input_tokens_per_s_per_gpu'])} input tokens/s per "
                                     f"GPU, {num(p['gpus_per_decode_gpu'])} prefill GPUs per decode GPU"))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    t = table("fast and slow modes: price multiple for a per-user speed-up over this point",
              ["speed-up", "tokens/s per user", "price multiple", "$ per M output tokens (all GPU time)", "layout"])
    for mo in r["modes"]:
        t.add_row(f"{mo['speedup']:g}x", num(mo["user_tokens_per_s"]),
                  "unreachable" if mo["price_multiple"] is None else f"{mo['price_multiple']:.2f}x",
                  usd(mo.get("cost_per_mtok_output_usd")), mo.get("layout", ""))
    c.print(t)
    if pareto:
        t = table("latency-cost frontier", ["tokens/s per user", "output tokens/s per GPU",
                                            "$ per M output tokens (all GPU time)", "TTFT", "concurrency", "layout"])
        for f in r["frontier"]:
            t.add_row(num(f["user_tokens_per_s"]), num(f["output_tokens_per_s_per_gpu"]),
                      usd(f["cost_per_mtok_output_usd"]), seconds(f["ttft_s"]), num(f["concurrency"]), f["layout"])
        c.print(t)
    for n in r["notes"]:
        c.print(f"[dim]note: {n}[/dim]")


def validate(
    ideal: bool = typer.Option(False, "--ideal", help="Validate the pure roofline instead."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Predicted vs measured for every row of chalk's validation set, with the median and p90 error."""
    from chalk.analyses.validate import validate as run

    r = run(ideal=ideal)
    if as_json:
        emit_json(r)
        return
    t = table(f"validation · {r['n']} measured rows · {r['efficiency']}",
              ["id", "model", "hardware", "GPUs", "metric", "measured", "predicted", "error"])
    for o in r["rows"]:
        t.add_row(o["id"], o["model"], o["hardware"], num(o["gpus"]), o["metric"].replace("_per_s_per_gpu", "/s/GPU"),
                  num(o["measured"]), num(o["predicted"]),
                  "failed: " + o["error_note"] if o["error"] is None else f"{100 * o['error']:+.0f}%")
    c = console()
    c.print(t)
    c.print(f"median |error| {pct(r['median_abs_error'])} (bound {pct(r['median_error_bound'])}), "
            f"p90 |error| {pct(r['p90_abs_error'])}, median signed error {pct(r['median_signed_error'])}; "
            f"residual log(measured/predicted) p10 {r['residual_p10']:+.2f}, p90 {r['residual_p90']:+.2f}")
