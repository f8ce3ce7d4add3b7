"""Number formatting with units, on the way out: one module the CLI, the plots, the report and the web explorer
all use (it imports nothing from `faces`, so no face depends on another to print a number)."""

from __future__ import annotations

import math

_SI = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def si(value, unit: str = "", digits: int = 3) -> str:
    """Format with a decimal SI prefix: si(3.35e12, 'B/s') -> '3.35 TB/s'."""
    if value is None:
        return "n/a"
    v = float(value)
    if not math.isfinite(v):
        return "n/a" if math.isnan(v) else "inf"
    for scale, prefix in _SI:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}g} {prefix}{unit}".strip()
    return f"{v:.{digits}g} {unit}".strip()


def seconds(value) -> str:
    if value is None:
        return "n/a"
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a == 0:
        return "0 s"
    if a < 1e-6:
        return f"{v * 1e9:.3g} ns"
    if a < 1e-3:
        return f"{v * 1e6:.3g} µs"
    if a < 1:
        return f"{v * 1e3:.3g} ms"
    if a < 100:
        return f"{v:.3g} s"
    if a < 3600:  # never "1.53e+03 s": minutes, with the seconds beside them
        return f"{v / 60:.3g} min ({v:,.0f} s)"
    if a < 86400 * 2:
        return f"{v / 3600:.3g} h"
    return f"{v / 86400:,.3g} days" if a < 86400 * 1000 else f"{v / 86400:,.0f} days"


def usd(value) -> str:
    if value is None:
        return "n/a"
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    if abs(v) >= 1e6:
        return f"${v / 1e6:.3g}M"
    if abs(v) >= 100:
        return f"${v:,.0f}"
    return f"${v:.3g}"


def pct(value) -> str:
    return "n/a" if value is None or not math.isfinite(float(value)) else f"{100 * float(value):.1f}%"


def num(value, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.{digits}g}"
