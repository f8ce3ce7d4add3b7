"""A batch x context sweep as a typed table: numpy columns, with `.to_frame()` for those who have pandas.

pandas is an optional extra (`pip install chalk[frames]`); nothing in chalk's core needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from chalk.errors import MissingExtraError, ChalkError

#: The columns of a sweep, in order; each is named with its unit.
SWEEP_COLUMNS = ("batch", "context", "step_time_s", "compute_time_s", "weight_time_s", "kv_time_s", "bound",
                 "mfu", "mbu", "tokens_per_s", "user_tokens_per_s", "cost_per_mtok_usd", "fits")


@dataclass(frozen=True)
class SweepResult:
    """One row per (batch, context): `columns[name]` is a 1-D numpy array; `meta` describes the whole grid
    (model, hardware, chips, phase, precisions, critical batch, balance context, efficiency)."""

    columns: dict = field(repr=False)
    meta: dict

    def __len__(self) -> int:
        return len(self.columns["batch"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def rows(self) -> list[dict]:
        """The table as a list of plain dicts (floats, str, bool; NaN and inf kept as floats)."""
        names = list(self.columns)
        return [{k: _plain(self.columns[k][i]) for k in names} for i in range(len(self))]

    def best(self, key: str = "cost_per_mtok_usd", where: str | None = "fits") -> dict | None:
        """The row minimising `key` among rows where column `where` is true (None when no row qualifies)."""
        ok = np.ones(len(self), dtype=bool) if where is None else np.asarray(self.columns[where], dtype=bool)
        if not ok.any():
            return None
        v = np.where(ok, np.asarray(self.columns[key], dtype=float), np.inf)
        return self.rows()[int(np.argmin(v))]

    def to_dict(self) -> dict:
        """JSON-ready: {"meta": {...}, "rows": [...]} with non-finite numbers as None."""
        return {"meta": {k: _finite(_plain(v)) for k, v in self.meta.items()},
                "rows": [{k: _finite(v) for k, v in r.items()} for r in self.rows()]}

    def to_csv(self, path) -> None:
        """Write the rows as CSV with a header of column names (no pandas needed)."""
        import csv

        from chalk.specs.files import atomic_path

        with atomic_path(path, "--csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(list(self.columns))
            for r in self.rows():
                w.writerow(list(r.values()))

    def to_frame(self):
        """A pandas DataFrame with `meta` in `.attrs`; pandas is imported only here."""
        try:
            import pandas as pd
        except ImportError:
            raise MissingExtraError("to_frame() needs pandas: pip install 'chalk[frames]' (or pandas)") from None
        df = pd.DataFrame({k: np.asarray(v) for k, v in self.columns.items()})
        df.attrs.update(self.meta)
        return df


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


def _finite(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def sweep_table(result, columns=SWEEP_COLUMNS) -> SweepResult:
    """A `RooflineResult` over a flattened grid as a SweepResult (scalars broadcast to the grid)."""
    n = np.asarray(result.batch).shape
    cols = {c: np.broadcast_to(np.asarray(getattr(result, c)), n).copy() for c in columns}
    meta = dict(model=result.model, hardware=result.hardware, chips=result.chips, phase=result.phase,
                precision=result.precision, kv_precision=result.kv_precision,
                critical_batch=_plain(result.critical_batch), balance_context=_plain(result.balance_context),
                efficiency=result.efficiency, kernels=getattr(result, "kernels", None))
    return SweepResult(columns=cols, meta=meta)
