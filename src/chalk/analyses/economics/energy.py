"""Energy per token and its electricity cost for one step, from the chip's power (TDP unless measured).

The lead's step model calls `energy_of(result, chip)` to add these figures to estimate and throughput.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from chalk.equations import energy as E
from chalk.errors import InputError

#: Electricity price used unless one is given: a round 0.10 USD/kWh, between the US industrial (~0.08) and
#: commercial (~0.13) averages (EIA Electric Power Monthly, 2024 annual averages). An assumption, stated in output.
DEFAULT_USD_PER_KWH = 0.10


@dataclass(frozen=True)
class EnergyResult:
    """Energy per token (J) and electricity per million tokens (USD), with the assumption behind them."""

    joules_per_token: float | None
    energy_cost_per_mtok_usd: float | None
    power_w_per_chip: float | None
    power_source: str  # "measured", "TDP (upper bound)" or "unknown"
    chips: int
    usd_per_kwh: float
    pue: float
    assumption: str

    def to_dict(self) -> dict:
        return asdict(self)


def chip_power_w(chip, power_w: float | None = None) -> tuple[float | None, str]:
    """The power to use for one chip: a given or measured figure, else the TDP as an upper bound."""
    if power_w is not None:
        return float(power_w), "measured"
    measured = getattr(chip, "measured_power_w", None)
    if measured:
        return float(measured), "measured"
    if getattr(chip, "tdp_w", None):
        return float(chip.tdp_w), "TDP (upper bound)"
    return None, "unknown"


def energy_per_token(step_time_s: float, chips: int, tokens_per_step: float, chip, *,
                     usd_per_kwh: float = DEFAULT_USD_PER_KWH, power_w: float | None = None,
                     pue: float = 1.0) -> EnergyResult:
    """J per token and electricity $ per million tokens for a step of `step_time_s` on `chips` chips."""
    for name, v, lo in (("usd_per_kwh", usd_per_kwh, 0.0), ("pue", pue, 1.0)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= lo):
            raise InputError(f"{name} must be a finite number >= {lo:g}, got {v!r}")
    if power_w is not None and not (math.isfinite(power_w) and power_w > 0):
        raise InputError(f"power must be a positive number of watts, got {power_w!r}")
    p, source = chip_power_w(chip, power_w)
    name = getattr(chip, "name", getattr(chip, "id", "chip"))
    if p is None:
        return EnergyResult(None, None, None, "unknown", int(chips), float(usd_per_kwh), float(pue),
                            f"no TDP or measured power for {name} in the catalog: energy not estimated")
    j = float(E.energy_per_token_j(p, float(step_time_s), int(chips), float(tokens_per_step), pue))
    usd = float(E.energy_cost_per_mtok_usd(j, usd_per_kwh))
    bound = "an upper bound: chips rarely draw TDP in decode" if source.startswith("TDP") else "measured power"
    return EnergyResult(
        joules_per_token=j, energy_cost_per_mtok_usd=usd, power_w_per_chip=p, power_source=source,
        chips=int(chips), usd_per_kwh=float(usd_per_kwh), pue=float(pue),
        assumption=(f"{int(chips)} x {p:,.0f} W ({source}) for the whole step, PUE {pue:g}, "
                    f"electricity at ${usd_per_kwh:g}/kWh; {bound}"))


def energy_of(result, chip, **kw) -> EnergyResult:
    """Energy figures for a scalar `RooflineResult` (tokens per step = tokens/s x step time)."""
    t = float(result.step_time_s)
    return energy_per_token(t, int(result.chips), float(result.tokens_per_s) * t, chip, **kw)
