"""`chalk hardware list|show` and `chalk models list|show`: the chip, system and model catalogs."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import KV_PRECISION_OPT, PRECISION_OPT, console, emit_json, num, seconds, si, table

hardware_app = typer.Typer(no_args_is_help=True, help="The chip and system catalog.")
models_app = typer.Typer(no_args_is_help=True, help="The model catalog.")


def register(app: typer.Typer) -> None:
    app.add_typer(hardware_app, name="hardware")
    app.add_typer(models_app, name="models")


@hardware_app.command("list")
def hardware_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
    """Every chip and system in the catalog."""
    from chalk.specs import catalog

    chips = [catalog.load_chip(c) for c in catalog.chip_ids()]
    systems = [catalog.load_system(s) for s in catalog.system_ids()]
    if as_json:
        emit_json({"chips": [_chip_dict(c) for c in chips],
                   "systems": [{"id": s.id, "name": s.name, "chip": s.chip.id, "chips": s.chips, "kind": s.kind}
                               for s in systems]})
        return
    t = table("chips (dense peaks)", ["id", "name", "precisions (dense)", "HBM", "HBM bandwidth",
                                      "scale-up (one way)", "$/chip-h"])
    for c in chips:
        t.add_row(c.id, c.name, ", ".join(f"{p} {si(v, 'FLOP/s')}" for p, v in c.flops_per_s.items()),
                  si(c.hbm_bytes, "B"), si(c.hbm_bandwidth_bytes_per_s, "B/s"),
                  si(c.scaleup_bandwidth_bytes_per_s, "B/s"),
                  f"{c.price_usd_per_hour:.2f}" + (" (assumed)" if c.price_is_assumption else ""))
    console().print(t)
    t = table("systems (scale-up domains)", ["id", "name", "chip", "chips", "kind"])
    for s in systems:
        t.add_row(s.id, s.name, s.chip.id, str(s.chips), s.kind)
    console().print(t)


def _chip_dict(c) -> dict:
    from dataclasses import asdict

    from chalk.analyses.blackboard.hardware_facts import chip_facts

    d = asdict(c)
    d.update(chip_facts(c))
    return d


@hardware_app.command("show")
def hardware_show(name: str = typer.Argument(..., help="Chip or system id, alias, or YAML path."),
                  as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
    """One chip or system, with its derived ratios."""
    from chalk.specs.catalog import resolve_hardware

    s = resolve_hardware(name)
    d = {"system": {"id": s.id, "name": s.name, "chips": s.chips, "kind": s.kind, "sources": s.sources},
         "chip": _chip_dict(s.chip)}
    if as_json:
        emit_json(d)
        return
    c = s.chip
    t = table(f"{s.name}: {s.chips} x {c.name}", ["quantity", "value", "source"])
    src = c.sources
    for p, v in c.flops_per_s.items():
        t.add_row(f"dense {p}", si(v, "FLOP/s"), src.get("dense_tflops", ""))
    cf = d["chip"]
    rows = [("HBM", si(c.hbm_bytes, "B"), src.get("hbm_gb", "")),
            ("HBM bandwidth", si(c.hbm_bandwidth_bytes_per_s, "B/s"), src.get("hbm_tb_per_s", "")),
            ("scale-up, bidirectional (vendor)", si(c.scaleup_bandwidth_bytes_per_s_bidir, "B/s"),
             src.get("scaleup_gb_per_s_bidir", "")),
            ("scale-up, one way", si(c.scaleup_bandwidth_bytes_per_s, "B/s"), "half the vendor figure"),
            ("scale-out NIC", si(c.scaleout_bandwidth_bytes_per_s, "B/s"), src.get("scaleout_gbit_per_s", "")),
            ("TDP", f"{c.tdp_w} W" if c.tdp_w else "n/a", src.get("tdp_w", "")),
            ("price", f"${c.price_usd_per_hour:.2f}/chip-hour" + (" (assumption)" if c.price_is_assumption else ""),
             src.get("price_usd_per_hour", "") or c.price_note),
            (f"FLOP/s per byte/s ({cf['native_precision']})", num(cf["flops_per_byte"]), "derived"),
            ("critical batch, dense (eq. 5)", num(cf["dense_critical_batch"]), "derived"),
            ("HBM drain time", seconds(cf["hbm_drain_time_s"]), "derived"),
            ("system HBM", si(s.hbm_bytes, "B"), "derived")]
    for r in rows:
        t.add_row(*r)
    console().print(t)


@models_app.command("list")
def models_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
    """Every model in the catalog with its sizes."""
    from chalk.analyses.step.model_sizes import ModelSizes
    from chalk.specs import catalog

    rows = [ModelSizes(catalog.load_model(m)).summary() for m in catalog.model_ids()]
    if as_json:
        emit_json({"models": rows})
        return
    t = table("models", ["id", "type", "total params", "active params", "weights", "KV/token (bf16)", "attention"])
    for r in rows:
        t.add_row(r["id"], r["model_type"], si(r["total_params"]), si(r["active_params"]),
                  f"{si(r['weight_bytes'], 'B')} {r['weights_precision']}", si(r["kv_bytes_per_token"], "B"),
                  r["attention"] + (f", window {r['sliding_window']}" if r["sliding_window"] else "")
                  + (f", DSA top-{r['dsa_topk']}" if r["dsa_topk"] else ""))
    console().print(t)


@models_app.command("show")
def models_show(name: str = typer.Argument(..., help="Catalog id, alias, config.json path or folder."),
                kv_precision: str = KV_PRECISION_OPT,
                precision: Optional[str] = PRECISION_OPT,
                as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
    """One model's derived sizes."""
    from chalk.analyses.step.model_sizes import ModelSizes
    from chalk.specs import catalog
    from chalk.specs.precision import canonical

    from chalk.analyses.step.parallel import resolve_kv_precision

    sz = ModelSizes(catalog.load_model(name))
    prec = canonical(precision) if precision is not None else None
    kvp = resolve_kv_precision(kv_precision, prec or sz.default_precision())
    d = sz.summary(kv_precision=kvp, precision=prec)
    if as_json:
        emit_json(d)
        return
    t = table(f"{d['name']} ({d['model_type']})", ["quantity", "value"])
    for k, v in d.items():
        if k in ("name",):
            continue
        if isinstance(v, float) and ("params" in k or "flops" in k):
            v = si(v)
        elif isinstance(v, float) and "bytes" in k:
            v = si(v, "B")
        t.add_row(k, str(v))
    console().print(t)
