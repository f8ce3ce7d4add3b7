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


def value_text(v) -> str:
    """A claim's or a record's value for a table: numbers as `num`, a range as 'low – high', None as ''."""
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, tuple)):
        return " – ".join(value_text(x) for x in v)
    return "" if v is None else str(v)


def gpus(n, chip: str) -> str:
    """A count of GPUs with its chip: gpus(8, 'h100-sxm') -> '8 x h100-sxm GPUs'. Titles count GPUs, never
    systems ('8 x hgx-h100' read as 64 GPUs)."""
    k = num(n)
    return f"{k} x {chip} GPU{'' if k == '1' else 's'}"


#: The words every throughput carries: what it is counted over.
PER = {"gpu": "per GPU", "replica": "per replica", "fleet": "per fleet", "user": "per user"}


def rate(value, unit: str, per: str, gpus_in: int | None = None) -> str:
    """A throughput with what it is counted over: rate(7999, 'tokens/s', 'replica', 16) ->
    '7,999 tokens/s per replica (16 GPUs)'."""
    where = PER[per]
    if gpus_in is not None and per in ("replica", "fleet"):
        where += f" ({num(gpus_in)} GPU{'' if num(gpus_in) == '1' else 's'})"
    return f"{num(value)} {unit} {where}"


def header(model: str, chip: str, n_gpus, layout: str | None, precision: str | None, kv_precision: str | None,
           engine: str | None, efficiency: str | None, *more: str, system: str | None = None) -> str:
    """The one line that opens every answer: model · GPUs and chip · layout · weight and KV precision · engine ·
    efficiency source (then what the answer adds: phase, batch, lengths). An unknown field says so, never drops."""
    where = gpus(n_gpus, chip) + (f" of {system}" if system and system != chip else "")
    parts = [model, where, f"layout {layout or 'n/a'}",
             f"{precision or 'checkpoint'} weights, {kv_precision or 'auto'} KV",
             f"engine {engine}" if engine else "no engine profile", f"efficiency {efficiency or 'n/a'}"]
    return " · ".join([*parts, *(m for m in more if m)])


def component_names(r) -> dict:
    """What each time field of `r` means, for a legend: on the layout view the step's ops by what binds each (they
    add up to the step with communication and overhead, as `chalk estimate` lists them); on the aggregate bound the
    lecture's roofline terms (eq. 1-3)."""
    if getattr(r, "view", None) == "layout":
        return {"compute": "compute-bound ops (GEMMs, attention)", "weight": "weight reads (memory-bound GEMMs)",
                "kv": "KV reads (memory-bound attention)", "memory": "memory-bound ops (weights + KV + activations)",
                "step": "step time = all ops + communication + overhead"}
    return {"compute": "compute (eq. 2)", "weight": "weight fetch (eq. 3)", "kv": "KV fetch (eq. 3)",
            "memory": "weights + KV", "step": "step time = max (eq. 1)" + ("" if r.efficiency == "ideal"
                                                                          else " + overhead")}
