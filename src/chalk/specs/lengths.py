"""Request-length distributions: a mean, a named family, or a file of measured lengths.

`parse_lengths` turns what a user types for --input-len / --output-len into a LengthDistribution:

    3790                                  constant (the mean, as before)
    constant:500
    lognormal:mean=3790,p99=15000         lognormal fitted to a mean and a tail quantile (p50 < pNN < p100)
    lognormal:mean=3790,median=2100       ... or to a mean and a median
    lognormal:mean=3790,sigma=0.7         ... or to a mean and its log-space spread
    uniform:min=100,max=900               integers min..max, equally likely
    path/to/lengths.csv                   measured lengths: one per line, or a CSV column; a header is fine

The math lives in chalk.equations.lengths; this module parses, validates and samples.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chalk.equations import lengths as E
from chalk.errors import InputError, UnknownNameError
from chalk.specs.files import MAX_TABLE_BYTES, read_bounded_text, shown
from chalk.specs.workload import MAX_QUANTITY, positive, short
from chalk.specs.workload import tokens as _tokens

FAMILIES = ("constant", "lognormal", "uniform")
#: Widest lognormal spread taken: past it exp(sigma^2), a factor of the second moment, overflows float64 (26.6),
#: and the median sits below 1e-150 tokens for any mean a length may have: no served lengths look like that.
MAX_SIGMA = 26.0
_QUANTILE_KEY = re.compile(r"^p(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class LengthDistribution:
    """Token lengths of requests. `kind`: 'constant' | 'lognormal' | 'uniform' | 'empirical'.

    Fields beyond kind/mean/label hold the family's parameters: `sigma` (lognormal log-space
    spread), `low`/`high` (uniform bounds), `values` (empirical lengths, read-only array).
    """

    kind: str
    mean: float
    label: str
    sigma: float = 0.0
    low: int = 0
    high: int = 0
    values: np.ndarray | None = field(default=None, compare=False, repr=False)

    # -------------------------------------------------------------- moments
    @property
    def mu(self) -> float:
        """Lognormal log-space location (ln of the median); ln(mean) for the other families."""
        return float(E.lognormal_mu(self.mean, self.sigma)) if self.kind == "lognormal" else math.log(self.mean)

    @property
    def second_moment(self) -> float:
        """E[L^2] in tokens^2: what holding KV for long requests costs (see equations.lengths)."""
        if self.kind == "lognormal":
            return float(E.lognormal_second_moment(self.mean, self.sigma))
        if self.kind == "uniform":
            return float(E.discrete_uniform_second_moment(self.low, self.high))
        if self.kind == "empirical":
            return float(np.mean(self.values * self.values))
        return self.mean * self.mean

    mean_square = second_moment

    def clipped_moments(self, cap: float) -> tuple[float, float]:
        """(E[min(L, cap)], E[min(L, cap)^2]) in tokens and tokens^2: the lengths as served where nothing runs past
        `cap` (a model's context). A lognormal's tail past the context would otherwise dominate its second moment
        (mean 200, sigma 3: E[L^2] / (2 E[L]), the output a slot holds, is 810,000 tokens uncut, 16,000 cut at
        131,072)."""
        c = float(cap)
        if not c > 0:
            raise InputError(f"length cap must be > 0, got {cap!r}")
        if self.kind == "lognormal":
            m1, m2 = E.lognormal_clipped_moments(self.mean, self.sigma, c)
            if not (m1 > 0 and m2 > 0 and math.isfinite(m2)):  # the mean lives in a tail the cut removes: served,
                # the requests average no measurable length, and E[L^2] / (2 E[L]) divides by zero (QA: sigma 20)
                raise InputError(f"{self.label}: cut at {c:,.0f} tokens (what fits in the model's context) its "
                                 f"lengths average {float(m1):.3g} tokens, as its median is {self.median:.3g}; its "
                                 "mean lies in a tail past the context: give a smaller sigma or a larger median")
            return float(m1), float(m2)
        if self.kind == "empirical":
            v = np.minimum(np.asarray(self.values, dtype=float), c)
            return float(np.mean(v)), float(np.mean(v * v))
        if self.kind == "uniform":
            if self.high <= c:
                return self.mean, self.second_moment
            n, k = self.high - self.low + 1.0, math.floor(c) + 1  # low..k-1 as drawn, every draw from k on as c
            below = max(k - self.low, 0)
            s1 = below * (self.low + k - 1) / 2.0
            s2 = (float(E.discrete_uniform_second_moment(self.low, k - 1)) * below) if below else 0.0
            rest = n - below
            return (s1 + rest * c) / n, (s2 + rest * c * c) / n
        lone = min(self.mean, c)
        return lone, lone * lone

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)

    @property
    def mean_held(self) -> float:
        """Tokens of its own a request holds on average over its life in a closed loop: E[L^2] / (2 E[L])."""
        return float(E.mean_held_output_tokens(self.mean, self.second_moment))

    # -------------------------------------------------------------- quantiles and samples
    def quantile(self, q) -> float:
        """The q-quantile in tokens (q in [0, 1])."""
        qf = float(q)
        if not 0.0 <= qf <= 1.0:
            raise InputError(f"quantile must be in [0, 1], got {q!r}")
        if self.kind == "lognormal":
            if qf in (0.0, 1.0):
                return 0.0 if qf == 0.0 else math.inf
            return float(E.lognormal_quantile(self.mu, self.sigma, qf))
        if self.kind == "uniform":
            return float(self.low + qf * (self.high - self.low))
        if self.kind == "empirical":
            return float(np.quantile(self.values, qf))
        return self.mean

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n lengths as positive integers (>= 1), drawn with `rng`."""
        n = int(n)
        if n < 0:
            raise InputError(f"sample size must be >= 0, got {n}")
        if self.kind == "lognormal":
            x = rng.lognormal(self.mu, self.sigma, n)
        elif self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, n, dtype=np.int64)
        elif self.kind == "empirical":
            x = rng.choice(self.values, n, replace=True)
        else:
            x = np.full(n, self.mean)
        return np.maximum(np.rint(x), 1).astype(np.int64)


# ------------------------------------------------------------------ constructors
def constant(mean: float, label: str | None = None) -> LengthDistribution:
    m = _positive("length", mean, tokens=True)
    return LengthDistribution("constant", m, label or f"{m:g}")


def lognormal(mean: float, *, sigma: float | None = None, p99: float | None = None,
              quantile: tuple[float, float] | None = None, median: float | None = None,
              label: str | None = None) -> LengthDistribution:
    """Lognormal with the given mean and exactly one of sigma, p99, (q, value) or median."""
    m = _positive("lognormal mean", mean, tokens=True)
    given = [k for k, v in (("sigma", sigma), ("p99", p99), ("quantile", quantile), ("median", median))
             if v is not None]
    if len(given) != 1:
        raise InputError("lognormal needs the mean and exactly one of sigma, median or a quantile "
                         f"such as p99 (got {', '.join(given) or 'none'})")
    if sigma is not None:
        try:
            s = float(sigma)
        except (TypeError, ValueError, OverflowError):
            s = math.nan
        if not math.isfinite(s) or s < 0:
            raise InputError(f"lognormal sigma must be finite and >= 0, got {short(sigma)}")
        if s > MAX_SIGMA:
            raise InputError(f"lognormal sigma must be at most {MAX_SIGMA:g}, got {short(sigma)}")
        s = abs(s)  # -0.0 passes s >= 0 but numpy's sampler refuses it ('sigma < 0')
        shape = f"sigma={s:g}"
    elif median is not None:
        med = _positive("lognormal median", median)
        if med > m:
            raise InputError(f"lognormal median ({med:g}) must not exceed the mean ({m:g})")
        s, shape = float(E.lognormal_sigma_from_mean_median(m, med)), f"median={med:g}"
        if not s <= MAX_SIGMA:
            raise InputError(f"lognormal median {med:.3g} is too far below the mean {m:g}: its sigma "
                             f"{s:.3g} is past {MAX_SIGMA:g}")
    else:
        q, x = (0.99, p99) if p99 is not None else quantile
        x = _positive(f"lognormal p{q * 100:g}", x)
        if not 0.5 < q < 1.0:
            raise InputError(f"a lognormal tail quantile must lie between p50 and p100, got p{q * 100:g}")
        if x <= m:
            raise InputError(f"lognormal p{q * 100:g} ({x:g}) must exceed the mean ({m:g})")
        cap = E.lognormal_max_quantile_ratio(q)
        if x / m > cap:
            raise InputError(f"no lognormal has p{q * 100:g} / mean = {x / m:.3g} (at most {cap:.3g}); "
                             "give a file of lengths instead")
        s, shape = float(E.lognormal_sigma_from_mean_quantile(m, x, q)), f"p{q * 100:g}={x:g}"
    return LengthDistribution("lognormal", m, label or f"lognormal(mean={m:g}, {shape})", sigma=s)


def uniform(low: float, high: float, label: str | None = None) -> LengthDistribution:
    lo, hi = _positive("uniform min", low, tokens=True), _positive("uniform max", high, tokens=True)
    if lo != int(lo) or hi != int(hi):
        raise InputError(f"uniform bounds must be whole token counts, got min={low!r}, max={high!r}")
    if hi < lo:
        raise InputError(f"uniform max ({hi:g}) must be >= min ({lo:g})")
    return LengthDistribution("uniform", (lo + hi) / 2.0, label or f"uniform({lo:g}..{hi:g})",
                              low=int(lo), high=int(hi))


def empirical(values, label: str = "empirical") -> LengthDistribution:
    a = np.asarray(values, dtype=float).ravel()
    if a.size == 0:
        raise InputError(f"{label}: no lengths")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise InputError(f"{label}: lengths must be finite and positive")
    a = a.copy()
    a.setflags(write=False)
    return LengthDistribution("empirical", float(a.mean()), f"{label} (n={a.size}, mean {a.mean():.0f})",
                              values=a)


# ------------------------------------------------------------------ parsing
def parse_lengths(spec, *, column: str | None = None) -> LengthDistribution:
    """A LengthDistribution from a number, a 'family:key=value,...' string, or a path to a file.

    `column` picks the column of a multi-column CSV (by header name). Raises InputError on a
    malformed spec or file and UnknownNameError on an unknown family, each with a one-line message.
    """
    if isinstance(spec, LengthDistribution):
        return spec
    if isinstance(spec, bool) or spec is None:
        raise InputError(f"a length must be a number, a distribution or a file, got {spec!r}")
    if isinstance(spec, (int, float, np.integer, np.floating)):
        return constant(spec)
    if isinstance(spec, os.PathLike):
        return read_lengths_file(spec, column=column)
    if not isinstance(spec, str):
        raise InputError(f"a length must be a number, a distribution or a file, got {spec!r}")
    text = spec.strip()
    if not text:
        raise InputError("empty length spec")
    try:
        return constant(float(text), label=text)
    except ValueError:
        pass
    # FILE:COLUMN names a column of a multi-column CSV from the command line (QA 2026-11-28: the error asked for a
    # column name no flag could give)
    path, sep_c, col = text.rpartition(":")
    named = bool(sep_c and col.strip() and "=" not in col and not Path(text).exists() and Path(path).is_file())
    fam, sep, rest = text.partition(":")
    if sep and re.fullmatch(r"[A-Za-z_]+", fam.strip()) and not Path(text).exists() and not named:
        return _parse_family(fam.strip().lower(), rest, text)
    if named:
        if column is not None and column != col.strip():
            raise InputError(f"lengths {text!r} names column {col.strip()!r} and column {column!r}: give one")
        return read_lengths_file(path, column=col.strip())
    return read_lengths_file(text, column=column)


def _parse_family(fam: str, rest: str, text: str) -> LengthDistribution:
    if fam not in FAMILIES:
        raise UnknownNameError("length distribution", fam, FAMILIES)
    if fam == "constant" and "=" not in rest:
        return constant(_number(text, "value", rest), label=text)
    kv = {}
    for part in (p for p in rest.split(",") if p.strip()):
        key, eq, val = part.partition("=")
        key = key.strip().lower()
        if not eq or not key:
            raise InputError(f"malformed length spec {text!r}: expected key=value, got {part.strip()!r}")
        if key in kv:
            raise InputError(f"malformed length spec {text!r}: {key} given twice")
        kv[key] = _number(text, key, val)
    if fam == "constant":
        return constant(_take(kv, text, "mean", required=True), label=text)
    if fam == "uniform":
        lo, hi = _take(kv, text, "min", required=True), _take(kv, text, "max", required=True)
        _no_extra(kv, text)
        return uniform(lo, hi)
    mean = _take(kv, text, "mean", required=True)
    sigma, median = _take(kv, text, "sigma"), _take(kv, text, "median")
    quant = None
    for key in list(kv):
        m = _QUANTILE_KEY.match(key)
        if m:
            if quant is not None:
                raise InputError(f"malformed length spec {text!r}: give one quantile, not several")
            quant = (float(m.group(1)) / 100.0, kv.pop(key))
    _no_extra(kv, text)
    return lognormal(mean, sigma=sigma, median=median, quantile=quant)


def _number(text: str, key: str, val: str) -> float:
    try:
        x = float(val.strip())
    except ValueError:
        raise InputError(f"malformed length spec {text!r}: {key} must be a number, got {val.strip()!r}") \
            from None
    if not math.isfinite(x):
        raise InputError(f"malformed length spec {text!r}: {key} must be finite")
    return x


def _take(kv: dict, text: str, key: str, required: bool = False):
    if key not in kv:
        if required:
            raise InputError(f"malformed length spec {text!r}: missing {key}=")
        return None
    return kv.pop(key)


def _no_extra(kv: dict, text: str) -> None:
    if kv:
        raise InputError(f"malformed length spec {text!r}: unknown key(s) {', '.join(sorted(kv))}")


def read_lengths_file(path, *, column: str | None = None) -> LengthDistribution:
    """Lengths from a text file: one number per line, or a CSV whose column is named by `column`
    (a single-column CSV needs no name). A first line that is not a number is a header."""
    p = Path(path)
    if not os.path.lexists(p):
        raise InputError(f"lengths file {shown(path)!r} not found (nor is it a number or "
                         f"'family:key=value' distribution)")
    raw = read_bounded_text(p, f"lengths file {shown(path)!r}", MAX_TABLE_BYTES, what="a lengths file",
                            error=InputError)
    try:  # a field past csv's limit (131,072 characters) is one line, as the trace and --diurnal readers say it
        rows = [r for r in csv.reader(io.StringIO(raw)) if any(c.strip() for c in r)]
    except csv.Error as e:
        raise InputError(f"lengths file {p.name!r}: malformed CSV ({e})") from None
    if not rows:
        raise InputError(f"lengths file {p.name!r} is empty")
    header = None
    if not _is_number(rows[0][0]) or (column is not None and not all(_is_number(c) for c in rows[0])):
        header, rows = [c.strip() for c in rows[0]], rows[1:]
    if not rows:
        raise InputError(f"lengths file {p.name!r} has a header but no lengths")
    width = max(len(r) for r in rows)
    if column is not None:
        if header is None or column not in header:
            raise InputError(f"lengths file {p.name!r} has no column {column!r}"
                             + (f" (columns: {', '.join(header)})" if header else " (no header)"))
        idx = header.index(column)
    elif width == 1:
        idx = 0
    else:
        names = f" (columns: {', '.join(header)})" if header else ""
        raise InputError(f"lengths file {p.name!r} has {width} columns; name one as {p.name}:COLUMN{names}")
    values = []
    first_line = 2 if header is not None else 1
    for i, r in enumerate(rows):
        cell = r[idx].strip() if idx < len(r) else ""
        if not _is_number(cell):
            raise InputError(f"lengths file {p.name!r}: row {i + first_line} is not a number: {cell!r}")
        x = float(cell)
        if not math.isfinite(x) or x <= 0:
            raise InputError(f"lengths file {p.name!r}: row {i + first_line} must be a positive length, "
                             f"got {short(cell)}")
        values.append(_tokens(f"lengths file {p.name!r}: row {i + first_line}", x))  # as a plain --input-len
    return empirical(values, label=p.name)


def _is_number(s: str) -> bool:
    try:
        float(s.strip())
        return True
    except ValueError:
        return False


def _positive(name: str, value, *, tokens: bool = False) -> float:
    """A positive length parameter at most MAX_QUANTITY, as a plain --input-len is (past 2^63 numpy draws no
    integers; past 1e15 a product of lengths leaves float64); `tokens`: a length itself (a mean, a bound), so at
    least one token too, as --input-len 0.5 is refused. A median or a tail quantile may sit below one token."""
    if type(value) is not int:  # a Python int past float's range is positive()'s to judge: 'at most', no overflow
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise InputError(f"{name} must be a number, got {short(value)}") from None
    return _tokens(name, value) if tokens else float(positive(name, value, maximum=MAX_QUANTITY, scalar=True))
