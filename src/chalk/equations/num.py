"""Numbers or numpy arrays, as numpy takes them, without numpy's per-call cost when the arguments are numbers.

One question answered at a time (`chalk.Session.estimate(64, 4096)`) runs the same formulas as a grid of them; a
numpy function on 0-d values costs about a microsecond, a comparison of two floats some tens of nanoseconds. So
numbers travel as numpy float64 scalars (`flt`): their arithmetic is numpy's (a division by zero gives inf or nan,
not an exception), and `maximum`, `minimum` and `where` pick between two of them without a ufunc. Arrays go to
numpy unchanged; the answers are numpy's either way (NaN propagates through `maximum` and `minimum`).
"""

from __future__ import annotations

import numpy as np

_F64 = np.float64
_BOOL = (bool, np.bool_)
_PLAIN = (float, str)  # numpy float64 is a float
_ZERO, _ONE = _F64(0.0), _F64(1.0)  # numpy scalars are immutable: one of each serves every caller


def flt(x):
    """`np.asarray(x, dtype=float)`, except that a number (or a 0-d array) comes back as a numpy float64 scalar."""
    t = type(x)
    if t is _F64:
        return x
    if t is float or t is int:
        return _F64(x)
    a = np.asarray(x, dtype=float)
    return a if a.ndim else a[()]


def maximum(a, b):
    """`np.maximum(a, b)`."""
    if isinstance(a, float) and isinstance(b, float):
        return a if a >= b or a != a else b
    return np.maximum(a, b)


def minimum(a, b):
    """`np.minimum(a, b)`."""
    if isinstance(a, float) and isinstance(b, float):
        return a if a <= b or a != a else b
    return np.minimum(a, b)


def where(cond, a, b):
    """`np.where(cond, a, b)`: `a` or `b` itself when `cond` is one bool and both are numbers or strings."""
    if type(cond) in _BOOL and isinstance(a, _PLAIN) and isinstance(b, _PLAIN):
        return a if cond else b
    return np.where(cond, a, b)


def zeros_like(x):
    """`np.zeros_like(x)` of a float array; 0.0 (a numpy float64) for a number."""
    return np.zeros_like(x) if isinstance(x, np.ndarray) else _ZERO


def ones_like(x):
    """`np.ones_like(x)` of a float array; 1.0 (a numpy float64) for a number."""
    return np.ones_like(x) if isinstance(x, np.ndarray) else _ONE


def every(cond) -> bool:
    """`bool(np.all(cond))`."""
    return bool(cond) if type(cond) in _BOOL else bool(np.all(cond))


def some(cond) -> bool:
    """`bool(np.any(cond))`."""
    return bool(cond) if type(cond) in _BOOL else bool(np.any(cond))
