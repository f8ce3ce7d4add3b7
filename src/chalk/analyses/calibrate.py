"""Calibration as code: refit chalk's few global efficiency parameters on the validation set, and judge the fit by
leave-one-source-out cross-validation (each source group predicted by a fit that never saw it).

The fitted parameters are physical and few: per-step overhead (per layer), MoE permute passes, two-micro-batch
overlap, the scheduler cap, how far engines line up prefill chunks across attention-DP ranks, and the achieved
fractions of peak FLOP/s and HBM bandwidth that time ops where no measured kernel table applies. Everything else
comes from kernel or link data (`chalk.analyses.calibration`).
The objective is robust: median |log error| + 0.5 * mean(min(|log error|, log 3)) over throughput and TPOT rows
(TTFT rows are reported, not fitted: their measured values carry queueing that the benchmarks do not separate).
Search is coordinate descent over a coarse grid; predictions are memoised per parameter vector, so the folds of
the cross-validation share most of their work.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from chalk.analyses.calibration import CALIBRATION, Calibration
from chalk.errors import ChalkError

#: The parameters refitted, and the grid each is searched over.
FIT_GRID = {
    "compute": (0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7),
    # achieved HBM fraction of the ops without a measured table (elementwise, sampling, other vendors' chips):
    # streaming kernels reach 63-92% of peak in every public figure chalk cites (calibration.MEMORY), so the
    # search starts at 0.6; below it the objective is flat and a fold would drift to fractions no kernel shows
    "memory": (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
    "overhead_fixed_s": (0.1e-3, 0.5e-3, 1e-3, 2e-3, 4e-3),
    "overhead_per_layer_s": (0.0, 5e-6, 10e-6, 20e-6, 30e-6, 40e-6, 50e-6, 60e-6),
    "moe_shuffle_passes": (0.0, 4.0, 8.0, 12.0, 16.0, 24.0),
    "overlap": (0.0, 0.25, 0.5, 0.75),
    "max_seqs_per_scheduler": (256, 512, 1024, 2048),
    "kv_reserve_output_fraction": (0.0, 0.5, 1.0),
    "amd_compute": (0.5, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0),
    "amd_memory": (0.7, 0.8, 0.9, 1.0),
    "dp_prefill_alignment": (0.0, 0.25, 0.5, 0.75, 1.0),
    "overhead_per_seq_s": (0.0, 1e-6, 2e-6, 4e-6, 8e-6, 16e-6),
    # EP group size from which deployments balance expert load (EPLB); inf: never
    "eplb_min_ep": (8.0, 16.0, 32.0, 64.0, 128.0, float("inf")),
}

#: Most coordinate-descent rounds one fit may take (each round visits every grid value once; two usually converge).
MAX_ROUNDS = 8

from chalk.analyses.validate import FITTED_METRICS  # noqa: E402  (metrics in the objective and the headline)


def _rows():
    from chalk.analyses.validate import load_rows

    return load_rows()


_CACHE: dict = {}


def predictions(cal: Calibration, ttft: bool = False) -> np.ndarray:
    """Every validation row of a fitted metric predicted under `cal` (NaN where chalk cannot answer), and with
    `ttft` the TTFT rows too (each replays its closed loop in the simulator); memoised."""
    from chalk.analyses.validate import predict

    key = (cal, ttft)
    if key not in _CACHE:
        out = []
        for r in _rows():
            if r.metric not in FITTED_METRICS and not (ttft and r.metric == "ttft_s"):
                out.append(math.nan)
                continue
            try:
                out.append(float(predict(r, cal)))
            except ChalkError:
                out.append(math.nan)
        _CACHE[key] = np.array(out)
    return _CACHE[key]


#: Per-request latencies searched for the TTFT rows (seconds).
REQUEST_LATENCY_GRID = tuple(np.round(np.arange(0.0, 0.6001, 0.02), 3))


def fit_request_latency(cal: Calibration, mask: np.ndarray | None = None) -> Calibration:
    """`cal` with the per-request latency that best explains the TTFT rows selected by `mask` (all by default):
    the grid value minimising the objective over their log errors. TTFT rows fit this one parameter only; the
    throughput and TPOT parameters are fitted without them."""
    rows = _rows()
    sel = np.array([r.metric == "ttft_s" for r in rows]) & (True if mask is None else mask)
    base = dataclasses.replace(cal, request_latency_s=0.0)
    pred = predictions(base, ttft=True)
    meas = np.array([r.measured for r in rows])
    best, best_obj = 0.0, math.inf
    for lat in REQUEST_LATENCY_GRID:
        with np.errstate(invalid="ignore", divide="ignore"):
            obj = objective(np.log((pred[sel] + lat) / meas[sel]))
        if obj < best_obj - 1e-12:
            best, best_obj = float(lat), obj
    return dataclasses.replace(cal, request_latency_s=best)


def log_errors(pred: np.ndarray, rows=None) -> np.ndarray:
    """log(predicted / measured) per row (NaN where unanswered)."""
    rows = rows or _rows()
    meas = np.array([r.measured for r in rows])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(pred / meas)


def objective(le: np.ndarray) -> float:
    """median |log error| + 0.5 * mean(min(|log error|, log 3)); an unanswered row counts as log 3."""
    a = np.where(np.isfinite(le), np.abs(le), math.log(3))
    if a.size == 0:
        return math.inf
    return float(np.median(a) + 0.5 * np.mean(np.minimum(a, math.log(3))))


def _fitted_mask(rows) -> np.ndarray:
    return np.array([r.metric in FITTED_METRICS for r in rows])


def fit(mask: np.ndarray | None = None, start: Calibration = CALIBRATION, rounds: int = 2,
        grid: dict | None = None) -> tuple[Calibration, float]:
    """Coordinate descent of `grid`'s parameters from `start`, on the rows selected by `mask` (default: all fitted
    metrics). Returns the calibration and its objective."""
    rows = _rows()
    sel = _fitted_mask(rows) if mask is None else (mask & _fitted_mask(rows))
    grid = grid or FIT_GRID
    best = start
    best_obj = objective(log_errors(predictions(best), rows)[sel])
    for _ in range(rounds):
        moved = False
        for name, values in grid.items():
            for v in values:
                if getattr(best, name) == v:
                    continue
                cand = dataclasses.replace(best, **{name: v})
                obj = objective(log_errors(predictions(cand), rows)[sel])
                if obj < best_obj - 1e-9:
                    best, best_obj, moved = cand, obj, True
        if not moved:
            break
    return fit_request_latency(best, mask), best_obj


def _summary(abs_err: np.ndarray) -> dict:
    e = abs_err[np.isfinite(abs_err)]
    return {"n": int(e.size), "median_abs_error": float(np.median(e)) if e.size else None,
            "p90_abs_error": float(np.percentile(e, 90)) if e.size else None}


def cross_validate(rounds: int = 1, grid: dict | None = None, start: Calibration = CALIBRATION) -> dict:
    """Leave-one-source-out: for each source group, fit on the others (from `start`) and predict the group.

    Reports the held-out |error| (predicted / measured - 1) over every fitted-metric row, per group, and for dense
    and MoE models."""
    from chalk.specs.catalog import load_model

    rows = _rows()
    groups = sorted({r.group for r in rows})
    fitted = _fitted_mask(rows)
    held = np.full(len(rows), math.nan)
    per_group = {}
    for gname in groups:
        in_g = np.array([r.group == gname for r in rows])
        cal, _ = fit(~in_g, start=start, rounds=rounds, grid=grid)
        pred = predictions(cal, ttft=True)
        meas = np.array([r.measured for r in rows])
        err = pred / meas - 1
        held[in_g] = err[in_g]
        ge = np.abs(err[in_g & fitted])
        per_group[gname] = {**_summary(ge), "fit": {k: getattr(cal, k) for k in (*(grid or FIT_GRID),
                                                                              "request_latency_s")}}
    moe = np.array([load_model(r.model).is_moe for r in rows])
    fixed = np.array([r.kind == "fixed" for r in rows])
    a = np.abs(held)
    out = {"n": int(np.sum(fitted & np.isfinite(a))), "groups": per_group,
           "cv_median_abs_error": _summary(a[fitted])["median_abs_error"],
           "cv_p90_abs_error": _summary(a[fitted])["p90_abs_error"],
           "dense": _summary(a[fitted & ~moe]), "moe": _summary(a[fitted & moe]),
           "fixed_throughput": _summary(a[fixed & np.array([r.metric == "output_tokens_per_s_per_gpu"
                                                           for r in rows])]),
           "fixed_tpot": _summary(a[fixed & np.array([r.metric == "tpot_s" for r in rows])]),
           "ttft": _summary(a[np.array([r.metric == "ttft_s" for r in rows])]),
           "rounds": rounds}
    out["groups"]["dense"] = out["dense"]
    out["groups"]["moe"] = out["moe"]
    return out


def residual_range(cal: Calibration) -> tuple[float, float]:
    """p10 and p90 of log(measured / predicted) over the fitted rows: the [low, high] range of estimates."""
    rows = _rows()
    le = -log_errors(predictions(cal), rows)[_fitted_mask(rows)]
    le = le[np.isfinite(le)]
    return float(np.percentile(le, 10)), float(np.percentile(le, 90))
