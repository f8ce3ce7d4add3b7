"""What is asked of a deployment: batch, context, phase, precisions; validated on the way in."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chalk.errors import InputError
from chalk.specs.precision import canonical


def positive(name: str, value, *, integer: bool = False, allow_zero: bool = False):
    """Validate a scalar or array of physical quantities: finite and > 0 (or >= 0)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise InputError(f"{name} must be a number, got {value!r}")
    a = arr.astype(float)
    if not np.all(np.isfinite(a)):
        raise InputError(f"{name} must be finite, got {value!r}")
    if np.any(a < 0) or (not allow_zero and np.any(a == 0)):
        raise InputError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    if integer and np.any(a != np.floor(a)):
        raise InputError(f"{name} must be a whole number, got {value!r}")
    return value if arr.ndim else (int(a) if integer else float(a))


def fraction(name: str, value: float) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0 or v > 1:
        raise InputError(f"{name} must be in (0, 1], got {value!r}")
    return v


@dataclass(frozen=True)
class Workload:
    """One roofline question: `batch` sequences at `context` tokens (prompt length for prefill).

    batch and context may be numpy arrays (a grid). Validation lives here, once, for every analysis;
    precision None means the checkpoint's own precision.
    """

    batch: float
    context: float
    phase: str = "decode"
    precision: str | None = None
    kv_precision: str = "bf16"

    def __post_init__(self):
        object.__setattr__(self, "batch", positive("batch", self.batch))
        object.__setattr__(self, "context", positive("context", self.context))
        if self.phase not in ("decode", "prefill"):
            raise InputError(f"phase must be 'decode' or 'prefill', got {self.phase!r}")
        if self.precision is not None:
            object.__setattr__(self, "precision", canonical(self.precision))
        object.__setattr__(self, "kv_precision", canonical(self.kv_precision))
