"""`chalk sweep` and `chalk lecture`: the lecture's latency and cost curves as a table, and its deductions
replayed."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import (HW_OPT, KV_PRECISION_OPT, MODEL_OPT, PLOT_FORMATS, PRECISION_OPT, Phase, busy,
                                    console, emit_json, fail, num, out_file, pct, seconds, table, usd, write_plot)


def register(app: typer.Typer) -> None:
    app.command()(sweep)
    app.command()(lecture)


def sweep(
    model: str = MODEL_OPT,
    hardware: str = HW_OPT,
    batches: str = typer.Option("1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192", "--batches",
                                help="Comma-separated batch sizes, or start:stop:points for a log range."),
    contexts: str = typer.Option("4096", "--contexts", help="Comma-separated context lengths, or start:stop:points."),
    phase: Phase = typer.Option(Phase.decode, "--phase", help="decode: one token per sequence; prefill: the "
                                "whole prompt of each context."),
    chips: Optional[int] = typer.Option(None, "--gpus", "--chips", help="GPUs summed into one chip (default: the "
                                        "system's scale-up domain)."),
    precision: Optional[str] = PRECISION_OPT,
    kv_precision: str = KV_PRECISION_OPT,
    ideal: bool = typer.Option(False, "--ideal", help="Peak rates: the pure roofline, no calibration."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    csv: Optional[str] = typer.Option(None, "--csv", callback=out_file("--csv"),
                                       help="Write the table to this CSV file."),
    plot: Optional[str] = typer.Option(None, "--plot", callback=out_file("--plot", PLOT_FORMATS),
                                        help="Also write cost-vs-batch to this .png/.svg."),
):
    """Sweep batch x context in one vectorised call: the lecture's latency and cost curves as a table."""
    from chalk import api

    res = api.sweep(model, hardware, _parse_grid(batches, "batches"), _parse_grid(contexts, "contexts"),
                    phase=phase.value, chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    if csv:
        res.to_csv(csv)
    write_plot("cost-vs-batch", plot, model=model, hardware=hardware, context=float(res["context"][0]),
                chips=chips, precision=precision, kv_precision=kv_precision, ideal=ideal)
    if as_json:
        d = res.to_dict()
        n = d["meta"]["chips"]  # each row is one replica of `chips` GPUs, as estimate answers
        d["meta"].setdefault("gpus_per_replica", n)
        for row in d["rows"]:
            row.setdefault("tokens_per_s_per_replica", row["tokens_per_s"])
            row.setdefault("tokens_per_s_per_gpu", row["tokens_per_s"] / n if row["tokens_per_s"] is not None else None)
        emit_json(d)
        return
    a = res.meta
    from chalk.faces.fmt import header
    from chalk.specs.catalog import resolve_hardware

    t = table(header(a["model"], resolve_hardware(hardware).chip.id, a["chips"],
                     f"one {a['chips']}-GPU replica, as estimate picks it", a["precision"], a["kv_precision"], None,
                     a["efficiency"], a["phase"], f"critical batch {num(a['critical_batch'])}",
                     f"balance context {num(a['balance_context'])} tokens", system=a["hardware"]),
              ["batch", "context", "step", "bound", "MFU", "tok/s/replica", "tok/s/user", "$/M tokens", "fits"])
    for row in res.rows():
        t.add_row(num(row["batch"]), num(row["context"]), seconds(row["step_time_s"]), row["bound"], pct(row["mfu"]),
                  num(row["tokens_per_s"]), num(row["user_tokens_per_s"]), usd(row["cost_per_mtok_usd"]),
                  "yes" if row["fits"] else "no")
    console().print(t)
    if a.get("kernels"):
        console().print(f"[dim]kernel tables: {a['kernels']}[/dim]")


def _parse_grid(text: str, name: str):
    import numpy as np

    from chalk.errors import InputError
    from chalk.specs.validate import list_items
    from chalk.specs.workload import MAX_GRID_POINTS

    text = text.strip()
    try:
        if ":" in text:
            a, b, n = text.split(":")
            points = int(n)
            if not 1 <= points <= MAX_GRID_POINTS:
                fail(f"--{name}: points must be between 1 and {MAX_GRID_POINTS:,}, got {n}")
            return np.unique(np.round(np.geomspace(float(a), float(b), points)))
        values = [float(x) for x in list_items(text, f"--{name}")]
    except InputError:
        raise
    except (ValueError, OverflowError):
        fail(f"--{name} must be comma-separated numbers or start:stop:points, got {text!r}")
    if name == "batches" and values:
        from chalk.specs.workload import positive

        positive("--batches", values, integer=True)  # sequences are whole; a range is rounded above
    return values


def lecture(as_json: bool = typer.Option(False, "--json", help="Print {\"claims\": [...]} as JSON.")):
    """Replay the lecture's deductions, each computed by chalk."""
    from chalk.analyses.blackboard.lecture import all_claims
    from chalk.faces.lecture_text import render

    with busy(as_json, "replaying the lecture's deductions"):
        claims = all_claims()
    if as_json:
        emit_json({"claims": [c.to_dict() for c in claims]})
        return
    render(claims, console())
