"""The energy options and lines every answering command shares (estimate, throughput, plan): one wording, one
pair of options. Formatting only: the figures come from `chalk.analyses.economics.energy`."""

from __future__ import annotations

import typer

from chalk.faces.fmt import num, pct, si, usd

USD_PER_KWH_OPT = typer.Option(None, "--usd-per-kwh", help="Electricity price for the energy figures, USD per kWh "
                               "(default: the catalog's, energy.yaml, with its source).")
PUE_OPT = typer.Option(None, "--pue", help="Power usage effectiveness, facility power / IT power (>= 1; default: the "
                       "catalog's, energy.yaml, with its source).")


def energy_rows(e) -> list[tuple[str, str]]:
    """Two (quantity, value) rows: J per token with power per GPU and per fleet and kWh per day; the electricity
    per M tokens and its share of $/M tokens."""
    d = e.to_dict() if hasattr(e, "to_dict") else e
    if not d or d.get("joules_per_token") is None:
        return [("energy", (d or {}).get("assumption", "not estimated"))]
    share = d.get("electricity_share_of_cost")
    gpus = d["gpus"]
    return [("energy", f"{num(d['joules_per_token'])} J per {d['tokens']} token; {si(d['power_w_per_gpu'], 'W')} "
                       f"per GPU, {d['power_source']}; {si(d['power_w_per_fleet'], 'W')} for {gpus} "
                       f"GPU{'s' if gpus != 1 else ''} at the wall (PUE {d['pue']:g}), "
                       f"{num(d['kwh_per_day'])} kWh/day"),
            ("electricity", f"{usd(d['electricity_usd_per_mtok'])} per M tokens at ${d['usd_per_kwh']:g}/kWh"
                            + (f" = {pct(share)} of the cost" if share is not None else ""))]
