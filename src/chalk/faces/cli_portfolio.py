"""`chalk plan --portfolio FILE`: several models placed on a fleet at the least total cost, and what binds.
A thin face on `chalk.analyses.planning.portfolio.portfolio` (candidates run on `chalk.executor`): no formulas here."""

from __future__ import annotations

from typing import Optional

import typer

from chalk.faces.cli_common import console, emit_json, num, table, usd

PORTFOLIO_OPT = typer.Option(None, "--portfolio", help="A portfolio YAML (models with demand and targets, chips, "
                             "fleet limits, regions): the cheapest assignment of every model (see "
                             "examples/portfolio.yaml). --model and the demand options are then not used.")
RESULTS_OPT = typer.Option(None, "--results", help="With --portfolio: JSON-lines file each finished candidate is "
                           "appended to (default: PORTFOLIO-NAME.results.jsonl in this folder).")
RESUME_OPT = typer.Option(False, "--resume", help="With --portfolio: reuse the candidates already in --results, "
                          "evaluate only the rest.")
RAY_OPT = typer.Option(False, "--ray", help="Run candidates as Ray tasks: a local Ray started for the run (or the "
                       "cluster at $RAY_ADDRESS). Needs pip install 'chalk\\[ray]'.")
RAY_ADDRESS_OPT = typer.Option(None, "--ray-address", help="Run candidates on the Ray cluster at this address "
                               "(host:port, ray://host:port or auto).")
WORKERS_OPT = typer.Option(None, "--workers", help="With --portfolio: local processes (or local Ray CPUs with "
                           "--ray); default this process only (Ray: the usable CPUs).")


def executor_for(ray: bool, ray_address: Optional[str], workers: Optional[int]):
    """The executor the options ask for (`chalk.executor.executor`), the worker count checked first."""
    from chalk.executor import executor
    from chalk.specs.workload import count

    if workers is not None:
        workers = count("workers", workers, 256)
    return executor(ray=ray, address=ray_address, workers=workers)


def run(path: str, *, results: Optional[str], resume: bool, ray: bool, ray_address: Optional[str],
        workers: Optional[int], as_json: bool) -> None:
    from pathlib import Path

    from chalk.analyses.planning.portfolio import load, portfolio

    from chalk.specs.validate import output_path

    load(path)  # a bad portfolio or results path is one line before any executor starts
    results = results or f"{Path(path).stem}.results.jsonl"
    output_path(results, "--results", (".jsonl",))
    ex = executor_for(ray, ray_address, workers)
    try:
        if as_json:
            r = portfolio(path, executor=ex, results=results, resume=resume)
        else:
            from rich.progress import Progress

            with Progress(console=console(), transient=True, disable=not console().is_terminal) as bar:
                task = bar.add_task("candidates", total=None)
                r = portfolio(path, executor=ex, results=results, resume=resume,
                              progress=lambda done, total: bar.update(task, completed=done, total=total))
    finally:
        ex.close()
    if as_json:
        emit_json(r)
        return
    _print(r)


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.0f}ms" if v < 1 else f"{v:.2f}s"


def _print(r) -> None:
    c = console()
    tot = r["total"]
    tab = table(f"portfolio {r['source']} · {len(r['models'])} models · {usd(tot['usd_per_hour'])}/h, "
                f"{usd(tot['usd_per_day'])}/day, {num(tot['gpus'])} GPUs"
                + (f", {tot['power_mw']:.3g} MW" if tot["power_mw"] is not None else ""),
                ["model", "chip", "region", "engine", "deployment", "GPUs", "$/hour", "p99 TTFT/TPOT", "what binds"])
    for m in r["models"]:
        tab.add_row(m["name"], m["chip"], m["region"] or "-", f"{m['engine'] or '-'} {m['precision']} {'PD' if m['mode'] == 'disaggregated' else 'agg'}",
                    m["layout"], num(m["gpus"]), usd(m["usd_per_hour"]),
                    f"{_ms(m['ttft_p99_s'])}/{_ms(m['tpot_p99_s'])}", "; ".join(m["binds"]))
    c.print(tab)
    if r["constraints"]:
        t2 = table("fleet constraints", ["constraint", "limit", "used", "binds", "$/hour without it"])
        for k in r["constraints"]:
            t2.add_row(k["name"], f"{num(k['limit'])} {k['unit']}", f"{num(k['used'])} {k['unit']}",
                       "yes" if k["binds"] else "no",
                       usd(k["usd_per_hour_without"]) if k["usd_per_hour_without"] is not None else "-")
        c.print(t2)
    c.print(f"total {usd(tot['usd_per_hour'])}/h ({usd(tot['usd_per_hour_unconstrained'])}/h with every model on "
            f"its own cheapest option); binding: {', '.join(r['binding']) or 'nothing'}; "
            f"{'optimal' if r['proven_optimal'] else 'best found'} ({r['method'].split(' over ')[0]})")
    run_ = r["run"]
    c.print(f"[dim]{r['candidates']['total']} candidates ({run_['evaluated']} evaluated on {run_['executor']}, "
            f"{run_['reused']} reused), {r['candidates']['meeting_targets']} meet their targets; results in "
            f"{run_['results']}[/dim]")
    for n in r["notes"]:
        c.print(f"[dim]note: {n}[/dim]")
