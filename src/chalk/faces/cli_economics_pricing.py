"""`chalk pricing`: API price sheets read through the roofline, and margins against them. No formulas here."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import LENGTH_FORMS, console, emit_json, length, num, pct, seconds, si, table, usd, whole

_ASSUME_HELP = {
    "active_params": "Eq. 6's active parameters N_active (count, e.g. 1e11). Default 100B (the lecture's).",
    "hardware": "Take eq. 6's ratio from this chip: (FLOP/s at --precision / 2) / HBM bytes/s. "
                "Default: the lecture's 300 multiplies per byte.",
    "precision": "Compute precision for --hardware's ratio (default fp8).",
    "ratio": "Eq. 6's ratio directly, in multiplies per byte (overrides --hardware).",
    "ref_model": "Reference model for cache load-vs-recompute and fast modes (default deepseek-v3).",
    "ref_hardware": "Reference chip for cache load-vs-recompute (default h100-sxm).",
    "cache_context": "Context (tokens) at which a token's KV is recomputed (default 32768).",
    "mode_hardware": "Reference system for the fast-mode cost-vs-batch curve (default gb200-nvl72).",
    "mode_context": "Context (tokens) for the fast-mode curve (default 4096).",
}


#: The short flags these options share with every other command (-H hardware, -p precision).
_SHORT = {"hardware": ("-H",), "precision": ("-p",)}


def _opts(**names):
    return {k: typer.Option(None, f"--{k.replace('_', '-')}", *_SHORT.get(k, ()), help=_ASSUME_HELP[k])
            for k in names}


def _mean_length(option: str):
    """A length option read as its mean (the margin is linear in tokens per request): any form --input-len takes."""
    check = length(option)

    def mean(value):
        v = check(value)
        if isinstance(v, str):
            from chalk.specs.lengths import parse_lengths

            return parse_lengths(v).mean
        return v
    return mean


def _assumptions(obj: dict | None, **given):
    from chalk.analyses.economics.pricing import assumptions

    vals = {**(obj or {}), **{k: v for k, v in given.items() if v is not None}}
    if vals.get("precision") is not None:  # never dropped: an empty or unknown name, or one with nothing to apply to
        from chalk.errors import InputError
        from chalk.specs.precision import canonical

        canonical(vals["precision"])
        if vals.get("hardware") is None or vals.get("ratio") is not None:
            raise InputError("--precision picks the FLOP/s of --hardware's ratio: give --hardware (and no --ratio)")
    kw = {"active_params": vals.pop("active_params", None), "hardware": vals.pop("hardware", None),
          "precision": vals.pop("precision", None) or "fp8", "multiplies_per_byte": vals.pop("ratio", None)}
    return assumptions(**kw, **vals)


def _kb(v) -> str:
    return si(v, "B") if v is not None else "n/a (no cliff)"


def _print_report(rep: dict) -> None:
    c = console()
    a = rep["assumptions"]
    t = table(f"API price sheets read through the roofline · eq. 6 with N_active {si(a['active_params'])}, "
              f"ratio {num(a['multiplies_per_byte'], 3)} multiplies/byte ({a['ratio_source']})",
              ["sheet", "date", "$ per M in / out", "out / in", "decode MFU / prefill", "cache read / input",
               "cliff (tokens)", "KV per token: eq. 6 / refined"])
    modes = []
    for s in rep["sheets"]:
        t.add_row(s["id"] + (f" (mode of {s['mode_of']})" if s["mode_of"] else ""), s["date"],
                  f"{usd(s['input_usd_per_mtok'])} / {usd(s['output_usd_per_mtok'])}", num(s["output_input_ratio"], 3),
                  num(s["implied_decode_mfu_fraction"], 3), pct(s["cache_read_discount"]),
                  num(s["cliff_context_tokens"]) if s["cliff_context_tokens"] else "none",
                  f"{_kb(s['implied_kv_bytes_per_token'])} / {_kb(s['implied_kv_bytes_per_token_refined_output'])}"
                  if s["cliff_context_tokens"] else "n/a")
        modes += [(s["id"], m) for m in s["modes"]]
    c.print(t)
    mr = rep["mode_reference"]
    t = table(f"fast / priority / off-peak modes on {mr['model']} / {mr['hardware']}, context {num(mr['context'])}, "
              f"from the cost-optimal batch {num(mr['baseline_batch'])} (the lecture's aggregate bound: the "
              "system as one chip)",
              ["sheet", "mode", "price x", "speed claimed", "batch cut", "cost x", "speed x", "price / cost"])
    for sid, m in modes:
        ok = m["implied_batch"] is not None
        t.add_row(sid, m["name"], num(m["price_multiple"]), num(m["speedup_claimed"]) if m["speedup_claimed"] else "-",
                  f"/{num(m['implied_batch_reduction'], 3)}" if ok else m["note"],
                  num(m["implied_cost_multiple"], 3), num(m["implied_speedup"], 3), num(m["price_over_cost"], 3))
    c.print(t)
    t = table("cache-retention windows matched to the storage tier with the nearest drain time (capacity / bandwidth)",
              ["window", "tier", "kind", "drain time", "drain / window", "nearest disk drain"])
    for label, m in rep["retention_tiers"].items():
        disk = m["nearest_by_kind"].get("disk")
        t.add_row(label, m["tier"], m["kind"], seconds(m["drain_time_s"]), num(m["drain_over_window"], 3),
                  seconds(disk["drain_time_s"]) if disk else "n/a")
    c.print(t)
    ce = rep["cache_economics"]
    t = table(f"one token's KV: load vs recompute · {ce['model']} on one {ce['chip']} ({ce['compute_precision']}), "
              f"context {num(ce['context'])}, {si(ce['kv_bytes_per_token'], 'B')} per token, "
              f"recompute {seconds(ce['recompute_time_s'])}",
              ["tier", "kind", "bandwidth", "load time", "load / recompute"])
    for tr in ce["tiers"]:
        t.add_row(tr["id"], tr["kind"], si(tr["bandwidth_bytes_per_s"], "B/s"), seconds(tr["load_time_s"]),
                  num(tr["load_over_recompute"], 3))
    c.print(t)
    c.print("[dim]Refined KV: the output price multiple m above the cliff read as memory = (m - 1) x compute "
            "at the cliff (m = 2 is eq. 6). Modes: the batch that gives the claimed speed-up (or, with none "
            "claimed, the price multiple as cost) on the aggregate roofline's cost-vs-batch curve (the whole system "
            "summed into one chip, the lecture's bound; not a deployment).[/dim]")


def _print_sheet(d: dict) -> None:
    c = console()
    t = table(f"{d['provider']} {d['model']} ({d['id']}) · {d['date']} · confidence {d['confidence']}",
              ["quantity", "value"])
    rows = [
        ("input / output / cache read", f"{usd(d['input_usd_per_mtok'])} / {usd(d['output_usd_per_mtok'])} / "
                                        f"{usd(d['cache_read_usd_per_mtok'])} per M tokens"),
        ("output / input price", num(d["output_input_ratio"], 3)),
        ("decode MFU as a fraction of prefill MFU (1 / ratio)", num(d["implied_decode_mfu_fraction"], 3)),
        ("cache-read price / input price", pct(d["cache_read_discount"])),
        ("tier bandwidth where loading costs that share of recomputing",
         si(d["cache_load_breakeven_bandwidth_bytes_per_s"], "B/s")
         + (f" (slowest tier fast enough: {d['cache_load_tier']})" if d["cache_load_tier"] else "")),
        ("long-context cliff", f"{num(d['cliff_context_tokens'])} tokens" if d["cliff_context_tokens"] else "none"),
        ("  input / output multiple above it",
         f"{num(d['cliff_input_multiple'], 3)} / {num(d['cliff_output_multiple'], 3)}"),
        ("  implied KV per token (eq. 6)", _kb(d["implied_kv_bytes_per_token"])),
        ("  refined from the output / input multiple",
         f"{_kb(d['implied_kv_bytes_per_token_refined_output'])} / "
         f"{_kb(d['implied_kv_bytes_per_token_refined_input'])}"),
    ]
    for w in d["cache_retention"]:
        rows.append((f"cache retention {w['label']} ({seconds(w['window_s'])}, {w['basis']})",
                     f"{w['tier']} ({w['kind']}, drain {seconds(w['drain_time_s'])}); storage "
                     f"{usd(w['storage_usd_per_mtok_hour'])} per M tokens per hour"))
    for m in d["modes"]:
        rows.append((f"mode {m['name']}: {num(m['price_multiple'])}x price"
                     + (f", {num(m['speedup_claimed'])}x speed claimed" if m["speedup_claimed"] else ""),
                     m["note"] if m["implied_batch"] is None else
                     f"batch {num(m['baseline_batch'])} -> {num(m['implied_batch'])}"
                     f" (/{num(m['implied_batch_reduction'], 3)}),"
                     f" cost {num(m['implied_cost_multiple'], 3)}x, speed {num(m['implied_speedup'], 3)}x,"
                     f" price / cost {num(m['price_over_cost'], 3)}"))
    rows += [("source", d["source"]), ("notes", d["notes"])]
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)


def register(app: typer.Typer) -> None:
    """Add the `pricing` command group (list, show, margin) to `app`."""
    pricing_app = typer.Typer(invoke_without_command=True, no_args_is_help=False,
                              help="Public API price sheets read through the roofline, and serving margins.")
    app.add_typer(pricing_app, name="pricing")
    o = _opts(active_params=1, hardware=1, precision=1, ratio=1, ref_model=1, ref_hardware=1, cache_context=1,
              mode_hardware=1, mode_context=1)

    @pricing_app.callback()
    def pricing(ctx: typer.Context,
                as_json: bool = typer.Option(False, "--json", help="Print {\"sheets\": [...], ...} as JSON."),
                active_params: Optional[float] = o["active_params"], hardware: Optional[str] = o["hardware"],
                precision: Optional[str] = o["precision"], ratio: Optional[float] = o["ratio"],
                ref_model: Optional[str] = o["ref_model"], ref_hardware: Optional[str] = o["ref_hardware"],
                cache_context: Optional[float] = o["cache_context"], mode_hardware: Optional[str] = o["mode_hardware"],
                mode_context: Optional[float] = o["mode_context"]):
        """Every price sheet: decode vs prefill MFU, cliff KV bytes (eq. 6), cache tiers, fast modes."""
        from chalk.analyses.economics.pricing import pricing_report

        given = dict(active_params=active_params, hardware=hardware, precision=precision, ratio=ratio,
                     ref_model=ref_model, ref_hardware=ref_hardware, cache_context=cache_context,
                     mode_hardware=mode_hardware, mode_context=mode_context)
        ctx.obj = {k: v for k, v in given.items() if v is not None}
        if ctx.invoked_subcommand is not None:
            return
        rep = pricing_report(_assumptions(ctx.obj))
        if as_json:
            emit_json(rep)
        else:
            _print_report(rep)

    @pricing_app.command("show")
    def show(ctx: typer.Context, sheet: str = typer.Argument(..., help="Price sheet id (e.g. gemini-2.5-pro)."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON."),
             active_params: Optional[float] = o["active_params"], hardware: Optional[str] = o["hardware"],
             precision: Optional[str] = o["precision"], ratio: Optional[float] = o["ratio"],
             ref_model: Optional[str] = o["ref_model"], ref_hardware: Optional[str] = o["ref_hardware"],
             cache_context: Optional[float] = o["cache_context"], mode_hardware: Optional[str] = o["mode_hardware"],
             mode_context: Optional[float] = o["mode_context"]):
        """One price sheet with every reading."""
        from chalk.analyses.economics.pricing import analyze_sheet

        a = _assumptions(ctx.obj, active_params=active_params, hardware=hardware, precision=precision, ratio=ratio,
                         ref_model=ref_model, ref_hardware=ref_hardware, cache_context=cache_context,
                         mode_hardware=mode_hardware, mode_context=mode_context)
        d = analyze_sheet(sheet, a)
        if as_json:
            emit_json({"sheet": d, "assumptions": a.to_dict()})
        else:
            _print_sheet(d)

    @pricing_app.command("margin")
    def margin(
        model: str = typer.Option(..., "--model", "-m", help="Catalog id or alias, a config.json, or its folder."),
        hardware: str = typer.Option(..., "--hardware", "-H", help="Chip id (its system), system id, or YAML."),
        sheet: str = typer.Option("deepseek-r1", "--sheet", help="Price sheet id to earn revenue at."),
        chips: Optional[int] = typer.Option(None, "--gpus", "--chips", help="Chips serving decode (default: the system's)."),
        batch: Optional[float] = typer.Option(
            None, "--batch", "-b", callback=whole("--batch"), metavar="<int>", help="Sequences per decode step over all chips (default 128 per chip)."),
        batch_per_chip: float = typer.Option(128, "--batch-per-chip", help="Sequences per chip without --batch."),
        context: Optional[float] = typer.Option(
            None, "--context", "-c", help="KV tokens per decoding sequence (default 4,989, DeepSeek's average)."),
        prompt_len: Optional[float] = typer.Option(None, "--prompt-len", help="Prefill tokens (default: --context)."),
        input_tokens: Optional[float] = typer.Option(None, "--input-tokens", help="Input tokens/day (default 608e9)."),
        output_tokens: Optional[float] = typer.Option(None, "--output-tokens", help="Output tokens/day (168e9)."),
        input_len: Optional[str] = typer.Option(None, "--input-len", callback=_mean_length("--input-len"),
                                                help=f"Prompt tokens per request (not per day): {LENGTH_FORMS}; "
                                                "the margin reads its mean."),
        output_len: Optional[str] = typer.Option(None, "--output-len", callback=_mean_length("--output-len"),
                                                 help="Output tokens per request: as --input-len."),
        cache_hit: float = typer.Option(0.563, "--cache-hit", help="Fraction of input tokens hitting the cache (0-1)."),
        precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Weights/compute: bf16, fp8, fp4..."),
        kv_precision: str = typer.Option("auto", "--kv-precision", help="KV cache precision."),
        ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ):
        """Chalk's predicted serving cost against a price sheet, as a margin; with DeepSeek's 545% as a check."""
        from chalk.analyses.economics.pricing import DEEPSEEK, deepseek_chalk_margin, deepseek_published_margin, pricing_margin

        DEEPSEEK_USD_PER_GPU_HOUR = DEEPSEEK.usd_per_gpu_hour

        r = pricing_margin(model, hardware, sheet, batch=batch, batch_per_chip=batch_per_chip, chips=chips,
                           context=context, prompt_len=prompt_len, input_tokens=input_tokens,
                           output_tokens=output_tokens, input_len=input_len, output_len=output_len,
                           cache_hit_fraction=cache_hit, precision=precision, kv_precision=kv_precision, ideal=ideal)
        pub, own = deepseek_published_margin(), deepseek_chalk_margin(ideal=ideal)
        if as_json:
            emit_json({"margin": r, "deepseek_published": pub, "deepseek_chalk": own})
            return
        c = console()
        fits = "" if r.get("fits", True) else " · DOES NOT FIT (cost is a lower bound)"
        from chalk.analyses.step.model_sizes import ModelSizes
        from chalk.analyses.step.parallel import resolve_kv_precision
        from chalk.faces.fmt import header
        from chalk.specs.catalog import load_model, resolve_hardware
        from chalk.specs.precision import canonical

        prec = canonical(precision) if precision else ModelSizes(load_model(model)).default_precision()
        t = table("Your question: " + header(r["model"], resolve_hardware(hardware).chip.id, r["chips"],
                                             r.get("layout"), prec, resolve_kv_precision(kv_precision, prec), None,
                                             r["efficiency"],
                                             f"against {r['sheet']} ({r['tier']} tier)", f"per {r['per']}",
                                             system=r["hardware"]) + fits, ["quantity", "value"])
        rows = [
            ("tokens in (cache hits) / out", f"{si(r['input_tokens'])} ({pct(r['cache_hit_fraction'])}) / "
                                             f"{si(r['output_tokens'])}"),
            ("decode", f"batch {num(r['decode_batch'])} at context {num(r['context'])} tokens: "
                       f"{num(r['decode_user_tokens_per_s'])} tokens/s per user, {r['decode_bound']}-bound"),
            ("price in / cache hit / out", f"{usd(r['input_usd_per_mtok'])} / {usd(r['cache_read_usd_per_mtok'])} / "
                                           f"{usd(r['output_usd_per_mtok'])} per M tokens"),
            ("chalk's cost in (prefill) / out (decode)",
             f"{usd(r['cost_input_usd_per_mtok'])} / {usd(r['cost_output_usd_per_mtok'])} per M tokens"),
            ("margin on input / output", f"{pct(r['margin_input'])} / {pct(r['margin_output'])}"),
            ("revenue", usd(r["revenue_usd"])),
            ("cost (chip-hours the tokens need x $/chip-hour)", usd(r["cost_usd"])),
            ("chip-hours", num(r["chip_hours"])), ("margin (revenue / cost - 1)", pct(r["margin"])),
        ]
        for k, v in rows:
            t.add_row(k, v)
        c.print(t)
        same = all(r.get(k) == own.get(k) for k in ("model", "hardware", "chips", "decode_batch", "context",
                                                     "input_tokens", "output_tokens", "cache_hit_fraction",
                                                     "precision", "kv_precision"))
        t = table(f"Check against DeepSeek's published day (2025-02-27/28, R1 prices): {own['configuration']}"
                  + (" — the same configuration as above" if same else " — a fixed configuration, not the one above"),
                  ["quantity", "published", "chalk"])
        t.add_row("GPUs (average over the day)", num(pub["gpus"]), num(own["average_gpus"]))
        t.add_row("cost basis", f"whole fleet x 24 h x ${DEEPSEEK_USD_PER_GPU_HOUR:.2f}/GPU-h",
                  "chip-hours the tokens need x catalog $/chip-h")
        t.add_row("cost per day",
                  usd(pub["published_cost_usd_per_day"]) + f" (recomputed {usd(pub['cost_usd_per_day'])})",
                  usd(own["cost_usd"]) + f" ({num(own['cost_over_published'], 3)}x published)")
        t.add_row("revenue per day", usd(pub["published_revenue_usd_per_day"]) +
                  f" (recomputed {usd(pub['revenue_usd_per_day'])})", usd(own["revenue_usd"]))
        t.add_row("margin", pct(pub["published_margin"]) + f" (recomputed {pct(pub['margin'])})", pct(own["margin"]))
        t.add_row("reproduces the published margin?", "", "yes" if own["reproduces"] else "NO")
        c.print(t)
        if own["gap"]:
            c.print(f"[bold]gap:[/bold] {own['gap']}")
        for n in r["notes"]:
            c.print(f"[dim]note: {n}[/dim]")
