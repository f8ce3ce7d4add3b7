"""Energy in every answer: joules per token, power per GPU and per fleet, kWh per day and the electricity share of
$/M tokens, from the chip's power (TDP unless measured), a PUE and an electricity price.

The price per kWh and the PUE are options with sourced defaults (catalog `energy.yaml`). The step model and the
serving search cannot import this room: the API and the faces attach these figures to their answers by calling
`estimate_energy`, `serving_energy` and `plan_energy` (one function per kind of answer; the arithmetic is in
`chalk.equations.energy`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from chalk.equations import energy as E
from chalk.errors import InputError

#: seconds in a day (kWh per day = W x DAY_S / J_PER_KWH)
DAY_S = 86_400.0
#: the largest electricity price or PUE taken (a check against typos, not a physical bound)
_MAX = {"usd_per_kwh": 100.0, "pue": 10.0}


@dataclass(frozen=True)
class EnergyDefaults:
    """The catalog's electricity price (USD/kWh) and PUE, each with its source."""

    usd_per_kwh: float
    usd_per_kwh_source: str
    pue: float
    pue_source: str


@lru_cache(maxsize=1)
def energy_defaults() -> EnergyDefaults:
    """The defaults of `energy.yaml` (read once)."""
    from chalk.specs.catalog import package_path, read_yaml
    from chalk.specs.validate import spec_number, spec_str

    d = read_yaml(package_path("catalog", "energy.yaml"), "catalog energy.yaml")
    return EnergyDefaults(
        usd_per_kwh=spec_number(d["usd_per_kwh"], "catalog energy.yaml: usd_per_kwh", maximum=_MAX["usd_per_kwh"]),
        usd_per_kwh_source=spec_str(d["usd_per_kwh_source"], "energy.yaml: usd_per_kwh_source"),
        pue=spec_number(d["pue"], "catalog energy.yaml: pue", maximum=_MAX["pue"]),
        pue_source=spec_str(d["pue_source"], "energy.yaml: pue_source"))


def _setting(name: str, v, low: float):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number, got {v!r}")
    x = float(v)
    if not (math.isfinite(x) and low <= x <= _MAX[name]):
        raise InputError(f"{name} must be a finite number in [{low:g}, {_MAX[name]:g}], got {v!r}")
    return x


def energy_settings(usd_per_kwh=None, pue=None) -> tuple[float, str, float, str]:
    """(USD/kWh, its source, PUE, its source): the values given (checked: price >= 0, 1 <= PUE <= 10), else the
    catalog's. Called before any long work so a bad value fails first."""
    d = energy_defaults()
    price = (d.usd_per_kwh, f"chalk default: {d.usd_per_kwh_source}") if usd_per_kwh is None else (
        _setting("usd_per_kwh", usd_per_kwh, 0.0), "given")
    p = (d.pue, f"chalk default: {d.pue_source}") if pue is None else (_setting("pue", pue, 1.0), "given")
    return price[0], price[1], p[0], p[1]


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


def _out(x):
    a = np.asarray(x, dtype=float)
    return float(a) if a.ndim == 0 else a


@dataclass(frozen=True, eq=False)
class Energy:
    """The energy of one answer. SI units; arrays where the answer is a grid.

    joules_per_token: energy at the wall (x PUE) per token the answer counts (`tokens`: 'output' tokens for a
    decode step or a deployment, 'input' tokens for a prefill step); power_w_per_gpu: one accelerator's draw
    (TDP: an upper bound, decode rarely holds a chip there); power_w_per_fleet: the `gpus` of the answer at the
    wall (gpus x power x PUE); kwh_per_day: that fleet for 24 hours; electricity_usd_per_mtok: the electricity of a
    million such tokens; electricity_share_of_cost: that over the answer's $/M tokens (None where it has none).
    """

    joules_per_token: object
    tokens: str
    power_w_per_gpu: float | None
    power_w_per_fleet: float | None
    gpus: int
    kwh_per_day: float | None
    electricity_usd_per_mtok: object
    electricity_share_of_cost: object
    power_source: str
    usd_per_kwh: float
    usd_per_kwh_source: str
    pue: float
    pue_source: str
    assumption: str

    def to_dict(self) -> dict:
        from chalk.analyses.records.results import jsonable

        return jsonable(asdict(self))

    def __eq__(self, other) -> bool:
        """Equal figures (arrays compared element by element, through their JSON form)."""
        return isinstance(other, Energy) and self.to_dict() == other.to_dict()

    __hash__ = None


def answer_energy(chip, gpus: int, tokens_per_s, cost_per_mtok_usd=None, *, tokens: str = "output",
                  fleet_gpus: int | None = None, usd_per_kwh=None, pue=None,
                  power_w: float | None = None) -> Energy:
    """The energy figures of an answer running `gpus` of `chip` at `tokens_per_s` (summed over those GPUs) with
    a cost of `cost_per_mtok_usd` per million tokens (rental, all GPU time; None: no share). `fleet_gpus`: the GPUs
    the fleet figures count (default `gpus`).

    Formula: J/token = P x N x PUE / (tokens/s) (`energy_per_token_j` over one second); fleet W = P x N x PUE;
    kWh/day = fleet W x 86,400 s / 3.6e6 J; share = electricity $/M tokens / $/M tokens.
    """
    price, price_src, p_ue, pue_src = energy_settings(usd_per_kwh, pue)
    if power_w is not None and not (isinstance(power_w, (int, float)) and math.isfinite(power_w) and power_w > 0):
        raise InputError(f"power must be a positive number of watts, got {power_w!r}")
    p, source = chip_power_w(chip, power_w)
    n = int(gpus)
    fleet = n if fleet_gpus is None else int(fleet_gpus)
    name = getattr(chip, "name", getattr(chip, "id", "chip"))
    if p is None:
        return Energy(None, tokens, None, None, fleet, None, None, None, "unknown", price, price_src, p_ue, pue_src,
                      f"no TDP or measured power for {name} in the catalog: energy not estimated")
    j = E.energy_per_token_j(p, 1.0, n, tokens_per_s, p_ue)
    usd = E.energy_cost_per_mtok_usd(j, price)
    share = None
    if cost_per_mtok_usd is not None:
        with np.errstate(all="ignore"):
            c = np.asarray(cost_per_mtok_usd, dtype=float)
            share = _out(np.where(c > 0, usd / np.where(c > 0, c, 1.0), np.nan))
    fleet_w = p * fleet * p_ue
    bound = "an upper bound: chips rarely draw TDP in decode" if source.startswith("TDP") else "measured power"
    return Energy(
        joules_per_token=_out(j), tokens=tokens, power_w_per_gpu=p, power_w_per_fleet=fleet_w, gpus=fleet,
        kwh_per_day=fleet_w * DAY_S / E.J_PER_KWH, electricity_usd_per_mtok=_out(usd),
        electricity_share_of_cost=share, power_source=source, usd_per_kwh=price, usd_per_kwh_source=price_src,
        pue=p_ue, pue_source=pue_src,
        assumption=(f"{fleet} x {p:,.0f} W, {source}, all the time, PUE {p_ue:g}, electricity at ${price:g}/kWh; "
                    f"{bound}"))


def estimate_energy(result, chip, **kw) -> Energy:
    """`answer_energy` of a `RooflineResult` (one replica, or the aggregate's chips): its tokens/s over its chips,
    per output token for decode, per prompt token for prefill."""
    return answer_energy(chip, int(result.chips), result.tokens_per_s, result.cost_per_mtok_usd,
                         tokens="output" if result.phase == "decode" else "input", **kw)


def serving_energy(result, chip, **kw) -> Energy:
    """`answer_energy` of a `ServingResult` (`chalk.throughput`): per output token over all its GPU time (as its
    cost_per_mtok_output_usd), the fleet being the deployment's GPUs (`gpus`)."""
    gpus = int(result["gpus"])
    return answer_energy(chip, 1, float(result["output_tokens_per_s_per_gpu"]),
                         result.get("cost_per_mtok_output_usd"), fleet_gpus=gpus, **kw)


def plan_energy(option: dict, chip, **kw) -> Energy:
    """`answer_energy` of one `plan` option: its whole fleet (`gpus`: both pools when disaggregated) serving the
    demand's output tokens/s, against its $/M output tokens."""
    return answer_energy(chip, int(option["gpus"]), float(option["output_tokens_per_s"]),
                         option.get("usd_per_mtok_output"), **kw)


def attach_plan_energy(result, **kw):
    """`result` (a `PlanResult`) with each option's `energy` (`plan_energy`, as a dict); returned for chaining."""
    from chalk.errors import ChalkError
    from chalk.specs.catalog import as_system, load_chip

    for o in result["options"]:
        try:
            chip = load_chip(o["chip"])
        except ChalkError:  # a chip from a YAML path: the system it came with
            chip = as_system(o["hardware"]).chip
        o["energy"] = plan_energy(o, chip, **kw).to_dict()
    return result


# ------------------------------------------------------------------------------ one step (kept: issue 12's form)
@dataclass(frozen=True)
class EnergyResult:
    """Energy per token (J) and electricity per million tokens (USD) of one step, with the assumption behind."""

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


def energy_per_token(step_time_s: float, chips: int, tokens_per_step: float, chip, *, usd_per_kwh=None,
                     power_w: float | None = None, pue=None) -> EnergyResult:
    """J per token and electricity $ per million tokens for a step of `step_time_s` on `chips` chips (price and
    PUE: the catalog's defaults unless given)."""
    price, _, p_ue, _ = energy_settings(usd_per_kwh, pue)
    if power_w is not None and not (math.isfinite(power_w) and power_w > 0):
        raise InputError(f"power must be a positive number of watts, got {power_w!r}")
    p, source = chip_power_w(chip, power_w)
    name = getattr(chip, "name", getattr(chip, "id", "chip"))
    if p is None:
        return EnergyResult(None, None, None, "unknown", int(chips), price, p_ue,
                            f"no TDP or measured power for {name} in the catalog: energy not estimated")
    j = float(E.energy_per_token_j(p, float(step_time_s), int(chips), float(tokens_per_step), p_ue))
    usd = float(E.energy_cost_per_mtok_usd(j, price))
    bound = "an upper bound: chips rarely draw TDP in decode" if source.startswith("TDP") else "measured power"
    return EnergyResult(
        joules_per_token=j, energy_cost_per_mtok_usd=usd, power_w_per_chip=p, power_source=source,
        chips=int(chips), usd_per_kwh=price, pue=p_ue,
        assumption=(f"{int(chips)} x {p:,.0f} W, {source}, for the whole step, PUE {p_ue:g}, "
                    f"electricity at ${price:g}/kWh; {bound}"))


def energy_of(result, chip, **kw) -> EnergyResult:
    """Energy figures for a scalar `RooflineResult` (tokens per step = tokens/s x step time)."""
    t = float(result.step_time_s)
    return energy_per_token(t, int(result.chips), float(result.tokens_per_s) * t, chip, **kw)
