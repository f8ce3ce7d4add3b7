"""Streaming quantiles in bounded memory: a log-bucketed histogram with a relative-accuracy guarantee.

The buckets are DDSketch's logarithmic mapping (Masson, Rim and Lee, "DDSketch: a fast and fully-mergeable
quantile sketch with relative-error guarantees", VLDB 2019): bucket k holds values in (g^(k-1), g^k] with
g = (1 + a) / (1 - a), and a quantile read as 2 g^k / (g + 1) is within a relative error `a` of the true one.
The buckets here are filled a chunk at a time with one `np.bincount`, because the simulator hands over latencies
by the tens of thousands: the `ddsketch` package adds one value per Python call (~1 us each, 3e8 calls for a
1e8-request run), which would cost more than the simulation itself.
"""

from __future__ import annotations

import math

import numpy as np


class LogHistogram:
    """Counts of positive values in log buckets from `lo` to `hi` (values outside are clamped to the end buckets;
    zeros and negatives count in the lowest). Memory: one int64 per bucket (~3,300 for 1e-7 .. 1e7 s at 0.5%)."""

    def __init__(self, relative_accuracy: float = 0.005, lo: float = 1e-7, hi: float = 1e7):
        self.alpha = float(relative_accuracy)
        self.gamma = (1 + self.alpha) / (1 - self.alpha)
        self._inv_log_gamma = 1.0 / math.log(self.gamma)
        self._k0 = math.floor(math.log(lo) * self._inv_log_gamma)
        self._n = math.ceil(math.log(hi) * self._inv_log_gamma) - self._k0 + 1
        self.counts = np.zeros(self._n, dtype=np.int64)
        self.count = 0
        self.total = 0.0

    def add(self, values) -> None:
        """Add the finite values of an array (NaN and inf are skipped)."""
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        with np.errstate(divide="ignore"):
            k = np.ceil(np.log(np.maximum(v, 1e-300)) * self._inv_log_gamma).astype(np.int64) - self._k0
        self.counts += np.bincount(np.clip(k, 0, self._n - 1), minlength=self._n)
        self.count += int(v.size)
        self.total += float(v.sum())

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1) within the relative accuracy; NaN when empty."""
        if not self.count:
            return math.nan
        rank = q * (self.count - 1)
        k = int(np.searchsorted(np.cumsum(self.counts), rank, side="right"))
        k = min(k, self._n - 1)
        return 2.0 * self.gamma ** (k + self._k0) / (self.gamma + 1.0)
