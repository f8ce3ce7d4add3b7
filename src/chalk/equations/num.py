"""Elementwise helpers that take numbers or numpy arrays, as numpy's do, without numpy's per-call cost when every
argument is a plain float (one question answered at a time: a numpy call on 0-d values costs ~1 us, the plain
comparison ~50 ns). Results are numpy's: `maximum` and `minimum` propagate NaN, `where` picks elementwise."""

from __future__ import annotations

import numpy as np


def flt(x):
    """`np.asarray(x, dtype=float)`, a plain float passed through."""
    return x if type(x) is float else np.asarray(x, dtype=float)


def maximum(a, b):
    """`np.maximum(a, b)`."""
    if type(a) is float and type(b) is float:
        return a if a >= b or a != a else b
    return np.maximum(a, b)


def minimum(a, b):
    """`np.minimum(a, b)`."""
    if type(a) is float and type(b) is float:
        return a if a <= b or a != a else b
    return np.minimum(a, b)


def where(cond, a, b):
    """`np.where(cond, a, b)`; one of `a`, `b` itself when `cond` is a plain bool and both are plain numbers or
    strings."""
    if type(cond) is bool and type(a) in _PLAIN and type(b) in _PLAIN:
        return a if cond else b
    return np.where(cond, a, b)


_PLAIN = (float, str)
