"""`chalk plan`: from demand and latency targets to GPUs, layout, replicas, dollars and launch commands.
A thin face on `chalk.analyses.planning.plan.plan`: no formulas here."""

from __future__ import annotations

import math
import sys
from typing import List, Optional, Tuple

import typer

from chalk.faces import cli_portfolio as PF
from chalk.faces.cli_common import (ACCEPTANCE_OPT, EPLB_OPT, LENGTH_FORMS, PLOT_FORMATS, speculation_for, busy,
                                    console, duration, emit_json, length, num, out_file, pct, table, usd, wrote)
from chalk.faces.energy_text import PUE_OPT, USD_PER_KWH_OPT, energy_rows


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


_duration = duration  # the one reading of a time option lives in cli_common


def _precision_line(r, given) -> str:
    """Which weight precisions the plan chose among, and how to choose others."""
    seen = ", ".join(r["precisions_explored"])
    if given:
        return f"precisions explored: {seen} (as --precision gave)"
    return (f"precisions explored: {seen} (the checkpoint's and each narrower one a candidate chip runs natively; "
            f"a narrower one means a quantised checkpoint, accuracy not modelled); --precision "
            f"{r['precisions_explored'][0].split(' ')[0]} keeps the checkpoint's")


def plan(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog id or alias, a config.json, or a "
                                        "folder holding one (or --portfolio)."),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-H", help="Candidate chips or systems, comma-"
                                           "separated (default: every catalog chip with a price)."),
    users: Optional[float] = typer.Option(None, "--users", help="Demand: concurrent users, one request in flight "
                                          "each."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Demand: requests per second (Poisson)."),
    input_len: Optional[str] = typer.Option(None, "--input-len", callback=length("--input-len"),
                                            help=f"Prompt tokens per request: {LENGTH_FORMS}."),
    output_len: Optional[str] = typer.Option(None, "--output-len", callback=length("--output-len"),
                                             help="Output tokens per request: as --input-len."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Request trace (chalk CSV, rows in any order; Azure LLM "
                                        "trace CSV or Mooncake JSONL, timestamps in order): the rate of its "
                                        "busiest minute and its own lengths, instead of --rate/--users and "
                                        "--input-len/--output-len."),
    speedup: float = typer.Option(1.0, "--speedup", help="With --trace: its rate times this."),
    min_user_tps: Optional[float] = typer.Option(None, "--min-user-tps", help="Output tokens/s every user gets "
                                                 "(checked as p99 TPOT <= 1/X)."),
    ttft_p99: Optional[str] = typer.Option(None, "--ttft-p99", callback=duration("--ttft-p99"),
                                           help="Target p99 time to first token: seconds, or 500ms."),
    tpot_p99: Optional[str] = typer.Option(None, "--tpot-p99", callback=duration("--tpot-p99"),
                                           help="Target p99 time per output token: seconds, or 20ms."),
    diurnal: Optional[str] = typer.Option(None, "--diurnal", help="CSV of 24 hourly demand multipliers (one per "
                                          "line, or hour,multiplier): size the peak, cost the day."),
    price: Optional[List[str]] = typer.Option(None, "--price", help="Price override CHIP=USD_PER_GPU_HOUR "
                                              "(repeat, or comma-separate)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm | sglang | trtllm (@release): size and launch "
                                         "with that engine only (default: each engine that runs on the chip, each "
                                         "sized with its own scheduler cap, KV memory, prefill chunk and overhead)."),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="Your own checkpoint (Hugging Face repo "
                                             "id or folder) for the launch commands, loaded as given (default: the "
                                             "model's own, or a known one at the sized precision)."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Weight precisions to choose from, "
                                            "comma-separated, e.g. bf16,fp8 (default: the checkpoint's and each "
                                            "narrower one of bf16, fp8, fp4 a candidate chip runs natively)."),
    kv_precision: str = typer.Option("auto", "--kv-precision", help="KV cache precision; 'auto' = each engine's "
                                     "default (vLLM, SGLang: bf16; TensorRT-LLM: what the checkpoint declares, "
                                     "bf16 for a quantised one declaring none, fp8 beside another 8-bit one), else fp8 "
                                     "with 8-bit weights, else bf16."),
    mode: str = typer.Option("all", "--mode", help="all | aggregated | disaggregated (prefill/decode pools)."),
    mtp: Optional[int] = typer.Option(None, "--mtp", help="Allow speculative decoding / MTP: draft tokens per step."),
    acceptance: Optional[float] = ACCEPTANCE_OPT,
    draft_model: Optional[str] = typer.Option(None, "--draft-model", help="EAGLE draft model (HF repo) for the "
                                              "launch commands of a model without MTP heads."),
    sim_requests: int = typer.Option(12_000, "--sim-requests", help="Requests each option's replay simulates."),
    seed: int = typer.Option(0, "--seed", help="Seed of the replay's arrivals and lengths."),
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    eplb: str = EPLB_OPT,
    usd_per_kwh: Optional[float] = USD_PER_KWH_OPT,
    pue: Optional[float] = PUE_OPT,
    launch: bool = typer.Option(True, "--launch/--no-launch", help="Print the launch commands."),
    emit: Tuple[str, str] = typer.Option((None, None), "--emit", help="Also write the cheapest option: --emit k8s DIR "
                                             "(Kubernetes manifests) or --emit compose DIR (docker-compose, one "
                                             "node). DIR must not exist or be empty.", metavar="KIND DIR"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {\"options\": [...]}, cheapest first."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                       help="Also draw cost vs per-user speed and GPUs vs demand to this .png/.svg."),
    portfolio: Optional[str] = PF.PORTFOLIO_OPT, results: Optional[str] = PF.RESULTS_OPT, resume: bool = PF.RESUME_OPT,
    ray: bool = PF.RAY_OPT, ray_address: Optional[str] = PF.RAY_ADDRESS_OPT, workers: Optional[int] = PF.WORKERS_OPT,
):
    """The cheapest deployment per chip that serves a demand within latency targets, checked in a replay:
    layout, replicas, GPUs, $/hour, and the launch commands."""
    from chalk.analyses.planning.plan import plan as run
    from chalk.errors import InputError

    if portfolio is not None:  # several models on one fleet: chalk.faces.cli_portfolio
        return PF.run(portfolio, results=results, resume=resume, ray=ray, ray_address=ray_address, workers=workers,
                      as_json=as_json)
    if model is None:
        raise InputError("give --model (or --portfolio FILE)")
    if emit[0] is not None:  # a bad kind or folder is refused before the plan runs
        from chalk.faces.emit_plan import check_target
        from chalk.specs.validate import path_name_ok

        path_name_ok(emit[1], "--emit", "folder")  # a name past 255 bytes, as --output's: not an OSError traceback
        check_target(emit[0], emit[1])

    modes = {"all": ("aggregated", "disaggregated"), "aggregated": ("aggregated",),
             "disaggregated": ("disaggregated",)}.get(mode.strip().lower())
    if modes is None:
        raise InputError(f"--mode must be all, aggregated or disaggregated, got {mode[:40]!r}")
    drafts = speculation_for(mtp, acceptance, model=model)
    from chalk.analyses.economics.energy import attach_plan_energy, energy_settings

    energy_settings(usd_per_kwh, pue)  # a bad price or PUE fails before the search
    precisions = precision if precision is not None else "explore"
    with busy(as_json, "planning: sizing each chip, engine and precision, then replaying the fleet"):
        r = run(model, hardware, users=users, rate=rate, input_len=input_len, output_len=output_len,
                min_user_tps=min_user_tps, ttft_p99_s=ttft_p99, tpot_p99_s=tpot_p99, diurnal=diurnal, prices=price,
                engine=engine, precision=precisions, kv_precision=kv_precision,
                speculative=drafts if drafts is not None else "auto", draft_model=draft_model,
                modes=modes, ideal=ideal, sim_requests=sim_requests, seed=seed, curves=bool(plot), eplb=eplb,
                trace=trace, speedup=speedup, checkpoint=checkpoint)
    attach_plan_energy(r, usd_per_kwh=usd_per_kwh, pue=pue)
    for o in r["options"]:  # what each throughput is counted over: the fleet serves the demand
        if o.get("output_tokens_per_s") is not None:
            o.setdefault("output_tokens_per_s_per_fleet", o["output_tokens_per_s"])
            o.setdefault("output_tokens_per_s_per_gpu", o["output_tokens_per_s"] / o["gpus"] if o["gpus"] else None)
        if o.get("requests_per_s") is not None:  # the fleet's too, said (QA 2026-11-28)
            o.setdefault("requests_per_s_per_fleet", o["requests_per_s"])
    if plot:
        from chalk.faces.plots_plan import plot_plan

        wrote(plot_plan(r, plot))
    if as_json:
        emit_json(r)
    else:
        _print(r, launch, precision is not None)
    if emit[0] is not None:  # after the plan is out: a deployment --emit cannot write still has its plan printed
        # (QA 2026-11-28: a refused compose file lost the whole plan's output)
        from chalk.faces.emit_plan import emit as write, emit_notes

        wrote(write(r, emit[0], emit[1]))
        for note in emit_notes(emit[1]):
            sys.stderr.write(f"note: {note}\n")
        o = r["options"][0] if r["options"] else {}
        # said where it is written, not only in launch.yaml (QA 2026-11-28)
        sys.stderr.write(f"fill in ENGINE_TAG in the image lines: a {o.get('engine') or 'engine'} image of release "
                         f"{o.get('engine_version') or o.get('engine_release') or 'the one sized'} (chalk sized the "
                         "deployment on that engine release; it records no image tag)\n")


def _len_arg(v: str | None):
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return v


def _ms(v) -> str:
    if v is None:
        return "-"
    if not math.isfinite(v):  # NaN: no request had a second token to time (one output token)
        return "n/a"
    return f"{v * 1e3:.0f}ms" if v < 1 else f"{v:.2f}s" if v < 100 else f"{v:.0f}s"


def _short(o) -> str:
    """The deployment in a table cell: 'TP2 x28', or 'P TP1 x92 / D TP4 x12' for prefill and decode pools."""
    main = f"{o['replica_layout']} x{o['replicas']}"
    if not o["prefill"]:
        return main
    return f"P {o['prefill']['layout']} x{o['prefill']['replicas']} / D {main}"


def _engine_cell(o) -> str:
    """'vllm 0.11.x fp4': the engine and version that sized the option, and its weight precision."""
    eng = f"{o['engine']} {(o.get('engine_version') or '').split(' ')[0]}".strip() if o.get("engine") else "none"
    return f"{eng} {o['precision']}"


def _price_lines(options) -> list[str]:
    """One line per chip: the $/GPU-hour each option is costed at, its source and date (* = given with --price)."""
    out, seen = [], set()
    for o in options:
        p = o.get("price")
        if not p or o["chip"] in seen:
            continue
        seen.add(o["chip"])
        if p["given"]:
            out.append(f"* {o['chip']} ${p['usd_per_gpu_hour']:.2f}/GPU-h: given with --price")
        else:
            out.append(f"{o['chip']} ${p['usd_per_gpu_hour']:.2f}/GPU-h ({p['date'] or 'undated'}"
                       + (", an assumption" if p["assumption"] else "") + f"): {p['source'] or 'no source'}")
    return out


def _print(r, launch: bool, precision_given: bool = True) -> None:
    c = console()
    d, t = r["demand"], r["targets"]
    want = []
    if t["tpot_p99_s"]:
        want.append(f"p99 TPOT <= {_ms(t['tpot_p99_s'])}")
    if t["ttft_p99_s"]:
        want.append(f"p99 TTFT <= {_ms(t['ttft_p99_s'])}")
    peak = f" (peak {num(d['planned_for'])})" if d["peak_multiplier"] != 1 else ""
    lens = [r.get(f"{k}_dist") or num(r[f"{k}_len"]) for k in ("input", "output")]
    tab = table(f"{r['model']} · {num(d['value'])} {d['unit']}{peak} · {lens[0]} in / {lens[1]} out · "
                f"{', '.join(want) or 'no latency targets'}",
                ["chip", "engine", "deployment", "GPUs", "$/hour", "p99 TTFT/TPOT", "why it loses"])
    from rich import box

    tab.box = box.SIMPLE_HEAD  # no vertical rules: the table fits 80 columns
    # widths as `table` sets them (every column at least its longest word, the widest giving way first); expand
    # with ratio columns let rich share the width again and drop the chip, GPU and price columns at 160-250
    # columns (QA 2026-11-28)
    for i in (0, 3, 4, 5):
        tab.columns[i].no_wrap = True
    for o in r["options"]:
        sim = o["simulated"]
        tab.add_row(o["hardware"], _engine_cell(o), _short(o), num(o["gpus"]),
                    usd(o["usd_per_hour"]) + ("*" if (o.get("price") or {}).get("given") else ""),
                    f"{_ms(sim['ttft_p99_s'])}/{_ms(sim['tpot_p99_s'])}", o["why"])
    for u in r["unavailable"]:
        tab.add_row(u["hardware"], u.get("engine") or "-", "PD pools" if u["mode"] == "disaggregated" else
                    "aggregated", "-", "-", "-", u["why"])
    c.print(tab)
    arrivals = ("the trace's own requests around its busiest window" if r.get("replay_arrivals") == "trace"
                else "Poisson arrivals")
    c.print(f"[dim]p99 TTFT/TPOT: measured by replaying the fleet ({arrivals}, least-loaded router); engine: "
            "the engine, version and weight precision that sized the option[/dim]")
    for line in _price_lines(r["options"]):
        c.print(f"[dim]{line}[/dim]")
    if r.get("precisions_explored"):
        c.print(_precision_line(r, precision_given))
    b = r["options"][0]
    nodes = (f" on {b['domains']} scale-up domains of {b['domain_chips']} ({b['replica_domains']} per replica)"
             if b.get("replica_domains", 1) > 1 else "")
    from chalk.faces.fmt import header

    eng = f"{b['engine']} {(b.get('engine_version') or '').split(' ')[0]}".strip() if b.get("engine") else None
    c.print("[bold]cheapest:[/bold] " + header(r["model"], b["chip"], b["gpus"], f"{b['layout']} ({b['mode']})",
                                               b["precision"], b["kv_precision"], eng, b.get("efficiency"),
                                               system=b.get("system")))
    c.print(f"  {num(b['gpus'])} GPUs{nodes} x "
            f"{usd(b['usd_per_gpu_hour'])}/GPU-h = {usd(b['usd_per_hour'])}/h, {usd(b['usd_per_day'])}/day, "
            f"{usd(b['usd_per_mtok_output'])} per M output tokens"
            + (" at the peak hour" if b.get("diurnal") else
               " at the trace's busiest window (its requests' own outputs)" if r.get("trace") else "")
            + f"; {num(b['concurrency_per_replica'])} requests in "
            f"flight per replica at the demand ("
            + ("Little's law at that load's own latency; " if "/s" in b["demand_unit"] else "")
            + (f"its replay held {num(b['simulated']['mean_in_flight_per_replica'])}; "
               if (b.get("simulated") or {}).get("mean_in_flight_per_replica") is not None else "")
            + f"at most {num(b['max_concurrency_per_replica'])} meet the targets), capacity "
            f"{num(b['capacity_per_replica'])} {b['demand_unit']} per replica "
            + ("with every seat busy" if b.get("capacity_bound", "decode replica") == "decode replica" else
               "(its share of the prefill pool's prompts)") + ", headroom "
            f"{pct(b['headroom'])} (more demand the replicas carry with Poisson peaks within their caps); "
            f"{b['precision']} weights, {b['kv_precision']} KV"
            + (f", speculative decoding ({b['speculative']['draft_tokens']} draft tokens per step, "
               f"{num(b['speculative']['tokens_per_step'])} tokens per step emitted)" if b["speculative"] else ""))
    for k, v in energy_rows(b.get("energy")):
        c.print(f"  {k}: {v}")
    if b.get("kernels"):
        c.print(f"  kernel tables: {b['kernels']}")
        for n in b.get("kernel_notes") or []:
            c.print(f"  [dim]{n}[/dim]")
    for o in r["options"]:
        if o.get("diurnal"):
            di = o["diurnal"]
            c.print(f"[bold]{o['hardware']} {o['mode']}[/bold] by hour: replicas "
                    f"{' '.join(str(x) for x in di['replicas_per_hour'])}; a day costs "
                    f"{usd(di['usd_per_day_fixed'])} fixed at the peak, {usd(di['usd_per_day_autoscaled'])} "
                    f"autoscaled ({pct(di['autoscaling_saving'])} less): over the day's output, "
                    f"{usd(di['usd_per_mtok_output_fixed'])} per M output tokens fixed, "
                    f"{usd(di['usd_per_mtok_output_autoscaled'])} autoscaled")
    if launch:
        seen = set()
        for o in r["options"]:
            if (o["hardware"], o.get("engine")) in seen or not o["meets_targets"]:
                continue
            seen.add((o["hardware"], o.get("engine")))
            c.rule(f"{o['hardware']}: {o['mode']} {o['layout']}" + (f" · {o['engine']}" if o.get("engine") else ""),
                   style="dim")
            for eng, text in o["launch"].items():
                c.print(text, markup=False, highlight=False, soft_wrap=True)
            for n in o["launch_notes"]:
                c.print(f"[dim]note: {n}[/dim]")
    for n in r["notes"]:
        c.print(f"[dim]note: {n}[/dim]")
