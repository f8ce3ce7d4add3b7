"""What a plan is asked to serve: demand (users in flight or requests per second), latency targets, a 24-hour
demand curve, price overrides and the candidate chips; validated on the way in."""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chalk.errors import InputError
from chalk.specs.files import read_bounded_text
from chalk.specs.workload import short

#: Most concurrent users / requests per second a plan takes (beyond: GPU counts lose their meaning).
MAX_USERS = 1e9
MAX_RATE = 1e8
#: Slowest arrival rate: a simulated day of arrivals stays inside the simulator's clock.
MIN_RATE = 1e-3
#: Longest latency target one can ask for (a day): beyond it a target means nothing.
MAX_TARGET_S = 86400.0


def _number(name: str, value, *, lo: float = 0.0, hi: float = math.inf, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number, got {short(value)}")
    v = float(value)
    if not math.isfinite(v) or v <= lo:
        raise InputError(f"{name} must be a positive number, got {short(value)}")
    if v > hi:
        raise InputError(f"{name} must be at most {hi:g}, got {short(value)}")
    if integer and v != int(v):
        raise InputError(f"{name} must be a whole number, got {short(value)}")
    return v


@dataclass(frozen=True)
class Demand:
    """`users` requests in flight (concurrent users, each with one request), or `rate` requests per second.

    Latency targets (None: none): `ttft_p99_s`, `tpot_p99_s`; `min_user_tps` asks every user but one in a
    hundred for at least that many output tokens per second, i.e. p99 TPOT <= 1 / min_user_tps.
    """

    users: float | None = None
    rate: float | None = None
    min_user_tps: float | None = None
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None

    def __post_init__(self):
        if (self.users is None) == (self.rate is None):
            raise InputError("give the demand as --users N (concurrent users) or --rate R (requests/s), "
                             "one of the two")
        if self.users is not None:
            v = _number("users", self.users, hi=MAX_USERS, integer=True)
            if v < 1:
                raise InputError(f"users must be at least 1, got {short(self.users)}")
            object.__setattr__(self, "users", v)
        else:
            v = _number("rate", self.rate, hi=MAX_RATE)
            if v < MIN_RATE:
                raise InputError(f"rate must be at least {MIN_RATE:g} requests/s, got {short(self.rate)}")
            object.__setattr__(self, "rate", v)
        if self.min_user_tps is not None:
            object.__setattr__(self, "min_user_tps", _number("min_user_tps", self.min_user_tps, hi=1e7))
        for k in ("ttft_p99_s", "tpot_p99_s"):
            if getattr(self, k) is not None:
                object.__setattr__(self, k, _number(k, getattr(self, k), hi=MAX_TARGET_S))

    @property
    def kind(self) -> str:
        return "users" if self.users is not None else "rate"

    @property
    def value(self) -> float:
        return float(self.users if self.users is not None else self.rate)

    @property
    def unit(self) -> str:
        return "users in flight" if self.users is not None else "requests/s"

    @property
    def tpot_target_s(self) -> float | None:
        """The p99 TPOT to meet: the stricter of --tpot-p99 and 1 / --min-user-tps."""
        ts = [t for t in (self.tpot_p99_s, None if self.min_user_tps is None else 1.0 / self.min_user_tps)
              if t is not None]
        return min(ts) if ts else None

    def scaled(self, factor: float) -> Demand:
        """The same demand times `factor` (> 0), targets unchanged."""
        f = float(factor)
        return Demand(users=None if self.users is None else max(math.ceil(self.users * f - 1e-9), 1),
                      rate=None if self.rate is None else max(self.rate * f, MIN_RATE),
                      min_user_tps=self.min_user_tps, ttft_p99_s=self.ttft_p99_s, tpot_p99_s=self.tpot_p99_s)


# --------------------------------------------------------------------------- the 24-hour demand curve
def read_diurnal(source) -> np.ndarray:
    """24 hourly demand multipliers from a CSV file (one per line, or `hour,multiplier` rows; a header line
    is fine), or from a sequence of 24 numbers. Exactly 24, finite, >= 0, not all zero."""
    where = "diurnal curve"
    if isinstance(source, (str, Path)):
        where = f"diurnal file {str(source)!r}"
        values = _diurnal_file(Path(source), where)
    else:
        try:
            values = [float(v) for v in source]
        except (TypeError, ValueError):
            raise InputError(f"{where} must be 24 numbers, got {short(source)}") from None
        except OverflowError:  # an integer past float's range (10**400): past the 1e6 cap below, said so
            raise InputError(f"{where}: multipliers must be at most 1e6, got an integer past float's range") from None
    m = np.asarray(values, dtype=float)
    if m.size != 24:
        raise InputError(f"{where}: expected 24 hourly multipliers, got {m.size}")
    if not np.all(np.isfinite(m)):
        raise InputError(f"{where}: multipliers must be finite numbers")
    if np.any(m < 0):
        raise InputError(f"{where}: multipliers must be >= 0, got {float(m.min()):g} at hour {int(np.argmin(m))}")
    if not np.any(m > 0):
        raise InputError(f"{where}: every multiplier is zero: no demand to plan for")
    if m.max() > 1e6:
        raise InputError(f"{where}: multipliers must be at most 1e6, got {float(m.max()):g}")
    return m


def _diurnal_file(path: Path, where: str) -> list[float]:
    text = read_bounded_text(path, where, 1_000_000, what="a diurnal curve (24 lines)", error=InputError)
    try:
        rows = [r for r in csv.reader(text.splitlines()) if any(c.strip() for c in r)]
    except csv.Error as e:
        raise InputError(f"{where}: malformed CSV ({e})") from None
    rows = [r for r in rows if not r[0].strip().startswith("#")]
    if rows and not _all_numbers(rows[0]):
        rows = rows[1:]  # a header
    if not rows:
        raise InputError(f"{where}: no multipliers (expected 24 lines)")
    width = {len(r) for r in rows}
    if width not in ({1}, {2}):
        raise InputError(f"{where}: expected one multiplier per line or hour,multiplier rows")
    out = []
    for n, r in enumerate(rows, 1):
        if not _all_numbers(r):
            raise InputError(f"{where}: row {n} is not numbers: {short(','.join(r), 40)}")
        out.append([float(c) for c in r])
    if width == {1}:
        return [r[0] for r in out]
    hours = [r[0] for r in out]
    if sorted(hours) != list(range(24)) and sorted(hours) != list(range(1, 25)):
        raise InputError(f"{where}: the hour column must hold each of 0..23 (or 1..24) once")
    return [r[1] for r in sorted(out)]


def _all_numbers(row) -> bool:
    try:
        [float(c) for c in row]
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- prices and candidates
def parse_prices(prices) -> dict[str, float]:
    """Price overrides: {'h100-sxm': 2.5} or 'h100-sxm=2.5,h200=3.1' (or a list of such items) -> {chip id: $/h}.

    Keys are resolved to catalog chip ids (an alias or a system names its chip); each price must be > 0."""
    from chalk.specs.catalog import resolve_hardware

    if prices is None:
        return {}
    if isinstance(prices, dict):
        items = list(prices.items())
    else:
        parts = [prices] if isinstance(prices, str) else list(prices)
        items = []
        for p in (x for s in parts for x in str(s).split(",")):
            if not p.strip():
                raise InputError(f"--price has an empty item in {short(','.join(map(str, parts)))}")
            if "=" not in p:
                raise InputError(f"--price must be CHIP=USD_PER_HOUR (e.g. h100-sxm=2.5), got {short(p)}")
            k, v = p.split("=", 1)
            try:
                items.append((k.strip(), float(v.replace("$", "").strip())))
            except ValueError:
                raise InputError(f"--price {short(p)}: the price must be a number of $ per GPU-hour") from None
    out, given = {}, {}
    for k, v in items:
        ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        if not ok or not math.isfinite(float(v)) or not 0 < float(v) <= 1e6:
            raise InputError(f"price of {short(k, 40)} must be a number of $ per GPU-hour in (0, 1e6], got {short(v)}")
        chip = resolve_hardware(str(k)).chip.id
        if chip in out:  # a chip priced twice, by any spelling: which one is meant is not for chalk to guess
            raise InputError(f"--price gives {chip} two prices ({given[chip]} and {short(k, 40)}={short(v)})")
        out[chip], given[chip] = float(v), f"{short(k, 40)}={short(v)}"
    return out


def priced_chips() -> list[str]:
    """Every catalog chip with a price: the default candidates of a plan."""
    from chalk.specs.catalog import chip_ids, load_chip

    return [c for c in chip_ids() if load_chip(c).price_usd_per_hour > 0]


def candidate_list(hardware) -> list:
    """`-H` as a list: a comma-separated string, a path to a system YAML, a list of names, paths or Systems, or
    None (every priced catalog chip)."""
    if hardware is None:
        return priced_chips()
    if isinstance(hardware, str):
        items = [h.strip() for h in hardware.split(",")]
    elif isinstance(hardware, os.PathLike) or hasattr(hardware, "chip"):  # one path or System, as estimate takes
        items = [hardware]
    else:
        items = list(hardware)
    names = [str(getattr(h, "id", h)).strip() for h in items]
    if not names or any(not n for n in names):
        raise InputError(f"hardware list has an empty name: {short(hardware)}")
    same_hardware_twice(items, hardware)
    return items


def same_hardware_twice(items, given) -> None:
    """Refuse a hardware list that names one system twice, by any spelling: `h100-sxm,hgx-h100` (a chip and its
    default system), an alias and its id, a YAML file and its catalog twin are one candidate, not two."""
    from chalk.specs.catalog import resolve_hardware

    seen: dict = {}
    for h in items:
        name = str(getattr(h, "id", h)).strip()
        s = h if hasattr(h, "chip") else resolve_hardware(name)
        key = (s.id, s.chip.id, s.chips)
        if key in seen:
            same = f"'{seen[key]}' and '{name}' are" if seen[key] != name else f"'{name}' is"
            raise InputError(f"hardware list names one system twice: {same} both {s.id} "
                             f"({s.chips} x {s.chip.id}) in {short(given)}")
        seen[key] = name
