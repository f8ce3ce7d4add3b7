"""What is asked of a deployment: batch, context, phase, precisions; validated on the way in."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chalk.errors import FitError, InputError
from chalk.specs.precision import canonical


#: Largest magnitude a physical input may take (a batch, a context, a token count, a FLOP rate ...).
#: Products of a few such inputs stay finite in float64, so nothing downstream overflows to inf.
MAX_QUANTITY = 1e15

#: Most points one sweep evaluates (batches x contexts): each becomes a table row.
MAX_GRID_POINTS = 100_000

#: Most GPUs (chips) one deployment or training run may hold: layouts are enumerated over their divisors.
MAX_GPUS = 10_000_000


#: The units a duration may carry, longest match first ('500ms', '200us', '2s', '1min'; bare numbers are seconds).
DURATION_UNITS = (("ms", 1e-3), ("us", 1e-6), ("\u00b5s", 1e-6), ("min", 60.0), ("s", 1.0))


def duration_s(value, name: str) -> float:
    """A duration in seconds from a number or text with a unit (DURATION_UNITS): one reading for every time a user
    gives, on the command line or in a file. Its range is the caller's to check, in that quantity's own words."""
    text, scale = str(value).strip().lower(), 1.0
    for suffix, f in DURATION_UNITS:
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)].strip(), f
            break
    try:
        return float(text) * scale
    except ValueError:
        raise InputError(f"{name} must be a duration in seconds (0.5) or with a unit (500ms, 2s), "
                         f"got {str(value)[:40]!r}") from None


def positive(name: str, value, *, integer: bool = False, allow_zero: bool = False, maximum: float = MAX_QUANTITY,
             scalar: bool = False):
    """Validate a scalar or array of physical quantities: finite, > 0 (or >= 0) and <= `maximum`. `scalar`: one
    number, not a list or an array."""
    t = type(value)
    if t is int and not -2**63 <= value < 2**63:  # beyond int64: numpy holds it as an object and float() may overflow
        if value < 0:
            raise InputError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {short(value)}")
        if value > maximum:
            raise InputError(f"{name} must be at most {_limit(maximum)}, got {short(value)}")
        return value if integer else float(value)
    if t is float or t is int or t is np.float64:  # one plain number inside the bounds: no array needed
        v = float(value)
        if (v > 0 or (allow_zero and v == 0)) and v <= maximum and (not integer or v == math.floor(v)):
            return int(v) if integer else v
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        arr = np.asarray(None)
    if scalar and arr.ndim != 0:
        raise InputError(f"{name} must be one number, got {short(value)}")
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise InputError(f"{name} must be a number, got {short(value)}")
    with np.errstate(all="ignore"):
        a = arr.astype(float)
    if not np.all(np.isfinite(a)):
        raise InputError(f"{name} must be finite, got {short(value)}")
    if np.any(a < 0) or (not allow_zero and np.any(a == 0)):
        raise InputError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {short(value)}")
    if np.any(a > maximum):
        raise InputError(f"{name} must be at most {_limit(maximum)}, got {short(value)}")
    if integer and np.any(a != np.floor(a)):
        raise InputError(f"{name} must be a whole number, got {short(value)}")
    return value if arr.ndim else (int(a) if integer else float(a))


def _limit(maximum: float) -> str:
    return f"{maximum:,.0f}" if maximum <= 1e15 and maximum == int(maximum) else f"{maximum:g}"


def count(name: str, value, maximum: float = MAX_QUANTITY) -> int:
    """A positive whole number (GPUs, stages, requests, ...) no larger than `maximum`."""
    return int(positive(name, value, integer=True, maximum=maximum, scalar=True))


def tokens(name: str, value) -> float:
    """A token count (a length or a mean length): finite, at least one token, at most MAX_QUANTITY."""
    v = float(positive(name, value, scalar=True))
    if v < 1:
        raise InputError(f"{name} must be at least 1 token, got {short(value)}")
    return v


def fraction(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number in (0, 1], got {short(value)}") from None
    if not math.isfinite(v) or v <= 0 or v > 1:
        raise InputError(f"{name} must be in (0, 1], got {short(value)}")
    return v


def short(value, limit: int = 60) -> str:
    """A value's repr cut to `limit` characters, so that an error naming it stays one short line."""
    if isinstance(value, np.ndarray) and value.size > 6:
        try:
            with np.errstate(all="ignore"):
                return f"an array of {value.size} values from {np.min(value):g} to {np.max(value):g}"
        except (TypeError, ValueError):
            return f"an array of {value.size} values"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


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
        if np.any(np.asarray(self.context) < 1):  # a context of half a token was answered (QA 2026-11-28)
            raise InputError(f"context must be at least 1 token, got {short(self.context)}")
        try:  # a grid's axes broadcast together: numpy's own ValueError was no ChalkError (QA 2026-11-28)
            np.broadcast(np.asarray(self.batch), np.asarray(self.context))
        except ValueError:
            raise InputError(f"batch (shape {np.shape(self.batch)}) and context (shape {np.shape(self.context)}) do "
                             "not broadcast together: give arrays of one shape, or one of them a number") from None
        if self.phase not in ("decode", "prefill"):
            raise InputError(f"phase must be 'decode' or 'prefill', got {self.phase!r}")
        if self.precision is not None:
            object.__setattr__(self, "precision", canonical(self.precision))
        object.__setattr__(self, "kv_precision", canonical(self.kv_precision))


SPARSE_LAWS = (None, "sqrt")


def sparse_law_name(sparse_law):
    """None (each model's own attention) or 'sqrt' (the lecture's square-root law)."""
    if sparse_law not in SPARSE_LAWS:
        raise InputError(f"sparse_law must be 'sqrt' or None, got {short(sparse_law)}")
    return sparse_law


def context_note(model, context, *, strict_fit: bool = False) -> list[str]:
    """A note when `context` (a number or an array) runs past the model's max_position_embeddings;
    a FitError instead with `strict_fit`. Empty when the model states no maximum."""
    limit = getattr(model, "max_context", None)
    longest = float(context) if isinstance(context, float) else float(np.max(np.asarray(context, dtype=float)))
    if not limit or longest <= limit:
        return []
    msg = (f"context {longest:,.0f} tokens is beyond {model.id}'s max_position_embeddings ({limit:,}): "
           "the model was not trained that long")
    if strict_fit:
        raise FitError(msg)
    return [msg]
